"""Tests for reporter.metrics.stats against slow, plain-loop reference implementations."""

from __future__ import annotations

import json
import math
import random
import warnings
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest

from reporter.metrics.sign_flip import sign_flip
from reporter.metrics.stats import PairedComparison, ScoreCI, all_pairs, mcnemar_exact, paired_comparison, score_ci

# ---------------------------------------------------------------- references


def ref_quantile(values, p):
    """Hyndman-Fan type 7 ("linear") quantile of a list, by hand."""
    v = sorted(values)
    h = (len(v) - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (h - lo) * (v[hi] - v[lo])


def ref_bootstrap_ci(x, seed, n_resamples=2000, confidence=0.95, method="bca"):
    """Percentile / BCa bootstrap of the mean with plain loops (Efron & Tibshirani).

    Draws the resample indices as scipy.stats.bootstrap does: one
    ``rng.integers(0, n, (n_resamples, n))`` call on ``default_rng(seed)``, over the scores in sorted order (the
    interval of a mean belongs to its scores, not to their order).
    """
    x = sorted(float(v) for v in x)
    n = len(x)
    idx = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
    means = []
    for row in idx:
        total = 0.0
        for i in row:
            total += x[int(i)]
        means.append(total / n)
    alpha = (1 - confidence) / 2
    if method == "percentile":
        return ref_quantile(means, alpha), ref_quantile(means, 1 - alpha)
    theta = sum(x) / n
    below = sum(1 for m in means if m < theta) + sum(1 for m in means if m <= theta)
    nd = NormalDist()
    z0 = nd.inv_cdf(below / (2 * n_resamples))
    jack = [(sum(x) - x[i]) / (n - 1) for i in range(n)]
    jbar = sum(jack) / n
    num = sum((jbar - t) ** 3 for t in jack)
    den = sum((jbar - t) ** 2 for t in jack)
    a = num / (6 * den ** 1.5)
    out = []
    for z in (nd.inv_cdf(alpha), nd.inv_cdf(1 - alpha)):
        out.append(ref_quantile(means, nd.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))))
    return tuple(out)


def ref_mcnemar(n01, n10):
    """Two-sided exact McNemar: 2 * P(Binom(n01+n10, 1/2) <= min), capped at 1."""
    total = n01 + n10
    if total == 0:
        return 1.0
    tail = 0.0
    for k in range(min(n01, n10) + 1):
        tail += math.comb(total, k) / 2 ** total
    return min(1.0, 2 * tail)


def binary(n, p, seed):
    return (np.random.default_rng(seed).random(n) < p).astype(int).tolist()


CONTINUOUS = np.random.default_rng(123).normal(0.6, 0.2, 57).tolist()

# ------------------------------------------------------------------ score_ci


