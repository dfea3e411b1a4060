"""Uncertainty in a leaderboard: paired item-bootstrap rank intervals and tiers of tied models.

The leaderboard score of a model is the mean over the benchmark tasks of its task score (the
mean over the task's items), an lm-eval group counting as one task (``shares``). A bootstrap
resample draws, **for each task**, ``n_t`` of the task's items with replacement
(``rng.integers(0, n_t, n_t)``, one draw per task and resample, tasks in the given order, then
resamples) and applies **the same items to every model** (paired), so the item difficulty every
model shares cancels out. The task set is fixed (it is what the leaderboard averages over), so
tasks are not resampled.

* rank: ``1 + #models with a strictly higher score`` (ties share the better rank), per resample;
* rank interval: the 2.5th and 97.5th percentiles of a model's resampled ranks, read as the
  ``floor(0.025 B)``-th and ``(ceil(0.975 B) - 1)``-th of the ``B`` sorted ranks (Chatbot Arena's
  reading of bootstrap ranks);
* tiers: the best remaining model leads a tier; every remaining model whose paired bootstrap
  difference from the leader (leader minus model) has a 95% percentile interval whose lower end is not
  above 0 joins it (the interval contains 0, or lies below it, which the point order all but rules
  out); repeat. Members of a tier are statistically tied with its leader.

>>> import numpy as np
>>> s = {"t": {"a": np.array([1, 1, 1, 0, 1, 1, 1, 1.]), "b": np.array([1, 0, 1, 0, 1, 1, 0, 1.]),
...            "c": np.zeros(8)}}
>>> r = bootstrap_ranks(s, seed=0, n_resamples=500)
>>> [(m["model"], m["rank"], m["rank_low"], m["rank_high"], m["tier"]) for m in r["models"]]
[('a', 1, 1, 1, 1), ('b', 2, 1, 2, 1), ('c', 3, 3, 3, 2)]
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

__all__ = ["bootstrap_ranks", "competition_ranks"]

_TOL = 1e-12


def competition_ranks(values: Sequence[float] | np.ndarray) -> list[int]:
    """``1 + #values strictly higher`` for each value ("1224" ranking: ties share the better rank).

    >>> competition_ranks([0.5, 0.7, 0.5, 0.1])
    [2, 1, 2, 4]
    """
    v = np.asarray(values, dtype=np.float64)
    return [int(1 + np.sum(v > x + _TOL)) for x in v]


def _interval(sorted_values: np.ndarray, confidence: float) -> tuple[float, float]:
    b = sorted_values.size
    tail = (1 - confidence) / 2
    return float(sorted_values[int(math.floor(tail * b))]), float(sorted_values[int(math.ceil((1 - tail) * b)) - 1])


def bootstrap_ranks(scores: Mapping[str, Mapping[str, np.ndarray]], *, seed: int, n_resamples: int = 2000,
                    confidence: float = 0.95, shares: Mapping[str, float] | None = None,
                    units: int | None = None) -> dict:
    """Rank intervals and tiers from a paired item bootstrap (see the module docstring).

    ``scores[task][model]`` is the model's per-item scores on the task, items in the same
    order for every model (the items all models answered). Every task must list the same
    models. Returns ``{"models": [{model, score, rank, rank_low, rank_high, tier}] best first,
    "tiers": [[model, ...], ...], "leader_diffs": {model: {leader, diff, ci_low, ci_high}}`` (the
    paired difference to its tier's leader; for a tier leader, to the leader of the tier above),
    ``"n_resamples", "seed", "confidence", "tasks", "n_items": {task: n}}``.

    ``shares`` and ``units`` weigh the tasks (:func:`reporter.analyse.task_weights.task_shares`: an lm-eval group
    counts as one task): the score is ``sum(shares[t] * mean_t) / units``, in the point estimate and in every
    resample. Without them every task counts as one.
    """
    tasks = list(scores)
    if not tasks:
        raise ValueError("no task to rank on")
    models = list(scores[tasks[0]])
    for t in tasks:
        if list(scores[t]) != models:
            raise ValueError(f"task {t!r} lists models {list(scores[t])}, expected {models}")
    if shares is None or units is None:
        shares, units = {t: 1.0 for t in tasks}, len(tasks)
    rng = np.random.default_rng(seed)
    agg = np.zeros((n_resamples, len(models)))
    point = np.zeros(len(models))
    n_items = {}
    for t in tasks:
        x = np.stack([np.asarray(scores[t][m], dtype=np.float64) for m in models])
        n = x.shape[1]
        if n == 0:
            raise ValueError(f"task {t!r} has no items")
        n_items[t] = n
        point += x.mean(axis=1) * shares[t] / units
        for b in range(n_resamples):
            agg[b] += x[:, rng.integers(0, n, n)].mean(axis=1) * shares[t] / units
    ranks = np.array([competition_ranks(row) for row in agg])
    point_rank = competition_ranks(point)
    order = sorted(range(len(models)), key=lambda i: (-point[i], i))
    tiers: list[list[int]] = []
    leader_diffs = {}
    remaining = list(order)
    while remaining:
        lead = remaining[0]
        tier = [lead]
        for i in remaining[1:]:
            diff = np.sort(agg[:, lead] - agg[:, i])
            lo, hi = _interval(diff, confidence)
            leader_diffs[models[i]] = {"leader": models[lead], "diff": float(point[lead] - point[i]),
                                       "ci_low": lo, "ci_high": hi}
            if not lo > 0:
                tier.append(i)
        tiers.append(tier)
        remaining = [i for i in remaining if i not in tier]
    tier_of = {i: k + 1 for k, tier in enumerate(tiers) for i in tier}
    rows = []
    for i in order:
        lo, hi = _interval(np.sort(ranks[:, i]), confidence)
        rows.append({"model": models[i], "score": float(point[i]), "rank": point_rank[i], "rank_low": int(lo),
                     "rank_high": int(hi), "tier": tier_of[i]})
    return {"models": rows, "tiers": [[models[i] for i in tier] for tier in tiers],
            "leader_diffs": leader_diffs,
            "n_resamples": n_resamples, "seed": seed, "confidence": confidence, "tasks": tasks, "n_items": n_items,
            **({"shares": {t: float(shares[t]) for t in tasks}, "units": int(units)}
               if any(shares[t] != 1.0 for t in tasks) else {})}
