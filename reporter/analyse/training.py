"""Training-phase diagnostics along checkpoints (Utility Law corollary 1).

Models carrying ``checkpoint:`` (``meta.checkpoint`` in results.json: a training step or a
token count) are ordered by it; each step between consecutive checkpoints gets
``dP = P_next - P_prev`` (percentage points) and ``dMUI = MUI_next - MUI_prev`` (MUI in %) and a
phase label (``PHASE_RULE``). A delta counts as zero when ``|dP| <= tol_p`` (default 0.5
percentage points) or ``|dMUI| <= tol_mui_rel * max(MUI_prev, MUI_next)`` (default 1% of the
larger MUI).

>>> r = training_phases([{"label": "s1", "checkpoint": 1000, "P": 20, "MUI": 8},
...                      {"label": "s2", "checkpoint": 2000, "P": 30, "MUI": 6},
...                      {"label": "s3", "checkpoint": 3000, "P": 25, "MUI": 7}])
>>> [s["phase"] for s in r["steps"]], r["collapse"]
(['evolving', 'collapsing'], True)
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence, TypedDict

import numpy as np

from .task_weights import task_shares

__all__ = ["PHASES", "PHASE_RULE", "phase_label", "step_interval", "training_phases", "TOL_P", "TOL_MUI_REL", "TrainingResult"]


#: one step between consecutive checkpoints and its phase (functional form: ``from`` is a keyword)
Step = TypedDict("Step", {"from": str, "to": str, "checkpoint_from": Any, "checkpoint_to": Any, "dP": float,
                          "dMUI": float, "phase": str, "dP_ci": list[float], "dP_within_noise": bool}, total=False)


class TaskPhases(TypedDict):
    """The steps of one task's checkpoint series."""

    steps: list[Step]
    collapse: bool


class SeriesPoint(TypedDict):
    """One checkpoint in the card's units (:class:`reporter.schema.TrainingPoint`), with the step into it."""

    model: str
    checkpoint: Any
    P: float
    MUI: float
    dP: float | None
    dP_ci: list[float] | None
    dMUI: float | None
    phase: str | None


class TrainingResult(TypedDict, total=False):
    """``analysis.training`` (:class:`reporter.schema.Training`) as :func:`training_phases` builds it."""

    rule: str
    tolerance: dict[str, float]
    series: list[dict[str, Any]]
    steps: list[Step]
    collapse: bool
    collapse_steps: list[str]
    per_task: dict[str, TaskPhases]
    notes: list[str]
    model_series: list[SeriesPoint]
    summary: str
    tasks: list[str]
    tasks_dropped: list[str]

TOL_P = 0.5  # percentage points
TOL_MUI_REL = 0.01  # share of the larger MUI of the two checkpoints

PHASES = ("evolving", "accumulating", "coarsening", "collapsing", "stable")

PHASE_RULE = (
    "Per step between consecutive checkpoints: P up & MUI down = evolving (better with less effort, healthy); "
    "P up & MUI up = accumulating (better by recruiting more neurons); P down & MUI down = coarsening (less "
    "effort, worse); P down & MUI up = collapsing (more effort, worse: flagged). A change within tolerance "
    f"(|dP| <= {TOL_P} percentage points; |dMUI| <= {TOL_MUI_REL:.0%} of the larger MUI) counts as flat: both flat "
    "= stable; P up & MUI flat or P flat & MUI down = evolving; P flat & MUI up = accumulating; P down & MUI "
    "flat = coarsening. With the items' outcomes (a run's samples), a score change whose 95% paired bootstrap "
    "interval (items resampled within each task, the tasks' mean changes averaged, an lm-eval group as one task) "
    "includes 0 is within the "
    "items' noise and counts as flat too.")

_TABLE = {(1, -1): "evolving", (1, 1): "accumulating", (-1, -1): "coarsening", (-1, 1): "collapsing",
          (0, 0): "stable", (1, 0): "evolving", (0, -1): "evolving", (0, 1): "accumulating", (-1, 0): "coarsening"}


