"""`reporter compare`: before/after release notes on real runs of a tiny local model.

The positive control is built for real: the "release" model answers a multiple-choice task whose
gold answers are the base model's own answers (so the base scores 100 %), and the new release is
the same model with one MLP's weights scaled, which changes many of its answers. ``compare`` must
report that task as a significant regression, and gsm8k (0 % for both, untouched) as unchanged.
The refusals are real runs too: one on fewer items, one with other MUI settings.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from reporter.analyse.compare import compare_runs
from reporter.cli import main
from reporter.errors import UserError
from reporter.metrics.stats import holm, mcnemar_exact
from reporter.store.samples import read_samples
from tests.conftest import copy_run, small_tokenizer_dir
from tests.test_golden import _save_local_model

N_ITEMS = 40
PROFILE = """\
name: release
mui: {{top_ratio: {top_ratio}, mode: score}}
lpp: {{enabled: false}}
contamination: {{verbatim_items: 0, reference_texts: 4}}
smoke_texts: 2
tasks:
  - {{name: mine, type: jsonl, path: mine.jsonl, prompt_field: q, answer_field: a, choices_field: options,
      scorer: choice, shots: 0, max_new_tokens: {tokens}, limit: {limit}}}
  - {{name: gsm8k, limit: 3, shots: 0, max_new_tokens: 6}}
