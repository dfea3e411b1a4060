"""Rank intervals and tiers, the Holm adjustment, power and sample size, chance levels.

Each figure is checked against an obviously-correct reference written here: plain-loop
bootstrap ranks, a hand-written Holm step-down (and statsmodels), Monte-Carlo power.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from reporter.analyse.leaderboard import leaderboard
from reporter.analyse.results import comparisons
from reporter.metrics.power import (
    mcnemar_power,
    min_detectable_mcnemar,
    n_needed_mcnemar,
    ttest_min_detectable,
    ttest_n_needed,
)
from reporter.metrics.ranking import bootstrap_ranks
from reporter.metrics.stats import above_chance, holm, mcnemar_exact
from reporter.scoring import chance_level

# --- rank intervals --------------------------------------------------------------------------------


def slow_bootstrap_ranks(scores, seed, n_resamples, confidence=0.95):
    """Plain loops: per task, per resample, draw the items (rng.integers(0, n, n)), sum per model."""
    rng = np.random.default_rng(seed)
    tasks = list(scores)
    models = list(scores[tasks[0]])
    agg = [[0.0] * len(models) for _ in range(n_resamples)]
    for t in tasks:
        n = len(scores[t][models[0]])
        for b in range(n_resamples):
            idx = rng.integers(0, n, n)
            for j, m in enumerate(models):
                total = 0.0
                for i in idx:
                    total += float(scores[t][m][i])
                agg[b][j] += total / n / len(tasks)
    intervals = {}
    for j, m in enumerate(models):
        ranks = sorted(1 + sum(1 for k in range(len(models)) if agg[b][k] > agg[b][j] + 1e-12)
                       for b in range(n_resamples))
        tail = (1 - confidence) / 2
        intervals[m] = (ranks[math.floor(tail * n_resamples)], ranks[math.ceil((1 - tail) * n_resamples) - 1])
    diffs = {(x, y): sorted(agg[b][models.index(x)] - agg[b][models.index(y)] for b in range(n_resamples))
             for x in models for y in models if x != y}
    return intervals, diffs


def _suite(rng, accuracies, n_items):
    """Per task, per model: 0/1 scores with the given accuracy (a shared item difficulty)."""
    out = {}
    for t, n in n_items.items():
        difficulty = rng.uniform(-1, 1, n)
        out[t] = {m: (rng.uniform(0, 1, n) + 0.3 * difficulty < p).astype(float) for m, p in accuracies.items()}
    return out


def test_rank_intervals_equal_the_slow_reference_bootstrap():
    rng = np.random.default_rng(3)
    scores = _suite(rng, {"a": 0.7, "b": 0.62, "c": 0.6, "d": 0.2}, {"t1": 25, "t2": 12, "t3": 40})
    got = bootstrap_ranks(scores, seed=11, n_resamples=300)
    intervals, diffs = slow_bootstrap_ranks(scores, seed=11, n_resamples=300)
    for row in got["models"]:
        assert (row["rank_low"], row["rank_high"]) == intervals[row["model"]], row["model"]
    # tiers: each member's 95% interval of the difference to its tier's leader contains 0
    for tier in got["tiers"]:
        lead = tier[0]
        for m in tier[1:]:
            d = diffs[(lead, m)]
            assert d[math.floor(0.025 * 300)] <= 0
    leaders = [t[0] for t in got["tiers"]]
    for i, lead in enumerate(leaders[1:], 1):  # a later leader is significantly below every earlier one
        assert diffs[(leaders[i - 1], lead)][math.floor(0.025 * 300)] > 0
    # the clearly worse model is alone at the bottom; the point ranks follow the mean scores
    assert got["tiers"][-1] == ["d"] and got["models"][-1]["rank_low"] == 4
    assert [r["model"] for r in got["models"]] == sorted("abcd", key=lambda m: -np.mean(
        [scores[t][m].mean() for t in scores]))


def test_identical_models_are_tied_and_a_clear_gap_is_not():
    rng = np.random.default_rng(0)
    x = (rng.uniform(size=200) < 0.5).astype(float)
    scores = {"t": {"twin-1": x, "twin-2": x.copy(), "far-below": np.zeros(200)}}
    r = bootstrap_ranks(scores, seed=0, n_resamples=200)
    assert r["tiers"] == [["twin-1", "twin-2"], ["far-below"]]
    rows = {m["model"]: m for m in r["models"]}
    assert rows["twin-1"]["rank"] == rows["twin-2"]["rank"] == 1  # identical every resample: shared rank
    assert (rows["far-below"]["rank_low"], rows["far-below"]["rank_high"]) == (3, 3)


def test_the_bootstrap_is_paired():
    """Two models that differ on 3 of 60 items, always in one direction: unpaired resampling could not
    separate them; the paired bootstrap always ranks them in the same order."""
    rng = np.random.default_rng(1)
    a = (rng.uniform(size=60) < 0.5).astype(float)
    b = a.copy()
    flip = np.flatnonzero(a == 1)[:3]
    b[flip] = 0
    r = bootstrap_ranks({"t": {"a": a, "b": b}}, seed=0, n_resamples=400)
    rows = {m["model"]: m for m in r["models"]}
    assert rows["a"]["rank_high"] == 1 and rows["b"]["rank_low"] == 1  # b can tie (flips not drawn), never lead
    assert rows["b"]["rank_high"] == 2


# --- Holm -----------------------------------------------------------------------------------------


def slow_holm(p):
    """Holm's step-down, by hand: sort ascending, multiply the k-th smallest by (m - k), running max, cap at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[i]))
        out[i] = running
    return out


