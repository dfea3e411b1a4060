"""Build results.json from a run directory's artifacts alone (no model needed).

Data-driven, so a new collector plugin needs no edit here: every ``models/<slug>/*.json``
document becomes a key of the model's entry (``model.json`` is ``meta``, ``error.json`` makes
the model ``failed``), and every task's ``summary.json`` is its task entry as written.

>>> build_results(run_dir)["schema_version"]
1
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from ..config import Profile
from ..errors import UserError
from ..metrics.stats import ALPHA, all_pairs, holm
from ..schema import SCHEMA_VERSION, check_document
from ..store.atomic import read_json, read_record, write_json
from ..store.checked import read_document
from ..store.layout import (
    ERROR,
    MODEL_META,
    SAMPLES,
    STEP_ERRORS,
    SUMMARY,
    VALIDATION,
    RunDir,
    legacy_slug,
    slugify,
)
from ..store.samples import check_score, item_scores
from .correlations import Correlation, lpp_correlations
from .numbers import tested_p

#: a model's documents with a published schema: read against it (``reporter schema model`` …)
_SCHEMAS = {"meta": "model", "smoke": "smoke", "lpp": "lpp"}


#: what to do about a summary.json whose score is not its items' mean
SUMMARY_EDITED = "Remove it and rerun `reporter run` on the run directory to recompute that task"


class RunBlock(TypedDict):
    """``results.json``'s ``run`` (:class:`reporter.schema.RunInfo`), copied from the manifest."""

    created: str | None
    reporter_version: str | None
    seed: int | None
    config_hash: str | None
    profile: str | None


class PairRow(TypedDict, total=False):
    """One paired comparison with its Holm adjustment (:class:`reporter.schema.Comparison`; null: not a 0/1 task)."""

    model_a: str
    model_b: str
    task: str
    n: int
    mean_diff: float
    ci_low: float
    ci_high: float
    mcnemar_p: float | None
    n01: int | None
    n10: int | None
    method: str
    p_value: float
    test: str | None
    p_holm: float
    significant: bool
    family: int


class ResultsDocument(TypedDict, total=False):
    """``results.json`` (:class:`reporter.schema.Results`) as :func:`build_results` builds it, before
    :func:`reporter.analyse.write_analysis` adds ``analysis`` (:class:`reporter.analyse.analysis.AnalysisDoc`).

    A model entry is open by design: every ``models/<slug>/*.json`` document becomes one of its keys (a plugin
    collector's included), so it stays a mapping; :func:`reporter.schema.check_document` checks the keys the
    schema knows before the file is written.
    """

    schema_version: int
    run: RunBlock
    models: dict[str, dict[str, Any]]
    comparisons: list[PairRow]
    lpp_correlations: list[Correlation]


def build_results(run_dir: str | Path) -> ResultsDocument:
    """Assemble the machine-readable result of a run from its artifacts."""
    rd = RunDir(run_dir)
    manifest = read_json(rd.manifest)
    if manifest is None:
        raise UserError(f"{rd.root}: not a run directory (no {rd.manifest.name}); run `reporter run` first")
    resolved = manifest.get("resolved") if isinstance(manifest, dict) else None
    if not isinstance(resolved, dict):
        resolved = {}
    models_cfg = (resolved.get("config") or {}).get("models")
    if not isinstance(models_cfg, list) or not all(isinstance(m, dict) and "name" in m for m in models_cfg):
        raise UserError(f"{rd.manifest}: has no resolved.config.models; it is not the manifest of a run")
    profile = Profile.from_dict(resolved["profile"], f"{rd.manifest}: resolved.profile", recorded=True) \
        if resolved.get("profile") else Profile(name=None)
    out_models: dict[str, dict[str, Any]] = {}
    per_item: dict[str, dict[str, dict[str, float]]] = {}
    for m in models_cfg:
        slug = slugify(m["name"])
        if not rd.model_dir(slug).is_dir() and _measured_as(rd, legacy := legacy_slug(m["name"]), m["name"]):
            slug = legacy  # a run made before non-ASCII names got their hash
        entry: dict[str, Any] = {"slug": slug, "source": m["source"], "status": "pending"}
        for key, path in rd.model_documents(slug).items():  # a damaged one is one line naming it
            entry[key] = read_document(path, _SCHEMAS[key]) if key in _SCHEMAS else read_json(path)
        tasks = {}
        for t in profile.tasks:
            tdir = rd.task_dir(slug, t.name)
            summary = read_document(tdir / SUMMARY, "summary")
            if summary is not None:
                validation = read_document(tdir / VALIDATION, "validation")
                tasks[t.name] = {**summary, **({"validation": validation} if validation else {})}
                if (scores := item_scores(tdir / SAMPLES, summary.get("n"))) is not None:  # not a cut file's items
                    check_score(str(tdir / SUMMARY), summary, scores, SUMMARY_EDITED)
                    per_item.setdefault(m["name"], {})[t.name] = scores
        entry["tasks"] = tasks
        task_errors = {t.name: why for t in profile.tasks if t.name not in tasks
                       and isinstance(why := (read_record(rd.task_dir(slug, t.name) / ERROR) or {}).get("error"), str)}
        if task_errors:  # why a listed task is missing: its failure line, as the run printed it
            entry["task_errors"] = task_errors
        places = [("", rd.model_dir(slug) / STEP_ERRORS)] + [(f"{t.name}/", rd.task_dir(slug, t.name) / STEP_ERRORS)
                                                             for t in profile.tasks if t.name in tasks]
        step_errors = {f"{where}{p.stem}": why for where, d in places if d.is_dir() for p in sorted(d.glob("*.json"))
                       if isinstance(why := (read_record(p) or {}).get("failure"), str)}
        if step_errors:  # a model-only step or evidence pass that failed (LPP, a contamination test): what is missing
            entry["step_errors"] = step_errors
        err = read_json(rd.model_dir(slug) / ERROR) if rd.model_dir(slug).is_dir() else None
        err = err or read_json(rd.failure_note(slug))  # its own directory could not be written
        if err is not None:
            entry["status"] = "failed"
            entry["error"] = err.get("error")
        elif "meta" in entry and "smoke" in entry and len(tasks) == len(profile.tasks):
            entry["status"] = "complete"
        elif "meta" in entry:
            entry["status"] = "partial"
        out_models[m["name"]] = entry
    _check_provenance(manifest, rd)
    res: ResultsDocument = {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "created": manifest.get("created"),
            "reporter_version": manifest.get("reporter_version"),
            "seed": manifest.get("seed"),
            "config_hash": manifest.get("config_hash"),
            "profile": profile.name,
        },
        "models": out_models,
        "comparisons": comparisons(per_item, seed=manifest.get("seed") or 0),
    }
    res["lpp_correlations"] = lpp_correlations(res)
    return res


