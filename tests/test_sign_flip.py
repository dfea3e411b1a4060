"""The paired sign-flip test of partial-credit differences and the interval that inverts it.

References written here: every sign arrangement enumerated with plain loops (float64), SciPy's own
``permutation_test`` for the exact p-value, and a simulation of coverage.
"""
from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy import stats

from reporter.metrics import sign_flip as sf
from reporter.metrics.stats import paired_comparison


def slow_p(d, delta=0.0):
    """Two-sided p of the sign-flip test of mean(d - delta) = 0: every arrangement, plain loops."""
    x = [v - delta for v in d]
    obs = sum(x) / len(x)
    tol = 1e-12 * sum(abs(v) for v in d) / len(x) + 1e-15
    ge = le = 0
    for signs in itertools.product((1, -1), repeat=len(x)):
        m = sum(s * v for s, v in zip(signs, x)) / len(x)
        ge += m >= obs - tol
        le += m <= obs + tol
    total = 2 ** len(x)
    return min(1.0, 2 * min(ge, le) / total)


def graded(rng, n, shift=0.0):
    """Partial-credit scores of two models on n items (quarters, so ties and zero differences occur)."""
    a = np.clip(np.round((rng.uniform(size=n) + shift) * 4) / 4, 0, 1)
    b = np.round(rng.uniform(size=n) * 4) / 4
    return a, b


def test_the_exact_p_value_is_scipys_permutation_test():
    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(2, 12))
        a, b = graded(rng, n, shift=rng.choice([0.0, 0.3]))
        got = sf.sign_flip(a - b, seed=0)
        ref = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
                                     permutation_type="samples", n_resamples=10**6, alternative="two-sided")
        assert got.exact and got.arrangements == 2 ** int(np.count_nonzero(a - b))  # ties move no arrangement
        assert got.p_value == pytest.approx(ref.pvalue, abs=1e-12)
        assert got.p_value == pytest.approx(slow_p(a - b), abs=1e-12)


def slow_confidence_distribution(d):
    """mu's lower confidence distribution from the sign-flip test on the non-zero differences, by loops: one
    arrangement's weight on each non-empty subset's mean, the observed arrangement's on -1 (scores in [0, 1])."""
    x = [v for v in d if v != 0]
    atoms = []
    for pick in itertools.product((0, 1), repeat=len(x)):
        if any(pick):
            atoms.append(sum(v for v, k in zip(x, pick) if k) / sum(pick))
    total = len(atoms) + 1
    return [(-1.0, 1 / total)] + [(a, 1 / total) for a in atoms], len(x)


def slow_p_low(d, d0):
    """P[T M <= d0]: T tau's Clopper-Pearson confidence distribution (the lower for d0 > 0, the upper for d0 < 0),
    M mu's lower one, summed atom by atom with scipy.stats.beta."""
    cd, m = slow_confidence_distribution(d)
    n = len(d)
    t = stats.beta(m, n - m + 1) if d0 > 0 else stats.beta(m + 1, n - m) if m < n else None
    p = 0.0
    for a, w in cd:
        if a == 0 or d0 == 0:
            p += w * (a <= 0 if d0 == 0 else d0 >= 0)
        elif a > 0:
            p += w * (1.0 if d0 >= a else t.cdf(d0 / a) if d0 > 0 else 0.0)
        else:  # T a <= d0 <=> T >= d0 / a
            if d0 > 0:
                p += w
            else:
                p += w * (float(d0 / a <= 1) if t is None else t.sf(d0 / a))  # T is the point 1 when m = n
    return p