@pytest.mark.parametrize("method", ["percentile", "bca"])
@pytest.mark.parametrize("data,seed,conf", [
    (binary(40, 0.7, 1), 0, 0.95), (binary(200, 0.1, 2), 7, 0.9),
    (CONTINUOUS, 3, 0.95), ([0, 1], 11, 0.95), ([0.2, 0.9, 0.5], 5, 0.8),
])
def test_score_ci_matches_reference_loop(method, data, seed, conf):
    r = score_ci(data, seed=seed, confidence=conf, n_resamples=1500, method=method)
    lo, hi = ref_bootstrap_ci(data, seed, 1500, conf, method)
    assert r.method == f"bootstrap-{method}"
    assert r.score == pytest.approx(sum(data) / len(data), rel=1e-12)
    assert (r.n, r.seed) == (len(data), seed)
    assert r.ci_low == pytest.approx(lo, rel=1e-9, abs=1e-12)
    assert r.ci_high == pytest.approx(hi, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("batch_elements", [None, 100])
def test_score_ci_batching_does_not_change_result(monkeypatch, batch_elements):
    data, n_res = (binary(5000, 0.4, 8), 300) if batch_elements is None else (CONTINUOUS, 500)
    if batch_elements is not None:  # one resample / jackknife row per batch
        monkeypatch.setattr("reporter.metrics.stats._BATCH_ELEMENTS", batch_elements)
    r = score_ci(data, seed=2, n_resamples=n_res)
    assert (r.ci_low, r.ci_high) == pytest.approx(ref_bootstrap_ci(data, 2, n_res), rel=1e-9)


def test_score_ci_default_is_bca_and_deterministic():
    data = binary(100, 0.6, 3)
    r = score_ci(data, seed=42)
    assert r.method == "bootstrap-bca"
    assert r == score_ci(data, seed=42)
    assert (r.ci_low, r.ci_high) == pytest.approx(ref_bootstrap_ci(data, 42), rel=1e-9)
    # another seed, other resamples (continuous scores: 100 right/wrong items' bounds fall on hundredths, where two
    # seeds may agree)
    assert score_ci(CONTINUOUS, seed=42) != score_ci(CONTINUOUS, seed=43)


def test_score_ci_brackets_shrinks_and_matches_normal_approx():
    widths = []
    for n in (100, 400, 1600, 6400):
        data = binary(n, 0.3, n)
        r = score_ci(data, seed=1)
        assert r.ci_low < r.score < r.ci_high
        widths.append(r.ci_high - r.ci_low)
        if n == 6400:
            half = 1.959963984540054 * math.sqrt(r.score * (1 - r.score) / n)
            # Monte Carlo sd of an endpoint with 2000 resamples is ~5% of `half`.
            assert r.ci_low == pytest.approx(r.score - half, abs=0.15 * half)
            assert r.ci_high == pytest.approx(r.score + half, abs=0.15 * half)
    for w_small_n, w_big_n in zip(widths, widths[1:]):
        assert w_big_n / w_small_n == pytest.approx(0.5, abs=0.1)


@pytest.mark.parametrize("data", [[1], [0.37], [0, 0, 0], [1] * 50, [0.1] * 7])
def test_score_ci_degenerate_no_warnings(data):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = score_ci(data, seed=0)
    assert r.method == "degenerate"
    assert r.ci_low == r.ci_high == r.score == pytest.approx(data[0])
    assert r.n == len(data)


def ref_clopper_pearson(k, n, confidence=0.95):
    """The exact binomial interval by bisection on plain-loop binomial tails (float64): the lowest p with
    P(X >= k | p) >= a/2 and the highest with P(X <= k | p) >= a/2."""
    a = (1 - confidence) / 2

    def tail_ge(p):
        return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))

    def tail_le(p):
        return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(0, k + 1))

    def solve(f, rising):
        lo, hi = 0.0, 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if (f(mid) < a) == rising:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2
    return (0.0 if k == 0 else solve(tail_ge, True)), (1.0 if k == n else solve(tail_le, False))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 20, 80])