def _sign(d: float, tol: float) -> int:
    return 0 if abs(d) <= tol else (1 if d > 0 else -1)


def phase_label(d_p: float, d_mui: float, *, mui_scale: float = 0.0, tol_p: float = TOL_P,
                tol_mui_rel: float = TOL_MUI_REL) -> str:
    """Phase of one step (see ``PHASE_RULE``); ``mui_scale`` = the larger MUI of the two checkpoints.

    >>> phase_label(5, -1, mui_scale=10), phase_label(-5, 1, mui_scale=10), phase_label(0.1, 0.05, mui_scale=10)
    ('evolving', 'collapsing', 'stable')
    """
    return _TABLE[(_sign(d_p, tol_p), _sign(d_mui, tol_mui_rel * abs(mui_scale)))]


#: item-level outcomes {label: {task: {item id: score}}}: the steps' score changes get a paired interval
Items = Mapping[str, Mapping[str, Mapping[str, float]]]


def step_interval(a: Mapping[str, Mapping[str, float]], b: Mapping[str, Mapping[str, float]], tasks: Sequence[str], *,
                  seed: int = 0, n_resamples: int = 2000, confidence: float = 0.95,
                  groups: Mapping[str, str] | None = None) -> tuple[float, float] | None:
    """Percentile CI (percentage points) of dP = mean over ``tasks`` of (B's mean - A's mean) on the items both answered
    (an lm-eval group's tasks, ``groups``: {task: group}, count as one task, shared as the group weighs them).

    A stratified paired bootstrap: per task, in ``tasks`` order, the items' differences B - A are resampled with
    replacement (``numpy.random.default_rng(seed).integers``, one (n_resamples, n_items) draw per task) and the
    task means averaged. None when a task has no shared item.

    >>> a = {"t": {"1": 0, "2": 0, "3": 1, "4": 0}}; b = {"t": {"1": 1, "2": 1, "3": 1, "4": 1}}
    >>> lo, hi = step_interval(a, b, ["t"], seed=0); lo > 0 and hi == 100.0
    True
    """
    rng = np.random.default_rng(seed)
    total = np.zeros(n_resamples)
    shared = {t: sorted(set(a.get(t) or {}) & set(b.get(t) or {})) for t in tasks}
    shares, units = task_shares(list(tasks), groups or {}, {t: len(ids) for t, ids in shared.items()})
    for t in tasks:
        ids = shared[t]
        if not ids:
            return None
        d = 100.0 * (np.array([b[t][i] for i in ids], np.float64) - np.array([a[t][i] for i in ids], np.float64))
        total += d[rng.integers(0, d.size, size=(n_resamples, d.size))].mean(axis=1) * shares[t]
    total /= max(1, units)
    q = 50 * (1 - confidence), 50 * (1 + confidence)
    return float(np.percentile(total, q[0])), float(np.percentile(total, q[1]))


def _steps(series: Sequence[dict], tol_p: float, tol_mui_rel: float, items: Items | None = None,
           tasks: Sequence[str] = (), seed: int = 0, groups: Mapping[str, str] | None = None) -> list[Step]:
    out: list[Step] = []
    for a, b in zip(series, series[1:]):
        d_p, d_m = b["P"] - a["P"], b["MUI"] - a["MUI"]
        ci = (step_interval(items.get(a["label"]) or {}, items.get(b["label"]) or {}, tasks, seed=seed, groups=groups)
              if items is not None and tasks else None)
        # a score change whose paired interval covers 0 is within the items' noise: it counts as flat
        noise = ci is not None and ci[0] <= 0 <= ci[1]
        step: Step = {"from": a["label"], "to": b["label"], "checkpoint_from": a["checkpoint"],
                      "checkpoint_to": b["checkpoint"], "dP": d_p, "dMUI": d_m,
                      "phase": phase_label(0.0 if noise else d_p, d_m, mui_scale=max(a["MUI"], b["MUI"]),
                                           tol_p=tol_p, tol_mui_rel=tol_mui_rel)}
        if ci is not None:
            step["dP_ci"] = [ci[0], ci[1]]
            step["dP_within_noise"] = noise
        out.append(step)
    return out


