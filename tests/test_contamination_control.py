"""The small version of benchmarks/contamination_control.py: a model trained on half of a task's
test items is flagged on that task, and nothing is flagged where nothing was trained on.

The full control fine-tunes SmolLM2-135M-Instruct (benchmarks/RESULTS.md); here a tiny Llama
with random weights is the "clean" model and a copy of it trained on half of the
ARC-Challenge items a run evaluates (format (a): question, options and answer as raw text) the
contaminated one. A tiny model needs more steps than one epoch to learn its items, so it
trains longer.
Both go through ``reporter run`` end to end with the script's own functions.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from reporter.cli import main

from .conftest import benchmark_script, tiny_lm

pytestmark = pytest.mark.slow  # every test reads the fine-tuned model's run of `control`

#: 16 items left the other-split and verbatim tests at the edge of the run-wide correction on an AMD EPYC
#: machine (adjusted p 0.010 and 0.035 against 0.01: float rounding of the fine-tuning); 20 cleared it there (0.002,
#: 0.003), but left the other split's at 0.0097 on an AVX-512 EPYC, so the test asks two of the three signals to fire
N_ITEMS = 20


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model gains nothing from threads; on 2 shared cores one is far faster
    try:
        yield _control(tmp_path_factory)
    finally:
        torch.set_num_threads(threads)


def _control(tmp_path_factory):
    ctl = benchmark_script("contamination_control")
    out = tmp_path_factory.mktemp("control")
    torch.manual_seed(0)
    lm = tiny_lm("llama", vocab="small")
    tok = lm.tokenizer
    lm.model.save_pretrained(out / "clean")
    tok.save_pretrained(out / "clean")
    items = ctl.run_items("arc_challenge", N_ITEMS, seed=0, kind="base")
    trained = {"arc_challenge": ctl.trained_half(items, seed=0)}
    # no "Question: " label: a tiny model only continues text from the context it was trained in
    texts = [ctl.raw_text(it, label="") for it in items if str(it.id) in trained["arc_challenge"]]
    losses = ctl.finetune(lm.model, tok, texts, epochs=30, lr=1e-2, batch_size=6)
    lm.model.save_pretrained(out / "contaminated")
    tok.save_pretrained(out / "contaminated")
    (out / "models.yaml").write_text(
        f"models:\n  - {{name: clean, source: {out / 'clean'}, kind: base}}\n"
        f"  - {{name: contaminated, source: {out / 'contaminated'}, kind: base}}\n")
    (out / "profile.yaml").write_text(
        "name: control-small\nmui: {enabled: false}\nlpp: {enabled: false}\nsmoke_texts: 2\n"
        f"contamination: {{verbatim_items: {N_ITEMS}, order_items: {N_ITEMS}, order_permutations: 8, "
        "reference_texts: 16}\n"
        f"tasks:\n  - {{name: arc_challenge, limit: {N_ITEMS}, shots: 0}}\n  - {{name: arc_easy, limit: 8, shots: 0}}\n")
    r = CliRunner().invoke(main, ["run", str(out / "models.yaml"), "--profile", str(out / "profile.yaml"),
                                  "-o", str(out / "run"), "--seed", "0", "--no-progress", "--no-render"])
    assert r.exit_code == 0, r.output
    summary = ctl.summarise(out / "run", trained, ["contaminated"], ["clean"], [])
    return {"summary": summary, "losses": losses, "run": out / "run", "ctl": ctl}


def test_the_contaminated_task_is_flagged(control):
    s = control["summary"]
    assert control["losses"][-1] < control["losses"][0] / 4  # it did learn its items
    assert s["detected"] == {"weak_or_strong": 1, "strong": 1, "of": 1}
    row = next(v for v in s["verdicts"] if v["role"] == "contaminated")
    # "strong" is two signals or more; which of the three clear the run-wide correction is float rounding of the
    # fine-tuning at this size (adjusted p 0.004-0.017 across CPU kernels: benchmarks/RESULTS.md), so the test asks
    # for two, and for every signal's effect, which does not move, through its AUC
    assert len({"option_order", "split_min_k", "verbatim"} & set(row["fired"])) >= 2, row["fired"]
    auc = {a["signal"]: a["auc"] for a in s["aucs"]}
    assert auc["option_order"] >= 0.9 and auc["verbatim"] >= 0.9  # trained-on vs held-out items of the same task
    assert auc["split_min_k"] >= 0.9, auc


def test_nothing_else_is_flagged(control):
    s = control["summary"]
    assert s["false_alarms"] == {"warned": 0, "of": 3}  # clean on both tasks, contaminated on the untouched one
    roles = {(v["model"], v["task"]): v["role"] for v in s["verdicts"]}
    assert roles[("contaminated", "arc_easy")] == "untouched task" and roles[("clean", "arc_challenge")] == "clean"


def test_the_markdown_table_and_results_json_agree(control):
    md = control["ctl"].markdown(control["summary"], {"items": N_ITEMS, "tasks": ["arc_challenge"],
                                                      "untouched": ["arc_easy"], "epochs": 30, "lr": 1e-2})
    assert "| contaminated | arc_challenge | contaminated | strong |" in md
    assert "| model | task | role | severity | option order | split min k | verbatim | law residual |" in md
    assert "False alarms: 0 of 3" in md
    res = json.loads((control["run"] / "results.json").read_text())
    rows = {(r["model"], r["task"]): r for r in res["analysis"]["contamination"]}
    assert rows[("contaminated", "arc_challenge")]["severity"] == "strong"
    assert rows[("clean", "arc_challenge")]["severity"] == "none" and rows[("clean", "arc_challenge")]["measured"]
    # every measured option-order and other-split test carries the positive control's power at its own size
    from reporter.analyse.control_power import power_at_size, why_not

    seen = 0
    for (_model, _task), row in rows.items():
        for name in ("option_order", "split_min_k"):
            s = row["signals"][name]
            if not s.get("measured"):
                continue
            size = dict(items=s["n"], n_tests=s["n_tests"], orders=s.get("orders"))
            want = power_at_size(name, **size)
            assert s.get("power_at_size") == want, (row["model"], row["task"], name)
            assert s.get("power_reason") == (why_not(name, **size) if want is None else None)
            seen += want is not None
    assert seen >= 3


def _trie_lines(orders):
    """Option lines of a prefix tree, counted by building the trie node by node (reference for tree_lines)."""
    root: dict = {}
    n = 0
    for order in orders:
        node = root
        for opt in order:
            if opt not in node:
                node[opt] = {}
                n += 1
            node = node[opt]
    return n


def test_evidence_power_subsets_go_through_the_runs_own_test(control):
    """benchmarks/evidence_power.py (issue #35's power-for-cost table) on the control's run: the whole run as one
    "subset" gives the run's own p-value; the contaminated task fires at full size and less often at a small one;
    the clean model never fires; the tree's line count equals a trie's."""
    ep = benchmark_script("evidence_power")
    res = json.loads((control["run"] / "results.json").read_text())
    sig = {(r["model"], r["task"]): r["signals"] for r in res["analysis"]["contamination"]}
    rows = ep.study(control["run"], items=[N_ITEMS, 6], orders=[8, 2], pairs=[N_ITEMS, 6], tests=[3], draws=40, seed=1,
                    replace=False)
    at = {(r["model"], r["task"], r["test"], r["n"], r.get("orders")): r for r in rows}
    n_run = {}
    for model, task in (("contaminated", "arc_challenge"), ("clean", "arc_challenge"), ("clean", "arc_easy")):
        n_run[model, task] = n = json.loads((control["run"] / "models" / model / "tasks" / task
                                             / "option_order.json").read_text())["n"]
        full = at[(model, task, "option_order", n, 8)]
        assert full["K=3"]["median_p"] == pytest.approx(sig[(model, task)]["option_order"]["p_value"], rel=1e-9)
        assert full["run_p"] == pytest.approx(sig[(model, task)]["option_order"]["p_value"], rel=1e-9)
    hot = at[("contaminated", "arc_challenge", "option_order", n_run["contaminated", "arc_challenge"], 8)]["K=3"]
    small = at[("contaminated", "arc_challenge", "option_order", 6, 2)]["K=3"]
    run_sig = sig[("contaminated", "arc_challenge")]["option_order"]
    assert hot["fires"] == float(run_sig["p_value"] * 3 < 0.01 and run_sig["meets_effect"])  # one subset: the run
    assert small["fires"] <= hot["fires"] and small["median_p"] > 10 * hot["median_p"]
    split_full = at[("contaminated", "arc_challenge", "split_min_k", N_ITEMS, None)]["K=3"]
    assert split_full["median_p"] == pytest.approx(sig[("contaminated", "arc_challenge")]["split_min_k"]["p_value"])
    assert all(r["K=3"]["fires"] == 0.0 for r in rows if r["model"] == "clean")
    rng = np.random.default_rng(0)
    for _ in range(50):
        orders = [tuple(rng.permutation(4)) for _ in range(int(rng.integers(1, 10)))]
        assert ep.tree_lines(orders) == _trie_lines(orders)
    rec = json.loads((control["run"] / "models" / "contaminated" / "tasks" / "arc_challenge" / "option_order.json")
                     .read_text())
    sub = ep.subsample_order(rec, 5, 3, np.random.default_rng(2))
    by_id = {it["id"]: it for it in rec["per_item"]}
    for it in sub["per_item"]:  # each kept order keeps its own log-likelihood
        orig = by_id[it["id"]]
        assert len(it["perm_ll"]) == 3 and it["ll"] == orig["ll"]
        for p, ll in zip(it["perms"], it["perm_ll"], strict=True):
            assert orig["perm_ll"][orig["perms"].index(p)] == ll
    boot = ep.subsample_order(rec, 2 * rec["n"], 8, np.random.default_rng(3))  # a bootstrap sample: any size
    assert boot["n"] == 2 * rec["n"] and {it["id"] for it in boot["per_item"]} <= set(by_id)


def test_the_shipped_table_is_built_from_the_controls_own_signals(control, tmp_path):
    """``evidence_power.py --ship`` on the suite's tiny control: one contaminated pair, every cell drawn as often,
    each control's own share beside the pooled one, and a share that falls as more tests are corrected."""
    ep = benchmark_script("evidence_power")
    ctl = tmp_path / "tiny"
    ctl.mkdir()
    (ctl / "run").symlink_to(control["run"])
    (ctl / "control.json").write_text(json.dumps({"meta": {"seed": 0, "items": N_ITEMS, "tasks": ["arc_challenge"],
                                                           "epochs": 30, "lr": 1e-2}}))
    shipped: dict = {}
    real_ship = ep.ship

    def ship(controls, *, draws, seed):  # each table once: ship_into below reads it three times with these arguments
        key = (tuple(map(str, controls)), draws, seed)
        if key not in shipped:
            shipped[key] = real_ship(controls, draws=draws, seed=seed)
        return shipped[key]

    ep.ship = ship
    doc = ep.ship([ctl], draws=2, seed=0)
    assert doc["pairs"] == ["tiny/contaminated"] and doc["tests"] == list(ep.SHIP_TESTS)
    assert len(doc["option_order"]) == len(ep.SHIP_ITEMS) * len(ep.SHIP_ORDERS) and len(doc["split_min_k"]) == len(ep.SHIP_ITEMS)
    for c in doc["option_order"] + doc["split_min_k"]:
        assert c["draws"] == 2 and c["by_control"] == {"tiny": c["power"]}  # one control: its share is the pool's
        assert all(a >= b for a, b in zip(c["power"], c["power"][1:]))
    big = next(c for c in doc["option_order"] if c["items"] == 48 and c["orders"] == 8)
    small = next(c for c in doc["option_order"] if c["items"] == 8 and c["orders"] == 2)
    assert big["power"][0] >= small["power"][0]
    assert json.loads(ep.compact_json(doc)) == doc
    # --ship-task: the controls' table goes in as that task's own, the rest of the file as it was
    current = {"name": "main", "option_order": [], "by_task": {"other": {"name": "kept"}}}
    with_task = ep.ship_into(current, [ctl], task="arc_challenge", draws=2, seed=0)
    assert with_task["name"] == "main" and with_task["by_task"]["other"] == {"name": "kept"}
    assert with_task["by_task"]["arc_challenge"] == doc
    with pytest.raises(ValueError, match="fine-tuned on arc_challenge, not on hellaswag alone"):
        ep.ship_into(current, [ctl], task="hellaswag", draws=2, seed=0)
    assert ep.ship_into(current, [ctl], task=None, draws=2, seed=0) == {**doc, "by_task": current["by_task"]}
    assert list(shipped) == [((str(ctl),), 2, 0)]  # every table of the same controls and draws


def test_the_null_study_mode_counts_the_published_orders_on_top_as_the_test_does(tmp_path):
    """``evidence_power.py --null-study``: a null study's record (every order of every item) sampled at a run's sizes.
    With every order kept, the top share is the plain count of items whose published order is strictly the most
    likely; the null's chance share is the calibrated mixture's; every draw goes through the run's own test."""
    from reporter.analyse.order_null import order_null_for
    from reporter.collect.option_order import option_order_evidence
    from tests.test_contamination import toy_items

    ep = benchmark_script("evidence_power")
    lm = tiny_lm("llama")
    items = toy_items(12)
    ev = option_order_evidence(lm, items, n_perms=23, max_items=None, window=6)
    rec = {"model": "tiny", "benchmark": "arc_challenge", "n": ev["n"], "per_item": [
        {"id": r["id"], "orders": [[0, 1, 2, 3], *r["perms"]], "ll": [r["ll"], *r["perm_ll"]]} for r in ev["per_item"]]}
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "arc_challenge.json").write_text(json.dumps(rec))
    rows = ep.null_rows(tmp_path, items=[8], orders=[23, 3], tests=[1, 3], draws=20, seed=0)
    assert [(r["orders"], r["n"]) for r in rows] == [(23, 8), (3, 8)]
    loop = sum(all(r["ll"] > v for v in r["perm_ll"]) for r in ev["per_item"]) / ev["n"]
    w = order_null_for("arc_challenge")["preference"]
    assert rows[0]["top_share"] == pytest.approx(loop) and rows[0]["null_chance"] == pytest.approx(w + (1 - w) / 24)
    assert rows[1]["null_chance"] == pytest.approx(w + (1 - w) / 4) and 0 <= rows[1]["top_share"] <= 1
    for r in rows:
        assert 0 <= r["K=3"]["fires"] <= r["K=1"]["fires"] <= 1 and 0 < r["K=1"]["median_p"] <= 1


