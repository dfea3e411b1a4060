"""The Utility Law's points from ``results.json``, its fits, and what they leave out.

The law (``MUI = a + b * ln P``) compares trained models: every model x task with a finite
score and MUI is a point, untrained baselines are reference rows (never points) and the LPP
probes are never points. Models that are the same weights by content (equal ``meta.identity``:
another name, dtype or run of one model) are one model, so one point (:func:`one_point_per_weights`).
One fit never mixes MUI definitions. :func:`law_and_fairness` gives a
run's (or a board's) law section, its per-task fits (the contamination residual's input) and the
law-adjusted fairness; :func:`training_section` the training-phase view of checkpoints.

>>> res = {"models": {"a": {"tasks": {"arc_easy": {"score": 0.5, "mui": 1.2}, "spc": {"score": 0.3, "mui": 1.0}}},
...                   "b": {"tasks": {"arc_easy": {"score": 0.4}}}}}
>>> pts, baselines, left_out = law_points(res)  # spc is an LPP probe: never a point
>>> pts["a"]["arc_easy"]["P"], pts["a"]["arc_easy"]["MUI"], list(pts), [r["reason"] for r in left_out]
(50.0, 1.2, ['a'], ['no MUI measured (mui disabled?)'])
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, NamedTuple, Sequence, TypedDict

import numpy as np

from ..metrics.mui import LEGACY_DEFINITION
from ..schema import is_untrained
from ..tasks import is_probe
from .fairness import FairnessResult, fairness
from .law import MIN_POINTS, FitDescription, LawFit, describe_fit, fit_points
from .leaderboard import PerItem
from .signals import SignalResult, law_residual_signal
from .task_weights import grouping, task_shares, weighted_mean
from .training import TrainingResult, training_phases

__all__ = ["LawAndFairness", "LawSection", "MUI_SETTINGS", "Points", "averages", "finite", "law_and_fairness",
           "law_points", "law_section", "law_signal", "one_definition", "one_point_per_weights", "settings_differ",
           "strip_settings", "training_section"]

#: the MUI settings a law point records; points of one task at different settings are not comparable
MUI_SETTINGS = ("definition", "mode", "top_ratio", "rho", "n_samples")


class LawSection(TypedDict, total=False):
    """``analysis.law`` and ``analysis.law_sae`` (:class:`reporter.schema.Law`): the fits and what they leave out."""

    pooled: FitDescription
    per_task: dict[str, FitDescription]
    per_model_average: FitDescription
    excluded: list[dict[str, Any]]
    notes: list[str]
    left_out: list[dict[str, Any]]


def finite(v: Any) -> bool:
    """A real, finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


Points = dict[str, dict[str, dict[str, Any]]]  # {model: {task: point}}


def law_points(results: dict[str, Any], key: str = "mui", settings_key: str = "mui_settings",
            settings: Sequence[str] = MUI_SETTINGS) -> tuple[Points, Points, list[dict[str, Any]]]:
    """{model: {task: point}} for law models and for baselines, plus rows left out and why.

    ``key`` is the effort measure: ``mui`` (neurons) or ``mui_sae`` (SAE features). Copies of one model's weights
    (equal ``meta.identity``) give one model's points (:func:`one_point_per_weights`).
    """
    law: Points = {}
    base: Points = {}
    left_out: list[dict[str, Any]] = []
    for name, e in (results.get("models") or {}).items():
        target = base if is_untrained(e) else law
        for task, s in (e.get("tasks") or {}).items():
            if is_probe(task):  # synthetic LPP probes are not benchmarks: never points of the law
                continue
            if not finite(s.get("score")):
                left_out.append({"model": name, "task": task, "reason": "no score"})
                continue
            if not finite(s.get(key)):
                left_out.append({"model": name, "task": task, "reason": "no MUI measured (mui disabled?)" if key == "mui"
                                 else "no MUI over SAE features measured (mui.unit is not sae or both)"})
                continue
            target.setdefault(name, {})[task] = {"label": name, "model": name, "task": task,
                                                 "P": 100.0 * float(s["score"]), "MUI": float(s[key]),
                                                 "settings": {k: (s.get(settings_key) or {}).get(k) for k in settings}}
        if target is base:
            left_out.append({"model": name, "task": None,
                             "reason": "untrained baseline: a reference row, never a point of the law"})
    identities = {name: (e.get("meta") or {}).get("identity") for name, e in (results.get("models") or {}).items()}
    one_point_per_weights(law, identities, left_out)
    return law, base, left_out


