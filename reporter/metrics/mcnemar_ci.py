"""A confidence interval for a paired difference of right/wrong scores that agrees with the exact McNemar test.

Two models answer the same ``n`` items; ``x`` items only model A gets right, ``m - x`` only model B. The difference
of their scores is ``Δ = (x - (m - x)) / n``, the parameter ``τ (2β - 1)``: ``τ`` the share of items they disagree
on, ``β`` the share of those that A wins. The exact McNemar test conditions on ``m`` and tests ``β = 1/2``; a
bootstrap interval of Δ ignores that and, on a few items, excludes 0 where the test is far from rejecting.

This is the interval of Fay & Lumbard (2021), "Confidence intervals for difference in proportions for matched
pairs compatible with exact McNemar's or sign tests", Statistics in Medicine 40(5):1147-1159: the Clopper-Pearson
confidence distributions of ``τ`` (``Beta(m, n-m+1)`` and ``Beta(m+1, n-m)``) and of ``β`` (``Beta(x, m-x+1)`` and
``Beta(x+1, m-x)``) are *melded*: the lower limit is the Δ₀ whose one-sided p-value
``P[T (2B - 1) <= Δ₀]`` is α/2 (T the lower of τ's two for Δ₀ > 0, the upper for Δ₀ < 0; B the lower of β's), the
upper limit the mirror. At Δ₀ = 0 that p-value is the exact binomial tail of the McNemar test, so the central
two-sided 95 % interval excludes 0 exactly when the two-sided exact test (``mcnemar_exact``) has p < 0.05. The
authors' R implementation is ``exact2x2::mcnemarExactDP``; the limits here are its numeric-integration method
(``scipy.integrate.quad``, roots by ``brentq``), with the root searched on the side of 0 the test decides, so that
agreement holds however close the p-value is to α.

>>> lo, hi = mcnemar_ci(n10=9, n01=2, n=44)
>>> round(lo, 4), round(hi, 4), lo < 0 < hi   # 9 against 2 of 44: exact p = 0.065, so 0 is inside
(-0.009, 0.3231, True)
>>> mcnemar_ci(0, 0, 10)[1] > 0                # no disagreement: 0 is inside, the interval is not a point
True
"""
from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Callable

from scipy import integrate, optimize, special

__all__ = ["mcnemar_ci"]


def _sf(a: float, b: float, x: float) -> float:
    """``P[Beta(a, b) >= x]`` with the degenerate limits: ``a = 0`` is the point 0, ``b = 0`` the point 1."""
    if x <= 0:
        return 1.0
    if x > 1:
        return 0.0
    if a == 0:
        return 0.0
    if b == 0:
        return 1.0
    return float(special.betaincc(a, b, x))


def _pdf(a: float, b: float, t: float) -> float:
    return math.exp((a - 1) * math.log(t) + (b - 1) * math.log1p(-t) - special.betaln(a, b)) if 0 < t < 1 else 0.0


def _integral(f: Callable[[float], float], a: float, b: float, lo: float) -> float:
    """``∫ f(t) Beta(a, b).pdf(t) dt`` over ``[lo, 1]`` (``f`` a probability, so the result is one)."""
    if lo >= 1:
        return 0.0
    # the beta density's mass is where quad must look: split at its mode so a narrow peak is not stepped over
    mode = (a - 1) / (a + b - 2) if a > 1 and b > 1 else None
    points = [mode] if mode is not None and lo < mode < 1 else None
    with warnings.catch_warnings():  # quad's "roundoff" warnings at these tolerances: the values agree with R's
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        val, _ = integrate.quad(lambda t: f(t) * _pdf(a, b, t), lo, 1.0, points=points, limit=200,
                                epsabs=1e-12, epsrel=1e-10)
    return min(1.0, max(0.0, float(val)))


def _p_upper(delta: float, x: int, m: int, n: int) -> float:
    """One-sided p-value of H0: Δ >= ``delta`` against Δ < ``delta`` (what the upper limit inverts):
    ``P[T (2 B_U - 1) >= delta]`` with ``B_U ~ Beta(x+1, m-x)``, ``T ~ Beta(m+1, n-m)`` for ``delta > 0`` and
    ``Beta(m, n-m+1)`` for ``delta < 0``.
    """
    if delta == 0:
        return _sf(x + 1, m - x, 0.5)
    if delta > 0:
        if m == n:
            return _sf(x + 1, m - x, 0.5 + delta / 2)
        if m == x:
            return _sf(m + 1, n - m, delta)
        return _integral(lambda t: _sf(x + 1, m - x, 0.5 + delta / (2 * t)), m + 1, n - m, delta)
    if m == 0 or x == m:
        return 1.0
    return _integral(lambda t: _sf(x + 1, m - x, 0.5 + delta / (2 * t)), m, n - m + 1, 0.0)


@lru_cache(maxsize=4096)
def mcnemar_ci(n10: int, n01: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The central ``confidence`` interval of ``Δ = (n10 - n01) / n`` compatible with the exact McNemar test (see the
    module docstring): ``n10`` items only A gets right, ``n01`` only B, ``n`` items in all.

    >>> mcnemar_ci(5, 0, 5)[0] > 0, mcnemar_ci(5, 0, 20)[0] > 0   # exact p = 1/16 either way: not significant
    (False, False)
    >>> mcnemar_ci(6, 0, 20)[0] > 0                                # p = 1/32
    True
    """
    n10, n01, n = int(n10), int(n01), int(n)
    if n10 < 0 or n01 < 0 or n10 + n01 > n or n < 1:
        raise ValueError(f"need 0 <= n10, n01 and n10 + n01 <= n >= 1, got n10={n10}, n01={n01}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x, m = n10, n10 + n01
    alpha = (1 - confidence) / 2
    return _limit(x, m, n, alpha, lower=True), _limit(x, m, n, alpha, lower=False)


def _limit(x: int, m: int, n: int, alpha: float, *, lower: bool) -> float:
    """One limit: the Δ₀ whose one-sided p-value is ``alpha``, searched on the side of 0 the test at Δ₀ = 0 puts it."""
    if lower:
        return -_limit(m - x, m, n, alpha, lower=False)
    if m == 0:  # no disagreement: Δ <= τ, and τ's upper limit with no discordant item (exact2x2's qbeta(1-α, 1, n))
        return float(special.betaincinv(1, n, 1 - alpha))
    if m == n and x == m:
        return 1.0

    def excess(d: float) -> float:
        return _p_upper(d, x, m, n) - alpha

    at0 = excess(0.0)
    if at0 == 0:
        return 0.0
    # _p_upper falls from 1 (Δ₀ = -1) to 0 (Δ₀ = 1); the root lies above 0 exactly when the test does not reject there
    lo, hi = (0.0, 1.0) if at0 > 0 else (-1.0, 0.0)
    f_lo, f_hi = excess(lo), excess(hi)
    if f_hi >= 0:
        return hi
    if f_lo <= 0:
        return lo
    root = float(optimize.brentq(excess, lo, hi, xtol=1e-10, rtol=1e-10))
    # never on 0's wrong side through rounding: the test's verdict at 0 decides it
    return max(root, math.nextafter(0.0, 1.0)) if at0 > 0 else min(root, -math.nextafter(0.0, 1.0))