def training_phases(points: Sequence[dict], per_task: dict[str, Sequence[dict]] | None = None, *,
                    tol_p: float = TOL_P, tol_mui_rel: float = TOL_MUI_REL, items: Items | None = None,
                    tasks: Sequence[str] = (), seed: int = 0,
                    groups: Mapping[str, str] | None = None) -> TrainingResult | None:
    """Order checkpoints, label each step, flag collapse; None with fewer than 2 checkpoints.

    ``points``: one dict per checkpoint model with "label", "checkpoint", "P" (%), "MUI" (%)
    (the per-model averages); ``per_task``: {task: points} for the same analysis per task.
    Ties in ``checkpoint`` keep the label order and are reported in ``notes``. ``items`` ({label: {task: {id:
    score}}}) with ``tasks`` (the tasks the averages use) give each step a paired interval of dP
    (:func:`step_interval`); a change within it counts as flat (``PHASE_RULE``).

    >>> training_phases([{"label": "a", "checkpoint": 1, "P": 10, "MUI": 5},
    ...                  {"label": "b", "checkpoint": 2, "P": 30, "MUI": 6}])["steps"][0]["phase"]
    'accumulating'
    """
    series = sorted(points, key=lambda p: (float(p["checkpoint"]), str(p["label"])))
    if len(series) < 2:
        return None
    notes = []
    cps = [float(p["checkpoint"]) for p in series]
    if len(set(cps)) < len(cps):
        notes.append("several models share a checkpoint value; they are ordered by name")
    steps = _steps(series, tol_p, tol_mui_rel, items, tasks, seed, groups)
    out: TrainingResult = {"rule": PHASE_RULE, "tolerance": {"P_points": tol_p, "MUI_relative": tol_mui_rel},
           "series": [{k: p[k] for k in ("label", "checkpoint", "P", "MUI")} for p in series], "steps": steps,
           "collapse": any(s["phase"] == "collapsing" for s in steps),
           "collapse_steps": [f"{s['from']} -> {s['to']}" for s in steps if s["phase"] == "collapsing"],
           "per_task": {}, "notes": notes}
    for task, pts in (per_task or {}).items():
        ts = sorted(pts, key=lambda p: (float(p["checkpoint"]), str(p["label"])))
        if len(ts) >= 2:
            st = _steps(ts, tol_p, tol_mui_rel, items, [task] if items is not None else (), seed)
            out["per_task"][task] = {"steps": st, "collapse": any(s["phase"] == "collapsing" for s in st)}
    # the same series in the card's units (score and dP as fractions, MUI in %), phase of the step INTO each point
    out["model_series"] = [{"model": p["label"], "checkpoint": p["checkpoint"], "P": p["P"] / 100.0, "MUI": p["MUI"],
                            "dP": None if k == 0 else steps[k - 1]["dP"] / 100.0,
                            "dP_ci": None if k == 0 or "dP_ci" not in steps[k - 1]
                            else [v / 100.0 for v in steps[k - 1]["dP_ci"]],
                            "dMUI": None if k == 0 else steps[k - 1]["dMUI"],
                            "phase": None if k == 0 else steps[k - 1]["phase"]} for k, p in enumerate(series)]
    counts = {ph: sum(s["phase"] == ph for s in steps) for ph in PHASES}
    desc = ", ".join(f"{n} {ph}" for ph, n in counts.items() if n)
    noisy = [s for s in steps if s.get("dP_within_noise")]
    if any("dP_ci" in s for s in steps):
        desc += (f" ({len(noisy)} of {len(steps)} score changes within the items' noise, read as flat)" if noisy
                 else " (every score change outside the items' noise)")
    out["summary"] = (f"{len(series)} checkpoints, {len(steps)} steps: {desc}."
                      + (f" Collapse (performance down while effort rises) at {', '.join(out['collapse_steps'])}."
                         if out["collapse"] else " No collapse."))
    return out
