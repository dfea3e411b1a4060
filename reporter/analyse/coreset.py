"""The core set of a task, pooled over the trained models, and how well it reproduces the full task.

In the spirit of EffiEval (the Utility Law authors' evaluation-efficiency follow-up): a core set
is the few items whose key neurons cover most of the key neurons the whole task activates. The
pooled core set treats each model's key neurons as distinct elements (model ``m``'s neuron
``j`` is the element ``offset_m + j``) and runs the greedy maximum coverage of
:func:`reporter.analyse.diversity.greedy_core_set` on the items every model answered, until
95% of the pooled union is covered. It is exported as ``coreset.json``; a profile task's
``items: coreset.json`` evaluates only those items next time.

Reproduction: per model and task, the core-set score minus the full-task score,
``d = mean(core) - mean(all)``. Its 95% CI is a percentile bootstrap that resamples the core
items and the other items separately (their sizes kept). With 3 or more trained models, the
Kendall τ between the core-set scores and the full-task scores says whether the core set keeps
the ranking (per task, and for the mean over tasks).

>>> import numpy as np
>>> sets = {"m1": (["a", "b", "c"], [np.array([1, 2]), np.array([1]), np.array([3])]),
...         "m2": (["a", "b", "c"], [np.array([5]), np.array([6]), np.array([5])])}
>>> pooled_core_set(sets, fraction=1.0)["items"]
['a', 'b', 'c']
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence, TypedDict

import numpy as np
from scipy import stats

from .diversity import COVERAGE_FRACTION, greedy_core_set
from .task_weights import task_shares, weighted_mean

__all__ = ["pooled_core_set", "reproduction", "coreset_document", "CORESET_VERSION", "PooledCoreSet", "Reproduction",
           "CoreSetDocument"]

CORESET_VERSION = 1

NeuronSets = Mapping[str, tuple[Sequence[str], Sequence[np.ndarray]]]  # {model: (item ids, key-neuron sets)}


class PooledCoreSet(TypedDict):
    """The pooled core set of one task (:func:`pooled_core_set`)."""

    items: list[str]
    size: int
    n: int
    covered: int
    total: int
    coverage: float
    fraction: float
    models: list[str]


class Kendall(TypedDict):
    """Kendall's tau between core-set and full-task scores, or why there is none."""

    tau: float | None
    p: float | None
    reason: str | None


class ReproductionRow(TypedDict):
    """One model on one task: its core-set score minus its full-task score, with the 95% CI."""

    full: float
    core: float | None
    diff: float | None
    ci_low: float
    ci_high: float
    n: int
    n_core: int


class TaskReproduction(TypedDict):
    """How one task's core set reproduces each model's score and the ranking."""

    per_model: dict[str, ReproductionRow]
    kendall: Kendall


class Scores(TypedDict):
    """A model's mean full-task and core-set scores over the tasks."""

    full: float
    core: float


class OverallReproduction(TypedDict):
    """The same over the mean of the tasks, for the models with a core-set score on every task."""

    per_model: dict[str, Scores]
    tasks: list[str]
    kendall: Kendall


class Reproduction(TypedDict):
    """What :func:`reproduction` returns (``analysis.coreset.reproduction``)."""

    per_task: dict[str, TaskReproduction]
    overall: OverallReproduction


class CoreSetDocument(TypedDict):
    """``coreset.json`` (:func:`coreset_document`)."""

    version: int
    about: str
    run: dict[str, Any]
    tasks: dict[str, dict[str, Any]]


def pooled_core_set(by_model: NeuronSets, *, fraction: float = COVERAGE_FRACTION) -> PooledCoreSet:
    """The greedy core set of one task over the items every model answered, pooled over the models.

    Returns ``{"items": [ids in pick order], "size", "n", "covered", "total", "coverage", "fraction",
    "models": [...]}``.
    """
    models = list(by_model)
    index = {m: {i: k for k, i in enumerate(by_model[m][0])} for m in models}
    ids = sorted(set.intersection(*(set(index[m]) for m in models))) if models else []
    offsets, off = {}, 0
    for m in models:
        sets = by_model[m][1]
        offsets[m] = off
        off += 1 + max((int(np.max(s)) for s in sets if np.asarray(s).size), default=-1)
    pooled = [np.concatenate([np.asarray(by_model[m][1][index[m][i]], np.int64).ravel() + offsets[m]
                              for m in models]) for i in ids]
    c = greedy_core_set(pooled, fraction=fraction)
    return {"items": [ids[k] for k in c["indices"]], "size": c["size"], "n": len(ids), "covered": c["covered"],
            "total": c["total"], "coverage": c["coverage"], "fraction": fraction, "models": models}


