"""Exact null distributions of rank tests: the summed rank and Fisher's combination of rank p-values.

Under the null of exchangeability an item's rank ``r`` among ``m + 1`` equally likely
candidates is uniform on ``0..m``, independently across items, so both statistics have an
exact null distribution: the convolution of the items' discrete ones. The option-order
contamination test (:mod:`reporter.analyse.contamination`) uses them.

>>> order_fisher_pvalue([0, 0], [3, 3])  # two items, each with its published order first of 4
0.0625
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["FISHER_GRID", "MIN_ITEMS", "fisher_scores", "order_fisher_pvalue", "order_null_pvalue"]

#: the fewest items (per side) a contamination test is computed on: the option-order test, Min-K% against held-out
#: text and against the other split. The collect stage spends nothing on a test that would have fewer; the analyse
#: stage reports it "not measurable".
MIN_ITEMS = 5


def order_null_pvalue(ranks: Sequence[int], n_perms: Sequence[int]) -> float:
    """Exact ``P(sum of independent uniform{0..m_i} <= sum(ranks))``: the summed-rank test.

    The option-order signal's test until 2026-12-01, still reported as ``p_value_rank_sum``
    (the signal's p-value is :func:`order_fisher_pvalue`).

    >>> order_null_pvalue([0], [3])  # one item, 4 orders: the published one first with prob 1/4
    0.25
    >>> round(order_null_pvalue([0, 0], [1, 1]), 3)
    0.25
    """
    pmf = np.ones(1)
    for m in n_perms:
        pmf = np.convolve(pmf, np.full(int(m) + 1, 1.0 / (int(m) + 1)))
    s = int(np.sum(ranks))
    return float(min(1.0, pmf[: s + 1].sum()))


#: the exact Fisher null is computed on an integer grid of at most this many points
FISHER_GRID = 1 << 17


def fisher_scores(n_perms: Sequence[int]) -> tuple[float, list[np.ndarray]]:
    """The grid scale and, per item, the integer score of each rank: ``round(scale * ln((m+1)/(r+1)))``.

    ``scale`` is 1000 per nat, or less when the items' largest total would exceed ``FISHER_GRID``.

    >>> scale, sc = fisher_scores([3]); scale, sc[0].tolist()
    (1000.0, [1386, 693, 288, 0])
    """
    m = np.asarray(n_perms, int)
    top = float(np.sum(np.log(m + 1.0)))
    scale = min(1000.0, FISHER_GRID / top) if top > 0 else 1000.0
    return scale, [np.rint(scale * np.log((mi + 1.0) / np.arange(1, mi + 2))).astype(int) for mi in m]


def order_fisher_pvalue(ranks: Sequence[int], n_perms: Sequence[int],
                        preference: float | Sequence[float] = 0.0) -> float:
    """Exact ``P(T_null >= T)`` for Fisher's combination of the items' rank p-values ``(r+1)/(m+1)``.

    ``T`` is ``sum ln((m_i+1)/(r_i+1))`` on the grid of :func:`fisher_scores` (``-2 T`` is Fisher's
    statistic); under the null each ``r_i`` is uniform on ``0..m_i``, independently, and the
    distribution of ``T`` is their convolution, so the p-value is exact for the gridded statistic.

    ``preference`` (one share, or one per item) widens the null to a benchmark whose published
    orders are preferred by convention: with that probability an item's published order is the
    most likely whatever the model saw (rank 0), otherwise its rank is uniform. ``0`` is plain
    exchangeability. A larger share makes the test more conservative for every outcome.

    >>> order_fisher_pvalue([0], [3])  # one item, 4 orders: the published one first with prob 1/4
    0.25
    >>> order_fisher_pvalue([0, 3], [3, 3]) == order_fisher_pvalue([3, 0], [3, 3])
    True
    >>> order_fisher_pvalue([0], [3], preference=0.2)  # 0.2 + 0.8 / 4
    0.4
    """
    _, scores = fisher_scores(n_perms)
    w = np.broadcast_to(np.asarray(preference, np.float64), (len(scores),))
    if np.any((w < 0) | (w >= 1)) or not np.all(np.isfinite(w)):
        raise ValueError(f"preference must lie in [0, 1), got {preference}")
    pmf = np.ones(1)
    for sc, wi in zip(scores, w):
        prob = np.full(sc.size, (1.0 - wi) / sc.size)
        prob[0] += wi
        new = np.zeros(pmf.size + int(sc[0]))
        for v, q in zip(sc, prob):
            new[v:v + pmf.size] += q * pmf
        pmf = new
    t = int(sum(int(sc[int(r)]) for sc, r in zip(scores, ranks)))
    return float(min(1.0, pmf[t:].sum()))
