"""The paired difference's interval that agrees with the exact McNemar test (Fay & Lumbard 2021).

Checked against the authors' R implementation, against a Monte Carlo of its definition written here, for agreement
with the test on every table of a size, and for its coverage, computed exactly by enumerating every table.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from reporter.metrics.mcnemar_ci import mcnemar_ci
from reporter.metrics.stats import mcnemar_exact, paired_comparison

#: (x = items only A gets right, items only B gets right, n, lower, upper, two-sided p) from
#: ``exact2x2::mcnemarExactDP(x, m, n)`` (exact2x2 1.7.0, its R/mcnemarExactDP.R sourced into R 4.2.2, numeric
#: integration, conf.level 0.95). R's ``uniroot`` stops within about 1.2e-4 of the root, hence the tolerance.
R_EXACT2X2 = [
    (9, 2, 44, -0.0089586223, 0.3230681922, 0.0654296875),
    (5, 0, 5, -0.0436366294, 1.0000000000, 0.0625000000),
    (5, 0, 20, -0.0111000964, 0.4910456575, 0.0625000000),
    (6, 0, 20, 0.0196394735, 0.5427890574, 0.0312500000),
    (0, 0, 10, -0.3084971078, 0.3084971078, 1.0000000000),
    (3, 1, 8, -0.3584684219, 0.7171333468, 0.6250000000),
    (10, 4, 100, -0.0235495620, 0.1460512944, 0.1795654297),
    (1, 0, 8, -0.3123411931, 0.5264957655, 1.0000000000),
    (0, 3, 12, -0.5718712068, 0.1255207376, 0.2500000000),
    (7, 7, 30, -0.2725802559, 0.2725802559, 1.0000000000),
    (12, 3, 40, 0.0133012431, 0.4179095623, 0.0351562500),
    (300, 250, 3000, 0.0010106706, 0.0323204182, 0.0365787455),
    (2, 9, 44, -0.3230681922, 0.0089586223, 0.0654296875),
    (8, 0, 8, 0.2244150597, 1.0000000000, 0.0078125000),
    (0, 8, 8, -1.0000000000, -0.2244150597, 0.0078125000),
    (4, 4, 8, -0.6859770009, 0.6859770009, 1.0000000000),
    (0, 1, 1, -1.0000000000, 0.9499949995, 1.0000000000),
    (1, 0, 1, -0.9499949995, 1.0000000000, 1.0000000000),
    (40, 10, 60, 0.2634346537, 0.6832493478, 0.0000238613),
    (17, 5, 120, 0.0159153443, 0.1848771294, 0.0169005394),
]


@pytest.mark.parametrize("x, y, n, lower, upper, p", R_EXACT2X2)
def test_the_limits_are_the_authors_r_implementations(x, y, n, lower, upper, p):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing printed to the user's terminal during analyse
        lo, hi = mcnemar_ci.__wrapped__(x, y, n)
    assert lo == pytest.approx(lower, abs=1.2e-4) and hi == pytest.approx(upper, abs=1.2e-4)
    assert mcnemar_exact(y, x) == pytest.approx(p, abs=1e-10)  # R printed to 10 decimals


def _monte_carlo(x: int, y: int, n: int, draws: int, seed: int) -> tuple[float, float]:
    """The interval's definition by simulation (exact2x2's ``nmc`` method, in plain numpy): Δ = T (2B - 1) with T
    and B drawn from the Clopper–Pearson confidence distributions of the share of disagreements and of A's share of
    them; each limit the more extreme of the α/2 quantiles over τ's two distributions."""
    rng = np.random.default_rng(seed)
    m = x + y

    def beta(a: float, b: float) -> np.ndarray:
        if a == 0:
            return np.zeros(draws)
        if b == 0:
            return np.ones(draws)
        return rng.beta(a, b, draws)

    t_lo, t_hi = beta(m, n - m + 1), beta(m + 1, n - m)
    b_lo, b_hi = beta(x, m - x + 1), beta(x + 1, m - x)
    lower = min(np.quantile(t_lo * (2 * b_lo - 1), 0.025), np.quantile(t_hi * (2 * b_lo - 1), 0.025))
    upper = max(np.quantile(t_lo * (2 * b_hi - 1), 0.975), np.quantile(t_hi * (2 * b_hi - 1), 0.975))
    return float(lower), float(upper)


