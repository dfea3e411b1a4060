"""Analysis stage: Utility Law, fairness, contamination, diversity, training phases — from artifacts alone.

Re-runnable on any run directory (no model, no torch needed). Reads ``results.json`` (built
with :func:`reporter.analyse.results.build_results` when missing) and, per model x task, the
optional artifacts of the collect stage::

    models/<slug>/tasks/<task>/neurons.npz      key-neuron sets (reporter.store.neurons)
    models/<slug>/tasks/<task>/logprobs.npz     per-item prompt/response token log-probs (reporter.store.logprobs)
    models/<slug>/tasks/<task>/verbatim.json    verbatim-completion evidence (reporter.collect.verbatim)
    models/<slug>/reference_logprobs.npz        log-probs of non-benchmark reference text

Each analysis reads its own artifacts: the law (:mod:`reporter.analyse.law_points`), the
contamination table (:mod:`reporter.analyse.evidence_rows`) and diversity
(:mod:`reporter.analyse.diversity_run`); this module puts them together. A missing artifact
makes its signal "not measured"; nothing is guessed. Untrained baselines
(:func:`reporter.schema.is_untrained`) are reference rows: never points of the law, never ranked.
The LPP probes (:func:`reporter.tasks.is_probe`) are never points of the law.

>>> analysis = analyse(run_dir)
>>> sorted(analysis)[:4]
['above_chance', 'contamination', 'coreset', 'definitions']
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from ..schema import Analysis, NotRanked, Ties, check_document, validate
from ..store.atomic import read_json, write_json
from ..store.layout import RunDir
from .advice import ADVICE_RULES
from .contamination import CONTAMINATION_RULE, CONTROL_POWER, MEANING, ContaminationVerdict
from .coreset import coreset_document
from .diversity import ModelDiversity
from .diversity_run import CoreSetSection, diversity_from_artifacts
from .evidence_rows import contamination_rows
from .fairness import FAIRNESS_DEFINITION, FairnessResult
from .law_points import (
    LawAndFairness,
    LawSection,
    finite,
    law_and_fairness,
    law_points,
    law_section,
    training_section,
)
from .leaderboard import Leaderboard, PowerAdvice, ReferenceRow, leaderboard, per_item_scores
from .numbers import json_ready
from .responses import RESPONSE_RULE, ResponseCheck, response_checks
from .results import build_results
from .task_weights import grouping
from .training import PHASE_RULE, TrainingResult

__all__ = ["analyse", "write_analysis", "law_and_fairness", "LawAndFairness", "ANALYSIS_VERSION", "AnalysisDoc",
           "LawSection", "CoreSetSection"]

ANALYSIS_VERSION = 2


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
    responses: list[ResponseCheck]
    definitions: dict[str, Any]
    notes: list[str]


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


def analyse(run_dir: str | Path, *, seed: int | None = None, n_resamples: int = 2000,
            results: Any = None) -> AnalysisDoc:
    """Compute the ``analysis`` section of results.json from a run directory's artifacts (``results``: results.json
    as it is about to be written; default: read from the run directory).

    Returns ``{version, law, fairness, ranking, references, not_ranked, above_chance, ties, power,
    contamination, diversity, coreset, training, responses, definitions, notes}`` (see the README, "analysis"). ``seed`` defaults to the run's seed.

    >>> {r["severity"] for r in analyse(run_dir)["contamination"]} <= {"none", "weak", "strong"}
    True
    """
    rd = RunDir(run_dir)
    if results is None:
        results = read_json(rd.results)
    if results is None:
        results = build_results(run_dir)
    seed = int(seed if seed is not None else ((results.get("run") or {}).get("seed") or 0))
    per_item = per_item_scores(results, rd.root)
    law, fits, fair, notes, law_pts = law_and_fairness(results, per_item, seed=seed, n_resamples=n_resamples)
    notes += [f"{name} / {task}: samples.jsonl is missing or holds another number of items than the task's "
              f"{s.get('n')} (cut after the task finished?); its item-level analyses (pairwise tests, ranks, chance) "
              "leave it out: rerun `reporter run` to recompute it"
              for name, e in (results.get("models") or {}).items() for task, s in (e.get("tasks") or {}).items()
              if task not in per_item.get(name, {})]
    contamination = contamination_rows(results, rd, fits)
    _flag_fairness(fair, contamination)
    law_sae = None
    if any(finite(s.get("mui_sae")) for e in (results.get("models") or {}).values()
           for s in (e.get("tasks") or {}).values()):
        sae_pts, _, sae_left = law_points(results, "mui_sae", "mui_sae_settings", ("rho", "n_samples"))
        law_sae = law_section(sae_pts, seed, n_resamples, *grouping(results.get("models") or {}))[0]
        law_sae["left_out"] = sae_left
    diversity, coreset = diversity_from_artifacts(results, rd, per_item, seed, n_resamples, notes)
    board: Leaderboard = leaderboard(results, per_item, seed=seed, n_resamples=n_resamples)
    out: AnalysisDoc = {"version": ANALYSIS_VERSION, "seed": seed, "law": law, "fairness": fair, **board,
                        "contamination": contamination}
    if law_sae is not None:  # only when a model counted SAE features
        out["law_sae"] = law_sae
    out.update({"diversity": diversity, "coreset": coreset,
                "training": training_section(results, law_pts, per_item, seed),
                "responses": response_checks(results, rd.root),
                "definitions": {"fairness": FAIRNESS_DEFINITION, "contamination": CONTAMINATION_RULE,
                                "contamination_meaning": MEANING, "contamination_power": dict(CONTROL_POWER),
                                "training": PHASE_RULE, "advice": ADVICE_RULES, "responses": RESPONSE_RULE,
                                "law": "MUI = a + b*ln(P), OLS of MUI on ln P (P, MUI in %), pairs-bootstrap "
                                       "percentile CIs"},
                "notes": notes})
    if not law_pts:
        notes.append("no trained model has both a score and MUI: the Utility Law analyses are not possible")
    doc: AnalysisDoc = json_ready(out)
    validate(doc, Analysis, "analysis")  # the boundary: a wrong key or type fails here, naming its path
    return doc


def write_analysis(run_dir: str | Path, *, results: Any = None, **kwargs: Any) -> AnalysisDoc:
    """Run :func:`analyse` and store it as ``results["analysis"]`` in results.json (atomic write).

    ``results``: results.json as the artifacts give it now (:func:`~reporter.analyse.results.fresh_results`),
    written here once with its analysis, so that an interrupt never leaves a results.json without one (when the
    analysis itself fails, the results are written without it, and the error goes on); default: read from the run
    directory (built from the artifacts first when it is missing), and kept as it was when the analysis fails.
    Also writes ``coreset.json`` (the pooled core set of every benchmark task) when key neurons were measured.
    Returns the analysis.

    >>> write_analysis(run_dir)["fairness"]["available"]
    False
    """
    rd = RunDir(run_dir)
    fresh = results is not None  # a results.json not written yet: written even where its analysis fails
    if results is None:
        results = read_json(rd.results)
        if results is None:
            results = build_results(run_dir)
            check_document(results)
            write_json(rd.results, results)
    try:
        analysis = analyse(run_dir, results=results, **kwargs)
        results["analysis"] = analysis
        if coreset := analysis.get("coreset"):
            write_json(rd.coreset, coreset_document(coreset["tasks"], results.get("run") or {}))
        else:
            rd.coreset.unlink(missing_ok=True)
        check_document(results)  # the published schema (reporter/data/results.schema.json), at the boundary
    except Exception:
        if fresh:  # the artifacts' results, for render to show (the error says why there is no analysis)
            results.pop("analysis", None)
            write_json(rd.results, results)
        raise  # results.json read from the run directory: kept as it was
    write_json(rd.results, results)
    return analysis
