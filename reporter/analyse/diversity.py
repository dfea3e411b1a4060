"""Model-specific dataset diversity from per-sample key-neuron sets (Utility Law corollary 4).

More diverse data activates more distinct key neurons in a given model; coverage of the
union of key neurons measures it. For ONE model, with ``sets_by_task = {task: [set per
sample]}`` (sorted int arrays of flat neuron ids ``layer * d_ff + i``, as stored in
``neurons.npz``) and ``U_X`` = the union of task X's sample sets:

* overlap: Jaccard ``|U_X ∩ U_Y| / |U_X ∪ U_Y|`` and redundancy
  ``red(X, Y) = |U_X ∩ U_Y| / |U_X|`` — the share of X's key neurons that Y also activates
  (asymmetric);
* saturation curve: ``|union of the first n samples|`` against n, samples in a seeded random
  order; ``n_at_fraction`` = the smallest n whose union reaches ``fraction`` (95%) of ``|U_X|``;
* core set: greedy maximum coverage (at each step the sample adding the most uncovered
  neurons, ties to the lower sample index), stopped once ``fraction`` of ``|U_X|`` is covered —
  the usual (1 - 1/e)-approximation of the smallest such subset. Lazy greedy: exact same
  picks as plain greedy, far fewer gain evaluations;
* marginal gain: ``|U_X minus the union of all other tasks|`` — the coverage only X adds.

Union sizes grow with the number of samples, so compare tasks at similar sample counts.

>>> import numpy as np
>>> s = {"a": [np.array([1, 2]), np.array([2, 3])], "b": [np.array([3, 4])]}
>>> overlap(task_unions(s))["redundancy"]
[[1.0, 0.3333333333333333], [0.5, 1.0]]
>>> greedy_core_set([np.array([1, 2]), np.array([1]), np.array([3])], fraction=1.0)["indices"]
[0, 2]
"""
from __future__ import annotations

import heapq
from typing import Mapping, Sequence, TypedDict

import numpy as np

from ..schema import Advice

__all__ = ["task_unions", "overlap", "saturation_curve", "greedy_core_set", "marginal_gains",
           "model_diversity", "REDUNDANT_AT", "COVERAGE_FRACTION", "OverlapMatrices", "SaturationCurve",
           "GreedyCoreSet", "MarginalGain", "ModelDiversity"]

COVERAGE_FRACTION = 0.95
REDUNDANT_AT = 0.8  # "task X is p% redundant with Y" is said when red(X, Y) >= this
_CURVE_POINTS = 64  # the saturation curve is stored at about this many sample counts


class OverlapMatrices(TypedDict):
    """Task x task overlap (:func:`overlap`); ``matrix``/``matrix_kind`` are what the card's heatmap shows."""

    tasks: list[str]
    sizes: list[int]
    jaccard: list[list[float]]
    redundancy: list[list[float]]
    matrix: list[list[float]]
    matrix_kind: str


class SaturationCurve(TypedDict):
    """A task's key-neuron union against the number of samples (:func:`saturation_curve`)."""

    n_samples: int
    total: int
    fraction: float
    n_at_fraction: int
    seed: int
    n: list[int]
    union_size: list[int]
    union: list[int]
    n95: int


class GreedyCoreSet(TypedDict):
    """The greedy core set of one task (:func:`greedy_core_set`)."""

    indices: list[int]
    size: int
    n_samples: int
    total: int
    covered: int
    coverage: float
    fraction: float


class MarginalGain(TypedDict):
    """The key neurons only one task activates (:func:`marginal_gains`)."""

    task: str
    new_neurons: int
    share_of_all: float
    union_size: int


class TaskCoreSet(TypedDict, total=False):
    """A core set as a model's diversity entry stores it: item positions here, item ids once the analysis maps them."""

    size: int
    n_samples: int
    total: int
    covered: int
    coverage: float
    fraction: float
    item_indices: list[int]
    items: list[str]
    n: int


class ModelDiversity(TypedDict, total=False):
    """One model's ``analysis.diversity`` entry (:class:`reporter.schema.Diversity`): the facts of
    :func:`model_diversity`, and the advice that :func:`reporter.analyse.advice.advise` adds.
    """

    overlap: OverlapMatrices
    saturation: dict[str, SaturationCurve]
    core_sets: dict[str, TaskCoreSet]
    marginal_gain: list[MarginalGain]
    fraction: float
    redundant_at: float
    seed: int
    definitions: dict[str, str]
    advice: list[Advice]
    withheld: list[str]
    min_items: int
    rules: str


