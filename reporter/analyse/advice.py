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
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypedDict

import numpy as np

from ..schema import Advice
from .diversity import COVERAGE_FRACTION, REDUNDANT_AT, _curve, task_unions

__all__ = ["advise", "AdviceResult", "MIN_ADVICE_ITEMS", "MAX_ADVICE", "SATURATED_BY", "ADVICE_RULES"]

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


class AdviceResult(TypedDict):
    """What :func:`advise` returns (merged into the model's :class:`reporter.schema.Diversity` entry)."""

    advice: list[Advice]
    withheld: list[str]
    min_items: int
    rules: str


@dataclass(frozen=True)
class _Facts:
    """What the rules read: one model's key-neuron sets, their unions, growth over item orders and bootstrap unions."""

    model: str
    sets_by_task: Mapping[str, Sequence[np.ndarray]]
    unions: dict[str, np.ndarray]
    sizes: dict[str, int]
    total_items: int
    everything: np.ndarray
    empty: list[str]
    few: list[str]
    eligible: list[str]
    boot: list[dict[str, np.ndarray]]
    growth: dict[str, tuple[float, float, float]]
    saturated: dict[str, bool]

    @property
    def limit(self) -> float:
        """The growth share at which a union counts as still growing (1 - COVERAGE_FRACTION)."""
        return 1 - COVERAGE_FRACTION

    @property
    def sat(self) -> list[str]:
        """The eligible tasks whose union is saturated (in 90% of the item orders)."""
        return [t for t in self.eligible if self.saturated[t]]


def _facts(model: str, sets_by_task: Mapping[str, Sequence[np.ndarray]], seed: int) -> _Facts:
    """Unions, sizes, eligibility (>= MIN_ADVICE_ITEMS items and a non-empty union), growth and bootstrap unions."""
    unions = task_unions(sets_by_task)
    sizes = {t: len(s) for t, s in sets_by_task.items()}
    everything = np.unique(np.concatenate(list(unions.values()))) if unions else np.zeros(0, np.int64)
    eligible = [t for t in sets_by_task if unions[t].size and sizes[t] >= MIN_ADVICE_ITEMS]
    rng = np.random.default_rng(seed)
    boot = _resampled_unions(sets_by_task, rng) if eligible else []
    growth = {t: _growth(sets_by_task[t], seed) for t in eligible}
    limit = 1 - COVERAGE_FRACTION
    return _Facts(model=model, sets_by_task=sets_by_task, unions=unions, sizes=sizes,
                  total_items=sum(sizes.values()) or 1, everything=everything,
                  empty=[t for t in sets_by_task if unions[t].size == 0],
                  few=[t for t in sets_by_task if unions[t].size and sizes[t] < MIN_ADVICE_ITEMS],
                  eligible=eligible, boot=boot, growth=growth,
                  saturated={t: growth[t][2] < limit - 1e-12 for t in eligible})  # in 90% of orders


def _too_little_evidence(f: _Facts) -> list[str]:
    """No advice on a task with fewer than MIN_ADVICE_ITEMS items, or with no key neurons at all."""
    withheld = []
    if f.few:
        withheld.append(f"fewer than {MIN_ADVICE_ITEMS} items, so no advice on: "
                        + ", ".join(f"{t} ({f.sizes[t]})" for t in f.few)
                        + " (too few to tell a union of key neurons that has saturated from one still growing)")
    if f.empty:
        withheld.append("no key neurons at all (empty responses?), so no advice on: " + ", ".join(f.empty))
    return withheld