def test_holm_equals_statsmodels_and_the_hand_written_step_down(monkeypatch):
    import gc

    # statsmodels' Holm runs gc.collect() per call: up to half a second each in a test worker holding many runs,
    # and nothing the values depend on
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    rng = np.random.default_rng(0)
    cases = [list(rng.uniform(0, 0.2, m) ** 2) for m in (1, 2, 7, 40, 300)]
    cases += [[0.01, 0.01, 0.04, 0.04, 0.04, 0.5],  # ties, in and out of order
              [0.5, 0.9, 1.0, 0.0, 0.3],  # capped at 1, an exact 0
              list(rng.choice([0.001, 0.02, 0.2, 0.7], 60)),  # many ties
              list(rng.uniform(0, 1, 25)), [0.03, float("nan"), 0.01]]
    for p in cases:
        got = holm(p)
        np.testing.assert_array_equal(got, multipletests(p, method="holm")[1])  # bit for bit
        if not np.isnan(p).any():
            assert got == pytest.approx(slow_holm(p), abs=1e-15)


def test_holm_runs_no_garbage_collection():
    """statsmodels' Holm runs gc.collect() on every call (a tenth of this suite's CPU time, in the analyses of its
    runs); reporter's gives the same values without it."""
    import gc

    seen = []
    callback = lambda phase, info: seen.append((phase, info["generation"]))  # noqa: E731
    gc.callbacks.append(callback)
    was = gc.isenabled()
    gc.disable()  # no automatic collection: only an explicit one would be seen
    try:
        holm(list(np.linspace(0.001, 0.2, 50)))
    finally:
        gc.callbacks.remove(callback)
        if was:
            gc.enable()
    assert seen == []


def test_comparisons_carry_holm_adjusted_p_values_and_adjusted_significance():
    rng = np.random.default_rng(5)
    per_item = {m: {t: {f"{t}-{i}": float(rng.uniform() < acc) for i in range(40)} for t in ("x", "y", "z")}
                for m, acc in (("good", 0.9), ("mid", 0.6), ("bad", 0.1))}
    per_item["mid"]["z"] = {k: rng.uniform() for k in per_item["mid"]["z"]}  # partial credit: the sign-flip test
    rows = comparisons(per_item, seed=0)
    assert len(rows) == 9 and all(r["family"] == 9 for r in rows)
    raw = [r["p_value"] for r in rows]
    assert [r["p_holm"] for r in rows] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert all(r["significant"] == (r["p_holm"] < 0.05) for r in rows)
    for r in rows:
        if r["test"] == "mcnemar-exact":
            assert r["p_value"] == mcnemar_exact(r["n01"], r["n10"])
        else:
            assert r["model_b"] == "mid" or r["model_a"] == "mid"
            assert r["task"] == "z" and r["mcnemar_p"] is None
    # a difference significant on its own can lose significance after the adjustment: adjusted is never smaller
    assert all(r["p_holm"] >= r["p_value"] for r in rows)
    assert any(r["significant"] for r in rows) and not all(r["significant"] for r in rows)


# --- power ------------------------------------------------------------------------------------------