def test_the_interval_is_where_the_melded_one_sided_p_values_reach_alpha_over_two():
    """Each limit is where the slow one-sided p-value crosses 2.5 %: below it on the far side, at least it inside
    (the upper limit by the mirror: the lower limit of -d), and equal to it where some items tie."""
    rng = np.random.default_rng(1)
    interior = tied = 0
    for _ in range(30):
        n = int(rng.integers(4, 12))
        a, b = graded(rng, n, shift=rng.choice([0.0, 0.25]))
        d = list(a - b)
        if not any(d):
            continue
        r = sf.sign_flip(d, seed=0)
        for limit, dd in ((r.low, d), (-r.high, [-v for v in d])):
            if limit in (-1.0, 0.0):  # a bound, or the jump at 0 (the test's verdict there decides)
                assert slow_p_low(dd, limit) >= 0.025 - 1e-9 or limit == -1.0
                continue
            # the crossing (where tau's distribution is continuous the p-value is continuous and equals 2.5 % there;
            # where every item differs, T is the point 1 and it steps at a subset mean)
            assert slow_p_low(dd, limit - 1e-6) < 0.025 <= slow_p_low(dd, limit + 1e-9), (d, limit)
            if any(v == 0 for v in dd):
                assert slow_p_low(dd, limit) == pytest.approx(0.025, abs=1e-7)
                tied += 1
            interior += 1
    assert interior > 30 and tied > 10


def test_with_no_item_scored_differently_it_is_what_n_items_allow():
    for n in (1, 5, 30, 200):
        r = sf.sign_flip([0.0] * n, seed=0)
        bound = 1 - 0.025 ** (1 / n)  # tau's exact upper limit with nothing different: (1 - tau)^n = 0.025
        assert r.p_value == 1.0
        assert (r.low, r.high) == (pytest.approx(-bound, abs=1e-9), pytest.approx(bound, abs=1e-9))


def test_it_excludes_zero_exactly_where_the_test_rejects_exact_and_drawn():
    rng = np.random.default_rng(2)
    seen = {True: 0, False: 0}
    for i in range(400):
        n = int(rng.integers(2, 60))
        d = rng.normal(rng.choice([0.0, 0.05, 0.15]), 0.3, n)
        if i % 3 == 0:
            d = np.round(d * 4) / 4  # ties and zeros
        r = sf.sign_flip(d, seed=i, draws=999)
        rejects = r.p_value < 0.05
        assert rejects == (not r.low <= 0 <= r.high), (d, r)
        assert r.low <= float(np.mean(d)) <= r.high
        seen[rejects] += 1
    assert min(seen.values()) > 50  # both outcomes were exercised


def test_drawn_arrangements_approximate_the_exact_test(monkeypatch):
    rng = np.random.default_rng(3)
    d = rng.uniform(-0.3, 0.6, 16)
    exact = sf.sign_flip(d, seed=0)
    monkeypatch.setattr(sf, "EXACT_MAX_ITEMS", 5)
    drawn = sf.sign_flip(d, seed=0)
    assert not drawn.exact and drawn.arrangements == sf.DRAWS + 1
    se = math.sqrt(exact.p_value * (1 - exact.p_value) / sf.DRAWS) * 2  # two-sided: twice a one-sided share
    assert abs(drawn.p_value - exact.p_value) < 4 * se + 2 / sf.DRAWS
    assert drawn.low == pytest.approx(exact.low, abs=0.01) and drawn.high == pytest.approx(exact.high, abs=0.01)
    assert sf.sign_flip(d, seed=0) == drawn and sf.sign_flip(d, seed=1) != drawn  # seeded


@pytest.mark.parametrize("n, tied, mu", [(12, 0.0, 0.12), (30, 0.7, 0.3), (30, 0.9, 0.3), (60, 0.95, 0.5)])
def test_coverage_is_at_least_nominal_also_where_most_items_tie(n, tied, mu):
    """Items scored alike are common with partial credit (two models with the same F1 on most items). Inverting the
    test on all n differences covered the mean 77-91 % of the time where most items tie (it treats the ties as
    exact knowledge); the melded interval must cover it at least 95 % of the time (3 SE of 400 draws: 3.3 points)."""
    rng = np.random.default_rng(4)
    true = (1 - tied) * mu  # the differing items are symmetric about mu, as the test assumes
    covered = 0
    for i in range(400):
        differ = rng.random(n) >= tied
        d = np.where(differ, mu + rng.choice([-1, 1], n) * rng.uniform(0, 0.5, n), 0.0)
        r = sf.sign_flip(d, seed=i, draws=999)
        covered += r.low <= true <= r.high
    assert covered / 400 >= 0.95 - 0.033