def _add_rule(f: _Facts) -> tuple[list[Advice], list[str]]:
    """Add items to X: the union is still growing (the last 20% of the items add at least 5% of it) in 90% of
    the item orders; where it is neither growing nor saturated, saturation is unclear and no advice is given.
    """
    cands: list[Advice] = []
    unclear = []
    for t in f.eligible:
        g, lo, hi = f.growth[t]
        if lo >= f.limit - 1e-12:  # still growing in 90% of orders
            cands.append({"action": "add", "task": t, "impact": g,
                          "text": f"Add items to {t}: its last 20% of items still added {_pct(g)} of the key neurons "
                                  f"it activates in {f.model}, so more items would widen what it tests.",
                          "evidence": f"union after 80% of the {f.sizes[t]} items: {_pct(1 - g)} of its final size "
                                      f"(median over {_ORDERS} random item orders)",
                          "uncertainty": f"10th–90th percentile over the orders: {_pct(lo)}–{_pct(hi)} added"})
        elif not f.saturated[t]:
            unclear.append(f"{t} ({_pct(lo)}–{_pct(hi)})")
    withheld = []
    if unclear:
        withheld.append("saturation unclear (the last 20% of the items add this much of the key neurons, 10th–90th "
                        "percentile over item orders), so no add, drop or core-set advice on: " + ", ".join(unclear))
    return cands, withheld


def _still_growing(f: _Facts) -> list[str]:
    """No drop or core-set advice on a task whose key-neuron union is still growing."""
    growing = [t for t in f.eligible if f.growth[t][1] >= f.limit - 1e-12]
    return ["key-neuron union still growing, so no drop or core-set advice on: " + ", ".join(growing)] if growing else []


def _drop_rule(f: _Facts) -> tuple[list[Advice], list[str]]:
    """Drop X for Y: red(X, Y) >= REDUNDANT_AT with its 95% bootstrap CI above REDUNDANT_LOW, both unions saturated."""
    cands: list[Advice] = []
    withheld = []
    unions = f.unions
    for x in f.sat:
        for y in f.sat:
            if x == y:
                continue
            red = np.intersect1d(unions[x], unions[y]).size / unions[x].size
            if red < REDUNDANT_AT:
                continue
            reds = [np.intersect1d(b[x], b[y]).size / b[x].size if b[x].size else 0.0 for b in f.boot]
            lo, hi = _ci(reds)
            if lo < REDUNDANT_LOW:
                withheld.append(f"{x} looks redundant with {y} ({_pct(red)}), but its 95% CI reaches down to "
                                f"{_pct(lo)}: not enough to drop it")
                continue
            only = np.setdiff1d(unions[x], np.unique(np.concatenate([unions[o] for o in unions if o != x]))).size
            cands.append({"action": "drop", "task": x, "keep": y, "impact": f.sizes[x] / f.total_items,
                          "text": f"Drop {x} for {f.model}: {y} already activates {_pct(red)} of its key neurons; "
                                  f"dropping it saves {f.sizes[x]} of {f.total_items} items.",
                          "evidence": f"redundancy red({x}, {y}) = {_pct(red)}; {only} key neurons are {x}'s alone",
                          "uncertainty": f"95% CI of the redundancy {_pct(lo)}–{_pct(hi)}"})
    return cands, withheld


def _keep_rule(f: _Facts) -> list[Advice]:
    """Keep X: at least UNIQUE_AT of X's key neurons are X's alone, with the 95% CI of that share above UNIQUE_LOW."""
    cands: list[Advice] = []
    unions = f.unions
    if len(unions) <= 1:
        return cands
    for t in f.eligible:
        rest = np.unique(np.concatenate([unions[o] for o in unions if o != t]))
        only = np.setdiff1d(unions[t], rest).size
        share = only / unions[t].size
        if share < UNIQUE_AT:
            continue
        shares = []
        for b in f.boot:
            r = np.unique(np.concatenate([b[o] for o in b if o != t]))
            shares.append(np.setdiff1d(b[t], r).size / b[t].size if b[t].size else 0.0)
        lo, hi = _ci(shares)
        if lo < UNIQUE_LOW:
            continue
        cands.append({"action": "keep", "task": t, "impact": only / f.everything.size,
                      "text": f"Keep {t} for {f.model}: {_pct(share)} of its key neurons ({only}) are activated by "
                              "no other task in the suite.",
                      "evidence": f"unique coverage {only} of {unions[t].size} key neurons "
                                  f"({_pct(only / f.everything.size)} of all tasks' key neurons)",
                      "uncertainty": f"95% CI of the unique share {_pct(lo)}–{_pct(hi)}"})
    return cands