def task_unions(sets_by_task: Mapping[str, Sequence[np.ndarray]]) -> dict[str, np.ndarray]:
    """Sorted union of each task's sample sets.

    >>> task_unions({"t": [np.array([3, 1]), np.array([1, 2])]})["t"].tolist()
    [1, 2, 3]
    """
    return {t: (np.unique(np.concatenate([np.asarray(s, np.int64).ravel() for s in sets]))
                if len(sets) else np.zeros(0, np.int64)) for t, sets in sets_by_task.items()}


def overlap(unions: Mapping[str, np.ndarray]) -> OverlapMatrices:
    """Task x task Jaccard and redundancy matrices (rows X, columns Y), tasks in the given order.

    Empty unions give 0 (and redundancy 0 for an empty X).

    >>> overlap({"x": np.array([1, 2]), "y": np.array([2, 3, 4])})["jaccard"][0][1]
    0.25
    """
    tasks = list(unions)
    n = len(tasks)
    jac = [[0.0] * n for _ in range(n)]
    red = [[0.0] * n for _ in range(n)]
    sizes = [int(unions[t].size) for t in tasks]
    for i, x in enumerate(tasks):
        for j, y in enumerate(tasks):
            inter = int(np.intersect1d(unions[x], unions[y], assume_unique=True).size)
            uni = sizes[i] + sizes[j] - inter
            jac[i][j] = inter / uni if uni else 0.0
            red[i][j] = inter / sizes[i] if sizes[i] else 0.0
    return {"tasks": tasks, "sizes": sizes, "jaccard": jac, "redundancy": red, "matrix": jac, "matrix_kind": "jaccard"}


def _reached(count: float, total: int, fraction: float) -> bool:
    return count >= fraction * total - 1e-9


def saturation_curve(sets: Sequence[np.ndarray], *, seed: int = 0, fraction: float = COVERAGE_FRACTION,
                     max_points: int = _CURVE_POINTS) -> SaturationCurve:
    """Union size after the first n samples (seeded random order) and the n reaching ``fraction``.

    Computed in O(total ids): each neuron's first appearance in the order, then a cumulative
    count. ``n``/``union_size`` hold about ``max_points`` points (always the first and last).

    >>> c = saturation_curve([np.array([1, 2]), np.array([2]), np.array([3])], seed=0, fraction=1.0)
    >>> c["total"], c["n_samples"], c["n_at_fraction"] in (2, 3)
    (3, 3, True)
    """
    n = len(sets)
    order = np.random.default_rng(seed).permutation(n)
    full = _curve(sets, order)
    total = int(full[-1]) if n else 0
    n_at = next((k for k in range(n + 1) if _reached(full[k], total, fraction)), n) if n else 0
    if n <= max_points:
        ks = list(range(1, n + 1))
    else:
        ks = sorted(set(np.unique(np.linspace(1, n, max_points).round().astype(int)).tolist()) | {n_at})
    sizes = [int(full[k]) for k in ks]
    return {"n_samples": n, "total": total, "fraction": fraction, "n_at_fraction": int(n_at), "seed": seed,
            "n": ks, "union_size": sizes, "union": sizes, "n95": int(n_at)}


def _curve(sets: Sequence[np.ndarray], order: np.ndarray) -> np.ndarray:
    """full[k] = |union of sets[order[:k]]|, k = 0..n."""
    n = len(sets)
    if n == 0:
        return np.zeros(1, np.int64)
    lens = np.array([np.asarray(sets[i]).size for i in order], dtype=np.int64)
    ids = np.concatenate([np.asarray(sets[i], np.int64).ravel() for i in order]) if lens.sum() else np.zeros(0, np.int64)
    pos = np.repeat(np.arange(n), lens)
    first = np.full(0, 0, np.int64)
    if ids.size:
        _, idx = np.unique(ids, return_index=True)  # first occurrence in the concatenated order
        first = pos[idx]
    full = np.zeros(n + 1, np.int64)
    full[1:] = np.cumsum(np.bincount(first, minlength=n))
    return full


