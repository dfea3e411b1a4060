"""Analysis stage: Utility Law, fairness, contamination, diversity, training phases — from artifacts alone.

Re-runnable on any run directory (no model, no torch needed). Reads ``results.json`` (built
with :func:`reporter.analyse.results.build_results` when missing) and, per model x task, the
optional artifacts of the collect stage::

    models/<slug>/tasks/<task>/neurons.npz      key-neuron sets (reporter.store.neurons)
    models/<slug>/tasks/<task>/logprobs.npz     per-item prompt/response token log-probs (reporter.store.logprobs)
    models/<slug>/tasks/<task>/verbatim.json    verbatim-completion evidence (reporter.collect.verbatim)
    models/<slug>/reference_logprobs.npz        log-probs of non-benchmark reference text

A missing artifact makes its signal "not measured"; nothing is guessed. Untrained baselines
(:func:`reporter.schema.is_untrained`) are reference rows: never points of the law, never ranked.
The LPP probes (:func:`reporter.tasks.is_probe`) are never points of the law.

>>> analysis = analyse(run_dir)
>>> sorted(analysis)[:4]
['above_chance', 'contamination', 'coreset', 'definitions']
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple, Sequence, TypedDict

import numpy as np

from ..metrics.min_k import question_logprobs
from ..metrics.mui import LEGACY_DEFINITION
from ..schema import Analysis, NotRanked, Ties, check_document, is_untrained, validate
from ..store.atomic import read_json, write_json
from ..store.layout import (
    CORESET,
    FEATURES,
    LOGPROBS,
    NEURONS,
    OPTION_ORDER,
    REFERENCE_LOGPROBS,
    REFERENCE_VERBATIM,
    SPLIT_REFERENCE,
    VERBATIM,
    RunDir,
)
from ..store.logprobs import load_logprobs
from ..store.neurons import load_neuron_sets
from ..store.ragged import ragged_ok
from ..tasks import is_probe
from .advice import ADVICE_RULES, advise
from .contamination import (
    CONTAMINATION_RULE,
    CONTROL_POWER,
    MEANING,
    ContaminationVerdict,
    SignalResult,
    apply_fdr,
    assess,
    law_residual_signal,
    min_k_signal,
    option_order_signal,
    order_null_for,
    split_signal,
    verbatim_signal,
)
from .coreset import PooledCoreSet, Reproduction, coreset_document, pooled_core_set, reproduction
from .diversity import ModelDiversity, model_diversity
from .fairness import FAIRNESS_DEFINITION, FairnessResult, fairness
from .law import MIN_POINTS, FitDescription, LawFit, describe_fit, fit_points
from .leaderboard import Leaderboard, PerItem, PowerAdvice, ReferenceRow, leaderboard, per_item_scores
from .numbers import json_ready
from .results import build_results
from .training import PHASE_RULE, TrainingResult, training_phases

__all__ = ["analyse", "write_analysis", "law_and_fairness", "LawAndFairness", "ANALYSIS_VERSION", "AnalysisDoc", "LawSection", "CoreSetSection"]

ANALYSIS_VERSION = 2
_SETTINGS = ("definition", "mode", "top_ratio", "rho", "n_samples")


class LawSection(TypedDict, total=False):
    """``analysis.law`` and ``analysis.law_sae`` (:class:`reporter.schema.Law`): the fits and what they leave out."""

    pooled: FitDescription
    per_task: dict[str, FitDescription]
    per_model_average: FitDescription
    excluded: list[dict[str, Any]]
    notes: list[str]
    left_out: list[dict[str, Any]]


class CoreSetSection(TypedDict):
    """``analysis.coreset`` (:class:`reporter.schema.CoreSetExport`): the pooled core sets and their reproduction."""

    tasks: dict[str, PooledCoreSet]
    reproduction: Reproduction
    file: str


class AnalysisDoc(TypedDict, total=False):
    """What :func:`analyse` returns: ``results.json``'s ``analysis`` (:class:`reporter.schema.Analysis`, checked
    against it before it is returned), with the analysis version and seed.
    """

    version: int
    seed: int
    law: LawSection
    fairness: FairnessResult
    ranking: dict[str, Any] | None
    references: list[ReferenceRow]
    not_ranked: list[NotRanked]
    above_chance: list[dict[str, Any]]
    ties: Ties | None
    power: PowerAdvice | None
    contamination: list[ContaminationVerdict]
    law_sae: LawSection
    diversity: dict[str, ModelDiversity]
    coreset: CoreSetSection | None
    training: TrainingResult | None
    definitions: dict[str, Any]
    notes: list[str]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


Points = dict[str, dict[str, dict[str, Any]]]  # {model: {task: point}}


def _points(results: dict[str, Any], key: str = "mui", settings_key: str = "mui_settings",
            settings: Sequence[str] = _SETTINGS) -> tuple[Points, Points, list[dict[str, Any]]]:
    """{model: {task: point}} for law models and for baselines, plus rows left out and why.

    ``key`` is the effort measure: ``mui`` (neurons) or ``mui_sae`` (SAE features).
    """
    law: Points = {}
    base: Points = {}
    left_out: list[dict[str, Any]] = []
    for name, e in (results.get("models") or {}).items():
        target = base if is_untrained(e) else law
        for task, s in (e.get("tasks") or {}).items():
            if is_probe(task):  # synthetic LPP probes are not benchmarks: never points of the law
                continue
            if not _finite(s.get("score")):
                left_out.append({"model": name, "task": task, "reason": "no score"})
                continue
            if not _finite(s.get(key)):
                left_out.append({"model": name, "task": task, "reason": "no MUI measured (mui disabled?)" if key == "mui"
                                 else "no MUI over SAE features measured (mui.unit is not sae or both)"})
                continue
            target.setdefault(name, {})[task] = {"label": name, "model": name, "task": task,
                                                 "P": 100.0 * float(s["score"]), "MUI": float(s[key]),
                                                 "settings": {k: (s.get(settings_key) or {}).get(k) for k in settings}}
        if target is base:
            left_out.append({"model": name, "task": None,
                             "reason": "untrained baseline: a reference row, never a point of the law"})
    return law, base, left_out


def _one_definition(law: Points, left_out: list[dict[str, Any]]) -> None:
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


def _averages(by_model: dict[str, dict[str, dict]]) -> tuple[list[dict], list[str], list[str]]:
    """Per-model averages over the tasks every model has; (points, tasks used, tasks dropped)."""
    models = [m for m, t in by_model.items() if t]
    if not models:
        return [], [], []
    all_tasks = sorted({t for m in models for t in by_model[m]})
    common = [t for t in all_tasks if all(t in by_model[m] for m in models)]
    pts = []
    for m in models:
        if common:
            pts.append({"label": m, "model": m, "P": float(np.mean([by_model[m][t]["P"] for t in common])),
                        "MUI": float(np.mean([by_model[m][t]["MUI"] for t in common])), "n_tasks": len(common)})
    return pts, common, [t for t in all_tasks if t not in common]


def _strip(p: dict) -> dict:
    return {k: v for k, v in p.items() if k != "settings"}


def _law(law_pts: dict, seed: int, n_resamples: int) -> tuple[LawSection, dict, list[dict]]:
    """The law section, the per-task LawFit objects, and the per-model average points."""
    notes = []
    pooled_pts = [{**_strip(p), "label": f"{m} / {t}"} for m, ts in law_pts.items() for t, p in ts.items()]
    n_models = len({p["model"] for p in pooled_pts if p["P"] > 0})
    fit: LawFit | None
    reason: str | None
    if n_models < MIN_POINTS:
        fit, reason = None, (f"the points come from {n_models} model{'s' * (n_models != 1)} with P > 0; the law "
                             f"compares models and needs at least {MIN_POINTS}")
    else:
        fit, reason = fit_points(pooled_pts, seed=seed, n_resamples=n_resamples)
    pooled = describe_fit(fit, reason, pooled_pts)
    tasks = sorted({t for ts in law_pts.values() for t in ts})
    per_task: dict[str, FitDescription] = {}
    fits: dict[str, tuple[LawFit | None, str | None, list[dict]]] = {}
    for t in tasks:
        pts = [_strip(ts[t]) for ts in law_pts.values() if t in ts]
        f, r = fit_points(pts, seed=seed, n_resamples=n_resamples)
        per_task[t] = describe_fit(f, r, pts)
        fits[t] = (f, r, pts)
        settings = {tuple(sorted(ts[t]["settings"].items(), key=lambda kv: kv[0])) for ts in law_pts.values() if t in ts}
        if len(settings) > 1:
            notes.append(f"task {t}: MUI settings differ between models ({', '.join(_SETTINGS)}); "
                         "MUI is only comparable at equal settings and sample counts")
    avg, common, dropped = _averages(law_pts)
    if avg:
        f, r = fit_points(avg, seed=seed, n_resamples=n_resamples)
    else:
        f, r = None, "no model has a task with both a score and MUI"
    per_model: FitDescription = {**describe_fit(f, r, avg), "tasks": common, "tasks_dropped": dropped}
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


def _law_signal(model: str, task: str, baseline: bool, fits: dict) -> SignalResult:
    if baseline:
        return {"measured": False, "fires": False, "reason": "untrained baseline: not a point of the law"}
    if task not in fits:
        return {"measured": False, "fires": False, "reason": "no law point for this task (no MUI)"}
    fit, reason, pts = fits[task]
    if fit is None:
        return {"measured": False, "fires": False, "reason": f"no law fit for this task: {reason}"}
    if model not in fit.labels:
        return {"measured": False, "fires": False, "reason": "the point is not in the fit (P = 0 has no ln P)"}
    z = float(fit.studentized_residuals[fit.labels.index(model)])
    P = float(fit.performance[fit.labels.index(model)])
    return law_residual_signal(None if math.isnan(z) else z, P, float(np.median([p["P"] for p in pts])),
                               n_points=fit.n)


def _min_k(task_dir: Path, ref_path: Path, baseline: bool = False) -> SignalResult:
    lp_path = task_dir / LOGPROBS
    if not lp_path.is_file():
        return {"measured": False, "fires": False, "reason": f"no {LOGPROBS} for this task"}
    if not ref_path.is_file():
        why = (" (held-out text is not scored for untrained baselines unless contamination.untrained is true)"
               if baseline else "")
        return {"measured": False, "fires": False, "reason": f"no {REFERENCE_LOGPROBS} for this model{why}"}
    for path in (lp_path, ref_path):
        if not ragged_ok(path):
            return {"measured": False, "fires": False,
                    "reason": f"{path.name} is damaged; rerun `reporter run` to recompute it"}
    bench, _ = load_logprobs(lp_path)
    ref, _ = load_logprobs(ref_path)
    q = [question_logprobs(v["prompt"], v["question_span"]) for v in bench.values()]
    out = min_k_signal(q, [v["prompt"] for v in ref.values()], ids=list(bench))
    out["question_spans_known"] = sum(v["question_span"] is not None for v in bench.values())
    return out


def _contamination(results: dict, rd: RunDir, fits: dict) -> list[ContaminationVerdict]:
    """Rows per model x task, tests corrected together over the run (Benjamini-Hochberg).

    Untrained baselines are a negative control: they cannot have seen any data, so a test that
    fires on a baseline for a task is not counted as evidence for any model on it.
    """
    signals = {}
    for name, e in (results.get("models") or {}).items():
        slug = e.get("slug", name)
        baseline = is_untrained(e)
        ref_verbatim = read_json(rd.model_dir(slug) / REFERENCE_VERBATIM)
        for task in sorted(e.get("tasks") or {}):
            if is_probe(task):  # generated probes have no published text that could have leaked
                continue
            tdir = rd.task_dir(slug, task)
            signals[(name, task)] = (baseline, {
                "option_order": option_order_signal(read_json(tdir / OPTION_ORDER), order_null_for(task)),
                "split_min_k": split_signal(read_json(tdir / SPLIT_REFERENCE)),
                "verbatim": verbatim_signal(read_json(tdir / VERBATIM), ref_verbatim),
                "law_residual": _law_signal(name, task, baseline, fits),
                "min_k": _min_k(tdir, rd.model_dir(slug) / REFERENCE_LOGPROBS, baseline)})
    apply_fdr([sig for _, sig in signals.values()])
    confounded = {(task, k) for (name, task), (baseline, sig) in signals.items() if baseline
                  for k, v in sig.items() if v and v.get("fires")}
    rows = []
    for (name, task), (baseline, sig) in signals.items():
        if baseline:
            fired = [k for k, v in sig.items() if v and v.get("fires")]
            row = assess(name, task, sig)
            row.update({"severity": "none",
                        "evidence": "untrained baseline: a negative control that cannot be contaminated"
                        + (f"; its firing test(s) ({', '.join(fired)}) are discounted for every model on this task"
                           if fired else "" if row["measured"] else
                           " (no evidence is collected for untrained models: with no knowledge of language their "
                           "option orders and continuations are chance by construction)")})
        else:
            sig = {k: ({**v, "fires": False, "confounded": True,
                        "reason": "also fires on the untrained baseline (negative control): not evidence on this task"}
                       if (task, k) in confounded and v and v.get("fires") else v) for k, v in sig.items()}
            row = assess(name, task, sig)
        row["baseline"] = baseline
        rows.append(row)
    return rows


def _diversity(results: dict, rd: RunDir, per_item: PerItem, seed: int, n_resamples: int,
               notes: list[str]) -> tuple[dict[str, ModelDiversity], CoreSetSection | None]:
    """Per trained model: diversity facts and advice; and the pooled core sets with their reproduction."""
    out, neurons = {}, {}
    for name, e in (results.get("models") or {}).items():
        if is_untrained(e) or e.get("status") == "failed":
            continue
        slug = e.get("slug", name)
        sets_by_task, ids_by_task = {}, {}
        for task in sorted(e.get("tasks") or {}):
            path = rd.task_dir(slug, task) / NEURONS
            if not path.is_file() and (rd.task_dir(slug, task) / FEATURES).is_file():  # mui.unit: sae
                path = rd.task_dir(slug, task) / FEATURES
            if path.is_file() and not ragged_ok(path):
                notes.append(f"{name} / {task}: {path.name} is damaged; diversity leaves the task out "
                             "(rerun `reporter run` to recompute it)")
            elif path.is_file():
                ids, sets, _ = load_neuron_sets(path)
                sets_by_task[task], ids_by_task[task] = sets, ids
        if not sets_by_task:
            notes.append(f"{name}: no neurons.npz, diversity not measured")
            continue
        d = model_diversity(name, sets_by_task, seed=seed)
        for task, c in d["core_sets"].items():
            c["items"] = [ids_by_task[task][i] for i in c.pop("item_indices")]
        out[name] = d
        neurons[name] = {t: (ids_by_task[t], sets_by_task[t]) for t in sets_by_task}
    tasks = sorted({t for by_task in neurons.values() for t in by_task if not is_probe(t)})
    core: dict[str, PooledCoreSet] = {}
    for t in tasks:
        by_model = {m: by_task[t] for m, by_task in neurons.items() if t in by_task}
        pooled = pooled_core_set(by_model)
        if pooled["n"]:
            core[t] = pooled
    repro = reproduction({m: per_item.get(m, {}) for m in neurons}, {t: c["items"] for t, c in core.items()},
                         seed=seed, n_resamples=n_resamples)
    for name, d in out.items():
        rows = {t: r["per_model"][name] for t, r in repro["per_task"].items() if name in r["per_model"]}
        task_sets = {t: s for t, (_, s) in neurons[name].items() if not is_probe(t)}
        d.update(advise(name, task_sets, seed=seed, core=core, reproduction=rows))
    coreset: CoreSetSection | None = {"tasks": core, "reproduction": repro, "file": CORESET} if core else None
    return out, coreset


def _training(results: dict, law_pts: dict, per_item: PerItem | None = None, seed: int = 0) -> TrainingResult | None:
    ck = {m: (results["models"][m].get("meta") or {}).get("checkpoint") for m in law_pts}
    ck = {m: c for m, c in ck.items() if _finite(c)}
    if len(ck) < 2:
        return None
    sub = {m: law_pts[m] for m in ck}
    avg, common, dropped = _averages(sub)
    for p in avg:
        p["checkpoint"] = ck[p["label"]]
    per_task: dict[str, Sequence[dict[str, Any]]] = {
        t: [{**_strip(sub[m][t]), "checkpoint": ck[m]} for m in sub if t in sub[m]]
        for t in sorted({t for ts in sub.values() for t in ts})}
    out = (training_phases(avg, per_task, items=per_item, tasks=common, seed=seed) if len(avg) >= 2 else None)
    if out is not None:
        out["tasks"], out["tasks_dropped"] = common, dropped
    return out


def _flag_fairness(fair: FairnessResult, contamination: list[ContaminationVerdict]) -> None:
    """Append a contamination caveat to the fairness sentence when the top-ranked model carries a warning."""
    if not fair.get("available") or not fair.get("per_model"):
        return
    top = min(fair["per_model"], key=lambda r: r["rank_adjusted"])["label"]
    warn = [r for r in contamination if r["model"] == top and r["severity"] in ("weak", "strong")]
    sentence = fair["sentence"]  # an available adjustment always has its sentence
    if warn and sentence is not None:
        worst = "strong" if any(r["severity"] == "strong" for r in warn) else "weak"
        tasks = ", ".join(sorted(r["task"] for r in warn))
        fair["sentence"] = sentence + (f" Note: {top} also carries a {worst} contamination warning ({tasks}); its "
                                       "scores on those tasks may partly come from memorised test items.")


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
    >>> res = build_results(run_dir)
    >>> out = law_and_fairness(res, per_item_scores(res, run_dir), seed=0, n_resamples=200)
    >>> sorted(out.law)[:3], out.fairness["available"]
    (['excluded', 'left_out', 'notes'], False)
    """
    notes: list[str] = []
    law_pts, base_pts, left_out = _points(results)
    _one_definition(law_pts, left_out)
    law, fits, avg = _law(law_pts, seed, n_resamples)
    law["left_out"] = left_out
    base_rows: list[dict[str, Any]] = [{"label": m, "model": m, "P": float(np.mean([p["P"] for p in ts.values()])),
                  "MUI": float(np.mean([p["MUI"] for p in ts.values()])), "baseline": True}
                 for m, ts in base_pts.items() if ts]
    per_task_pts = {t: f[2] for t, f in fits.items()}
    fair = fairness(avg, per_task_pts, seed=seed, n_resamples=n_resamples, reference_rows=base_rows,
                    items=per_item, tasks=(law.get("per_model_average") or {}).get("tasks") or [])
    if base_rows:
        notes.append(f"untrained baseline(s) {', '.join(r['model'] for r in base_rows)}: reference rows, "
                     "not points of the law and not ranked")
    return LawAndFairness(law, fits, fair, notes, law_pts)