def _core_set_rule(f: _Facts, core: Mapping[str, Mapping[str, Any]],
                   reproduction: Mapping[str, Mapping[str, Any]]) -> tuple[list[Advice], list[str]]:
    """Evaluate only the core set of X: X saturated, the pooled core set at most CORE_MAX_SHARE of the items, and
    the 95% CI of the model's core-set score minus its full score inside ±CORE_TOLERANCE.
    """
    cands: list[Advice] = []
    withheld = []
    for t in f.sat:
        cs, rp = core.get(t), reproduction.get(t)
        if not cs or not rp or rp.get("diff") is None or cs["size"] > CORE_MAX_SHARE * cs["n"]:
            continue
        if rp["ci_low"] < -CORE_TOLERANCE or rp["ci_high"] > CORE_TOLERANCE:
            withheld.append(f"core set of {t} ({cs['size']} of {cs['n']} items): {f.model}'s score on it could differ "
                            f"from the full task by {100 * rp['ci_low']:+.0f} to {100 * rp['ci_high']:+.0f} points "
                            "(95% CI), too much to replace the task")
            continue
        cands.append({"action": "core set", "task": t, "impact": (cs["n"] - cs["size"]) / f.total_items,
                      "text": f"Evaluate only the core set of {t} ({cs['size']} of {cs['n']} items, coreset.json): "
                              f"it covers {_pct(cs['coverage'])} of the pooled key neurons and reproduces {f.model}'s "
                              "score.",
                      "evidence": f"core-set score − full score = {100 * rp['diff']:+.1f} points",
                      "uncertainty": f"95% CI {100 * rp['ci_low']:+.1f} to {100 * rp['ci_high']:+.1f} points"})
    return cands, withheld


def _choose(cands: Sequence[Advice]) -> list[Advice]:
    """By impact (then action, task): a drop is skipped when either task is already dropped or the task is kept,
    and a core set is skipped for a dropped task.
    """
    chosen: list[Advice] = []
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
    return chosen


def _cap(chosen: Sequence[Advice]) -> list[str]:
    """At most MAX_ADVICE decisions per model; the rest are left out, and that is said."""
    if len(chosen) > MAX_ADVICE:
        return [f"{len(chosen) - MAX_ADVICE} further decision(s) of lower impact left out (at most "
                f"{MAX_ADVICE} per model)"]
    return []


def advise(model: str, sets_by_task: Mapping[str, Sequence[np.ndarray]], *, seed: int = 0,
           core: Mapping[str, Mapping[str, Any]] | None = None,
           reproduction: Mapping[str, Mapping[str, Any]] | None = None) -> AdviceResult:
    """Advice for ``model`` from its per-item key-neuron sets: ``{"advice": [...], "withheld": [...]}``.

    ``core[task]`` is the pooled core set (``{"size", "n", ...}``) and ``reproduction[task]`` this
    model's core-set reproduction row (``{"diff", "ci_low", "ci_high"}``); without them no core-set
    advice is given. Each advice is ``{"action", "task", "text", "evidence", "uncertainty", "impact"}``.
    The rules are the functions above, applied in this order (the order of ``withheld``).
    """
    f = _facts(model, sets_by_task, seed)
    withheld = _too_little_evidence(f)
    add, unclear = _add_rule(f)
    drop, not_redundant = _drop_rule(f)
    keep = _keep_rule(f)
    core_set, not_reproduced = _core_set_rule(f, core or {}, reproduction or {})
    withheld += unclear + _still_growing(f) + not_redundant + not_reproduced
    chosen = _choose(add + drop + keep + core_set)
    withheld += _cap(chosen)
    return {"advice": chosen[:MAX_ADVICE], "withheld": withheld, "min_items": MIN_ADVICE_ITEMS,
            "rules": ADVICE_RULES}