def _loop_spearman(x, y):
    """Spearman's rho by plain loops: average ranks (ties share theirs), then Pearson's r in float64."""
    def ranks(v):
        out = []
        for a in v:
            below = sum(1 for b in v if b < a)
            equal = sum(1 for b in v if b == a)
            out.append(below + (equal + 1) / 2.0)
        return out
    rx, ry = ranks(list(x)), ranks(list(y))
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5


def test_the_joint_study_measures_whether_the_two_per_item_tests_lean_together(control):
    """``benchmarks/evidence_joint.py``: both per-item tests take the same items, so a run's two fires count as two pieces
    of evidence only if the tests do not lean together on clean items. On the suite's control the item statistics equal
    plain loops (the published order's rank share, the pair's Min-K% difference), Spearman's rho equals a loop's, and
    the model trained on half of the items shows the dependence contamination makes: its trained items are the ones
    both tests single out (rho < 0), more than on the clean model."""
    ep = benchmark_script("evidence_joint")
    run = control["run"]
    # 16 items per draw, as the study's own 48 more than 13: a bootstrap draw has ties, and at 13 items or fewer
    # scipy's Wilcoxon with ties enumerates every sign pattern through one Python call each (0.8 s a test, 28 s here)
    rows = ep.joint_rows(run, {("contaminated", "arc_challenge")}, n=16, orders=3, tests=[1, 3], draws=6, seed=0)
    at = {(r["model"], r["task"]): r for r in rows}
    assert {("contaminated", "arc_challenge"), ("clean", "arc_challenge")} <= set(at)
    for (model, task), r in at.items():
        tdir = run / "models" / model / "tasks" / task
        rec_o = json.loads((tdir / "option_order.json").read_text())
        rec_s = json.loads((tdir / "split_reference.json").read_text())
        by_id = {str(it["id"]): it for it in rec_o["per_item"]}
        u, d = [], []
        for pr in rec_s["pairs"]:
            it = by_id.get(str(pr["benchmark_id"]))
            if it is None or min(len(pr["benchmark_logprobs"]), len(pr["reference_logprobs"])) < 4:
                continue
            rank = sum(1 for v in it["perm_ll"] if v >= it["ll"] - 1e-6 * max(1.0, abs(it["ll"])))
            u.append((rank + 0.5) / (len(it["perm_ll"]) + 1))

            def min_k(lp):
                low = sorted(lp)[:max(1, int(0.2 * len(lp) + 1e-9))]
                return sum(low) / len(low)
            d.append(min_k(pr["benchmark_logprobs"]) - min_k(pr["reference_logprobs"]))
        su, sd = ep.item_statistics(ep.shared_items(rec_o, rec_s))
        assert r["n_shared"] == len(u) and su.tolist() == pytest.approx(u) and sd.tolist() == pytest.approx(d, abs=1e-9)
        assert r["rho_items"] == pytest.approx(_loop_spearman(u, d), abs=1e-9)
        assert r["contaminated"] == ((model, task) == ("contaminated", "arc_challenge"))
        for k in ("K=1", "K=3"):
            f = r[k]
            assert 0 <= f["both"] <= min(f["option_order"], f["split_min_k"]) <= 1
            assert f["product"] == pytest.approx(f["option_order"] * f["split_min_k"])
    hot, cold = at[("contaminated", "arc_challenge")], at[("clean", "arc_challenge")]
    assert hot["rho_items"] < -0.3 and hot["rho_items"] < cold["rho_items"]
    pooled = ep.pooled_rho([cold])
    assert pooled["rho"] == pytest.approx(cold["rho_items"]) and pooled["low"] < cold["rho_items"] < pooled["high"]
    two = ep.pooled_rho([{"rho_items": 0.5, "n_shared": 103}, {"rho_items": -0.5, "n_shared": 103}])
    half = 1.96 / np.sqrt(200.0)  # Fisher's z: the mean of arctanh(0.5) and arctanh(-0.5) is 0, its se 1/sqrt(100 + 100)
    assert two["rho"] == pytest.approx(0.0, abs=1e-12) and two["high"] == pytest.approx(np.tanh(half))
    assert two["low"] == pytest.approx(-np.tanh(half)) and two["items"] == 206


