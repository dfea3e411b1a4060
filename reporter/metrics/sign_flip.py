"""The paired sign-flip test of a mean difference, and the interval that agrees with it.

Two models score the same ``n`` items with partial credit (any score, not only right/wrong); ``d`` are the per-item
differences. If the two models are interchangeable, each ``d_i`` is as likely to have come out as ``-d_i``: the
test compares the observed mean of ``d`` with the means of its ``2^n`` sign-flipped copies (Fisher 1935's
randomisation test; the paired "approximate randomisation" test of NLP evaluation). Its statistic is the mean, the
number the card reports, so a significant difference always goes the way the mean does (the Wilcoxon signed-rank
test's ranks could point the other way). Its null is that the two models are interchangeable, each difference
symmetric about 0: as a test of the mean alone it assumes that symmetry (skewed differences with mean 0 make it reject
too often at small n; ``benchmarks/paired_partial_credit.py``).
Items the two score alike (``d_i = 0``) do not move any arrangement's mean: the test is the same on the ``m``
non-zero differences alone.

**The interval.** The mean difference is ``Δ = τ μ``: ``τ`` the share of items the two score differently, ``μ``
the mean of those differences. Inverting the sign-flip test on all ``n`` differences (Hartigan 1969) treats the
zeros as exact knowledge, and covers poorly where most items tie (all ``n`` tied gives the point 0). So, as Fay &
Lumbard (2021) do for right/wrong scores, two confidence distributions are *melded*: ``τ``'s Clopper-Pearson ones
(``Beta(m, n-m+1)`` and ``Beta(m+1, n-m)``) and ``μ``'s from the sign-flip test on the ``m`` non-zero differences
(flipping the items of a subset moves the mean past the observed one exactly when the subset's mean is below the
shift, so its confidence distribution puts one arrangement's weight on each subset mean, and the observed
arrangement's on the widest value the difference can take, ±1 for scores in [0, 1]). The lower limit is the Δ₀
with ``P[T M <= Δ₀] = α/2`` (``T`` the lower of τ's two for Δ₀ > 0, the upper for Δ₀ < 0; ``M`` μ's lower), the
upper limit the mirror. At Δ₀ = 0 that probability is the test's own one-sided p-value, so the central interval
excludes 0 exactly where the two-sided p-value is below α; with no item scored differently it is what n items
allow, ``±(1 - (α/2)^(1/n))``, as for right/wrong scores.

Up to :data:`EXACT_MAX_ITEMS` non-zero differences every arrangement is enumerated (exact); above, ``draws``
random ones are drawn (Monte Carlo, seeded; the p-value counts the observed arrangement on each side, Phipson &
Smyth 2010: two-sided, ``2 (1 + b) / (1 + draws)`` capped at 1, ``b`` the arrangements at least as extreme on the
observed side).

>>> r = sign_flip([0.5, 0.25, 0.75, 1.0, 0.1, 0.3], seed=0)
>>> r.p_value, r.exact, r.low > 0       # all six positive: 2 / 64, and the interval excludes 0
(0.03125, True, True)
>>> sign_flip([0.5, -0.25, 0.25], seed=0).p_value   # 3 of the 8 arrangements have a mean >= the observed one
0.75
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize, special

__all__ = ["SignFlip", "sign_flip", "EXACT_MAX_ITEMS", "DRAWS"]

#: up to this many non-zero differences every sign arrangement is enumerated (2**18 of them)
EXACT_MAX_ITEMS = 18

#: random arrangements drawn above :data:`EXACT_MAX_ITEMS` (the smallest p-value is 2 / (DRAWS + 1) = 1e-4)
DRAWS = 19_999

_BATCH = 1 << 22  # elements of a batch of drawn arrangements


@dataclass(frozen=True)
class SignFlip:
    """The test's two-sided p-value and the interval that agrees with it."""

    p_value: float
    low: float
    high: float
    exact: bool  # every arrangement enumerated; else ``draws`` drawn
    arrangements: int  # arrangements of the non-zero differences the p-value counts (2**m, or draws + 1)


