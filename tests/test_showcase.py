"""The small version of `make showcase` (benchmarks/showcase.py): every claim the card can make fires, with its
numbers, on tiny models trained in the test.

Models (tiny Llamas on the small-vocabulary SmolLM2 tokenizer, saved as local model directories):

* a release candidate's checkpoint series: steps 0 (random init), 15, 30 and 90 of full-batch AdamW on 64
  "Repeat: WORD" texts of a word list (``checkpoint:`` set on all four); the evaluated "copy" task asks for other
  draws of the same words, so the candidate learns the task, not the items;
* a contaminated model: step 0 trained on a seeded half of the 32 ARC-Challenge items the run evaluates (raw
  text, as benchmarks/contamination_control.py does). 32, not 20: the trained half always puts its published
  order first, but under ARC's calibrated null 20 items left the option-order test's adjusted p at 0.01-0.04,
  either side of the run's FDR level by the CPU's float rounding in training (it fired on an Intel Xeon, not
  on an AMD EPYC); with 32 it is 8e-5;
* an untrained ``random:`` baseline.

One ``reporter run`` (ARC-Challenge 32 items, copy 24) and one render; the tests read results.json and the card.
Seed 1 of the checkpoint series gives a per-model law slope of about -2.5 (at seed 0 it is near 0 and the
law-adjusted ranking is withheld as it should be; seed 2 gives +0.55): the claims are real evidence of this
construction, and a regression that silences one fails here.
"""
from __future__ import annotations

import html
import json
import random
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from reporter.card.render import render
from reporter.cli import main

from .conftest import benchmark_script, small_random, tiny_lm

pytestmark = pytest.mark.slow  # every test reads the run of `showcase`

SEED = 1
STEPS = (15, 30, 90)
WORDS = "apple river stone cloud green tiger paper light music ocean forest silver window garden rocket candle".split()
PROFILE = """\
name: tiny-showcase
mui: {top_ratio: 0.01, mode: score}
lpp: {enabled: false}
contamination: {verbatim_items: 32, order_items: 32, order_permutations: 8, reference_texts: 16}
smoke_texts: 2
tasks:
  - {name: arc_challenge, limit: 32, shots: 0}
  - {name: copy, type: jsonl, path: copy.jsonl, prompt_field: q, answer_field: a, scorer: exact, shots: 0,
     max_new_tokens: 4}
"""


@pytest.fixture(scope="module")
def showcase(tmp_path_factory, one_thread):
    return _build_and_run(tmp_path_factory.mktemp("showcase"))