def test_a_task_of_right_or_wrong_items_has_the_exact_binomial_interval_in_any_order(n):
    """A task's items right or wrong: the Clopper–Pearson interval whatever the count right, equal to a plain-loop
    bisection; the same for every order of the items. A bootstrap gave 1 of 4 right [0, 100 %] in one order and
    [0, 75 %] in another (two reviews saw both on one card)."""
    rng = np.random.default_rng(n)
    for k in sorted({0, 1, n // 2, n - 1, n} - {-1}):
        items = [1] * k + [0] * (n - k)
        want = ref_clopper_pearson(k, n)
        for _ in range(3):
            r = score_ci(list(rng.permutation(items)), seed=1234, exact_binary=True)
            assert r.method == "exact-binomial" and r.n == n and r.score == k / n
            assert (r.ci_low, r.ci_high) == pytest.approx(want, abs=1e-9)
            assert r.ci_low <= k / n <= r.ci_high and (k == 0 or r.ci_low > 0) and (k == n or r.ci_high < 1)


def test_partial_credit_gets_the_same_bootstrap_interval_in_any_order():
    """Partial credit (not right/wrong): the bootstrap, over the scores as a set; another order of the same items
    gave another interval."""
    data = [0.5, 0.0, 1.0, 0.25, 0.0, 1.0, 0.75]
    got = {(r.ci_low, r.ci_high, r.method) for r in
           (score_ci(list(np.random.default_rng(i).permutation(data)), seed=7, exact_binary=True) for i in range(5))}
    assert len(got) == 1 and next(iter(got))[2] == "bootstrap-bca"
    assert next(iter(got))[:2] == pytest.approx(ref_bootstrap_ci(data, 7), rel=1e-9)


@pytest.mark.parametrize("data", [[0, 1], [0] * 499 + [1], [1.0, 1.0 + 1e-9],
                                  binary(30, 0.97, 5)])
def test_score_ci_near_degenerate_no_warnings(data):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = score_ci(data, seed=0)
    assert math.isfinite(r.ci_low) and math.isfinite(r.ci_high)
    assert r.ci_low <= r.score <= r.ci_high


def test_score_ci_bca_undefined_falls_back_to_percentile():
    # With 2 resamples of [0, 1] both resample means can land on one side of
    # 0.5 (seed 4), so BCa's bias correction is infinite.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = score_ci([0, 1], seed=4, n_resamples=2)
    assert r.method == "bootstrap-percentile"
    assert (r.ci_low, r.ci_high) == pytest.approx(
        ref_bootstrap_ci([0, 1], 4, 2, method="percentile"))


@pytest.mark.parametrize("kwargs,match", [
    (dict(scores=[]), "empty"), (dict(scores=[0.5, float("nan")]), "NaN"),
    (dict(scores=[1, 0], confidence=1.0), "confidence"),
    (dict(scores=[1, 0], n_resamples=1), "n_resamples"),
    (dict(scores=[1, 0], method="basic"), "method"),
    (dict(scores=[[1, 0]]), "1-D"),
])
def test_score_ci_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        score_ci(seed=0, **kwargs)


def test_score_ci_to_dict_is_json_ready():
    d = score_ci([1, 0, 1], seed=0).to_dict()
    assert set(d) == {"score", "ci_low", "ci_high", "n", "seed", "method"}
    assert json.loads(json.dumps(d)) == d
    assert isinstance(ScoreCI(**d), ScoreCI)

# -------------------------------------------------------------- mcnemar_exact


def test_mcnemar_matches_loop_reference():
    for n01 in range(31):
        for n10 in range(31):
            assert mcnemar_exact(n01, n10) == pytest.approx(ref_mcnemar(n01, n10), rel=1e-9)
    for n01, n10 in [(480, 520), (0, 1000), (3, 997), (250, 250), (1, 60)]:
        assert mcnemar_exact(n01, n10) == pytest.approx(ref_mcnemar(n01, n10), rel=1e-9)


@pytest.mark.parametrize("n01,n10,exact", [
    (0, 0, Fraction(1)), (0, 1, Fraction(1)), (3, 3, Fraction(1)),
    (0, 5, Fraction(2, 2 ** 5)),            # 2 * (1/2)^5
    (2, 8, Fraction(2 * (1 + 10 + 45), 1024)),  # 2 * P(X <= 2), X ~ Bin(10, 1/2)
    (1, 9, Fraction(2 * (1 + 10), 1024)),
    (5, 15, Fraction(2 * sum(math.comb(20, k) for k in range(6)), 2 ** 20)),
])
def test_mcnemar_textbook_values(n01, n10, exact):
    assert mcnemar_exact(n01, n10) == pytest.approx(float(exact), rel=1e-12)
    assert mcnemar_exact(n10, n01) == mcnemar_exact(n01, n10)


def test_mcnemar_rejects_negative():
    with pytest.raises(ValueError, match="discordant"):
        mcnemar_exact(-1, 3)

# --------------------------------------------------------- paired_comparison


def test_identical_models():
    s = {f"q{i}": i % 3 == 0 for i in range(30)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = paired_comparison("a", s, "b", dict(s), task="t", seed=0)
    # no item disagrees, yet 30 items cannot show the difference is exactly 0: the exact interval of a difference
    # with no discordant pair (the bootstrap's was the point 0, a claim of certainty 30 items do not carry)
    assert (c.n, c.mean_diff, c.mcnemar_p, c.n01, c.n10) == (30, 0.0, 1.0, 0, 0)
    bound = 1 - 0.025 ** (1 / 30)  # τ's exact upper limit with no discordant item: (1 - τ)^30 = 0.025
    assert (c.ci_low, c.ci_high, c.method) == (pytest.approx(-bound, abs=1e-12), pytest.approx(bound, abs=1e-12),
                                               "mcnemar-compatible-exact")


def test_strictly_better_model_on_discordant_items():
    a = {f"q{i}": 1 if i < 12 or i % 2 else 0 for i in range(42)}
    b = {f"q{i}": 0 if i < 12 else a[f"q{i}"] for i in range(42)}
    c = paired_comparison("good", a, "bad", b, task="t", seed=3)
    assert (c.n01, c.n10) == (0, 12)
    assert c.mcnemar_p == pytest.approx(2 / 2 ** 12)
    assert c.mean_diff == pytest.approx(12 / 42)
    assert 0 < c.ci_low < c.mean_diff < c.ci_high
    rev = paired_comparison("bad", b, "good", a, task="t", seed=3)
    assert (rev.n01, rev.n10, rev.mcnemar_p) == (12, 0, c.mcnemar_p)
    assert rev.mean_diff == pytest.approx(-c.mean_diff)


def test_paired_ci_matches_reference_on_sorted_shared_items():
    rng = random.Random(0)
    a = {f"id{i:03d}": rng.random() for i in range(80)}
    b = {k: min(1.0, v + rng.gauss(0.05, 0.1)) for k, v in a.items() if k != "id007"}
    b["extra"] = 0.5
    c = paired_comparison("a", a, "b", b, task="t", seed=9, n_resamples=1000)
    ids = sorted(set(a) & set(b))
    d = [a[k] - b[k] for k in ids]
    assert c.n == 79 and c.mcnemar_p is None and c.n01 is None and c.n10 is None
    assert c.mean_diff == pytest.approx(sum(d) / len(d), rel=1e-12)
    # partial credit: the sign-flip test on the shared items in id order (tests/test_sign_flip.py checks it)
    ref = sign_flip(d, seed=9, draws=1000)
    assert (c.ci_low, c.ci_high, c.p_value, c.test) == (ref.low, ref.high, ref.p_value, "sign-flip")
    # insertion order of the mappings does not matter
    shuffled = dict(sorted(a.items(), key=lambda kv: rng.random()))
    assert paired_comparison("a", shuffled, "b", b, task="t", seed=9,
                             n_resamples=1000) == c


def test_mismatched_ids_and_binary_detection():
    a = {"q1": 1, "q2": 0, "q3": 1.0, "only_a": 0}
    b = {"q3": 0, "q2": True, "q1": 1, "only_b": 1}
    c = paired_comparison("a", a, "b", b, task="t", seed=0)
    assert (c.n, c.n01, c.n10, c.mcnemar_p) == (3, 1, 1, 1.0)
    assert c.mean_diff == 0.0
    half = paired_comparison("a", {**a, "q1": 0.5}, "b", b, task="t", seed=0)
    assert half.mcnemar_p is half.n01 is half.n10 is None
    with pytest.raises(ValueError, match="share no item ids"):
        paired_comparison("a", {"x": 1}, "b", {"y": 1}, task="t", seed=0)


def test_paired_comparison_to_dict():
    c = paired_comparison("a", {"q": 1, "r": 0}, "b", {"q": 0, "r": 0}, task="t", seed=0)
    d = c.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert PairedComparison(**d) == c

# ------------------------------------------------------------------ all_pairs


def test_all_pairs_order_and_content():
    per_model = {
        "m1": {"t1": {"q1": 1, "q2": 0, "q3": 1}, "t2": {"x": 0.2, "y": 0.9}},
        "m2": {"t1": {"q1": 0, "q2": 0, "q3": 1}, "t3": {"z": 1}},
        "m3": {"t2": {"x": 0.5, "y": 0.1}, "t1": {"q1": 1, "q2": 1, "q3": 1},
               "t3": {"other": 1}},
    }
    res = all_pairs(per_model, seed=5)
    assert [(c.model_a, c.model_b, c.task) for c in res] == [
        ("m1", "m2", "t1"), ("m1", "m3", "t1"), ("m1", "m3", "t2"), ("m2", "m3", "t1")]
    for c in res:
        assert c == paired_comparison(
            c.model_a, per_model[c.model_a][c.task], c.model_b,
            per_model[c.model_b][c.task], task=c.task, seed=5)
    assert all_pairs({"only": {"t": {"q": 1}}}, seed=0) == []


@pytest.mark.parametrize("n", [1, 2, 5, 40])
@pytest.mark.parametrize("value", [0, 1])
def test_a_task_whose_items_all_scored_the_same_gets_the_exact_binomial_interval(n, value):
    """0 of n right cannot be a zero-width "95% CI": no resample of the items varies the mean, so the interval is
    Clopper–Pearson's, whose bound for 0 (or n) of n right solves (1 - p)^n = 0.025 in closed form."""
    r = score_ci([value] * n, seed=0, exact_binary=True)
    bound = 0.025 ** (1.0 / n)
    assert r.method == "exact-binomial" and r.score == value and r.n == n
    if value == 0:
        assert r.ci_low == 0.0 and r.ci_high == pytest.approx(1.0 - bound, rel=1e-9)
    else:
        assert r.ci_high == 1.0 and r.ci_low == pytest.approx(bound, rel=1e-9)
    assert score_ci([value] * n, seed=0).method == "degenerate"  # a difference of scores keeps its zero width
    assert score_ci([0.5] * n, seed=0, exact_binary=True).method == "exact-bounded"  # equal scores strictly between


def _all_equal_bounds_by_search(c, n, alpha=0.05, grid=2001):
    """The means m of a score in [0, 1] under which n items all at c are not refused (probability of it >= α/2),
    by a plain search: for each m on a grid, the largest P(X = c)^n over the two-point scores {c, a} with mean m,
    a on a grid of [0, 1] (more support points only take mass from c)."""
    kept = []
    for i in range(grid):
        m = i / (grid - 1)
        best = 1.0 if m == c else 0.0
        for j in range(grid):
            a = j / (grid - 1)
            if a != c and 0.0 <= (q := (a - m) / (a - c)) <= 1.0:
                best = max(best, q ** n)
        if best >= alpha / 2:
            kept.append(m)
    return min(kept), max(kept)


@pytest.mark.parametrize("c, n", [(0.5, 5), (0.25, 3), (0.9, 12), (1 / 3, 1)])
def test_equal_partial_credit_gets_the_exact_bounded_interval_not_zero_width(c, n):
    """Every item of a partial-credit task at 0.5 was "50% [50, 50]": a certainty 5 items cannot give."""
    r = score_ci([c] * n, seed=0, exact_binary=True)
    low, high = _all_equal_bounds_by_search(c, n)
    assert r.method == "exact-bounded" and r.score == pytest.approx(c)
    assert r.ci_low == pytest.approx(low, abs=1e-3) and r.ci_high == pytest.approx(high, abs=1e-3)
    assert r.ci_low < c < r.ci_high
    # at the bound, the two-point score most likely to give all c gives it with probability α/2
    rng = np.random.default_rng(0)
    q = (1 - r.ci_high) / (1 - c)
    assert abs((rng.random((200_000, n)) < q).all(axis=1).mean() - 0.025) < 0.002


def test_a_card_of_an_older_run_names_the_bootstrap_intervals_of_right_or_wrong_items_it_still_holds(tmp_path):
    """Right/wrong items now get the exact binomial interval; an older run keeps the BCa bootstrap interval it
    recorded, and its card's methods name those tasks (none for a task of partial credit, whose interval is still a
    bootstrap, nor for one recorded exact)."""
    import copy
    import shutil
    from pathlib import Path

    from reporter.card.data import build_card
    from reporter.card.render import render

    data = Path(__file__).parent / "data" / "run2"
    results = json.loads((data / "results.json").read_text())
    manifest = json.loads((data / "manifest.json").read_text())
    for e in results["models"].values():
        for s in e["tasks"].values():
            if s.get("method") == "bootstrap-bca":
                s["method"] = "exact-binomial"
    assert build_card(copy.deepcopy(results), manifest)["bca_binary"] == []
    results["models"]["smol"]["tasks"]["boolq"]["method"] = "bootstrap-bca"  # a bool scorer's: right or wrong
    spc = results["models"]["smol"]["tasks"].get("spc")
    if spc is not None:
        spc["method"] = "bootstrap-bca"  # char_f1: partial credit, still a bootstrap
    assert build_card(copy.deepcopy(results), manifest)["bca_binary"] == ["smol on boolq"]
    shutil.copytree(data, tmp_path / "run")
    (tmp_path / "run" / "results.json").write_text(json.dumps(results))
    out = render(tmp_path / "run", formats=("html", "md"))
    assert "Analysed before that rule, smol on boolq keeps the BCa bootstrap interval of right/wrong items" in \
        Path(out["html"]).read_text()
    assert "Analysed before the exact rule for right/wrong items, smol on boolq keeps the BCa bootstrap interval" in \
        Path(out["md"]).read_text()
    readme = Path(render(tmp_path / "run", formats=("hf",), model="smol")["hf"]).read_text()
    assert "(analysed before that rule, boolq keeps its BCa bootstrap interval)" in readme


def test_a_card_of_an_older_run_names_the_zero_width_intervals_it_still_holds(tmp_path):
    """An older run's constant partial credit keeps its recorded "degenerate" interval; the methods now describe the
    exact bound, so the card names the tasks whose numbers do not follow it (and none where every task does)."""
    import copy
    import shutil
    from pathlib import Path

    from reporter.card.data import build_card
    from reporter.card.render import render

    data = Path(__file__).parent / "data" / "run2"
    results = json.loads((data / "results.json").read_text())
    manifest = json.loads((data / "manifest.json").read_text())
    assert build_card(copy.deepcopy(results), manifest)["zero_width"] == []
    t = results["models"]["smol"]["tasks"]["boolq"]
    t.update(score=0.5, ci_low=0.5, ci_high=0.5, method="degenerate")
    assert build_card(copy.deepcopy(results), manifest)["zero_width"] == ["smol on boolq"]
    shutil.copytree(data, tmp_path / "run")
    (tmp_path / "run" / "results.json").write_text(json.dumps(results))
    page = Path(render(tmp_path / "run", formats=("html",))["html"]).read_text()
    assert "Analysed before that rule, smol on boolq keeps the zero-width interval recorded then" in page
