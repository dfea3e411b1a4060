"""Dataset-diversity advice for one model: at most five decisions, each with evidence and uncertainty.

The tables of the card hold the mechanical facts (overlap, saturation, core sets). Advice is a
decision a reader can take, and it is only given when the evidence can carry it:

* **drop X** — X's key neurons are largely also activated by Y (``red(X, Y) >= 80%``, its 95%
  bootstrap CI above 70%), and both unions are saturated: X adds little coverage;
* **keep X** — X alone activates a sizeable share of its key neurons (``>= 20%``, 95% CI above
  10%): no other task covers them;
* **add items to X** — X's key-neuron union is still growing at the end of the task: after 80%
  of the items it has under 95% of its final size, in at least 90% of 20 random item orders
  (saturated: at least 95% in 90% of the orders; in between, no advice on X);
* **evaluate only the core set of X** — X is saturated, the pooled core set
  (:mod:`reporter.analyse.coreset`) has at most half of the items, and the model's core-set
  score reproduces its full score within ±5 points (the 95% CI of the difference inside).

Ranked by impact (the share of the model's evaluated items a decision saves, the share of all
key neurons a kept task holds alone, or the share of a task's key neurons its last items still
add) and capped at :data:`MAX_ADVICE`. Advice is withheld, with a one-line reason, for tasks
with fewer than :data:`MIN_ADVICE_ITEMS` items (on few items a small subset covers most of the
union by construction), tasks with no key neurons at all (empty responses), and unsaturated
unions (for drop and core-set advice). CIs resample each task's items (:data:`ADVICE_RESAMPLES`
resamples, seeded).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a = [rng.choice(12, 5, replace=False) for _ in range(30)]
>>> d = advise("m", {"A": a, "A copy": [s.copy() for s in a]}, seed=0)
>>> [x["action"] for x in d["advice"]], d["withheld"]
(['drop'], [])
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from .diversity import COVERAGE_FRACTION, REDUNDANT_AT, _curve, task_unions

__all__ = ["advise", "MIN_ADVICE_ITEMS", "MAX_ADVICE", "SATURATED_BY", "ADVICE_RULES"]

MIN_ADVICE_ITEMS = 20
MAX_ADVICE = 5
SATURATED_BY = 0.8  # saturated: the first 80% of the items reach 95% of the union
REDUNDANT_LOW = 0.7  # the lower CI bound a drop needs
UNIQUE_AT, UNIQUE_LOW = 0.2, 0.1
CORE_MAX_SHARE = 0.5
CORE_TOLERANCE = 0.05
ADVICE_RESAMPLES = 200
_ORDERS = 20  # random orders for the spread of the growth figure

ADVICE_RULES = (
    f"At most {MAX_ADVICE} decisions per model, by impact; none for tasks with fewer than {MIN_ADVICE_ITEMS} items "
    "or no key neurons. Drop X: red(X, Y) >= 80% with its 95% CI above 70%, both unions saturated. Keep X: >= 20% of "
    "X's key neurons are X's alone (95% CI above 10%). Add items to X: after 80% of X's items the union is below 95% "
    "of its final size in 90% of 20 random item orders (saturated: at or above it in 90%). Core set of X: X saturated, the pooled core set <= half the items, and the "
    "model's core-set score within ±5 points of its full score (95% CI). CIs: item bootstrap, "
    f"{ADVICE_RESAMPLES} resamples.")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _ci(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = np.percentile(np.asarray(values, dtype=np.float64), [2.5, 97.5])
    return float(lo), float(hi)


def _resampled_unions(sets_by_task: Mapping[str, Sequence[np.ndarray]], rng: np.random.Generator
                      ) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(ADVICE_RESAMPLES):
        out.append(task_unions({t: [sets[i] for i in rng.integers(0, len(sets), len(sets))] if len(sets) else []
                                for t, sets in sets_by_task.items()}))
    return out


def _growth(sets: Sequence[np.ndarray], seed: int) -> tuple[float, float, float]:
    """Share of the final union first reached by the last 20% of the items, over random item orders:
    the median, the 10th and the 90th percentile.
    """
    n = len(sets)
    k = int(math.ceil(SATURATED_BY * n))
    vals = []
    for s in range(_ORDERS):
        full = _curve(sets, np.random.default_rng(seed + s).permutation(n))
        vals.append(1 - full[k] / full[-1] if full[-1] else 0.0)
    lo, mid, hi = np.percentile(vals, [10, 50, 90])
    return float(mid), float(lo), float(hi)


def advise(model: str, sets_by_task: Mapping[str, Sequence[np.ndarray]], *, seed: int = 0,
           core: Mapping[str, Mapping[str, Any]] | None = None,
           reproduction: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Advice for ``model`` from its per-item key-neuron sets: ``{"advice": [...], "withheld": [...]}``.

    ``core[task]`` is the pooled core set (``{"size", "n", ...}``) and ``reproduction[task]`` this
    model's core-set reproduction row (``{"diff", "ci_low", "ci_high"}``); without them no core-set
    advice is given. Each advice is ``{"action", "task", "text", "evidence", "uncertainty", "impact"}``.
    """
    core, reproduction = core or {}, reproduction or {}
    unions = task_unions(sets_by_task)
    sizes = {t: len(s) for t, s in sets_by_task.items()}
    total_items = sum(sizes.values()) or 1
    everything = np.unique(np.concatenate(list(unions.values()))) if unions else np.zeros(0, np.int64)
    empty = [t for t in sets_by_task if unions[t].size == 0]
    few = [t for t in sets_by_task if unions[t].size and sizes[t] < MIN_ADVICE_ITEMS]
    eligible = [t for t in sets_by_task if unions[t].size and sizes[t] >= MIN_ADVICE_ITEMS]
    withheld = []
    if few:
        withheld.append(f"fewer than {MIN_ADVICE_ITEMS} items, so no advice on: "
                        + ", ".join(f"{t} ({sizes[t]})" for t in few)
                        + " (on few items a small subset covers most key neurons by construction)")
    if empty:
        withheld.append("no key neurons at all (empty responses?), so no advice on: " + ", ".join(empty))
    rng = np.random.default_rng(seed)
    boot = _resampled_unions(sets_by_task, rng) if eligible else []
    growth = {t: _growth(sets_by_task[t], seed) for t in eligible}
    limit = 1 - COVERAGE_FRACTION
    saturated = {t: growth[t][2] < limit - 1e-12 for t in eligible}  # in 90% of orders
    cands: list[dict[str, Any]] = []
    unclear = []
    for t in eligible:
        g, lo, hi = growth[t]
        if lo >= limit - 1e-12:  # still growing in 90% of orders
            cands.append({"action": "add", "task": t, "impact": g,
                          "text": f"Add items to {t}: its last 20% of items still added {_pct(g)} of the key neurons "
                                  f"it activates in {model}, so more items would widen what it tests.",
                          "evidence": f"union after 80% of the {sizes[t]} items: {_pct(1 - g)} of its final size "
                                      f"(median over {_ORDERS} random item orders)",
                          "uncertainty": f"10th–90th percentile over the orders: {_pct(lo)}–{_pct(hi)} added"})
        elif not saturated[t]:
            unclear.append(f"{t} ({_pct(lo)}–{_pct(hi)})")
    if unclear:
        withheld.append("saturation unclear (the last 20% of the items add this much of the key neurons, 10th–90th "
                        "percentile over item orders), so no add, drop or core-set advice on: " + ", ".join(unclear))
    growing = [t for t in eligible if growth[t][1] >= limit - 1e-12]
    if growing:
        withheld.append("key-neuron union still growing, so no drop or core-set advice on: " + ", ".join(growing))
    sat = [t for t in eligible if saturated[t]]
    for x in sat:
        for y in sat:
            if x == y:
                continue
            red = np.intersect1d(unions[x], unions[y]).size / unions[x].size
            if red < REDUNDANT_AT:
                continue
            reds = [np.intersect1d(b[x], b[y]).size / b[x].size if b[x].size else 0.0 for b in boot]
            lo, hi = _ci(reds)
            if lo < REDUNDANT_LOW:
                withheld.append(f"{x} looks redundant with {y} ({_pct(red)}), but its 95% CI reaches down to "
                                f"{_pct(lo)}: not enough to drop it")
                continue
            only = np.setdiff1d(unions[x], np.unique(np.concatenate([unions[o] for o in unions if o != x]))).size
            cands.append({"action": "drop", "task": x, "keep": y, "impact": sizes[x] / total_items,
                          "text": f"Drop {x} for {model}: {y} already activates {_pct(red)} of its key neurons; "
                                  f"dropping it saves {sizes[x]} of {total_items} items.",
                          "evidence": f"redundancy red({x}, {y}) = {_pct(red)}; {only} key neurons are {x}'s alone",
                          "uncertainty": f"95% CI of the redundancy {_pct(lo)}–{_pct(hi)}"})
    if len(unions) > 1:
        for t in eligible:
            rest = np.unique(np.concatenate([unions[o] for o in unions if o != t]))
            only = np.setdiff1d(unions[t], rest).size
            share = only / unions[t].size
            if share < UNIQUE_AT:
                continue
            shares = []
            for b in boot:
                r = np.unique(np.concatenate([b[o] for o in b if o != t]))
                shares.append(np.setdiff1d(b[t], r).size / b[t].size if b[t].size else 0.0)
            lo, hi = _ci(shares)
            if lo < UNIQUE_LOW:
                continue
            cands.append({"action": "keep", "task": t, "impact": only / everything.size,
                          "text": f"Keep {t} for {model}: {_pct(share)} of its key neurons ({only}) are activated by "
                                  "no other task in the suite.",
                          "evidence": f"unique coverage {only} of {unions[t].size} key neurons "
                                      f"({_pct(only / everything.size)} of all tasks' key neurons)",
                          "uncertainty": f"95% CI of the unique share {_pct(lo)}–{_pct(hi)}"})
    for t in sat:
        cs, rp = core.get(t), reproduction.get(t)
        if not cs or not rp or rp.get("diff") is None or cs["size"] > CORE_MAX_SHARE * cs["n"]:
            continue
        if rp["ci_low"] < -CORE_TOLERANCE or rp["ci_high"] > CORE_TOLERANCE:
            withheld.append(f"core set of {t} ({cs['size']} of {cs['n']} items): {model}'s score on it could differ "
                            f"from the full task by {100 * rp['ci_low']:+.0f} to {100 * rp['ci_high']:+.0f} points "
                            "(95% CI), too much to replace the task")
            continue
        cands.append({"action": "core set", "task": t, "impact": (cs["n"] - cs["size"]) / total_items,
                      "text": f"Evaluate only the core set of {t} ({cs['size']} of {cs['n']} items, coreset.json): "
                              f"it covers {_pct(cs['coverage'])} of the pooled key neurons and reproduces {model}'s "
                              "score.",
                      "evidence": f"core-set score − full score = {100 * rp['diff']:+.1f} points",
                      "uncertainty": f"95% CI {100 * rp['ci_low']:+.1f} to {100 * rp['ci_high']:+.1f} points"})
    chosen: list[dict[str, Any]] = []
    dropped: set[str] = set()
    kept = {c["task"] for c in cands if c["action"] == "keep"}
    for c in sorted(cands, key=lambda c: (-c["impact"], c["action"], c["task"])):
        if c["action"] == "drop" and (c["task"] in dropped or c["keep"] in dropped or c["task"] in kept):
            continue
        if c["action"] in ("drop", "core set") and c["task"] in dropped:
            continue
        if c["action"] == "drop":
            dropped.add(c["task"])
        chosen.append(c)
    if len(chosen) > MAX_ADVICE:
        withheld.append(f"{len(chosen) - MAX_ADVICE} further decision(s) of lower impact left out (at most "
                        f"{MAX_ADVICE} per model)")
    return {"advice": chosen[:MAX_ADVICE], "withheld": withheld, "min_items": MIN_ADVICE_ITEMS,
            "rules": ADVICE_RULES}