@pytest.mark.parametrize("x, y, n", [(9, 2, 44), (3, 1, 8), (12, 3, 40), (0, 3, 12), (40, 10, 60)])
def test_the_limits_are_the_definitions_by_simulation(x, y, n):
    lo, hi = mcnemar_ci(x, y, n)
    mc_lo, mc_hi = _monte_carlo(x, y, n, draws=400_000, seed=x * 1000 + n)
    assert lo == pytest.approx(mc_lo, abs=4e-3) and hi == pytest.approx(mc_hi, abs=4e-3)


def _tables(n: int):
    return [(x, m - x) for m in range(n + 1) for x in range(m + 1)]


@pytest.mark.parametrize("n", [*range(1, 9), 20])
def test_the_interval_excludes_0_exactly_when_the_exact_test_rejects(n):
    """Every table of n items: 0 is outside the 95 % interval if and only if the two-sided exact McNemar p < 0.05,
    and the interval holds the observed difference."""
    for x, y in _tables(n):
        lo, hi = mcnemar_ci(x, y, n)
        assert (lo > 0 or hi < 0) == (mcnemar_exact(y, x) < 0.05), (x, y, n, lo, hi)
        assert -1 <= lo <= (x - y) / n <= hi <= 1


@pytest.mark.parametrize("n", [10, 20])
def test_coverage_computed_exactly_is_at_least_95_percent(n):
    """The probability that the interval holds the true difference p10 - p01, summed over every table of n items
    with its multinomial probability, on a grid of (p10, p01): at least 95 % (the authors' conjecture, supported
    numerically in their paper)."""
    cis = {(x, y): mcnemar_ci(x, y, n) for x, y in _tables(n)}
    worst = 1.0
    for p10 in np.linspace(0, 0.6, 7):
        for p01 in np.linspace(0, 0.6, 7):
            if p10 + p01 > 1:
                continue
            covered = sum(math.comb(n, x + y) * math.comb(x + y, x) * p10 ** x * p01 ** y * (1 - p10 - p01) ** (n - x - y)
                          for (x, y), (lo, hi) in cis.items() if lo <= p10 - p01 <= hi)
            worst = min(worst, covered)
    assert worst >= 0.95 - 1e-12


def test_a_paired_comparison_of_right_wrong_scores_uses_it_and_agrees_with_its_test():
    """5 items A alone gets right of 20: exact p = 1/16, not significant; the bootstrap's interval excluded 0."""
    a = {f"q{i}": int(i < 5 or i >= 12) for i in range(20)}
    b = {f"q{i}": int(i >= 12) for i in range(20)}
    c = paired_comparison("a", a, "b", b, task="t", seed=0)
    assert (c.n10, c.n01, c.mcnemar_p, c.method) == (5, 0, 0.0625, "mcnemar-compatible-exact")
    assert (c.ci_low, c.ci_high) == mcnemar_ci(5, 0, 20) and c.ci_low < 0 < c.ci_high
    from reporter.metrics.stats import score_ci

    boot = score_ci([a[k] - b[k] for k in sorted(a)], seed=0)
    assert boot.ci_low > 0  # what the card showed before: an interval that excluded 0 beside a test that did not reject


@pytest.mark.parametrize("x, y, n", [(5, 0, 26), (4, 5, 5000), (1, 474, 14042)])
def test_no_integration_warning_reaches_the_terminal(x, y, n):
    """Tables where quad warned about roundoff (found by a review): the values stand, the warning is not printed."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lo, hi = mcnemar_ci.__wrapped__(x, y, n)
    assert lo <= (x - y) / n <= hi and (lo > 0 or hi < 0) == (mcnemar_exact(y, x) < 0.05)
