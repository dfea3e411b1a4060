"""Core-set export and diversity advice, end to end on tiny local models.

One run of three tiny "trained" (local directory) models and an untrained reference on four
tasks, all zero-shot so that a task's prompts do not depend on its name:

* ``dup`` — 24 items with one and the same question: every item activates the same key neurons;
* ``dup-copy`` — the same file under another name: a positive control for "drop" (it must fire)
  and, for the copy that is kept, for "evaluate only the core set" (one item reproduces the task);
* ``sums`` — 30 different questions, and ``arc_easy`` — 12 items: negative controls for "drop".

Then the core-set round trip: ``coreset.json`` from the run, a second run with ``items:
coreset.json``, and the scores on those items equal the full run's.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from reporter.card.render import render
from reporter.cli import main
from reporter.store.samples import read_samples
from tests.conftest import small_random, small_tokenizer_dir
from tests.test_golden import _save_local_model

pytestmark = pytest.mark.slow  # every test reads the two runs of `runs`

PROFILE = """\
name: coreset-test
mui: {{top_ratio: 0.01, mode: score}}
lpp: {{enabled: false}}
contamination: {{verbatim_items: 0, reference_texts: 4}}
smoke_texts: 2
tasks:
  - {{name: dup, type: jsonl, path: dup.jsonl, prompt_field: q, answer_field: a, scorer: numeric, shots: 0,
      max_new_tokens: 4{dup_items}}}
  - {{name: dup-copy, type: jsonl, path: dup.jsonl, prompt_field: q, answer_field: a, scorer: numeric, shots: 0,
      max_new_tokens: 4{copy_items}}}
  - {{name: sums, type: jsonl, path: sums.jsonl, prompt_field: q, answer_field: a, scorer: numeric, shots: 0,
      max_new_tokens: 4{sums_items}}}
  - {{name: arc_easy, limit: 12, shots: 0, max_new_tokens: 4{arc_items}}}
"""
MODELS = """\
profile: {profile}
seed: 5
models:
  - {{name: M1, source: ./m1}}
  - {{name: M2, source: ./m2}}
  - {{name: M3, source: ./m3}}
  - name: Untrained
    source: random:llama
    random: {{layers: 2, hidden: 64, intermediate: 96, heads: 4, kv_heads: 2, seed: 9}}
