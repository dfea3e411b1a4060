"""The contamination signals' statistics and the severity rule, without a model: exact nulls
against brute-force enumeration, validity under exchangeability, the run-wide Benjamini–Hochberg
correction and the strong / weak / none rule."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from reporter.analyse.contamination import (
    CONTAMINATION_RULE,
    CONTROL_POWER,
    FDR_Q,
    TESTS,
    apply_fdr,
    assess,
    combine,
    law_residual_signal,
    min_k_signal,
    option_order_signal,
    verbatim_signal,
)
from reporter.metrics.min_k import min_k_percent_prob
from reporter.metrics.rank_tests import order_fisher_pvalue, order_null_pvalue

# ---------------------------------------------------------------- signals and the rule

def test_min_k_signal_statistics():
    rng = np.random.default_rng(3)
    bench = [rng.normal(-1.0, 0.5, 20) for _ in range(12)]
    ref = [rng.normal(-1.6, 0.5, 60) for _ in range(15)]
    s = min_k_signal(bench, ref)
    b = [min_k_percent_prob(x, 0.2) for x in bench]
    r = [min_k_percent_prob(x[:20], 0.2) for x in ref]  # cut to the median benchmark length
    pairs = sum((x > y) + 0.5 * (x == y) for x in b for y in r)
    assert s["auc"] == pytest.approx(pairs / (len(b) * len(r)))
    assert s["reference_length"] == 20 and s["n_benchmark"] == 12 and s["n_reference"] == 15
    assert s["auc"] > 0.75 and not s["fires"] and s["test"] is False  # descriptive: never counted
    assert "not format-matched" in s["reason"]
    few = min_k_signal(bench[:4], ref)
    assert not few["measured"] and "at least 5" in few["reason"]
    short = min_k_signal([np.array([-1.0, -2.0])] * 10, ref)  # < 4 tokens: left out
    assert not short["measured"]


def _order_null_by_enumeration(ranks, ms):
    """P(sum of independent uniform{0..m_i} <= sum(ranks)) by listing every outcome (slow, obviously right)."""
    import itertools

    total, hit = 0, 0
    for outcome in itertools.product(*[range(m + 1) for m in ms]):
        total += 1
        hit += sum(outcome) <= sum(ranks)
    return hit / total


def test_option_order_pvalue_is_exact():
    rng = np.random.default_rng(5)
    for _ in range(20):
        ms = list(rng.integers(1, 6, size=int(rng.integers(1, 6))))
        ranks = [int(rng.integers(0, m + 1)) for m in ms]
        assert order_null_pvalue(ranks, ms) == pytest.approx(_order_null_by_enumeration(ranks, ms), abs=1e-12)


def _fisher_by_enumeration(ranks, ms):
    """P(T_null >= T), T = sum of round(1000 ln((m+1)/(r+1))), by listing every outcome (slow, obviously right)."""
    import itertools
    import math

    def t(outcome):
        return sum(round(1000 * math.log((m + 1) / (r + 1))) for r, m in zip(outcome, ms))

    outcomes = list(itertools.product(*[range(m + 1) for m in ms]))
    return sum(t(o) >= t(ranks) for o in outcomes) / len(outcomes)


def test_option_order_fisher_pvalue_is_exact_and_valid():
    rng = np.random.default_rng(7)
    for _ in range(20):
        ms = [int(x) for x in rng.integers(1, 6, size=int(rng.integers(1, 6)))]
        ranks = [int(rng.integers(0, m + 1)) for m in ms]
        assert order_fisher_pvalue(ranks, ms) == pytest.approx(_fisher_by_enumeration(ranks, ms), abs=1e-12)
    # validity: over every equally likely null outcome, P(p <= alpha) <= alpha for every alpha
    import itertools

    ms = [3, 4, 2, 5]
    ps = np.sort([order_fisher_pvalue(list(o), ms) for o in itertools.product(*[range(m + 1) for m in ms])])
    assert all(np.mean(ps <= a) <= a + 1e-12 for a in np.unique(ps))
    # a large run (the grid coarsens to stay bounded) still gives 9^-n when every item's order is the top one
    assert order_fisher_pvalue([0] * 200, [8] * 200) == pytest.approx(9.0 ** -200, rel=1e-6)


def _fisher_with_preference_by_enumeration(ranks, ms, w):
    """The same p-value under the null with a preference share ``w``: every outcome weighted by its probability
    (rank 0 with w + (1 - w)/(m + 1), any other rank with (1 - w)/(m + 1)), in float64, by listing them all."""
    import itertools
    import math

    def t(outcome):
        return sum(round(1000 * math.log((m + 1) / (r + 1))) for r, m in zip(outcome, ms))

    total = 0.0
    for o in itertools.product(*[range(m + 1) for m in ms]):
        prob = math.prod((w + (1 - w) / (m + 1)) if r == 0 else (1 - w) / (m + 1) for r, m in zip(o, ms))
        total += prob * (t(o) >= t(ranks))
    return total


def test_option_order_fisher_pvalue_under_a_preference_null():
    """The calibrated null (a share of items whose published order is first by convention): exact against an
    enumeration, valid under that null, and more conservative than exchangeability for every outcome."""
    import itertools

    rng = np.random.default_rng(11)
    for _ in range(20):
        ms = [int(x) for x in rng.integers(1, 6, size=int(rng.integers(1, 5)))]
        ranks = [int(rng.integers(0, m + 1)) for m in ms]
        w = float(rng.uniform(0, 0.5))
        assert order_fisher_pvalue(ranks, ms, w) == pytest.approx(_fisher_with_preference_by_enumeration(ranks, ms, w),
                                                                  abs=1e-12)
        assert order_fisher_pvalue(ranks, ms, w) >= order_fisher_pvalue(ranks, ms) - 1e-12
    ms, w = [3, 4, 2], 0.3
    outcomes = list(itertools.product(*[range(m + 1) for m in ms]))
    prob = np.array([np.prod([(w + (1 - w) / (m + 1)) if r == 0 else (1 - w) / (m + 1) for r, m in zip(o, ms)])
                     for o in outcomes])
    ps = np.array([order_fisher_pvalue(list(o), ms, w) for o in outcomes])
    assert all(prob[ps <= a].sum() <= a + 1e-12 for a in np.unique(ps))  # P(p <= alpha) <= alpha under that null
    assert order_fisher_pvalue([0, 1], [3, 3], [0.0, 0.0]) == order_fisher_pvalue([0, 1], [3, 3])
    with pytest.raises(ValueError):
        order_fisher_pvalue([0], [3], 1.0)


def test_fisher_combination_catches_a_memorised_subset_the_rank_sum_dilutes():
    """A third of the items memorised (published order first), the rest spread evenly: what a partly
    contaminated benchmark looks like. Fisher's combination is the more powerful of the two exact tests."""
    ranks, ms = [0] * 10 + [r for r in range(9) for _ in range(2)] + [4, 4], [8] * 30
    fisher, rank_sum = order_fisher_pvalue(ranks, ms), order_null_pvalue(ranks, ms)
    assert fisher < 1e-3 < rank_sum  # 2.3e-4 and 2.4e-3
    items = [{"id": str(i), "ll": 0.0, "perm_ll": [1.0] * r + [-1.0] * (8 - r)} for i, r in enumerate(ranks)]
    s = option_order_signal({"n": 30, "per_item": items})
    assert s["p_value"] == fisher and s["p_value_rank_sum"] == rank_sum and s["ranks_sum"] == sum(ranks)