def simulated_mcnemar_power(n, psi, delta, sims, seed=0):
    """Draw n paired items (a right/b wrong, a wrong/b right, agree) and run the exact McNemar test."""
    rng = np.random.default_rng(seed)
    p10, p01 = (psi + delta) / 2, (psi - delta) / 2
    counts = rng.multinomial(n, [p10, p01, 1 - psi], size=sims)
    pvalues: dict[tuple[int, int], float] = {}  # the draws repeat a few hundred distinct tables: test each once
    for n10, n01, _ in counts:
        if (key := (int(n01), int(n10))) not in pvalues:
            pvalues[key] = mcnemar_exact(*key)
    return float(np.mean([pvalues[(int(n01), int(n10))] <= 0.05 for n10, n01, _ in counts]))


@pytest.mark.parametrize("n, psi, delta", [(60, 0.4, 0.2), (200, 0.3, 0.1), (31, 0.5, 0.3)])
def test_exact_mcnemar_power_matches_a_simulation(n, psi, delta):
    sims = 4000
    sim = simulated_mcnemar_power(n, psi, delta, sims)
    exact = mcnemar_power(n, psi, delta)
    assert abs(sim - exact) < 3.5 * math.sqrt(exact * (1 - exact) / sims) + 1e-3


def test_min_detectable_difference_and_needed_n_reach_80_percent_in_simulation():
    n, psi = 150, 0.35
    d = min_detectable_mcnemar(n, psi)
    assert 0 < d < psi
    sims = 4000
    se = math.sqrt(0.8 * 0.2 / sims)
    assert abs(simulated_mcnemar_power(n, psi, d, sims, seed=1) - 0.8) < 3.5 * se + 0.01
    assert simulated_mcnemar_power(n, psi, 0.6 * d, sims, seed=2) < 0.7  # a smaller difference is missed more often
    need = n_needed_mcnemar(psi=0.4, delta=0.1)
    assert simulated_mcnemar_power(need, 0.4, 0.1, sims, seed=3) > 0.8 - 3.5 * se
    assert mcnemar_power(need // 2, 0.4, 0.1) < 0.6
    # Connor's normal approximation is in the same place
    za, zb = stats.norm.ppf(0.975), stats.norm.ppf(0.8)
    connor = (za * math.sqrt(0.4) + zb * math.sqrt(0.4 - 0.01)) ** 2 / 0.01
    assert 0.9 * connor < need < 1.15 * connor
    assert min_detectable_mcnemar(8, 0.25) is None  # 8 items: nothing is detectable


def test_t_test_power_matches_a_simulation():
    sd, delta = 0.3, 0.05
    need = ttest_n_needed(sd, delta)
    rng = np.random.default_rng(0)
    sims = 3000
    hits = [stats.ttest_1samp(rng.normal(delta, sd, need), 0).pvalue < 0.05 for _ in range(sims)]
    assert abs(np.mean(hits) - 0.8) < 3.5 * math.sqrt(0.16 / sims) + 0.01
    d = ttest_min_detectable(need, sd)
    assert d == pytest.approx(delta, rel=0.02)


# --- chance -------------------------------------------------------------------------------------------


def test_chance_levels_and_the_one_sided_test():
    assert chance_level("choice", [{"choices": list("abcd")}] * 3 + [{"choices": list("ab")}]) == pytest.approx(
        (3 * 0.25 + 0.5) / 4)
    assert chance_level("bool", [{}]) == 0.5 and chance_level("code", [{}]) == 0.0
    assert chance_level("char_f1", [{}]) is None
    # 4 of 8 on four options: p = P(X >= 4), X ~ Binomial(8, 1/4), by hand
    p = sum(math.comb(8, k) * 0.25 ** k * 0.75 ** (8 - k) for k in range(4, 9))
    r = above_chance([1, 1, 1, 1, 0, 0, 0, 0], 0.25)
    assert r["p"] == pytest.approx(p) and r["above"] is False
    assert above_chance([1] * 7 + [0], 0.25)["above"] is True
    assert above_chance([0, 0, 0], 0.0)["above"] is False and above_chance([0, 1, 0], 0.0)["above"] is True
    assert above_chance([0.5, 0.7], None)["above"] is None


def test_leaderboard_never_ranks_the_untrained_reference_and_marks_chance():
    rng = np.random.default_rng(2)

    def task(acc, n=40):
        return {f"q{i}": float(rng.uniform() < acc) for i in range(n)}
    per_item = {"strong": {"mc": task(0.9)}, "weak": {"mc": task(0.3)}, "untrained": {"mc": task(0.3)}}
    results = {"models": {
        "strong": {"source": "./s", "status": "complete", "tasks": {"mc": {"score": 0.9, "chance": 0.25}}},
        "weak": {"source": "./w", "status": "complete", "tasks": {"mc": {"score": 0.3, "chance": 0.25}}},
        "untrained": {"source": "random:llama", "status": "complete", "tasks": {"mc": {"score": 0.3, "chance": 0.25}}},
        "broken": {"source": "./b", "status": "failed", "tasks": {}}},
        "comparisons": comparisons(per_item, seed=0)}
    for m in per_item:
        results["models"][m]["tasks"]["mc"]["score"] = float(np.mean(list(per_item[m]["mc"].values())))
    lb = leaderboard(results, per_item, seed=0, n_resamples=300)
    assert [r["model"] for r in lb["ranking"]["models"]] == ["strong", "weak"]
    assert [r["model"] for r in lb["references"] if r["kind"] == "chance"] == ["untrained"]
    assert {"model": "broken", "reason": "failed to evaluate"} in lb["not_ranked"]
    chance = {(c["model"], c["task"]): c for c in lb["above_chance"]}
    assert chance[("strong", "mc")]["above"] is True
    k = int(sum(per_item["weak"]["mc"].values()))
    assert chance[("weak", "mc")]["above"] is bool(stats.binomtest(k, 40, 0.25, alternative="greater").pvalue < 0.05)
    assert chance[("weak", "mc")]["above"] is False  # 10 of 40 on four options is chance
    assert lb["ties"]["models"] == ["strong", "weak"] and lb["ties"]["tied"] == []
    assert lb["power"]["per_task"][0]["n"] == 40


def test_models_answering_other_items_of_a_task_are_each_tested_against_their_own_chance_level():
    """A base model's shot is held out of a file without a few-shot split, so an instruct model and a base model
    answer other items of the same choice task and have other chance levels (0.35 and 0.354): the task has no one
    level for the reference rows, but each model is tested against its own (it was tested against none, and the card
    then counted the task among those the model beat chance on)."""
    rng = np.random.default_rng(7)
    per_item = {"instruct": {"mc": {f"q{i}": float(rng.uniform() < 0.3) for i in range(40)}},
                "base": {"mc": {f"q{i}": float(rng.uniform() < 0.3) for i in range(1, 40)}}}
    levels = {"instruct": 0.35, "base": 0.354}
    results = {"models": {m: {"source": f"./{m}", "status": "complete",
                              "tasks": {"mc": {"score": float(np.mean(list(per_item[m]["mc"].values()))),
                                               "chance": levels[m]}}} for m in per_item},
               "comparisons": comparisons(per_item, seed=0)}
    lb = leaderboard(results, per_item, seed=0, n_resamples=100)
    assert [r["kind"] for r in lb["references"]] == []  # no one theoretical level for the task's reference row
    rows = {c["model"]: c for c in lb["above_chance"]}
    for m, s in per_item.items():
        k, n = int(sum(s["mc"].values())), len(s["mc"])
        p = sum(math.comb(n, j) * levels[m] ** j * (1 - levels[m]) ** (n - j) for j in range(k, n + 1))
        assert rows[m]["chance"] == levels[m] and rows[m]["p"] == pytest.approx(p, rel=1e-9)
        assert rows[m]["above"] is (p < 0.05) is False
    # the positive control: a model of the same kind right on most of its items beats its own level
    strong = {f"q{i}": float(i % 10 != 0) for i in range(1, 40)}
    per_item["strong"] = {"mc": strong}
    results["models"]["strong"] = {"source": "./strong", "status": "complete",
                                   "tasks": {"mc": {"score": float(np.mean(list(strong.values()))), "chance": 0.354}}}
    row = next(c for c in leaderboard(results, per_item, seed=0, n_resamples=100)["above_chance"]
               if c["model"] == "strong")
    assert row["chance"] == 0.354 and row["above"] is True and row["p"] < 1e-6


def test_a_constant_answer_on_a_skewed_task_is_not_above_chance():
    """BoolQ-like: 62 % of 400 items are "yes". A model that always answers "yes" (scored by the real scorer)
    beats 1/2 by far, but not the task's most common answer; a model right on 75 % beats both."""
    from reporter.card.data import _majority_levels
    from reporter.scoring import get_scorer, majority_answer

    rng = np.random.default_rng(0)
    items = [{"answer": bool(i < 248)} for i in range(400)]  # 248 / 400 = 62 %
    answer, share = majority_answer("bool", items)
    assert (answer, share) == ("yes", 0.62)
    constant = {f"q{i}": get_scorer("bool")("Yes.", it)[1] for i, it in enumerate(items)}
    good = {f"q{i}": float(rng.uniform() < 0.75) for i in range(400)}
    summary = {"chance": 0.5, "majority": {"answer": answer, "share": share, "over": 400}}
    results = {"models": {n: {"source": f"./{n}", "status": "complete", "tasks": {"bq": {**summary,
                                                                                         "score": float(np.mean(list(s.values())))}}}
                          for n, s in (("constant", constant), ("good", good))}}
    per_item = {"constant": {"bq": constant}, "good": {"bq": good}}
    lb = leaderboard(results, per_item, seed=0, n_resamples=100)
    rows = {c["model"]: c for c in lb["above_chance"]}
    # the reference rows: theoretical chance 1/2, and always "yes" at 62 %
    assert [(r["kind"], r["score"]) for r in lb["references"]] == [("theoretical", 0.5), ("majority", 0.62)]
    # by hand: P(X >= k), X ~ Binomial(400, 0.62)
    for name, s in per_item.items():
        k = int(sum(s["bq"].values()))
        p = sum(math.comb(400, j) * 0.62 ** j * 0.38 ** (400 - j) for j in range(k, 401))
        assert rows[name]["p"] == pytest.approx(p, rel=1e-9)
        assert rows[name]["baseline"] == 0.62 and rows[name]["baseline_kind"] == "majority"
        assert rows[name]["majority_answer"] == "yes"
    assert rows["constant"]["above"] is False and rows["good"]["above"] is True
    assert above_chance(list(constant.values()), 0.5)["above"] is True  # what 1/2 alone would have claimed
    # results.json from before the most common answer was recorded: tested against chance, as then
    for e in results["models"].values():
        del e["tasks"]["bq"]["majority"]
    lb_old = leaderboard(results, per_item, seed=0, n_resamples=100)
    old = {c["model"]: c for c in lb_old["above_chance"]}
    assert old["constant"]["baseline_kind"] == "chance" and old["constant"]["above"] is True
    assert [r["kind"] for r in lb_old["references"]] == ["theoretical"]
    # the card names the level it tested
    card = {"analysis": {"above_chance": list(rows.values())}}
    assert _majority_levels(card) == (" Where always giving a task's most common answer beats guessing, that is the "
                                      'level tested: bq 62 % ("yes").')


def test_the_most_common_answer_row_averages_each_tasks_floor():
    """Two tasks: BoolQ-like (always "yes" 62 % > 1/2) and four options whose most common answer (24 %) is below
    chance: the row is the mean of 62 % and 25 %, and names only the first task."""
    rng = np.random.default_rng(3)
    per = {"m": {t: {f"q{i}": float(rng.uniform() < 0.7) for i in range(30)} for t in ("bq", "mc")}}
    tasks = {"bq": {"chance": 0.5, "majority": {"answer": "yes", "share": 0.62, "over": 100}},
             "mc": {"chance": 0.25, "majority": {"answer": "B", "share": 0.24, "over": 100}}}
    for t, s in tasks.items():
        s["score"] = float(np.mean(list(per["m"][t].values())))
    results = {"models": {"m": {"source": "./m", "status": "complete", "tasks": tasks}}}
    refs = {r["kind"]: r for r in leaderboard(results, per, seed=0, n_resamples=50)["references"]}
    assert refs["theoretical"]["score"] == pytest.approx((0.5 + 0.25) / 2)
    assert refs["majority"]["score"] == pytest.approx((0.62 + 0.25) / 2)
    assert "(bq)" in refs["majority"]["reason"]


def test_the_most_common_answer_row_also_scores_the_evaluated_items_and_the_card_says_when_it_matches_a_model():
    """On 8 lopsided items the split's most common answer scored what the winner did (27.4 %), and the card only
    showed its 19.3 % over the split. The row now carries the same rule's score on the evaluated items, and a model
    whose mean does not exceed it gets a warning (and a model above it none)."""
    from reporter.card.warnings import card_warnings as _warnings

    gold = {"bq": ["yes"] * 6 + ["no"] * 2, "mc": ["D"] * 4 + ["A", "B", "C", "A"]}
    majority = {"bq": ("yes", 0.62), "mc": ("D", 0.278)}
    chance = {"bq": 0.5, "mc": 0.25}
    per = {"always": {t: {f"q{i}": float(g == majority[t][0]) for i, g in enumerate(gold[t])} for t in gold},
           "better": {t: {f"q{i}": 1.0 for i in range(8)} for t in gold}}
    # the rule on the evaluated items, by a plain loop: the better of chance and the split's constant answer's share
    here = [max(chance[t], sum(g == majority[t][0] for g in gold[t]) / len(gold[t])) for t in sorted(gold)]
    results = {"models": {m: {"source": f"./{m}", "status": "complete", "tasks": {
        t: {"chance": chance[t], "score": float(np.mean(list(per[m][t].values()))), "ci_low": 0.0, "ci_high": 1.0,
            "n": 8, "majority": {"answer": majority[t][0], "share": majority[t][1], "over": 300,
                                 "evaluated": sum(g == majority[t][0] for g in gold[t]) / 8}} for t in gold}}
        for m in per}}
    lb = leaderboard(results, per, seed=0, n_resamples=50)
    row = next(r for r in lb["references"] if r["kind"] == "majority")
    assert row["score"] == pytest.approx((0.62 + 0.278) / 2) and row["evaluated_score"] == pytest.approx(np.mean(here))
    card = {"ranked": [{"name": "always", "rank": 2, "avg": np.mean([np.mean(list(v.values())) for v in
                                                                      per["always"].values()])},
                       {"name": "better", "rank": 1, "avg": 1.0}],
            "majority_baseline": row}
    base = {"models": [], "analysis": None, "manifest": {}, "lpp_correlations": [], "benchmarks": ["bq", "mc"],
            "probes": []}
    said = [w for _, w in _warnings({**base, **card}) if "always giving each task's most common answer" in w]
    assert said == [f"On the evaluated items, always giving each task's most common answer (or guessing, where that "
                    f"does better) scores {100 * np.mean(here):.1f}%, as much as or more than always ({100 * card['ranked'][0]['avg']:.1f}%"
                    "): on these items their mean scores show nothing a constant answer would not get."]
    del row["evaluated_score"]  # a run from before it was recorded: no claim
    assert not [w for _, w in _warnings({**base, **card}) if "always giving" in w]


@pytest.mark.parametrize("split, items, want", [
    (0.62, 0.2, 0.5),    # the split's "yes" is rare among these items: guessing is the floor here, not 20 %
    (0.5, 1.0, 1.0),     # a balanced split, but every evaluated item "yes": the row appears for the items alone
    (0.62, 0.75, 0.75),
])
def test_the_evaluated_items_floor_is_the_better_of_guessing_and_the_constant_answer(split, items, want):
    per = {"m": {"bq": {f"q{i}": 1.0 for i in range(4)}}}
    results = {"models": {"m": {"source": "./m", "status": "complete", "tasks": {"bq": {
        "chance": 0.5, "score": 1.0, "majority": {"answer": "yes", "share": split, "over": 300, "evaluated": items}}}}}}
    refs = {r["kind"]: r for r in leaderboard(results, per, seed=0, n_resamples=50)["references"]}
    assert refs["majority"]["evaluated_score"] == pytest.approx(want)
    assert refs["majority"]["score"] == pytest.approx(max(0.5, split))
    if split <= 0.5:
        assert "on the evaluated items the most common answer also beats chance on bq" in refs["majority"]["reason"]


def test_a_model_from_a_run_before_the_most_common_answer_is_tested_against_it_too():
    """A board merges a run that recorded the most common answer with one from before it: the older run's model is
    tested against the same level (the answer named from the model that recorded it), not left out or broken."""
    rng = np.random.default_rng(4)
    per = {m: {"bq": {f"q{i}": float(rng.uniform() < 0.6) for i in range(40)}} for m in ("new", "old")}
    new = {"chance": 0.5, "majority": {"answer": "yes", "share": 0.62, "over": 3270}}
    tasks = {"new": new, "old": {"chance": 0.5}}
    results = {"models": {m: {"source": f"./{m}", "status": "complete",
                              "tasks": {"bq": {**tasks[m], "score": float(np.mean(list(per[m]["bq"].values())))}}}
                          for m in per}}
    rows = {c["model"]: c for c in leaderboard(results, per, seed=0, n_resamples=50)["above_chance"]}
    for m in per:
        k = int(sum(per[m]["bq"].values()))
        assert rows[m]["baseline"] == 0.62 and rows[m]["majority_answer"] == "yes"
        assert rows[m]["p"] == pytest.approx(stats.binomtest(k, 40, 0.62, alternative="greater").pvalue)