def _short_identity(identity: str) -> str:
    """An identity with its long hashes cut to 12 digits (``packaged:NAME:b179c9523d0e…``)."""
    return re.sub(r"([0-9a-f]{12})[0-9a-f]{4,}", r"\1…", identity)


def one_point_per_weights(law: Points, identities: dict[str, Any], left_out: list[dict[str, Any]]) -> None:
    """Keep one model's points per set of weights: models with the same content identity (``meta.identity``: the
    same weights under another name, dtype or run) are one model, and the law is fitted across models, so counting
    each copy would fit the law to one model's points (a perfect R² from two points). The copy with the most points
    (the first of those) keeps its points and lists the others under ``same_weights``; the others' points are left
    out, saying whose they are; a copy's point on a task the kept one lacks becomes the kept one's (``measured_as``
    the copy). Models without an identity are never merged.

    >>> law = {m: {"t": {"label": m, "model": m, "task": "t", "P": p, "MUI": 2.0, "settings": {}}}
    ...        for m, p in (("acme", 40.0), ("vendor", 41.0), ("other", 60.0))}
    >>> left: list[dict] = []
    >>> one_point_per_weights(law, {"acme": "local:ab", "vendor": "local:ab", "other": "local:cd"}, left)
    >>> sorted(law), law["acme"]["t"]["same_weights"], left[0]["model"]
    (['acme', 'other'], ['vendor'], 'vendor')
    >>> law = {"acme": {"t1": {"label": "acme", "model": "acme", "task": "t1", "P": 40.0, "MUI": 2.0}},
    ...        "vendor": {"t3": {"label": "vendor", "model": "vendor", "task": "t3", "P": 30.0, "MUI": 3.0}}}
    >>> one_point_per_weights(law, {"acme": "local:ab", "vendor": "local:ab"}, [])
    >>> sorted(law), sorted(law["acme"]), law["acme"]["t3"]["measured_as"]
    (['acme'], ['t1', 't3'], 'vendor')
    """
    groups: dict[str, list[str]] = {}
    for model, ts in law.items():
        ident = identities.get(model)
        if ts and isinstance(ident, str) and ident:
            groups.setdefault(ident, []).append(model)
    for ident, models in groups.items():
        if len(models) < 2:
            continue
        keep = max(models, key=lambda m: (len(law[m]), -models.index(m)))
        copies = [m for m in models if m != keep]
        for p in law[keep].values():
            p["same_weights"] = list(copies)
        for m in copies:
            for task, point in law[m].items():
                if task not in law[keep]:  # the same weights measured on a task only this copy ran: the model's point
                    law[keep][task] = {**point, "label": keep, "model": keep, "measured_as": m,
                                       "same_weights": list(copies)}
                    continue
                left_out.append({"model": m, "task": task, "same_weights_as": keep,
                                 "reason": f"the same weights as {keep} (meta.identity {_short_identity(ident)}): one "
                                           f"model is one point of the law, {keep}'s"})
            del law[m]


def one_definition(law: Points, left_out: list[dict[str, Any]]) -> None:
    """Keep the law points of one MUI definition (the most common; runs recorded before definitions
    were named used ``contribution``): a law fit never mixes definitions.
    """
    def definition(p: dict[str, Any]) -> str:
        return p["settings"].get("definition") or LEGACY_DEFINITION
    counts: dict[str, int] = {}
    for ts in law.values():
        for p in ts.values():
            counts[definition(p)] = counts.get(definition(p), 0) + 1
    if len(counts) < 2:
        return
    keep = max(sorted(counts), key=lambda d: (counts[d], d == "paper"))
    for model in list(law):
        for task, p in list(law[model].items()):
            if definition(p) != keep:
                left_out.append({"model": model, "task": task, "reason": f"MUI definition '{definition(p)}' differs "
                                 f"from the run's '{keep}': a law fit never mixes definitions"})
                del law[model][task]
        if not law[model]:
            del law[model]


