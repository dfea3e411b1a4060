"""Statistical power of the paired comparisons: what difference a run can detect, what n it needs.

Two models are compared item by item (:mod:`reporter.metrics.stats`). For 0/1 scores the test
is the two-sided exact McNemar test, and its power is computed **exactly**: with ``n`` items, a
discordance ``psi = P(the models disagree on an item)`` and a true difference
``delta = P(a right, b wrong) - P(a wrong, b right)``, the number of discordant items is
``m ~ Binomial(n, psi)`` and, given ``m``, the items ``a`` wins are
``Binomial(m, (psi + delta) / (2 psi))``; the power is the probability of landing in the exact
test's rejection region, summed over ``m``. For other scores (partial credit) the test is
approximated by a paired t-test on the differences (``statsmodels.stats.power.TTestPower``)
with the observed standard deviation of the differences.

>>> round(mcnemar_power(200, psi=0.3, delta=0.1), 3)
0.703
>>> min_detectable_mcnemar(8, psi=0.25) is None  # 8 items, 2 expected disagreements: nothing is detectable
True
>>> n_needed_mcnemar(psi=0.3, delta=0.05)
975
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.optimize import brentq

__all__ = ["POWER", "mcnemar_power", "min_detectable_mcnemar", "n_needed_mcnemar", "ttest_min_detectable",
           "ttest_n_needed"]

#: the power every figure on the card is computed for
POWER = 0.8
_MAX_N = 10_000_000


def _critical(m: np.ndarray, alpha: float) -> np.ndarray:
    """Largest ``c`` with two-sided exact binomial p-value of ``c`` (of ``m``, p = 1/2) <= alpha; -1 if none.

    The exact McNemar test rejects when the items ``a`` wins are ``<= c`` or ``>= m - c``.
    """
    c = stats.binom.ppf(alpha / 2, m, 0.5)
    c = np.where(stats.binom.cdf(c, m, 0.5) * 2 > alpha + 1e-12, c - 1, c)
    return c.astype(np.int64)


def mcnemar_power(n: int, psi: float, delta: float, *, alpha: float = 0.05) -> float:
    """Exact power of the two-sided exact McNemar test (see the module docstring).

    ``psi`` in (0, 1], ``|delta| <= psi``.

    >>> mcnemar_power(50, psi=0.2, delta=0.0) <= 0.05  # no difference: at most alpha
    True
    """
    if n <= 0 or psi <= 0:
        return 0.0
    if abs(delta) > psi + 1e-12:
        raise ValueError(f"|delta| = {abs(delta)} cannot exceed the discordance psi = {psi}")
    q = min(1.0, max(0.0, (psi + delta) / (2 * psi)))
    m = np.arange(1, n + 1)
    c = _critical(m, alpha)
    ok = c >= 0
    reject = np.where(ok, stats.binom.cdf(c, m, q) + stats.binom.sf(m - c - 1, m, q), 0.0)
    return float(np.sum(stats.binom.pmf(m, n, min(psi, 1.0)) * reject))


def min_detectable_mcnemar(n: int, psi: float, *, alpha: float = 0.05, power: float = POWER) -> float | None:
    """The smallest ``delta`` the exact McNemar test detects with ``power`` at this ``n`` and ``psi``.

    None when even ``delta = psi`` (every disagreement in one direction) is not detected.

    >>> round(min_detectable_mcnemar(400, psi=0.3), 3)
    0.079
    """
    if n <= 0 or psi <= 0 or mcnemar_power(n, psi, psi, alpha=alpha) < power:
        return None
    if mcnemar_power(n, psi, 0.0, alpha=alpha) >= power:
        return 0.0
    return float(brentq(lambda d: mcnemar_power(n, psi, d, alpha=alpha) - power, 0.0, psi, xtol=1e-6))


def n_needed_mcnemar(psi: float, delta: float, *, alpha: float = 0.05, power: float = POWER) -> int | None:
    """The smallest ``n`` at which the exact McNemar test reaches ``power`` for ``delta`` (``psi >= delta``).

    Connor's (1987) normal approximation gives the starting point; the exact power decides.
    Exact power is not quite monotone in ``n`` (the test is discrete): the answer is the first
    ``n`` of a bisection, accurate to the few items this sawtooth moves it. None when
    ``delta > psi`` or more than ten million items would be needed.
    """
    if delta <= 0 or psi <= 0 or delta > psi + 1e-12:
        return None
    za, zb = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    approx = (za * math.sqrt(psi) + zb * math.sqrt(max(psi - delta ** 2, 0.0))) ** 2 / delta ** 2
    lo, hi = 1, max(2, int(approx))
    while mcnemar_power(hi, psi, delta, alpha=alpha) < power:
        lo, hi = hi, hi * 2
        if hi > _MAX_N:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        if mcnemar_power(mid, psi, delta, alpha=alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return int(hi)


def ttest_min_detectable(n: int, sd: float, *, alpha: float = 0.05, power: float = POWER) -> float | None:
    """Smallest mean paired difference a two-sided paired t-test detects (``statsmodels`` TTestPower).

    >>> round(ttest_min_detectable(100, sd=0.3), 4)
    0.0849
    """
    if n < 2 or not sd > 0:
        return None
    from statsmodels.stats.power import TTestPower
    es = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power, alternative="two-sided")
    return float(es) * sd


def ttest_n_needed(sd: float, delta: float, *, alpha: float = 0.05, power: float = POWER) -> int | None:
    """Items a two-sided paired t-test needs to detect ``delta`` with ``power`` (``statsmodels`` TTestPower).

    >>> ttest_n_needed(0.3, 0.05)
    285
    """
    if not sd > 0 or delta <= 0:
        return None
    from statsmodels.stats.power import TTestPower
    n = TTestPower().solve_power(effect_size=delta / sd, nobs=None, alpha=alpha, power=power,
                                 alternative="two-sided")
    return int(math.ceil(float(n)))