def _subset_means(x: np.ndarray, *, exact: bool, draws: int, seed: int) -> tuple[np.ndarray, int]:
    """The means of ``x`` over every non-empty subset (exact), or over ``draws`` random subsets (each item in with
    probability 1/2); the number of drawn subsets that were empty, which count as the observed arrangement.
    A subset whose sum is 0 up to rounding has mean exactly 0, so the test at 0 and the interval agree.
    """
    scale = float(np.abs(x).sum()) or 1.0
    if exact:
        sums, sizes = np.zeros(1), np.zeros(1, dtype=np.int64)
        for v in x:
            sums, sizes = np.concatenate([sums, sums + v]), np.concatenate([sizes, sizes + 1])
        sums, sizes, empty = sums[1:], sizes[1:], 0
    else:
        rng = np.random.default_rng(seed)
        rows = max(1, _BATCH // x.size)
        parts_s, parts_n = [], []
        for start in range(0, draws, rows):
            pick = rng.random((min(rows, draws - start), x.size)) < 0.5
            parts_s.append(pick @ x)
            parts_n.append(pick.sum(axis=1))
        sums, sizes = np.concatenate(parts_s), np.concatenate(parts_n)
        empty = int(np.sum(sizes == 0))
        sums, sizes = sums[sizes > 0], sizes[sizes > 0]
    sums = np.where(np.abs(sums) <= 1e-12 * scale, 0.0, sums)
    return sums / sizes, empty


def _beta_cdf(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """``P[Beta(a, b) <= x]`` with the degenerate limits: ``a = 0`` is the point 0, ``b = 0`` the point 1."""
    if a == 0:
        return (x >= 0.0).astype(np.float64)
    if b == 0:
        return (x >= 1.0).astype(np.float64)
    return special.betainc(a, b, np.clip(x, 0.0, 1.0))


def _beta_sf(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """``P[Beta(a, b) >= x]``, the degenerate limits as in :func:`_beta_cdf`."""
    if a == 0:
        return (x <= 0.0).astype(np.float64)
    if b == 0:
        return (x <= 1.0).astype(np.float64)
    return 1.0 - special.betainc(a, b, np.clip(x, 0.0, 1.0))  # (SciPy's betaincc is ten times slower here)


def _lower(atoms: np.ndarray, weights: np.ndarray, m: int, n: int, bound: float, alpha: float,
           rejects: bool) -> float:
    """The lower limit: the Δ₀ with ``P[T M <= Δ₀] = alpha`` (module docstring), searched on the side of 0 that the
    test at 0 decides (``rejects``: its one-sided p-value, counted in whole arrangements, is below ``alpha``; it is
    ``P[T M <= 0]``, so this is the same verdict without the rounding of a sum of weights).
    ``atoms``/``weights``: μ's lower confidence distribution (weights sum to 1).
    """
    neg, pos = atoms < 0, atoms > 0

    def p_low(d0: float) -> float:
        if d0 > 0:  # T ~ Beta(m, n - m + 1): T a <= d0 always for a <= 0, with probability P[T <= d0 / a] for a > 0
            return float(weights[~pos].sum() + (weights[pos] * _beta_cdf(m, n - m + 1, d0 / atoms[pos])).sum())
        if d0 < 0:  # T ~ Beta(m + 1, n - m): only a < 0 can reach d0, when T >= d0 / a
            return float((weights[neg] * _beta_sf(m + 1, n - m, d0 / atoms[neg])).sum())
        return float(weights[~pos].sum())

    if rejects:  # the test rejects "Δ <= 0": the limit is above 0
        lo, hi = 0.0, bound
    elif float(weights[neg].sum()) < alpha:  # p jumps across alpha at 0 (atoms at exactly 0)
        return 0.0
    else:
        lo, hi = -bound, 0.0
    f_lo = p_low(lo if lo < 0 else math.nextafter(0.0, 1.0)) - alpha
    f_hi = p_low(hi if hi > 0 else -math.nextafter(0.0, 1.0)) - alpha
    if f_lo >= 0:
        return lo
    if f_hi <= 0:
        return hi
    root = float(optimize.brentq(lambda d0: p_low(d0) - alpha, lo if lo < 0 else math.nextafter(0.0, 1.0),
                                 hi if hi > 0 else -math.nextafter(0.0, 1.0), xtol=1e-12, rtol=1e-10))
    return max(root, math.nextafter(0.0, 1.0)) if rejects else min(root, 0.0)


def sign_flip(diffs: Sequence[float], *, seed: int, confidence: float = 0.95, draws: int = DRAWS) -> SignFlip:
    """Two-sided sign-flip test of ``mean(diffs) = 0`` and the ``confidence`` interval of the mean that agrees with it.

    Exact up to :data:`EXACT_MAX_ITEMS` non-zero differences, else ``draws`` seeded random arrangements. The
    interval lies within ±1 (scores in [0, 1]) or the data's own extreme if that lies beyond. Raises ``ValueError``
    for no items, non-finite differences or a confidence outside (0, 1).

    >>> r = sign_flip([0.0] * 30, seed=0)   # no item scored differently: what 30 items allow, not the point 0
    >>> r.p_value, round(r.low, 4), round(r.high, 4)
    (1.0, -0.1157, 0.1157)
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"diffs must be a non-empty 1-D sequence of numbers, got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError("diffs contains NaN or infinite values")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    scale = float(np.abs(d).max())
    x = d[np.abs(d) > 1e-12 * scale] if scale > 0 else d[:0]
    n, m = int(d.size), int(x.size)
    exact = m <= EXACT_MAX_ITEMS
    means, empty = _subset_means(x, exact=exact, draws=draws, seed=seed) if m else (np.zeros(0), 0)
    total = means.size + 1 + empty  # the observed arrangement (the empty subset) counts on both sides
    base = 1 + empty
    # one-sided counts at 0: arrangements whose mean is at least (at most) the observed one
    upper, lower = base + int(np.sum(means <= 0)), base + int(np.sum(means >= 0))
    p = min(1.0, 2 * min(upper, lower) / total)
    level = round(1.0 - confidence, 12)  # 1 - 0.95 is 0.05000000000000004 in floating point: the α users mean
    bound = max(1.0, scale)
    atoms, counts = np.unique(means, return_counts=True)
    weights = counts / total
    # the same expression as p: the interval excludes 0 exactly where p < level
    low = _lower(np.append(atoms, -bound), np.append(weights, base / total), m, n, bound, level / 2,
                 rejects=2 * upper / total < level)
    high = -_lower(np.append(-atoms, -bound), np.append(weights, base / total), m, n, bound, level / 2,
                   rejects=2 * lower / total < level)
    return SignFlip(p, low, high, exact, total)