def averages(by_model: dict[str, dict[str, dict]], groups: Mapping[str, str] | None = None,
             sizes: Mapping[str, int] | None = None) -> tuple[list[dict], list[str], list[str]]:
    """Per-model averages over the tasks every model has; (points, tasks used, tasks dropped). An lm-eval group's
    tasks (``groups``: {task: group}) count as one task, shared as the group weighs them (``sizes``;
    :mod:`reporter.analyse.task_weights`).
    """
    models = [m for m, t in by_model.items() if t]
    if not models:
        return [], [], []
    all_tasks = sorted({t for m in models for t in by_model[m]})
    common = [t for t in all_tasks if all(t in by_model[m] for m in models)]
    shares, units = task_shares(common, groups or {}, sizes or {})
    pts = []
    for m in models:
        if common:
            copies = next((p["same_weights"] for p in by_model[m].values() if p.get("same_weights")), None)
            pts.append({"label": m, "model": m,
                        "P": weighted_mean({t: by_model[m][t]["P"] for t in common}, shares, units),
                        "MUI": weighted_mean({t: by_model[m][t]["MUI"] for t in common}, shares, units),
                        "n_tasks": len(common),
                        **({"same_weights": list(copies)} if copies else {})})
    return pts, common, [t for t in all_tasks if t not in common]


def strip_settings(p: dict) -> dict:
    """A law point without its ``settings`` (what a fit and the card show)."""
    return {k: v for k, v in p.items() if k != "settings"}


def _merged(points: Sequence[dict[str, Any]]) -> str:
    """``; <who stands for whom>`` where points of ``points`` stand for copies of their weights, else ``""``."""
    said = [f"{p['model']} for {', '.join(p['same_weights'])}" for p in points if p.get("same_weights")]
    return (f"; copies of the same weights are one model ({'; '.join(dict.fromkeys(said))})" if said else "")


def settings_differ(by_model: dict[str, dict[str, Any]], limit: int = 160) -> list[str]:
    """The MUI settings that differ between models, each with its values and the models that have them
    (``by_model``: {model: {setting: value}}); where the models do not fit in ``limit`` characters, how many
    models have each value.

    >>> settings_differ({"base-model": {"mode": "score", "n_samples": 7}, "SmolLM2": {"mode": "score", "n_samples": 8}})
    ['n_samples: 7 (base-model) vs 8 (SmolLM2)']
    """
    keys = list(dict.fromkeys(k for s in by_model.values() for k in s))
    out = []
    for k in keys:
        values: dict[str, list[str]] = {}
        for m, s in by_model.items():
            values.setdefault(str(s.get(k)), []).append(m)
        if len(values) < 2:
            continue
        text = f"{k}: " + " vs ".join(f"{v} ({', '.join(ms)})" for v, ms in values.items())
        if len(text) > limit:
            text = f"{k}: " + " vs ".join(f"{v} ({len(ms)} model{'s' * (len(ms) != 1)})" for v, ms in values.items())
        out.append(text)
    return out