def test_option_order_null_is_uniform_under_exchangeability():
    """Canonical and permuted log-likelihoods drawn from one distribution: p-values are calibrated."""
    rng = np.random.default_rng(0)
    ps = []
    for _ in range(400):
        items = [{"id": str(i), "ll": float(x[0]), "perm_ll": x[1:].tolist()} for i, x in
                 enumerate(rng.normal(-50, 3, size=(12, 9)))]
        ps.append(option_order_signal({"n": 12, "per_item": items})["p_value"])
    ps = np.asarray(ps)
    assert abs(np.mean(ps < 0.05) - 0.05) < 0.035 and abs(np.mean(ps < 0.5) - 0.5) < 0.08
    preferred = [{"id": str(i), "ll": -40.0, "perm_ll": (-45 + rng.normal(0, 1, 8)).tolist()} for i in range(12)]
    s = option_order_signal({"n": 12, "per_item": preferred})
    assert s["ranks_sum"] == 0 and s["p_value"] == pytest.approx(9.0 ** -12) and s["meets_effect"]
    assert s["top_share"] == 1.0 and s["chance_share"] == pytest.approx(1 / 9)
    assert [d["rank"] for d in s["drivers"]] == [0] * 5 and len(s["item_values"]) == len(s["reference_values"]) == 12
    assert not option_order_signal({"n": 3, "per_item": preferred[:3]})["measured"]  # too few items
    assert "no multiple-choice" in option_order_signal({"n": 0, "per_item": []})["reason"]