@pytest.mark.parametrize("bad, match", [([], "non-empty"), ([0.1, float("nan")], "NaN")])
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        sf.sign_flip(bad, seed=0)


def test_a_partial_credit_comparison_uses_it_and_its_direction_is_the_means():
    """The case Wilcoxon got wrong: 12 small losses and one large win. The ranks say "worse", the mean says
    "better"; the card shows the mean, so the test must be about the mean."""
    rng = random.Random(5)
    a = {f"q{i:02d}": 0.5 for i in range(13)}
    b = {k: 0.55 for k in a}
    b["q12"] = 0.0
    a["q12"] = 1.0
    c = paired_comparison("a", a, "b", b, task="t", seed=0)
    d = [a[k] - b[k] for k in sorted(a)]
    assert c.mean_diff == pytest.approx(sum(d) / 13) and c.mean_diff > 0
    assert (c.test, c.method, c.mcnemar_p) == ("sign-flip", "sign-flip-exact", None)
    assert c.p_value == pytest.approx(slow_p(d), abs=1e-12)
    assert (c.p_value < 0.05) == (not c.ci_low <= 0 <= c.ci_high)
    # many items: drawn arrangements, seeded by the run's seed; insertion order does not matter
    a = {f"id{i:03d}": rng.random() for i in range(80)}
    b = {k: min(1.0, v + rng.gauss(0.05, 0.1)) for k, v in a.items()}
    c = paired_comparison("a", a, "b", b, task="t", seed=9)
    ref = sf.sign_flip([a[k] - b[k] for k in sorted(a)], seed=9)
    assert (c.p_value, c.ci_low, c.ci_high, c.method) == (ref.p_value, ref.low, ref.high, "sign-flip-monte-carlo")
    shuffled = dict(sorted(a.items(), key=lambda kv: rng.random()))
    assert paired_comparison("a", shuffled, "b", b, task="t", seed=9) == c


def test_the_benchmark_script_runs_and_the_shipped_interval_never_disagrees(capsys, monkeypatch):
    """``benchmarks/paired_partial_credit.py`` (figures in RESULTS.md), at 3 draws a row: it must keep running."""
    import json as _json
    import sys

    from .conftest import benchmark_script

    bench = benchmark_script("paired_partial_credit")
    monkeypatch.setattr(sys, "argv", ["paired_partial_credit.py", "--reps", "3"])
    bench.main()
    doc = _json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = [r for r in doc["rows"] if r["method"] == "melded"]
    assert len(rows) == len(bench.SCENARIOS) and all(r["disagreement"] == 0 for r in rows)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_five_or_fewer_differing_items_cannot_exclude_0_as_the_card_says(n):
    """The card's methods: with k <= 5 items scored differently the smallest two-sided p is 2/2^k >= 1/16, so the
    interval contains 0, and is the whole range where every item differs, even when each difference is large and
    one-sided; at 6 it excludes 0."""
    from reporter.metrics.stats import paired_comparison

    c = paired_comparison("a", {f"q{i}": 0.9 for i in range(n)}, "b", {f"q{i}": 0.0 for i in range(n)}, task="t",
                          seed=0)
    assert c.p_value == pytest.approx(2 / 2 ** n)
    if n <= 5:
        assert (c.ci_low, c.ci_high) == (pytest.approx(-1.0), pytest.approx(1.0))
    else:
        assert c.ci_low > 0
    # the same k differing items among 100 that tie: the interval contains 0 up to k = 5, narrower than the range
    same = {f"t{i}": 0.5 for i in range(100 - n)}
    c = paired_comparison("a", {**same, **{f"q{i}": 0.9 for i in range(n)}}, "b", {**same, **{f"q{i}": 0.0
                                                                                             for i in range(n)}},
                          task="t", seed=0)
    assert c.p_value == pytest.approx(2 / 2 ** n)
    assert (c.ci_low <= 0 <= c.ci_high) == (n <= 5) and c.ci_high - c.ci_low < 0.5