def law_section(law_pts: dict, seed: int, n_resamples: int, groups: Mapping[str, str] | None = None,
                sizes: Mapping[str, int] | None = None) -> tuple[LawSection, dict, list[dict]]:
    """The law section, the per-task LawFit objects, and the per-model average points.

    ``law_pts``: {model: {task: point}} (:func:`law_points`); a fit of fewer than ``MIN_POINTS`` models is withheld
    with the reason, which names the copies of one model's weights that counted once. ``groups`` and ``sizes``
    weigh an lm-eval group's tasks as one task in the per-model averages (:func:`averages`).

    >>> pts = {m: {"t": {"label": m, "model": m, "task": "t", "P": p, "MUI": u, "settings": {"n_samples": n}}}
    ...        for m, p, u, n in (("a", 20.0, 9.0, 8), ("b", 40.0, 6.0, 8), ("c", 80.0, 4.0, 7))}
    >>> law, fits, avg = law_section(pts, seed=0, n_resamples=100)
    >>> law["per_model_average"]["n"], law["notes"][0]
    (3, 'task t: MUI settings differ between models (n_samples: 8 (a, b) vs 7 (c)); MUI is only comparable at equal settings and sample counts')
    """
    notes = []
    pooled_pts = [{**strip_settings(p), "label": f"{m} / {t}"} for m, ts in law_pts.items() for t, p in ts.items()]
    n_models = len({p["model"] for p in pooled_pts if p["P"] > 0})
    fit: LawFit | None
    reason: str | None
    if n_models < MIN_POINTS:
        fit, reason = None, (f"the points come from {n_models} model{'s' * (n_models != 1)} with P > 0; the law "
                             f"compares models and needs at least {MIN_POINTS}")
    else:
        fit, reason = fit_points(pooled_pts, seed=seed, n_resamples=n_resamples)
    pooled = describe_fit(fit, reason and reason + _merged(pooled_pts), pooled_pts)
    tasks = sorted({t for ts in law_pts.values() for t in ts})
    per_task: dict[str, FitDescription] = {}
    fits: dict[str, tuple[LawFit | None, str | None, list[dict]]] = {}
    for t in tasks:
        pts = [strip_settings(ts[t]) for ts in law_pts.values() if t in ts]
        f, r = fit_points(pts, seed=seed, n_resamples=n_resamples)
        r = r and r + _merged(pts)
        per_task[t] = describe_fit(f, r, pts)
        fits[t] = (f, r, pts)
        differ = settings_differ({m: ts[t]["settings"] for m, ts in law_pts.items() if t in ts})
        if differ:
            notes.append(f"task {t}: MUI settings differ between models ({'; '.join(differ)}); "
                         "MUI is only comparable at equal settings and sample counts")
    avg, common, dropped = averages(law_pts, groups, sizes)
    if avg:
        f, r = fit_points(avg, seed=seed, n_resamples=n_resamples)
        r = r and r + _merged(avg)
    else:
        # the law's points are trained models' (a run of untrained references only has MUI, and no point)
        f, r = None, "no trained model has a task with both a score and MUI (untrained references are never points)"
    per_model: FitDescription = {**describe_fit(f, r, avg), "tasks": common, "tasks_dropped": dropped}
    for m, ts in law_pts.items():
        copies = next((p["same_weights"] for p in ts.values() if p.get("same_weights")), None)
        if copies:
            notes.append(f"{', '.join([m, *copies][:-1])} and {copies[-1]} are the "
                         f"same weights (equal meta.identity): one model, so one point of the law, {m}'s; the law "
                         "compares models, and the same weights under another name, dtype or run are one model "
                         "at one parameter count")
    if dropped:
        notes.append(f"per-model averages use the {len(common)} task(s) every model finished; dropped: {', '.join(dropped)}")
    if fit is not None and len(tasks) > 1:
        notes.append("the pooled fit mixes tasks whose MUI levels differ; per-task and per-model-average fits "
                     "are the paper's views")
    excluded: dict[tuple, dict] = {}  # one entry per (model, task, reason), with the fits it is left out of
    scopes: list[tuple[str, FitDescription]] = [("pooled", pooled), ("per_model_average", per_model)]
    for scope, blk in scopes + [(f"task {t}", b) for t, b in per_task.items()]:
        for p in blk["points"]:
            if "excluded" in p:
                key = (p.get("model"), p.get("task"), p["excluded"])
                excluded.setdefault(key, {"model": key[0], "task": key[1], "reason": key[2], "scopes": []})
                excluded[key]["scopes"].append(scope)
    return ({"pooled": pooled, "per_task": per_task, "per_model_average": per_model, "excluded": list(excluded.values()),
             "notes": notes}, fits, avg)


def law_signal(model: str, task: str, baseline: bool, fits: dict) -> SignalResult:
    """The law-residual contamination signal of one model x task, from the task's law fit."""
    if baseline:
        return {"measured": False, "fires": False, "reason": "untrained baseline: not a point of the law"}
    if task not in fits:
        return {"measured": False, "fires": False, "reason": "no law point for this task (no MUI)"}
    fit, reason, pts = fits[task]
    if fit is None:
        return {"measured": False, "fires": False, "reason": f"no law fit for this task: {reason}"}
    if model not in fit.labels:
        rep = next((p["model"] for p in pts if model in (p.get("same_weights") or ())), None)
        return {"measured": False, "fires": False,
                "reason": f"the same weights as {rep}, whose point stands for its copies in the law fit: no "
                          "residual of its own" if rep is not None else "the point is not in the fit (P = 0 has no ln P)"}
    z = float(fit.studentized_residuals[fit.labels.index(model)])
    P = float(fit.performance[fit.labels.index(model)])
    return law_residual_signal(None if math.isnan(z) else z, P, float(np.median([p["P"] for p in pts])),
                               n_points=fit.n)