def test_rule_and_correction():
    on = {"measured": True, "test": True, "fires": True, "p_adjusted": 1e-3, "evidence": "x"}
    off = {"measured": True, "test": True, "fires": False, "p_adjusted": 0.4}
    nm = {"measured": False, "fires": False}
    desc = {"measured": True, "test": False, "fires": False, "auc": 0.99}
    for k in TESTS:
        sig = {**{t: off for t in TESTS}, k: on, "min_k": desc}
        assert combine(sig)[0] == "weak"
    assert combine({"option_order": on, "verbatim": on, "law_residual": nm})[0] == "strong"
    assert combine({"option_order": off, "verbatim": off, "law_residual": nm, "min_k": desc})[0] == "none"
    sev, text = combine({"option_order": nm, "verbatim": nm, "law_residual": nm, "min_k": desc})
    assert sev == "none" and "No contamination test" in text  # Min-K% alone measures nothing that counts
    assert assess("m", "t", {})["measured"] is False and assess("m", "t", {"verbatim": off})["measured"] is True
    row = assess("m", "t", {"verbatim": on})
    assert row["severity"] == "weak" and "Not measured: option order, Min-K% vs the other split, law residual" in row["evidence"]
    # one signal alone is strong only with a tiny adjusted p AND a measured positive-control power
    tiny = {**on, "p_adjusted": 1e-9}
    power = dict(CONTROL_POWER)
    try:
        CONTROL_POWER.update(option_order=None)
        assert combine({"option_order": tiny})[0] == "weak"
        CONTROL_POWER.update(option_order=0.95)
        assert combine({"option_order": tiny})[0] == "strong"
        assert combine({"option_order": on})[0] == "weak"
        CONTROL_POWER.update(option_order=0.5)
        assert combine({"option_order": tiny})[0] == "weak"
    finally:
        CONTROL_POWER.update(power)
    assert "Benjamini-Hochberg" in CONTAMINATION_RULE and "never counted" in CONTAMINATION_RULE


def test_benjamini_hochberg_over_the_run():
    rng = np.random.default_rng(1)
    ps = rng.uniform(size=30) ** 3
    rows = [{"verbatim": {"measured": True, "test": True, "p_value": float(p), "meets_effect": True},
             "min_k": {"measured": True, "test": False, "fires": False}} for p in ps]
    rows.append({"law_residual": {"measured": False, "fires": False}})
    assert apply_fdr(rows) == 30
    # reference: BH by hand, float64 loops
    order = np.argsort(ps)
    adj = np.empty(30)
    running = 1.0
    for rank in range(30, 0, -1):
        i = order[rank - 1]
        running = min(running, ps[i] * 30 / rank)
        adj[i] = running
    for r, a in zip(rows, adj):
        assert r["verbatim"]["p_adjusted"] == pytest.approx(a) and r["verbatim"]["fires"] == (a < FDR_Q)
        assert "p_adjusted" not in r["min_k"]
    weak_effect = [{"verbatim": {"measured": True, "test": True, "p_value": 1e-9, "meets_effect": False}}]
    apply_fdr(weak_effect)
    assert not weak_effect[0]["verbatim"]["fires"]  # significant but below the effect floor


def test_law_and_verbatim_signals():
    s = law_residual_signal(2.5, 90.0, 60.0, n_points=5)
    assert s["measured"] and s["meets_effect"] and "z = +2.50" in s["evidence"]
    assert s["p_value"] == pytest.approx(stats.t.sf(2.5, 2))
    assert not law_residual_signal(2.5, 60.0, 60.0, n_points=5)["meets_effect"]  # not above the median
    assert law_residual_signal(float("inf"), 90.0, 60.0, n_points=5)["p_value"] == 0.0
    nm = law_residual_signal(5.0, 90.0, 60.0, n_points=3)
    assert not nm["measured"] and "not measurable" in nm["reason"] and "at least 4" in nm["reason"]
    ref = {"n": 20, "rate": 0.0, "token_match": 0.1, "per_item": []}
    v = verbatim_signal({"n": 20, "rate": 0.3, "token_match": 0.5}, ref)
    assert v["p_value"] == pytest.approx(stats.fisher_exact([[6, 14], [0, 20]], alternative="greater").pvalue)
    assert v["meets_effect"] and v["n_exact"] == 6
    assert not verbatim_signal({"n": 20, "rate": 0.05, "token_match": 0.2}, ref)["meets_effect"]  # only 1 exact
    same = verbatim_signal({"n": 20, "rate": 0.2, "token_match": 0.3}, {**ref, "rate": 0.2})
    assert not same["meets_effect"] and same["p_value"] > 0.5  # as often as on held-out text
    assert not verbatim_signal({"n": 20, "rate": 0.3, "token_match": 0.5}, None)["measured"]
    assert not verbatim_signal({"n": 0, "rate": None, "token_match": None}, ref)["measured"]