def greedy_core_set(sets: Sequence[np.ndarray], *, fraction: float = COVERAGE_FRACTION) -> GreedyCoreSet:
    """Greedy maximum coverage until ``fraction`` of the union is covered (lazy greedy, exact).

    Returns ``{"indices": picks in order, "size", "n_samples", "total", "covered", "coverage",
    "fraction"}``. Neuron ids are mapped to 0..|union|-1 and coverage kept in a boolean array;
    a heap holds upper bounds of each sample's gain, refreshed only when popped.

    >>> greedy_core_set([np.array([1]), np.array([1, 2, 3]), np.array([4])], fraction=0.75)["indices"]
    [1]
    """
    n = len(sets)
    arrs = [np.unique(np.asarray(s, np.int64).ravel()) for s in sets]
    universe = np.unique(np.concatenate(arrs)) if n and sum(a.size for a in arrs) else np.zeros(0, np.int64)
    total = int(universe.size)
    local = [np.searchsorted(universe, a) for a in arrs]
    covered = np.zeros(total, dtype=bool)
    n_cov, picks, rnd = 0, [], 0
    heap = [(-a.size, i, 0) for i, a in enumerate(local)]
    heapq.heapify(heap)
    while heap and not _reached(n_cov, total, fraction):
        neg, i, stamp = heapq.heappop(heap)
        if stamp == rnd:  # gain is current: the best
            if neg == 0:
                break
            picks.append(i)
            covered[local[i]] = True
            n_cov -= neg
            rnd += 1
        else:
            g = int(np.count_nonzero(~covered[local[i]]))
            if g:
                heapq.heappush(heap, (-g, i, rnd))
    return {"indices": picks, "size": len(picks), "n_samples": n, "total": total, "covered": int(n_cov),
            "coverage": n_cov / total if total else 1.0, "fraction": fraction}


def marginal_gains(unions: Mapping[str, np.ndarray]) -> list[MarginalGain]:
    """Per task: neurons no other task activates (count, share of the all-task union); largest first.

    >>> [(g["task"], g["new_neurons"]) for g in marginal_gains({"x": np.array([1, 2]), "y": np.array([2])})]
    [('x', 1), ('y', 0)]
    """
    tasks = list(unions)
    everything = np.unique(np.concatenate(list(unions.values()))) if tasks else np.zeros(0, np.int64)
    out: list[MarginalGain] = []
    for t in tasks:
        others = [unions[o] for o in tasks if o != t]
        rest = np.unique(np.concatenate(others)) if others else np.zeros(0, np.int64)
        only = int(np.setdiff1d(unions[t], rest, assume_unique=True).size)
        out.append({"task": t, "new_neurons": only, "share_of_all": only / everything.size if everything.size else 0.0,
                    "union_size": int(unions[t].size)})
    return sorted(out, key=lambda r: (-r["new_neurons"], r["task"]))


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def model_diversity(model: str, sets_by_task: Mapping[str, Sequence[np.ndarray]], *, seed: int = 0,
                    fraction: float = COVERAGE_FRACTION, redundant_at: float = REDUNDANT_AT) -> ModelDiversity:
    """Everything above for one model (the facts; advice is :func:`reporter.analyse.advice.advise`).

    >>> d = model_diversity("m", {"x": [np.array([1, 2, 3])], "y": [np.array([1, 2, 3, 4]), np.array([9])]})
    >>> d["overlap"]["redundancy"][0][1], d["core_sets"]["y"]["size"]
    (1.0, 2)
    """
    unions = task_unions(sets_by_task)
    ov = overlap(unions)
    sat = {t: saturation_curve(s, seed=seed, fraction=fraction) for t, s in sets_by_task.items()}
    core: dict[str, TaskCoreSet] = {}
    for t, s in sets_by_task.items():
        c = greedy_core_set(s, fraction=fraction)
        core[t] = {"size": c["size"], "n_samples": c["n_samples"], "total": c["total"], "covered": c["covered"],
                   "coverage": c["coverage"], "fraction": c["fraction"], "item_indices": c["indices"],
                   "n": c["n_samples"]}
    gains = marginal_gains(unions) if len(unions) > 1 else []
    return {"overlap": ov, "saturation": sat, "core_sets": core, "marginal_gain": gains,
            "fraction": fraction, "redundant_at": redundant_at, "seed": seed,
            "definitions": {"redundancy": "red(X, Y) = |U_X ∩ U_Y| / |U_X|, U_X = union of task X's key neurons",
                            "jaccard": "|U_X ∩ U_Y| / |U_X ∪ U_Y|",
                            "core_set": f"greedy maximum coverage until {_pct(fraction)} of U_X is covered",
                            "marginal_gain": "|U_X minus the union of the other tasks' key neurons|"}}