def training_section(results: dict, law_pts: dict, per_item: PerItem | None = None, seed: int = 0) -> TrainingResult | None:
    """The training-phase view of checkpoints (models whose meta names a ``checkpoint``), or None (fewer than 2)."""
    ck = {m: (results["models"][m].get("meta") or {}).get("checkpoint") for m in law_pts}
    ck = {m: c for m, c in ck.items() if finite(c)}
    if len(ck) < 2:
        return None
    sub = {m: law_pts[m] for m in ck}
    groups, sizes = grouping(results.get("models") or {})
    avg, common, dropped = averages(sub, groups, sizes)
    for p in avg:
        p["checkpoint"] = ck[p["label"]]
    per_task: dict[str, Sequence[dict[str, Any]]] = {
        t: [{**strip_settings(sub[m][t]), "checkpoint": ck[m]} for m in sub if t in sub[m]]
        for t in sorted({t for ts in sub.values() for t in ts})}
    out = (training_phases(avg, per_task, items=per_item, tasks=common, seed=seed, groups=groups)
           if len(avg) >= 2 else None)
    if out is not None:
        out["tasks"], out["tasks_dropped"] = common, dropped
    return out


class LawAndFairness(NamedTuple):
    """The law section, its per-task fits (for the contamination residual), the fairness section and notes."""

    law: LawSection
    fits: dict[str, tuple[LawFit | None, str | None, list[dict[str, Any]]]]
    fairness: FairnessResult
    notes: list[str]
    points: dict[str, dict[str, dict[str, Any]]]  # {model: {task: law point}}, one MUI definition


def law_and_fairness(results: dict[str, Any], per_item: dict[str, dict[str, dict[str, float]]], *, seed: int,
                     n_resamples: int = 2000) -> LawAndFairness:
    """The Utility Law fits and the law-adjusted fairness of every trained model of a results-shaped document.

    ``results``: ``{"models": {name: entry}}`` with each entry's ``tasks`` (score, mui, mui_settings), as in
    results.json; ``per_item``: {model: {task: {item id: score}}} (:func:`per_item_scores`). One run's
    analysis uses it, and so does a board over many runs (:mod:`reporter.analyse.board`).

    >>> from reporter.analyse.results import build_results
    >>> from reporter.analyse.leaderboard import per_item_scores
    >>> res = build_results(run_dir)
    >>> out = law_and_fairness(res, per_item_scores(res, run_dir), seed=0, n_resamples=200)
    >>> sorted(out.law)[:3], out.fairness["available"]
    (['excluded', 'left_out', 'notes'], False)
    """
    notes: list[str] = []
    law_pts, base_pts, left_out = law_points(results)
    one_definition(law_pts, left_out)
    groups, sizes = grouping(results.get("models") or {})
    law, fits, avg = law_section(law_pts, seed, n_resamples, groups, sizes)
    law["left_out"] = left_out

    def mean(ts: dict[str, dict[str, Any]], key: str) -> float:
        shares, units = task_shares(list(ts), groups, sizes)
        return weighted_mean({t: p[key] for t, p in ts.items()}, shares, units)

    base_rows: list[dict[str, Any]] = [{"label": m, "model": m, "P": mean(ts, "P"), "MUI": mean(ts, "MUI"),
                                        "baseline": True} for m, ts in base_pts.items() if ts]
    per_task_pts = {t: f[2] for t, f in fits.items()}
    fair = fairness(avg, per_task_pts, seed=seed, n_resamples=n_resamples, reference_rows=base_rows,
                    items=per_item, tasks=(law.get("per_model_average") or {}).get("tasks") or [], groups=groups)
    if base_rows:
        notes.append(f"untrained baseline(s) {', '.join(r['model'] for r in base_rows)}: reference rows, "
                     "not points of the law and not ranked")
    return LawAndFairness(law, fits, fair, notes, law_pts)