"""


def _run(root: Path, out: str, model_dir: str, *, top_ratio: float = 0.01, limit: int = N_ITEMS,
         tokens: int = 2) -> Path:
    (root / f"{out}.profile.yaml").write_text(PROFILE.format(top_ratio=top_ratio, limit=limit, tokens=tokens))
    (root / f"{out}.yaml").write_text(f"profile: {out}.profile.yaml\nseed: 5\n"
                                      f"models:\n  - {{name: Release, source: ./{model_dir}}}\n")
    r = CliRunner().invoke(main, ["run", str(root / f"{out}.yaml"), "-o", str(root / out), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    return root / out


def _items(answers: list[str] | None = None) -> str:
    words = ["red", "blue", "green", "black", "white", "grey", "pink", "gold"]
    lines = []
    for i in range(N_ITEMS):
        opts = [words[(i + k) % len(words)] + f" {i}" for k in range(4)]
        lines.append(json.dumps({"id": f"q{i}", "q": f"Which colour is item {i}?", "options": opts,
                                 "a": answers[i] if answers else "A"}))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    _save_local_model(root / "v1", "llama", 1, small_tokenizer_dir())
    model = __import__("transformers").AutoModelForCausalLM.from_pretrained(root / "v1")
    with torch.no_grad():  # the damaged release: one MLP's output scaled
        model.model.layers[1].mlp.down_proj.weight.mul_(4.0)
    model.save_pretrained(root / "v2")
    for f in (root / "v1").iterdir():  # the tokenizer and its chat template: the release is prompted as v1 was
        if not (root / "v2" / f.name).exists():
            (root / "v2" / f.name).write_bytes(f.read_bytes())
    # the base model's own answers become the gold answers (the run before, on gold "A" everywhere, is kept: the
    # same ids with other gold answers, i.e. other data)
    (root / "mine.jsonl").write_text(_items())
    probe = _run(root, "old-data", "v1")
    got = read_samples(probe / "models/Release/tasks/mine/samples.jsonl")
    answers = [got[f"q{i}"]["extracted"] for i in range(N_ITEMS)]
    (root / "mine.jsonl").write_text(_items(answers))
    return {"root": root, "base": _run(root, "base", "v1"), "new": _run(root, "new", "v2"),
            "fewer": _run(root, "fewer", "v1", limit=30), "other_mui": _run(root, "other-mui", "v1", top_ratio=0.02),
            "longer": _run(root, "longer", "v1", tokens=3), "old_data": probe, "answers": answers}


def _row(doc: dict, task: str) -> dict:
    return next(r for r in doc["rows"] if r["task"] == task)


@pytest.mark.slow
def test_damaged_release_is_a_significant_regression(runs):
    doc = compare_runs(runs["base"], runs["new"])
    mine, gsm = _row(doc, "mine"), _row(doc, "gsm8k")
    assert mine["base_score"] == 1.0 and mine["n"] == N_ITEMS  # gold = the base model's answers
    assert mine["status"] == "regression" and mine["significant"]
    # the numbers, against a plain recomputation from the two runs' samples
    base = read_samples(runs["base"] / "models/Release/tasks/mine/samples.jsonl")
    new = read_samples(runs["new"] / "models/Release/tasks/mine/samples.jsonl")
    lost = sum(base[i]["score"] == 1 and new[i]["score"] == 0 for i in base)
    gained = sum(base[i]["score"] == 0 and new[i]["score"] == 1 for i in base)
    assert (mine["n_regressed"], mine["n_improved"]) == (lost, gained) and lost >= 10
    assert mine["delta"] == pytest.approx(sum(new[i]["score"] - base[i]["score"] for i in base) / N_ITEMS)
    assert mine["ci_low"] <= mine["delta"] <= mine["ci_high"] < 0
    p_gsm = mcnemar_exact(0, 0)
    assert mine["p_holm"] == pytest.approx(holm([mcnemar_exact(lost, gained), p_gsm])[0])
    assert gsm["status"] == "no significant change" and gsm["delta"] == 0 and gsm["p_holm"] == 1.0
    assert doc["rows"][0] is mine  # regressions first
    assert mine["mui"]["n_samples"] == N_ITEMS and mine["mui"]["delta"] == pytest.approx(
        mine["mui"]["new"] - mine["mui"]["base"])


@pytest.mark.slow
def test_cli_writes_release_notes_and_pipes_markdown(runs, tmp_path):
    r = CliRunner().invoke(main, ["compare", str(runs["base"]), str(runs["new"]), "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    notes = r.stdout
    assert notes == (tmp_path / "c" / "compare.md").read_text()  # stdout is the Markdown, file list on stderr
    assert "compare.pdf" in r.stderr and "compare.pdf" not in notes
    regressions = notes.split("## Significant regressions")[1].split("## Significant improvements")[0]
    doc = json.loads((tmp_path / "c" / "compare.json").read_text())
    m = doc["rows"][0]
    pp = [f"{100 * m[k]:.1f}".replace("-", "−") for k in ("delta", "ci_low", "ci_high")]
    p = "p < 0.001" if m["p_holm"] < 0.001 else f"p = {m['p_holm']:.3f}"
    assert f"- mine {pp[0]} pp [{pp[1]}, {pp[2]}], {p} (100.0% → " in regressions
    unchanged = notes.split("## No significant change")[1].split("## Effort (MUI)")[0]
    assert "| gsm8k |" in unchanged and "mine" not in unchanged
    assert (tmp_path / "c" / "compare_files" / "deltas.png").read_bytes()[:4] == b"\x89PNG"
    assert [r_["task"] for r_ in doc["rows"]] == ["mine", "gsm8k"]
    html = (tmp_path / "c" / "compare.html").read_text()
    assert "regression" in html and "<script" not in html
    assert (tmp_path / "c" / "compare.pdf").read_bytes()[:5] == b"%PDF-"


@pytest.mark.slow
def test_default_output_is_inside_the_new_run(runs):
    r = CliRunner().invoke(main, ["compare", str(runs["base"]), str(runs["base"])])
    assert r.exit_code == 0, r.output
    assert (runs["base"] / "compare" / "compare.md").is_file()
    assert "## Significant regressions\n\n- none" in r.stdout


@pytest.mark.slow
def test_different_items_are_refused_in_one_line(runs):
    r = CliRunner().invoke(main, ["compare", str(runs["fewer"]), str(runs["base"])])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output
    assert "mine of Release: the runs answered different items (30 in base, 40 in new, 30 shared)" in lines[0]
    # comparing only the shared items is an explicit choice, and then MUI is not compared
    doc = compare_runs(runs["fewer"], runs["base"], shared_only=True)
    assert _row(doc, "mine")["n"] == 30 and _row(doc, "mine")["mui"] is None
    assert any("MUI was not compared" in n for n in doc["notes"])


@pytest.mark.slow
def test_the_same_ids_with_other_gold_answers_are_refused_or_left_out(runs):
    """The task's data changed between the runs (gold "A" everywhere, then the base model's own answers) under the
    same ids: pairing them by id would compare different questions (a review found a "significant regression"
    that was only the new gold). Refused in one line; --shared-only compares the items whose gold is unchanged."""
    changed = sum(a != "A" for a in runs["answers"])
    assert 0 < changed < N_ITEMS
    r = CliRunner().invoke(main, ["compare", str(runs["old_data"]), str(runs["base"])])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"mine of Release: {changed} of the items both runs answered have another gold" in lines[0]
    assert "--shared-only" in lines[0]
    doc = compare_runs(runs["old_data"], runs["base"], shared_only=True, mui=False)
    mine = _row(doc, "mine")
    assert mine["n"] == N_ITEMS - changed and mine["base_score"] == mine["new_score"]  # the same model on the same items
    assert any(n.startswith(f"Task mine of Release: {changed} item(s) have another gold answer") for n in doc["notes"])
    assert _row(doc, "gsm8k")["n"] == 3  # an unchanged task is compared as before
    # every shared item changed on one task: with --shared-only that task is left out, not the whole comparison
    old_gold = runs["root"] / "all-changed"
    shutil.copytree(runs["old_data"], old_gold)
    samples = old_gold / "models/Release/tasks/mine/samples.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    samples.write_text("".join(json.dumps({**r, "gold": "Z"}) + "\n" for r in rows))
    doc = compare_runs(old_gold, runs["base"], shared_only=True, mui=False)
    assert [r["task"] for r in doc["rows"]] == ["gsm8k"]
    assert any(n.startswith("Task mine of Release: every item both runs answered has another gold answer")
               for n in doc["notes"])


@pytest.mark.slow
def test_the_same_ids_and_golds_with_other_questions_are_refused(runs, tmp_path):
    """The same id and gold answer, another question (a task's data reworded under its ids): pairing by id and gold
    compared different questions. Each sample records its item's content digest; where both runs have it, a
    digest that differs makes the item another one, refused like another gold answer."""
    reworded = tmp_path / "reworded"
    shutil.copytree(runs["base"], reworded)
    samples = reworded / "models/Release/tasks/mine/samples.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert all(isinstance(r["item_sha256"], str) and len(r["item_sha256"]) == 64 for r in rows)
    changed = {r["id"] for r in rows[:3]}  # what a run on reworded questions records for them
    samples.write_text("".join(json.dumps({**r, "item_sha256": "0" * 64} if r["id"] in changed else r) + "\n"
                               for r in rows))
    r = CliRunner().invoke(main, ["compare", str(reworded), str(runs["base"])])
    assert r.exit_code == 2 and "Traceback" not in r.output
    line = r.stderr.strip()
    assert "mine of Release: 3 of the items both runs answered have another gold answer or question" in line
    assert "the same gold answer" in line and "to another question or options" in line
    doc = compare_runs(reworded, runs["base"], shared_only=True, mui=False)
    assert _row(doc, "mine")["n"] == N_ITEMS - 3
    # a run made before samples recorded the digest is paired by gold alone, as before
    samples.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "item_sha256"}) + "\n" for r in rows))
    assert _row(compare_runs(reworded, runs["base"], mui=False), "mine")["n"] == N_ITEMS


@pytest.mark.slow
def test_different_mui_settings_are_refused_in_one_line(runs):
    r = CliRunner().invoke(main, ["compare", str(runs["other_mui"]), str(runs["base"])])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "MUI is not comparable" in lines[0] and "top_ratio 0.02" in lines[0]
    assert "top_ratio 0.01" in lines[0] and "--no-mui" in lines[0]
    doc = compare_runs(runs["other_mui"], runs["base"], mui=False)  # scores only
    assert all(r_["mui"] is None for r_ in doc["rows"])
    r = CliRunner().invoke(main, ["compare", str(runs["other_mui"]), str(runs["base"]), "--no-mui", "-o",
                                  str(runs["root"] / "no-mui")])
    assert r.exit_code == 0, r.output
    assert "## Effort (MUI)\n\n- not compared" in r.stdout and "MUI was not compared (--no-mui)." in r.stdout


@pytest.mark.slow
def test_changed_task_settings_are_named_in_the_notes(runs):
    doc = compare_runs(runs["base"], runs["longer"])
    assert any(n.startswith("Task mine: its settings differ between the runs (max_new_tokens 2 → 3)")
               for n in doc["notes"])
    assert not any("gsm8k" in n for n in doc["notes"])  # unchanged task: no note
    # v1 in both (one content hash): the change is the evaluation's; v1 against the damaged v2: no such note
    assert ("The same weights in both runs (the same content hash): Release. A change there comes from how the model "
            "was evaluated (settings, items, dtype or device), not from the model.") in doc["notes"]
    other = compare_runs(runs["base"], runs["new"])["notes"]
    assert not any("settings differ" in n or "same weights" in n or "prompts or scores otherwise" in n for n in other)


@pytest.mark.slow
def test_a_task_prompted_otherwise_with_the_same_settings_is_named_in_the_notes(runs, tmp_path):
    """The profile's settings equal, a task may still prompt or score otherwise (a plugin task's prompt kept in a
    file beside it, another reporter's built-in instruction): each task's summary records how by content
    (``task_sha256``), and a pair whose digests differ is named; runs that did not record it, or agree, are not."""
    edited = copy_run(runs["new"], tmp_path / "edited")
    res = json.loads((edited / "results.json").read_text())
    entry = res["models"]["Release"]["tasks"]["mine"]
    assert entry["task_sha256"].startswith("sha256:")
    entry["task_sha256"] = "sha256:" + "0" * 64
    (edited / "results.json").write_text(json.dumps(res))
    notes = compare_runs(runs["base"], edited)["notes"]
    assert [n for n in notes if "prompts or scores otherwise" in n] == [
        "Task mine: it prompts or scores otherwise in the new run (its instruction, answer prefix, scorer, token limit "
        "or stop sequences differ: task_sha256), with the same settings: a score change on it may come from that, "
        "not only from the model."]
    del entry["task_sha256"]  # a run made before it was recorded
    (edited / "results.json").write_text(json.dumps(res))
    assert not any("prompts or scores otherwise" in n for n in compare_runs(runs["base"], edited)["notes"])


@pytest.mark.slow
def test_pairs_by_explicit_names_and_refuses_unknown_ones(runs):
    with pytest.raises(UserError, match="'Nope' is not a model of the new run"):
        compare_runs(runs["base"], runs["new"], pairs=[("Release", "Nope")])
    doc = compare_runs(runs["base"], runs["new"], pairs=[("Release", "Release")])
    assert doc["pairs"] == [{"base": "Release", "new": "Release"}]
    assert not any("same run" in n for n in doc["notes"])
    same = compare_runs(runs["base"], runs["base"])  # one run against itself: it says so
    assert same["notes"][0] == "Base and new are the same run: this compares models within it, not one run with another."
    assert not any("only in the" in n for n in same["notes"])
    r = CliRunner().invoke(main, ["compare", str(runs["base"]), str(runs["new"]), "--pair", "Release"])
    assert r.exit_code == 2 and "expected OLD=NEW" in r.stderr


@pytest.mark.slow
def test_a_release_that_fails_to_load_is_named_not_hidden(runs):
    root = runs["root"]
    broken = root / "v-broken"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text((root / "v2" / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"not weights")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (broken / f).write_bytes((root / "v1" / f).read_bytes())
    (root / "broken.yaml").write_text("profile: base.profile.yaml\nseed: 5\nmodels:\n  - {name: Release, source: ./v-broken}\n")
    r = CliRunner().invoke(main, ["run", str(root / "broken.yaml"), "-o", str(root / "broken"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["compare", str(runs["base"]), str(root / "broken")])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "share no task; nothing to compare (Release failed in the new run: model 'Release': cannot load" in r.stderr
    assert "its files look damaged (SafetensorError" in r.stderr


def test_not_a_run_directory(tmp_path):
    r = CliRunner().invoke(main, ["compare", str(tmp_path), str(tmp_path)])
    assert r.exit_code == 2 and "not a run directory" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [[], ["run"], ["analyse"], ["render"], ["compare"], ["board"], ["validate"]])
def test_every_help_has_a_worked_example(command):
    r = CliRunner().invoke(main, [*command, "--help"])
    assert r.exit_code == 0
    example = r.stdout.split("Example")[1]  # "Example:" or "Examples:", then an indented command line
    assert re.search(r"^\s+reporter \w+ ", example, re.M), r.stdout


def _with_verdict(src: Path, dst: Path, severity: str, signal: dict) -> Path:
    """A copy of run ``src`` whose stored analysis gives (Release, mine) this verdict and option-order signal."""
    shutil.copytree(src, dst)
    res = json.loads((dst / "results.json").read_text())
    rows = res["analysis"]["contamination"]
    row = next(r for r in rows if r["model"] == "Release" and r["task"] == "mine")
    row.update({"severity": severity, "measured": True})
    row["signals"]["option_order"] = signal
    (dst / "results.json").write_text(json.dumps(res))
    return dst


@pytest.mark.slow
def test_a_cleared_warning_says_what_each_run_could_see(runs, tmp_path):
    """A warning that clears in a new run scored with a far smaller test is not news about the model: the release
    notes put each firing test's size and positive-control power in both runs side by side."""
    from reporter.analyse.control_power import power_at_size

    def sig(n, orders, fires, k=3):
        return {"measured": True, "test": True, "fires": fires, "n": n, "orders": orders, "n_tests": k,
                "p_value": 1e-4 if fires else 0.6, "p_adjusted": 3e-4 if fires else 1.0, "effect": 0.3,
                "meets_effect": True, "power_at_size": power_at_size("option_order", items=n, orders=orders, n_tests=k)}

    base = _with_verdict(runs["base"], tmp_path / "base", "weak", sig(32, 8, True))
    new = _with_verdict(runs["base"], tmp_path / "new", "none", sig(8, 3, False))
    row = _row(compare_runs(base, new), "mine")
    p_base = power_at_size("option_order", items=32, orders=8, n_tests=3)["power"]
    p_new = power_at_size("option_order", items=8, orders=3, n_tests=3)["power"]
    assert row["contamination"]["change"] == "cleared"
    note = (f"option order fired in the base run at 32 items × 8 other orders, power {100 * p_base:.0f}% against the "
            f"positive control; the new run tested 8 items × 3 other orders, power {100 * p_new:.0f}% against the "
            "positive control")
    assert row["contamination"]["note"] == note
    r = CliRunner().invoke(main, ["compare", str(base), str(new), "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert f"- cleared: mine (weak → none): {note}" in r.stdout
    assert "cleared: mine (weak → none): option order fired" in (tmp_path / "c" / "compare.html").read_text()
    unchanged = _row(compare_runs(base, base), "mine")["contamination"]
    assert unchanged["change"] == "unchanged" and "note" not in unchanged


def test_a_cleared_notes_every_way_the_new_run_can_differ():
    """The note's other branches: a test the new run could not measure, one it discounted (it fired on the untrained
    baseline too), one its analysis has no record of, a law residual (its size is the law's models), a size between
    the table's rows (a lower bound, and the row read), and a base run analysed with another table (both runs are
    read against the current one)."""
    from reporter.analyse.compare_notes import cleared_note
    from reporter.analyse.control_power import power_at_size

    fired = {"measured": True, "test": True, "fires": True, "n": 44, "orders": 8, "n_tests": 3,
             "power_at_size": {"power": 0.98}}  # a stale table's number: not used
    at = power_at_size("option_order", items=44, orders=8, n_tests=3)
    base = {"signals": {"option_order": fired,
                        "law_residual": {"measured": True, "test": True, "fires": True, "n_points": 6},
                        "verbatim": {"measured": True, "test": True, "fires": False, "n": 16}}}
    new = {"signals": {"option_order": {"measured": False, "reason": "contamination.order_items is 0"},
                       "law_residual": {"measured": True, "test": True, "fires": False, "n_points": 4}}}
    note = cleared_note(base, new)
    assert note == (f"option order fired in the base run at 44 items × 8 other orders, power ≥ {100 * at['power']:.0f}% "
                    "against the positive control, read at the table's 40 items × 8 orders; the new run did not measure it "
                    "(contamination.order_items is 0); law residual fired in the base run at a law of 6 trained models; "
                    "the new run tested a law of 4 trained models")
    discounted = {"signals": {"option_order": {**fired, "fires": False, "confounded": True,
                                               "reason": "also fires on the untrained baseline"}}}
    assert cleared_note({"signals": {"option_order": fired}}, discounted).endswith(
        "; it fired in the new run too but was discounted (also fires on the untrained baseline)")
    assert cleared_note({"signals": {"option_order": fired}}, {"signals": {}}).endswith(
        "; the new run's analysis has no record of this test")
    small = {"measured": True, "test": True, "fires": False, "n": 4, "orders": 8, "n_tests": 3, "p_min": 0.02,
             "in_correction": False, "reason": "cannot fire at this size: its smallest attainable p-value 0.02 is not "
                                               "below q = 0.01, so it is left out of the correction"}
    assert cleared_note({"signals": {"option_order": fired}}, {"signals": {"option_order": small}}).endswith(
        "; in the new run it cannot fire at this size: its smallest attainable p-value 0.02 is not below q = 0.01, "
        "so it is left out of the correction")  # not "tested ..., power ...": it could not have fired
    assert cleared_note({"signals": {"verbatim": base["signals"]["verbatim"]}}, new) == ""  # nothing fired: no note


def test_a_cleared_note_on_a_users_file_named_like_a_benchmark_reads_the_general_table():
    """A ``type: jsonl`` task named ``hellaswag`` (a user's own data) took HellaSwag's own control's power in the
    cleared note, where the run's analysis had read the general table."""
    from reporter.analyse.compare_notes import cleared_note
    from reporter.analyse.control_power import power_at_size

    fired = {"measured": True, "test": True, "fires": True, "n": 32, "orders": 3, "n_tests": 3}
    quiet = {**fired, "fires": False, "n": 16}
    base, new = {"task": "hellaswag", "signals": {"option_order": fired}}, {"signals": {"option_order": quiet}}

    def said(task):
        return [f"{100 * power_at_size('option_order', items=n, orders=3, n_tests=3, task=task)['power']:.0f}%"
                for n in (32, 16)]

    assert said("hellaswag") != said(None)  # the two tables differ at these sizes: the test can tell them apart
    for own, task in ((True, "hellaswag"), (False, None)):
        note = cleared_note(base, new, own_control=own)
        assert [part.split("power ")[1].split(" ")[0] for part in note.split("; ")] == said(task), note


def _edited(src: Path, dst: Path, edit) -> Path:
    """A copy of run ``src`` whose results.json ``edit(results)`` changed (what another run would have recorded)."""
    shutil.copytree(src, dst)
    results = json.loads((dst / "results.json").read_text())
    edit(results)
    (dst / "results.json").write_text(json.dumps(results))
    return dst


@pytest.mark.slow
def test_a_model_prompted_or_run_otherwise_is_named_in_the_notes(runs, tmp_path):
    """The same weights 0-shot with the chat template in one run and 1-shot without it in the other: the notes named
    only the profile's task settings, so the biggest difference between the runs went unsaid."""
    def prompted(results):
        meta = results["models"]["Release"]["meta"]
        meta.update({"kind": "instruct", "chat_template": True, "dtype": "bfloat16"})
        results["models"]["Release"]["tasks"]["mine"]["shots"] = 1

    new = _edited(runs["base"], tmp_path / "prompted", prompted)
    was = json.loads((runs["base"] / "results.json").read_text())["models"]["Release"]["meta"]
    notes = compare_runs(runs["base"], new)["notes"]
    want = [f"Release was evaluated differently in the two runs (kind {was['kind']} → instruct; chat template "
            f"{'on' if was['chat_template'] else 'off'} → on; dtype {was['dtype']} → bfloat16; shots 0 → 1 on mine): "
            "a score or MUI change may come from how it was prompted and run, not only from the model."]
    if was["kind"] == "instruct":  # (the tiny tokenizer decides; a difference is only named where there is one)
        want[0] = want[0].replace("kind instruct → instruct; ", "")
    if was["chat_template"]:
        want[0] = want[0].replace("chat template on → on; ", "")
    assert [n for n in notes if "evaluated differently" in n] == want
    # negative control: the same run on both sides, and another model evaluated alike
    assert not any("evaluated differently" in n for n in compare_runs(runs["base"], runs["new"])["notes"])


@pytest.mark.slow
def test_an_unfinished_model_is_named_and_its_left_out_tasks_are_per_model(runs, tmp_path):
    """Against an interrupted run the notes said "Only in the base run, not compared: <every task>" though some were
    compared, and nothing said that a model had not finished."""
    def interrupted(results):
        release = results["models"]["Release"]
        release["tasks"].pop("gsm8k")
        release["status"] = "partial"

    new = _edited(runs["base"], tmp_path / "interrupted", interrupted)
    doc = compare_runs(runs["base"], new)
    assert doc["incomplete"] == ["Release did not finish in the new run (partial: mine finished); only the tasks it "
                                 "finished are compared, so rerun `reporter run` on that run directory to compare "
                                 "the rest"]
    assert "Only in the base run, not compared: gsm8k of Release." in doc["notes"]
    assert [r["task"] for r in doc["rows"]] == ["mine"]
    r = CliRunner().invoke(main, ["compare", str(runs["base"]), str(new), "-o", str(tmp_path / "notes")])
    assert r.exit_code == 0, r.output
    assert "> **Incomplete:** Release did not finish in the new run (partial: mine finished)" in (
        tmp_path / "notes" / "compare.md").read_text()
    assert compare_runs(runs["base"], runs["new"])["incomplete"] == []  # negative control: both finished