def _build_and_run(root: Path) -> dict:
    ctl = benchmark_script("contamination_control")
    rng = random.Random(0)
    test = [{"id": f"c{i}", "q": f"Repeat: {w}", "a": w} for i, w in enumerate(rng.choice(WORDS) for _ in range(24))]
    train = [f"Repeat: {w}\nAnswer: {w}\n" for w in (rng.choice(WORDS) for _ in range(64))]
    (root / "copy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    torch.manual_seed(SEED)
    lm = tiny_lm("llama", vocab="small", seed=SEED)
    tok, model = lm.tokenizer, lm.model

    def save(name: str) -> None:
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)

    save("step-0")
    start = {k: v.clone() for k, v in model.state_dict().items()}
    # the release candidate: one optimizer run over the whole batch, a checkpoint saved at each step of STEPS
    ctl.finetune(model, tok, train, epochs=max(STEPS), lr=1e-2, batch_size=len(train), seed=SEED,
                 on_step=lambda s: save(f"step-{s}") if s in STEPS else None)
    items = ctl.run_items("arc_challenge", 32, seed=0, kind="base")
    trained = ctl.trained_half(items, seed=0)
    model.load_state_dict(start)
    ctl.finetune(model, tok, [ctl.raw_text(it, label="") for it in items if str(it.id) in trained], epochs=30,
                 lr=1e-2, batch_size=6)
    save("contaminated")
    series = "\n".join(f"  - {{name: rc-{s}, source: ./step-{s}, kind: base, checkpoint: {s}}}" for s in (0, *STEPS))
    (root / "profile.yaml").write_text(PROFILE)
    (root / "models.yaml").write_text(small_random(
        f"seed: 0\nprofile: profile.yaml\nmodels:\n{series}\n  - {{name: contaminated, source: ./contaminated, kind: base}}\n"
        "  - {name: Untrained, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4, "
        "kv_heads: 2, seed: 9}}\n"))
    r = CliRunner().invoke(main, ["run", str(root / "models.yaml"), "-o", str(root / "run"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    render(root / "run", formats=("html", "md"))
    page = (root / "run" / "card.html").read_text()
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))
    return {"results": json.loads((root / "run" / "results.json").read_text()), "html": text,
            "md": (root / "run" / "card.md").read_text(), "trained": trained, "run": root / "run"}


def test_the_law_fit_is_on_the_card_with_its_numbers(showcase):
    fit = showcase["results"]["analysis"]["law"]["per_model_average"]
    assert fit["n"] == 5 and fit["slope"] < 0  # five trained models; the baseline is never a point of the law
    lo, hi = fit["slope_ci"]
    assert lo < fit["slope"] < hi
    row = f"per-model average (the paper's fit) MUI = {fit['intercept']:.3f} − {-fit['slope']:.3f}·ln(P)"
    assert row in showcase["html"], row
    assert f"{fit['slope']:.3f} [{lo:.3f}, {hi:.3f}]" in showcase["html"]


def test_the_law_adjusted_ranking_is_on_the_card_with_its_uncertainty(showcase):
    fair = showcase["results"]["analysis"]["fairness"]
    assert fair["available"] and fair["rank_uncertainty"]["resamples"] > 500
    assert "resampled items" in fair["rank_uncertainty"]["what"]  # the scores' own noise is in the interval
    top = min(fair["per_model"], key=lambda r: r["rank_adjusted"])
    lo, hi = top["rank_adjusted_interval"]
    line = (f"Law-adjusted, {top['model']} ranks first: law-adjusted score {top['adjusted']:.1f} against a raw mean of "
            f"{100 * top['score']:.1f}% over the law's tasks (raw rank {top['rank_raw']}; {lo}–{hi} under the items' "
            "and the law's uncertainty")
    assert line in showcase["html"] and line in showcase["md"]
    # the slope's CI includes 0 here: the card must say the ranking is indicative, not hide it
    assert (fair.get("caution") is not None) == (fair["fit"]["slope_ci"][1] >= 0)
    if fair.get("caution"):
        assert f"Indicative only: {fair['caution']}." in showcase["html"]
    assert "## Law-adjusted ranking" in showcase["md"]


def test_the_training_phases_are_on_the_card(showcase):
    tr = showcase["results"]["analysis"]["training"]
    assert [p["checkpoint"] for p in tr["model_series"]] == [0, *STEPS]
    assert len(tr["steps"]) == 3 and all("dP_ci" in s for s in tr["steps"])
    assert tr["steps"][0]["dP"] > 0  # the candidate learns the copy task
    assert tr["summary"] in showcase["html"]
    for s in tr["steps"]:
        assert s["phase"] in ("evolving", "accumulating", "coarsening", "collapsing", "stable")


def test_only_the_contaminated_model_is_warned_and_only_on_its_task(showcase):
    rows = showcase["results"]["analysis"]["contamination"]
    flagged = {(r["model"], r["task"]): r["severity"] for r in rows if r["severity"] != "none"}
    assert set(flagged) == {("contaminated", "arc_challenge")}, flagged
    row = next(r for r in rows if (r["model"], r["task"]) == ("contaminated", "arc_challenge"))
    fired = sorted(k for k, s in row["signals"].items() if isinstance(s, dict) and s.get("fires"))
    assert "option_order" in fired
    assert f"Possible test-set contamination ({flagged[('contaminated', 'arc_challenge')]}): contaminated on arc_challenge" \
        in showcase["html"]
    # the clean checkpoints were checked, not skipped: their verdicts are measured
    assert all(r["measured"] for r in rows if r["model"].startswith("rc-") and r["task"] == "arc_challenge")


def test_diversity_advice_is_on_the_card(showcase):
    div = showcase["results"]["analysis"]["diversity"]
    assert "Untrained" not in div  # the untrained reference gets no advice
    advised = {m: d["advice"] for m, d in div.items() if d["advice"]}
    assert advised, {m: d["withheld"] for m, d in div.items()}
    for model, advice in advised.items():
        for a in advice:
            assert f"{a['action'].capitalize()}: {a['text']}" in showcase["html"], (model, a["text"])


def test_check_same_ignores_timings_and_paths_and_names_every_other_difference(showcase, tmp_path):
    """``showcase.py --check-same``, the proof that two runs give the same results.json apart from timings: the
    same run made in another directory, its models loaded at other speeds on another date, is the same; a changed
    p-value and a missing section are named by their key paths, and the command exits 1."""
    sc = benchmark_script("showcase")
    run_a, run_b = showcase["run"], tmp_path / "elsewhere" / "run"
    doc = json.loads((run_a / "results.json").read_text())
    other = json.loads(json.dumps(doc).replace(str(run_a.resolve().parent), str(run_b.parent)))
    other["run"]["created"] = "2031-01-01T00:00:00+00:00"
    other["run"]["config_hash"] = "0123456789abcdef"  # a models YAML naming another cache directory
    for m in other["models"].values():
        m["meta"]["load_seconds"] = m["meta"].get("load_seconds", 0) + 7.5
        for section in m.values():
            if isinstance(section, dict) and "seconds" in section:
                section["seconds"] += 0.25
    run_b.mkdir(parents=True)

    def write(d: dict) -> None:
        (run_b / "results.json").write_text(json.dumps(d))

    write(other)
    assert sc.check_same(run_a, run_b) == []
    assert sc.main(["--check-same", str(run_a), str(run_b)]) == 0

    i, row = next((i, r) for i, r in enumerate(other["analysis"]["contamination"]) if r["model"] == "contaminated")
    before = row["signals"]["option_order"]["p_value"]
    row["signals"]["option_order"]["p_value"] = before * 1.001
    del other["models"]["Untrained"]["smoke"]
    write(other)
    assert sc.check_same(run_a, run_b) == [
        f"analysis.contamination[{i}].signals.option_order.p_value: {before!r} != {before * 1.001!r}",
        "models.Untrained.smoke: only in A"]
    assert sc.check_same(run_a, run_b, rel_tol=0.01) == ["models.Untrained.smoke: only in A"]
    assert sc.main(["--check-same", str(run_a), str(run_b)]) == 1
    assert sc.main(["--check-same", str(run_a), str(tmp_path / "missing")]) == 2


def test_the_manifest_says_how_each_models_option_orders_ran(showcase):
    """A fallback from the prefix tree to the KV-cache path is visible in the manifest, not only in the timings
    (a probe that refused every model once hid behind a slower run)."""
    man = json.loads((showcase["run"] / "manifest.json").read_text())
    assert "option_order" not in man["collection"]["Untrained"]["arc_challenge"]  # no evidence for a baseline
    for name, tasks in man["collection"].items():
        if name != "Untrained":  # tiny float32 Llamas: the probe takes the tree (scores from the cache say so too)
            assert tasks["arc_challenge"].get("option_order") == "prefix tree", (name, tasks)
    assert "option_order" not in man["collection"]["contaminated"]["copy"]  # a task without options