def analyse(run_dir: str | Path, *, seed: int | None = None, n_resamples: int = 2000) -> AnalysisDoc:
    """Compute the ``analysis`` section of results.json from a run directory's artifacts.

    Returns ``{version, law, fairness, ranking, references, not_ranked, above_chance, ties, power,
    contamination, diversity, coreset, training, definitions, notes}`` (see the README, "analysis"). ``seed`` defaults to the run's seed.

    >>> {r["severity"] for r in analyse(run_dir)["contamination"]} <= {"none", "weak", "strong"}
    True
    """
    rd = RunDir(run_dir)
    results = read_json(rd.results)
    if results is None:
        results = build_results(run_dir)
    seed = int(seed if seed is not None else ((results.get("run") or {}).get("seed") or 0))
    per_item = per_item_scores(results, rd.root)
    law, fits, fair, notes, law_pts = law_and_fairness(results, per_item, seed=seed, n_resamples=n_resamples)
    contamination = _contamination(results, rd, fits)
    _flag_fairness(fair, contamination)
    law_sae = None
    if any(_finite(s.get("mui_sae")) for e in (results.get("models") or {}).values()
           for s in (e.get("tasks") or {}).values()):
        sae_pts, _, sae_left = _points(results, "mui_sae", "mui_sae_settings", ("rho", "n_samples"))
        law_sae = _law(sae_pts, seed, n_resamples)[0]
        law_sae["left_out"] = sae_left
    diversity, coreset = _diversity(results, rd, per_item, seed, n_resamples, notes)
    board: Leaderboard = leaderboard(results, per_item, seed=seed, n_resamples=n_resamples)
    out: AnalysisDoc = {"version": ANALYSIS_VERSION, "seed": seed, "law": law, "fairness": fair, **board,
                        "contamination": contamination}
    if law_sae is not None:  # only when a model counted SAE features
        out["law_sae"] = law_sae
    out.update({"diversity": diversity, "coreset": coreset,
                "training": _training(results, law_pts, per_item, seed),
                "definitions": {"fairness": FAIRNESS_DEFINITION, "contamination": CONTAMINATION_RULE,
                                "contamination_meaning": MEANING, "contamination_power": dict(CONTROL_POWER),
                                "training": PHASE_RULE, "advice": ADVICE_RULES,
                                "law": "MUI = a + b*ln(P), OLS of MUI on ln P (P, MUI in %), pairs-bootstrap "
                                       "percentile CIs"},
                "notes": notes})
    if not law_pts:
        notes.append("no trained model has both a score and MUI: the Utility Law analyses are not possible")
    doc: AnalysisDoc = json_ready(out)
    validate(doc, Analysis, "analysis")  # the boundary: a wrong key or type fails here, naming its path
    return doc


def write_analysis(run_dir: str | Path, **kwargs: Any) -> AnalysisDoc:
    """Run :func:`analyse` and store it as ``results["analysis"]`` in results.json (atomic write).

    results.json is built from the artifacts first when it is missing. Also writes ``coreset.json``
    (the pooled core set of every benchmark task) when key neurons were measured. Returns the analysis.

    >>> write_analysis(run_dir)["fairness"]["available"]
    False
    """
    rd = RunDir(run_dir)
    results = read_json(rd.results)
    if results is None:
        results = build_results(run_dir)
        check_document(results)
        write_json(rd.results, results)
    analysis = analyse(run_dir, **kwargs)
    results["analysis"] = analysis
    if coreset := analysis.get("coreset"):
        write_json(rd.coreset, coreset_document(coreset["tasks"], results.get("run") or {}))
    else:
        rd.coreset.unlink(missing_ok=True)
    check_document(results)  # the published schema (reporter/data/results.schema.json), at the boundary
    write_json(rd.results, results)
    return analysis
