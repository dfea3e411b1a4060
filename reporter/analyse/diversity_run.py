"""Dataset diversity and the pooled core sets of a run, from its key-neuron files.

Reads every trained model's ``neurons.npz`` (or ``features.npz`` under ``mui.unit: sae``) per
task, and hands them to :func:`reporter.analyse.diversity.model_diversity`,
:func:`reporter.analyse.coreset.pooled_core_set` and :func:`reporter.analyse.advice.advise`.

>>> from reporter.analyse.results import build_results
>>> from reporter.analyse.leaderboard import per_item_scores
>>> from reporter.store.layout import RunDir
>>> res = build_results(run_dir)
>>> notes = []
>>> per_model, core = diversity_from_artifacts(res, RunDir(run_dir), per_item_scores(res, run_dir), 0, 200, notes)
>>> per_model, core  # the tiny run's models are untrained baselines: diversity is for trained models only
({}, None)
"""
from __future__ import annotations

from typing import TypedDict

from ..schema import is_untrained
from ..store.layout import CORESET, FEATURES, NEURONS, RunDir
from ..store.neurons import load_neuron_sets
from ..store.ragged import ragged_ok
from ..tasks import is_probe
from .advice import advise
from .coreset import PooledCoreSet, Reproduction, pooled_core_set, reproduction
from .diversity import ModelDiversity, model_diversity
from .leaderboard import PerItem
from .task_weights import groups_of

__all__ = ["CoreSetSection", "diversity_from_artifacts"]


class CoreSetSection(TypedDict):
    """``analysis.coreset`` (:class:`reporter.schema.CoreSetExport`): the pooled core sets and their reproduction."""

    tasks: dict[str, PooledCoreSet]
    reproduction: Reproduction
    file: str


def diversity_from_artifacts(results: dict, rd: RunDir, per_item: PerItem, seed: int, n_resamples: int,
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
            elif not path.is_file() and (e["tasks"][task] or {}).get("mui") is not None:  # measured, then removed
                notes.append(f"{name} / {task}: {path.name} is missing although MUI was measured; diversity and "
                             "the core set leave the task out (rerun `reporter run` to recompute it)")
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
                         seed=seed, n_resamples=n_resamples,
                         groups=groups_of(results.get("models") or {}, list(core)))
    for name, d in out.items():
        rows = {t: r["per_model"][name] for t, r in repro["per_task"].items() if name in r["per_model"]}
        task_sets = {t: s for t, (_, s) in neurons[name].items() if not is_probe(t)}
        d.update(advise(name, task_sets, seed=seed, core=core, reproduction=rows))
    coreset: CoreSetSection | None = {"tasks": core, "reproduction": repro, "file": CORESET} if core else None
    return out, coreset