#: what results.json's run block copies from the manifest, with the types it may have there
_PROVENANCE = {"created": str, "reporter_version": str, "seed": int, "config_hash": str}


def _check_provenance(manifest: dict[str, Any], rd: RunDir) -> None:
    """The manifest's fields that results.json copies are of their type (or absent): a hand-edited ``seed: "abc"`` was
    blamed on results.json, the file analyse was about to write.

    >>> _check_provenance({"seed": "abc"}, RunDir("r"))
    Traceback (most recent call last):
    reporter.errors.UserError: r/manifest.json: seed: 'abc' is not an integer from 0; the manifest records how the run was made and only `reporter run … --force` into r writes it again
    """
    for key, kind in _PROVENANCE.items():
        value = manifest.get(key)
        negative = isinstance(value, int) and value < 0
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool) or negative):
            what = "an integer from 0" if kind is int else "text"
            raise UserError(f"{rd.manifest}: {key}: {str(value)[:40]!r} is not {what}; the manifest records how the run "
                            f"was made and only `reporter run … --force` into {rd.root} writes it again")


def _measured_as(rd: RunDir, slug: str, name: str) -> bool:
    """Whether ``models/<slug>`` holds the model ``name`` (its ``model.json`` says so): the directory a name had
    before non-ASCII names got their hash ("Llama 3 (日本語)" → ``Llama-3``) may be another model's ("Llama 3").
    """
    try:
        meta = read_json(rd.model_dir(slug) / MODEL_META)
    except UserError:
        return False
    return isinstance(meta, dict) and meta.get("name") == name


def comparisons(per_item: dict[str, dict[str, dict[str, float]]], *, seed: int) -> list[PairRow]:
    """Every paired comparison of the run, with Holm-adjusted p-values over all of them.

    The family is every pair of models on every task they share (benchmarks and probes,
    untrained references included); ``significant`` means ``p_holm < ALPHA``.

    >>> [(c["model_a"], c["p_holm"], c["significant"]) for c in comparisons(
    ...     {"m1": {"t": {"q": 1, "r": 1}}, "m2": {"t": {"q": 0, "r": 0}}}, seed=0)]
    [('m1', 0.5, False)]
    """
    rows: list[PairRow] = [{"model_a": c.model_a, "model_b": c.model_b, "task": c.task, "n": c.n, "mean_diff": c.mean_diff,
                            "ci_low": c.ci_low, "ci_high": c.ci_high, "mcnemar_p": c.mcnemar_p, "n01": c.n01,
                            "n10": c.n10, "method": c.method, "p_value": tested_p(c.p_value), "test": c.test}
                           for c in all_pairs(per_item, seed=seed)]  # PairedComparison's fields, in its order
    adjusted = holm([c["p_value"] for c in rows])
    for c, p in zip(rows, adjusted):
        c.update({"p_holm": p, "significant": p < ALPHA, "family": len(rows)})
    return rows


def write_results(run_dir: str | Path) -> ResultsDocument:
    """Build results.json from the artifacts and write it, without the analysis section (:func:`fresh_results`)."""
    res = fresh_results(run_dir)
    write_json(RunDir(run_dir).results, res)
    return res


def fresh_results(run_dir: str | Path) -> ResultsDocument:
    """results.json as the artifacts give it now, checked against the published schema, not written (the run and
    ``analyse`` write it once, with its analysis: :func:`reporter.analyse.write_analysis`).

    Refused where results.json names finished models but no model's artifacts are there any more (``models/``
    deleted or moved): rebuilding would replace a good result with every model "pending".
    """
    rd = RunDir(run_dir)
    res = build_results(run_dir)
    try:
        old = read_json(rd.results) or {}
    except UserError:
        old = {}
    done = [n for n, m in (old.get("models") or {}).items() if isinstance(m, dict) and m.get("status") != "pending"]
    if done and not any(rd.model_dir(m.get("slug", n)).is_dir() for n, m in res["models"].items()):
        raise UserError(f"{rd.root / 'models'}: none of the run's models has its artifacts there (deleted or moved?), "
                        f"yet results.json has {len(done)} finished; results.json is left as it is")
    check_document(res)  # the published schema (reporter/data/results.schema.json), at the boundary
    return res