"""


def _run(models_yaml: Path, out: Path) -> dict:
    r = CliRunner().invoke(main, ["run", str(models_yaml), "-o", str(out), "--no-progress", "--no-render"])
    assert r.exit_code == 0, r.output
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("coreset")
    for name, family, seed in (("m1", "llama", 1), ("m2", "qwen2", 2), ("m3", "gpt2", 3)):
        _save_local_model(root / name, family, seed, small_tokenizer_dir())
    (root / "dup.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "q": "What is 2 + 2?", "a": "4"}) + "\n"
                                            for i in range(24)))
    (root / "sums.jsonl").write_text("".join(json.dumps({"q": f"What is {i} + {i + 3}?", "a": str(2 * i + 3)}) + "\n"
                                             for i in range(30)))
    (root / "full.yaml").write_text(PROFILE.format(dup_items="", copy_items="", sums_items="", arc_items=""))
    (root / "models.yaml").write_text(small_random(MODELS.format(profile="full.yaml")))
    full = _run(root / "models.yaml", root / "full")
    render(root / "full", formats=("html",))  # the card the tests read (the PDF is tests/test_card.py's)
    # the second run evaluates only the core sets (a path relative to the profile file)
    items = ", items: full/coreset.json"
    (root / "core.yaml").write_text(PROFILE.format(dup_items=items, copy_items=items, sums_items=items,
                                                   arc_items=items))
    (root / "models-core.yaml").write_text(small_random(MODELS.format(profile="core.yaml")))
    core = _run(root / "models-core.yaml", root / "core")
    return root, full, core


def test_duplicated_task_gets_drop_and_core_set_advice(runs):
    _, full, _ = runs
    div = full["analysis"]["diversity"]
    assert set(div) == {"M1", "M2", "M3"}  # the untrained reference gets no advice
    for model, d in div.items():
        actions = {(a["action"], a["task"]) for a in d["advice"]}
        assert 1 <= len(d["advice"]) <= 5
        assert ("drop", "dup") in actions, (model, actions, d["withheld"])
        drop = next(a for a in d["advice"] if a["action"] == "drop")
        assert drop["keep"] == "dup-copy" and "100%" in drop["evidence"] and "100%–100%" in drop["uncertainty"]
        assert ("core set", "dup-copy") in actions  # one item covers the task and reproduces its score exactly
        core = next(a for a in d["advice"] if a["action"] == "core set")
        assert "+0.0 points" in core["evidence"] and "1 of 24 items" in core["text"]
        # negative controls: different questions are never called redundant, nothing about dup-copy is dropped
        assert not any(a["action"] == "drop" and a["task"] in ("sums", "arc_easy", "dup-copy") for a in d["advice"])
        assert any("fewer than 20 items" in w and "arc_easy (12)" in w for w in d["withheld"])
        impacts = [a["impact"] for a in d["advice"]]
        assert impacts == sorted(impacts, reverse=True)


def test_coreset_json_lists_pooled_core_items(runs):
    root, full, _ = runs
    doc = json.loads((root / "full" / "coreset.json").read_text())
    assert set(doc["tasks"]) == {"dup", "dup-copy", "sums", "arc_easy"}
    assert doc["tasks"]["dup"]["items"] == ["d0"] and doc["tasks"]["dup"]["n"] == 24
    for task, c in doc["tasks"].items():
        assert c["models"] == ["M1", "M2", "M3"] and c["size"] == len(c["items"]) <= c["n"]
        answered = read_samples(root / "full" / "models" / "M1" / "tasks" / task / "samples.jsonl")
        assert set(c["items"]) <= set(answered)
    repro = full["analysis"]["coreset"]["reproduction"]
    assert repro["per_task"]["dup"]["per_model"]["M2"]["diff"] == 0.0
    # Kendall's tau-b of the core-set scores against the full-task scores, by a plain loop over the pairs of models
    rows = list(repro["overall"]["per_model"].values())
    conc = disc = tie_core = tie_full = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            dc, df = rows[i]["core"] - rows[j]["core"], rows[i]["full"] - rows[j]["full"]
            tie_core, tie_full = tie_core + (dc == 0), tie_full + (df == 0)
            conc, disc = conc + (dc * df > 0), disc + (dc * df < 0)
    pairs = len(rows) * (len(rows) - 1) // 2
    denominator = math.sqrt((pairs - tie_core) * (pairs - tie_full))
    kendall = repro["overall"]["kendall"]
    if denominator == 0:
        assert kendall["tau"] is None and "equal" in kendall["reason"]
    else:
        assert kendall["reason"] is None and kendall["tau"] == pytest.approx((conc - disc) / denominator, abs=1e-12)


def test_rerun_on_the_core_set_reproduces_the_full_run_on_those_items(runs):
    root, full, core = runs
    doc = json.loads((root / "full" / "coreset.json").read_text())
    assert "arc_easy" in doc["tasks"]
    for model in ("M1", "M2", "M3", "Untrained"):
        for task, c in doc["tasks"].items():
            a = read_samples(root / "full" / "models" / model / "tasks" / task / "samples.jsonl")
            b = read_samples(root / "core" / "models" / model / "tasks" / task / "samples.jsonl")
            assert set(b) == set(c["items"]), (model, task)
            for i in c["items"]:
                assert (b[i]["prompt"], b[i]["response"], b[i]["score"]) == \
                    (a[i]["prompt"], a[i]["response"], a[i]["score"]), (model, task, i)
            assert core["models"][model]["tasks"][task]["n"] == len(c["items"])
            # items chosen by key-neuron coverage are no sample of the split: the most common answer is counted on
            # them (the full run counted the whole split)
            maj, full_maj = (r["models"][model]["tasks"][task].get("majority") for r in (core, full))
            if task == "arc_easy":
                assert maj["over"] == len(c["items"]) and full_maj["over"] > maj["over"], (model, task)
    manifest = json.loads((root / "core" / "manifest.json").read_text())
    task = manifest["resolved"]["profile"]["tasks"][2]
    assert task["items"] == doc["tasks"]["sums"]["items"] and task["items_from"].endswith("full/coreset.json")


def test_the_untrained_reference_is_never_ranked(runs):
    _, full, _ = runs
    a = full["analysis"]
    assert [r["model"] for r in a["ranking"]["models"]] and "Untrained" not in [r["model"]
                                                                                for r in a["ranking"]["models"]]
    assert any(r["model"] == "Untrained" and r["kind"] == "chance" for r in a["references"])


def test_items_errors_name_the_key_and_what_is_valid(runs, tmp_path):
    root, _, _ = runs
    profile = tmp_path / "p.yaml"
    profile.write_text(f"tasks:\n  - {{name: arc_easy, items: {root / 'full' / 'coreset.json'}}}\n"
                       f"  - {{name: mmlu, items: {root / 'full' / 'coreset.json'}}}\n"
                       "  - {name: gsm8k, items: nope.json}\n  - {name: boolq, items: 3}\n")
    models = tmp_path / "m.yaml"
    models.write_text(f"profile: {profile}\nmodels:\n  - {{name: u, source: 'random:llama'}}\n")
    r = CliRunner().invoke(main, ["validate", str(models)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert any("tasks[1].items" in ln and "has no core set for task 'mmlu'" in ln and "it has: arc_easy" in ln
               for ln in lines), r.output
    assert any("tasks[2].items" in ln and "nope.json: file not found" in ln for ln in lines), r.output
    assert any("tasks[3].items" in ln and "must be the path of a coreset.json or a list of item ids" in ln
               for ln in lines), r.output
    assert not any("tasks[0]" in ln for ln in lines)
    assert "Traceback" not in r.output


def test_the_card_shows_ranks_references_advice_and_reproduction(runs):
    root, full, _ = runs
    html = (root / "full" / "card.html").read_text()
    text = re.sub(r"<[^>]+>", " ", html.split("<body", 1)[1])
    text = re.sub(r"\s+", " ", text)
    a = full["analysis"]
    top = a["ranking"]["models"][0]
    assert f"{top['rank_low']}–{top['rank_high']}" in text and "reference: chance" in text
    assert "Drop: Drop dup for M1" in text and "Core set: Evaluate only the core set of dup-copy" in text
    tau = a["coreset"]["reproduction"]["overall"]["kendall"]
    assert tau["tau"] is not None or tau["reason"] in text  # three trained models: τ, or why there is none
    assert "Power and sample size" in text and "Holm" in text
    assert "Definition in this run: paper — the activation is σ(W_gate x)" in text
    # every trained model that is not above chance somewhere is marked in the per-task table
    # (exactly: one mark per such cell, and none on a cell above chance or a reference's; the legend's ≈c has no title)
    marks = sum(1 for c in a["above_chance"] if c["above"] is False and not c["reference"])
    assert html.count('<span class="at-chance" title=') == marks