def _diff_ci(core: np.ndarray, rest: np.ndarray, *, seed: int, n_resamples: int) -> tuple[float, float]:
    n = core.size + rest.size
    if rest.size == 0 or core.size == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    c = core[rng.integers(0, core.size, (n_resamples, core.size))].mean(axis=1)
    r = rest[rng.integers(0, rest.size, (n_resamples, rest.size))].mean(axis=1)
    d = (1 - core.size / n) * (c - r)  # mean(core) - (|C| mean(core) + |R| mean(rest)) / n
    lo, hi = np.percentile(d, [2.5, 97.5])
    return float(lo), float(hi)


def _tau(core: list[float | None], full: list[float]) -> Kendall:
    if len(core) < 3:
        return {"tau": None, "p": None, "reason": f"needs 3 or more trained models, this run has {len(core)}"}
    res = stats.kendalltau(core, full)
    if not math.isfinite(res.statistic):
        return {"tau": None, "p": None, "reason": "the scores are all equal on the core set or on the full task"}
    return {"tau": float(res.statistic), "p": float(res.pvalue), "reason": None}


def reproduction(per_item: Mapping[str, Mapping[str, Mapping[str, float]]], core: Mapping[str, Sequence[str]], *,
                 seed: int, n_resamples: int = 2000, groups: Mapping[str, str] | None = None) -> Reproduction:
    """How well each task's core set reproduces each model's full-task score, and the ranking.

    The overall scores are means over tasks, an lm-eval group's tasks (``groups``: {task: group}) counting as one
    task, shared as the group weighs them, as on the leaderboard.

    ``per_item[model][task][item id] = score``; ``core[task]`` = the core-set item ids.
    Returns ``{"per_task": {task: {"per_model": {model: {full, core, diff, ci_low, ci_high, n, n_core}},
    "kendall": {tau, p, reason}}}, "overall": {"per_model": {model: {full, core}}, "kendall": ...}}``.

    >>> r = reproduction({"m": {"t": {"a": 1.0, "b": 0.0, "c": 1.0}}}, {"t": ["a", "c"]}, seed=0)
    >>> r["per_task"]["t"]["per_model"]["m"]["diff"]
    0.33333333333333337
    """
    per_task: dict[str, TaskReproduction] = {}
    for t, ids in core.items():
        chosen = set(ids)
        rows: dict[str, ReproductionRow] = {}
        for m, tasks in per_item.items():
            scores = tasks.get(t)
            if not scores or not chosen <= set(scores):
                continue
            c = np.array([scores[i] for i in ids], dtype=np.float64)
            r = np.array([v for i, v in scores.items() if i not in chosen], dtype=np.float64)
            full = float(np.mean(list(scores.values())))
            lo, hi = _diff_ci(c, r, seed=seed, n_resamples=n_resamples)
            rows[m] = {"full": full, "core": float(c.mean()) if c.size else None,
                       "diff": float(c.mean()) - full if c.size else None, "ci_low": lo, "ci_high": hi,
                       "n": len(scores), "n_core": int(c.size)}
        ok = [m for m in rows if rows[m]["core"] is not None]
        per_task[t] = {"per_model": rows,
                       "kendall": _tau([rows[m]["core"] for m in ok], [rows[m]["full"] for m in ok])}
    models = [m for m in per_item if all(m in per_task[t]["per_model"] and per_task[t]["per_model"][m]["core"]
                                         is not None for t in per_task)] if per_task else []
    shares, units = task_shares(list(per_task), groups or {},
                                {t: max((r["n"] for r in per_task[t]["per_model"].values()), default=0)
                                 for t in per_task})

    def mean(values: dict[str, float | None]) -> float:
        return weighted_mean({t: float(v or 0.0) for t, v in values.items()}, shares, units)

    overall: dict[str, Scores] = {m: {"full": mean({t: per_task[t]["per_model"][m]["full"] for t in per_task}),
                                      "core": mean({t: per_task[t]["per_model"][m]["core"] for t in per_task})}
                                  for m in models}
    return {"per_task": per_task,
            "overall": {"per_model": overall, "tasks": list(per_task),
                        "kendall": _tau([overall[m]["core"] for m in models], [overall[m]["full"] for m in models])}}


def coreset_document(core_sets: Mapping[str, Mapping[str, Any]], run: Mapping[str, Any]) -> CoreSetDocument:
    """The ``coreset.json`` document: per task, the core-set item ids and how they were chosen.

    >>> coreset_document({"t": {"items": ["a"], "size": 1, "n": 3, "coverage": 1.0, "fraction": 0.95,
    ...                         "models": ["m"]}}, {"seed": 0})["tasks"]["t"]["items"]
    ['a']
    """
    return {"version": CORESET_VERSION,
            "about": "per task, the item ids of the greedy key-neuron core set pooled over the trained models; "
                     "use it in a profile task as `items: coreset.json` (the same seed reproduces the prompts)",
            "run": {k: run.get(k) for k in ("seed", "profile", "config_hash", "created")},
            "tasks": {t: {k: c[k] for k in ("items", "size", "n", "coverage", "fraction", "models")}
                      for t, c in core_sets.items()}}