def test_a_users_own_file_named_like_a_benchmark_is_tested_against_exchangeable_orders(control, tmp_path):
    """A ``type: jsonl`` task named ``mmlu_inhouse`` or ``arc_challenge`` took the null the study measured on the shipped
    benchmark's data (its source on the card named the study's clean models): the user's file is not that data."""
    from reporter.analyse.analysis import analyse
    from reporter.analyse.order_null import USER_DATA, order_null_for

    from .conftest import copy_run

    def nulls(run):
        return {(r["model"], r["task"]): r["signals"]["option_order"].get("null")
                for r in analyse(run)["contamination"] if r["signals"]["option_order"].get("measured")}

    shipped = nulls(control["run"])  # arc_challenge and arc_easy, the shipped data: their calibrated nulls
    assert {t for _, t in shipped} == {"arc_challenge", "arc_easy"}
    for (_, task), n in shipped.items():
        want = order_null_for(task)
        assert (n["name"], n["preference"], n["source"]) == ("calibrated", want["preference"], want["source"])
    run = copy_run(control["run"], tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    for t in manifest["resolved"]["profile"]["tasks"]:  # the same items, as the user's own file named arc_challenge
        if t["name"] == "arc_challenge":
            t.update({"type": "jsonl", "path": str(tmp_path / "arc_challenge.jsonl")})
    (run / "manifest.json").write_text(json.dumps(manifest))
    own = nulls(run)
    assert set(own) == set(shipped)
    for key, n in own.items():
        if key[1] == "arc_challenge":
            assert {k: n[k] for k in USER_DATA} == USER_DATA
        else:  # negative control: arc_easy, still the shipped data, keeps its calibrated null
            assert n == shipped[key]
    assert all("power_at_size" in r["signals"]["option_order"] or "power_reason" in r["signals"]["option_order"]
               for r in analyse(run)["contamination"] if r["signals"]["option_order"].get("measured"))
