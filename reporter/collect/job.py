"""The collect stage for one model (a job): load it, measure, write artifacts.

Self-contained so that an executor can run it anywhere that sees the run directory. Each
finished piece of work is written as soon as it exists, so a failed or interrupted job loses
nothing and a rerun picks up where it stopped. Steps: load, ``model.json``, a 16-token check
that the model gives finite log-probabilities, every model-scope evidence pass (the held-out
reference text), the smoke perplexity (read from that pass), every enabled model-scope
collector (e.g. LPP), then per task the task run and every task-scope evidence pass
(option order, verbatim completion, the other split, the ablation check). Collectors and
evidence passes are plugins (:mod:`reporter.collect.collectors`, :mod:`reporter.collect.evidence`):
this module knows none of them by name, and asks each of them whether it is done.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import math
import os
import shutil
import time
import weakref
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..config import ModelSpec, Profile, RunConfig, TaskConfig
from ..errors import UserError
from ..models.heap import return_free_memory
from ..models.identity import model_identity, source_identity
from ..models.loading import load_model
from ..store.atomic import json_ok, read_json, read_record, write_json
from ..store.checked import document_ok
from ..store.layout import ERROR, MANIFEST, MODEL_META, MODEL_WORK, REFERENCE_LOGPROBS, SMOKE, STEP_ERRORS, RunDir
from ..tasks.sources import lambada_sha256
from . import ablation, option_order, reference, split_reference, verbatim  # noqa: F401  (the built-in evidence passes)
from .collectors import enabled_collectors
from .evidence import EvidenceContext, EvidencePass, evidence_passes, wants_evidence
from .failures import (
    blamed,
    clear_step_error,
    crashed,
    failed,
    first_line,
    log,
    not_the_tasks,
    out_of_memory,
    record_step_failure,
    step_crashed,
    stops_every_model,
    task_crashed,
    the_environments,
)
from .model_cache import ModelStep, run_cached
from .plan import data_checks_for, plan_task
from .resume import model_done, other_precision, other_weights, stale_reason, task_done
from .smoke import runs_finite, smoke
from .task_run import run_task

__all__ = ["collect_model", "log", "model_done", "task_done", "wants_evidence"]


def collect_model(cfg: RunConfig, index: int, root: str, profile: Profile, *, force: bool = False,
                  progress: bool = True, loaded: Any = None) -> list[str]:
    """Load model ``index`` of ``cfg``, measure it and write its artifacts under ``root``; returns failure lines.

    ``loaded``: the model already loaded (a :class:`~reporter.models.loading.LoadedModel` of that entry), as
    lm-eval's command line hands it over (:mod:`reporter.run.lm_eval_cli`).

    A failure of any kind is this model's alone: its line is returned (an unexpected exception's traceback is
    kept in the model's ``error.json``) and the other models run. Only an environment failure that every
    model would meet the same way (a full disk, a read-only run directory) and an interrupt stop the run.
    """
    data_checks_for(_run_token(root))  # the tasks' data as it is now, read once per run
    try:
        return _collect_model(cfg, index, root, profile, force=force, progress=progress, loaded=loaded)
    except (KeyboardInterrupt, SystemExit):
        raise
    except OSError as e:
        if stops_every_model(e, root):
            raise
        return crashed(cfg, index, root, e)
    except Exception as e:  # a bug in reporter or in the model's own code, or no memory: one line, traceback kept
        return crashed(cfg, index, root, e)


def _run_token(root: str) -> tuple[str, int, int] | None:
    """What names one run of ``root``: its manifest file as the run wrote it when it began (every run writes a new
    one, atomically: another inode and time), or None without one.
    """
    try:
        st = (Path(root) / MANIFEST).stat()
    except OSError:
        return None
    return os.path.realpath(root), st.st_ino, st.st_mtime_ns


def _collect_model(cfg: RunConfig, index: int, root: str, profile: Profile, *, force: bool,
                   progress: bool, loaded: Any) -> list[str]:
    rd = RunDir(root)
    spec = cfg.models[index]
    mdir = rd.model_dir(spec.slug)
    if not force:
        _sweep_step_errors(rd, spec, profile)
    if force and mdir.exists():
        shutil.rmtree(mdir)
    elif model_done(rd, spec, profile, cfg.seed) and not other_weights(spec, mdir, source_identity(spec, cfg.seed)):
        log(f"{spec.name}: already complete in {mdir}, skipping")
        return []
    elif (other := other_precision(spec, cfg, index, mdir, loaded)) is not None:
        return failed(spec.name, [other])
    rd.failure_note(spec.slug).unlink(missing_ok=True)
    (mdir / ERROR).unlink(missing_ok=True)
    try:
        lm = loaded if loaded is not None else load_model(spec, run_device=cfg.device, run_dtype=cfg.dtype,
                                                          run_seed=cfg.seed, progress=progress)
        for plugin in enabled_collectors(profile):  # e.g. an SAE that does not fit this model: fail before any work
            plugin.check_model(lm, profile)
    except UserError as e:  # each line names the model, as every other model failure does
        lines = [ln if ln.startswith(f"model '{spec.name}'") else f"model '{spec.name}': {ln}" for ln in e.lines]
        write_json(mdir / ERROR, {"error": "\n".join(lines)})
        return failed(spec.name, lines)
    except (MemoryError, RuntimeError) as e:  # torch's CPU allocator raises RuntimeError("... can't allocate memory")
        if not isinstance(e, MemoryError) and not out_of_memory(e):
            raise
        line = (f"model '{spec.name}': not enough memory to load it ({first_line(e)}); use a smaller model or "
                "dtype, another device, or device_map: auto")
        write_json(mdir / ERROR, {"error": line})
        return failed(spec.name, [line])
    model = weakref.ref(lm.model)
    try:
        return _measure(lm, cfg, spec, rd, mdir, profile, force=force, progress=progress)
    finally:
        del lm
        # Nothing of the measurement holds the weights now. A full collection (0.1-0.4 s, more in a big process)
        # runs only when something still does: a caller's ``loaded``, a traceback, or a reference cycle.
        if model() is not None:
            gc.collect()
        return_free_memory()  # what the model and its measurement freed, before the next model loads
        if torch.cuda.is_available():
            with contextlib.suppress(RuntimeError):  # a sticky CUDA error must not replace the measurement's own
                torch.cuda.empty_cache()


def _measure(lm: Any, cfg: RunConfig, spec: ModelSpec, rd: RunDir, mdir: Path, profile: Profile, *, force: bool,
             progress: bool) -> list[str]:
    """Everything measured on one loaded model: model-only work, evidence, then every task; the failures' lines.

    Its own function so that every reference it makes to the model (loop variables, bound partials) is gone
    when it returns.
    """
    failures: list[str] = []
    identity = model_identity(lm)  # by content; the model-only cache keys by it too (hashed once per process)
    other_weights(spec, mdir, identity)  # where the check before loading could not tell (a hub id the hub moved since)
    write_json(mdir / MODEL_META, {"name": spec.name, **lm.meta, **({"identity": identity} if identity else {}),
                                   "first_measured": _first_measured(mdir, identity)})
    work = _work_record(mdir)  # model-only work: computed here or taken from the cache
    ctx = EvidenceContext(lm=lm, profile=profile, seed=cfg.seed, directory=mdir)
    collectors = [(p, p.label, p.model_cache_key(profile), partial(p.model_done, profile, mdir),
                   partial(p.run_model, lm, profile, mdir))
                  for p in enabled_collectors(profile)]  # model-scope collectors (LPP)
    evidence = [(ev, ev.label, ev.model_cache_key(profile, cfg.seed), partial(ev.done, mdir), partial(ev.run, ctx))
                for ev in evidence_passes(profile, spec, "model")]  # the held-out reference text
    # A moment's check before the longer passes: damaged weights fail here, not after the reference pass.
    if not document_ok(mdir / SMOKE, "smoke") and not runs_finite(lm):
        return [_not_finite(spec, mdir)]
    # The reference pass first: the smoke perplexity is read from its log-probs of the same passages (one pass less).
    failures += _model_steps(lm, spec, mdir, work, evidence, force)
    if not document_ok(mdir / SMOKE, "smoke"):
        work["smoke"] = run_cached(
            lm, ModelStep("smoke", {"texts": profile.smoke_texts, "passages": lambada_sha256(profile.smoke_texts),
                                    "version": 3}), mdir,
            partial(_write_smoke, lm, profile, mdir, progress), partial(json_ok, mdir / SMOKE), use_cache=not force)
        write_json(mdir / MODEL_WORK, work)
    if not math.isfinite(read_json(mdir / SMOKE)["perplexity"]):
        (mdir / SMOKE).unlink()
        return [_not_finite(spec, mdir)]
    failures += _model_steps(lm, spec, mdir, work, collectors, force)
    entries: list[tuple[str, str]] = []  # lm-eval entries run together: a group's leaves are scored as one
    for task in profile.tasks:
        if task.lm_eval is None:
            failures += _collect_task(lm, cfg, profile, task, rd.task_dir(spec.slug, task.name), progress,
                                      _Scores("refresh" if force else "use", work, mdir))
            continue
        entry = ("group", task.lm_eval_group) if task.lm_eval_group else ("task", task.name)
        if entry in entries:
            continue
        entries.append(entry)
        members = [t for t in profile.tasks if t.lm_eval is not None
                   and (("group", t.lm_eval_group) if t.lm_eval_group else ("task", t.name)) == entry]
        failures += _collect_lm_eval(lm, cfg, profile, members, rd, progress, _Scores("refresh" if force else "use", work, mdir))
    return failures


def _first_measured(mdir: Path, identity: str | None) -> str:
    """When the model was first measured in ``mdir``: its ``model.json``'s date where a resume of the same weights
    finds one, else now (UTC). A model measured again (other weights, a changed entry, ``--force``) has lost its
    directory, and so its date, before this.
    """
    old = read_record(mdir / MODEL_META) or {}
    if isinstance(old.get("first_measured"), str) and old.get("identity") == identity:
        return str(old["first_measured"])
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")  # runs a second apart stay ordered


def _not_finite(spec: ModelSpec, mdir: Path) -> str:
    """The failure line of a model that gives NaN or infinite log-probabilities, written to its ``error.json``."""
    line = (f"model '{spec.name}': the model gives NaN or infinite log-probabilities on plain text; its weights "
            "are damaged or it does not run in this dtype (try dtype: float32)")
    write_json(mdir / ERROR, {"error": line})
    failed(spec.name, [line])
    return line


def _model_steps(lm: Any, spec: ModelSpec, mdir: Path, work: dict[str, str], steps: list[Any],
                 force: bool) -> list[str]:
    """Run each model-only step that is not done, through the model cache where it has a key; the failures' lines."""
    failures: list[str] = []
    for owner, label, settings, done, run in steps:
        clear_step_error(mdir, owner.name)  # measured now, or done (one that wrote its artifact, then failed)
        if done():
            continue
        kind = "evidence pass" if isinstance(owner, EvidencePass) else "collector"
        try:
            with blamed(f"{kind} '{owner.name}'"), torch.no_grad():
                if settings is None:  # not cacheable: computed every run
                    run()
                else:
                    work[owner.name] = run_cached(lm, ModelStep(owner.name, settings), mdir, run, done,
                                                  use_cache=not force, owner=owner)
                    write_json(mdir / MODEL_WORK, work)
        except UserError as e:
            lines = [f"model '{spec.name}', {label}: {line}" for line in e.lines]
            record_step_failure(mdir, owner.name, "\n".join(lines), f"failed: {e.lines[0] if e.lines else e}")
            failures.extend(failed(f"{spec.name} / {label}", lines))
        except Exception as e:  # a bug in the step (a plugin's), or no memory for it: its failure alone
            if the_environments(e):  # a full disk, a directory that cannot be written: every step would meet it
                raise
            failures += step_crashed(f"{spec.name} / {label}", f"model '{spec.name}', {kind} '{owner.name}'", mdir,
                                     owner.name, e)
            _free_memory(e)
    return failures


def _sweep_step_errors(rd: RunDir, spec: ModelSpec, profile: Profile) -> None:
    """Remove the failures kept of steps and passes this run does not run (turned off since they failed) or that are
    done (a pass that wrote its artifact, then failed): the card would say they failed, and a rerun would not
    measure them.
    """
    mdir = rd.model_dir(spec.slug)
    steps: dict[str, Any] = {p.name: partial(p.model_done, profile, mdir) for p in enabled_collectors(profile)
                             if hasattr(p, "model_done")}
    steps.update({ev.name: partial(ev.done, mdir) for ev in evidence_passes(profile, spec, "model")})
    dirs = [(mdir, steps)] + [(d, {ev.name: partial(ev.done, d) for ev in evidence_passes(profile, spec, "task", t)})
                              for t in profile.tasks for d in [rd.task_dir(spec.slug, t.name)]]
    for directory, named in dirs:
        if (directory / STEP_ERRORS).is_dir():
            for path in (directory / STEP_ERRORS).glob("*.json"):
                done = named.get(path.stem)
                with contextlib.suppress(Exception):  # a plugin's done() that raises: its failure stays said
                    if done is None or done():  # turned off, or done after all (it wrote, then failed)
                        clear_step_error(directory, path.stem)


def _free_memory(e: BaseException) -> None:
    """After a step that ran out of memory: what it held back to the allocator, before the next step."""
    if isinstance(e, MemoryError) or out_of_memory(e):
        e.__traceback__ = None  # its frames hold the step's tensors
        gc.collect()
        return_free_memory()
        if torch.cuda.is_available():
            with contextlib.suppress(RuntimeError):
                torch.cuda.empty_cache()


def _write_smoke(lm: Any, profile: Profile, mdir: Path, progress: bool) -> None:
    """``smoke.json``, from the held-out reference pass's log-probs where this model has them."""
    write_json(mdir / SMOKE, smoke(lm, n_texts=profile.smoke_texts, progress=progress,
                                   reference=mdir / REFERENCE_LOGPROBS))


@dataclass
class _Scores:
    """How the task-scope evidence uses the score cache (``use``; ``refresh`` under ``--force``), and where its
    statuses go: the model's ``model_work.json`` (``"<task>/<pass>": "cached" | "computed"``).
    """

    mode: str
    work: dict[str, Any]
    mdir: Path

    def record(self, task: str, statuses: dict[str, str]) -> None:
        """Add one task's statuses to the model's record."""
        if statuses:
            self.work.update({f"{task}/{name}": v for name, v in statuses.items()})
            write_json(self.mdir / MODEL_WORK, self.work)


def _collect_task(lm: Any, cfg: RunConfig, profile: Profile, task: TaskConfig, task_dir: Path,
                  progress: bool, scores: _Scores | None = None) -> list[str]:
    """One task: run it, then every evidence pass that is not done; the plan is built once.

    A pass that fails is one failure line naming it; the passes after it still run.
    """
    name = lm.spec.name
    if task_done(profile, lm.spec, task, task_dir, cfg.seed):
        return []
    (task_dir / ERROR).unlink(missing_ok=True)
    try:
        plan = plan_task(lm, task, cfg.seed)
        summary = run_task(lm, profile, task, plan, task_dir, seed=cfg.seed, progress=progress)
    except UserError as e:
        own = f"task '{task.name}': "  # a line of the task's own that names it already
        return _task_failed(f"{name} / {task.name}", [task_dir],
                            [f"model '{name}', {own}{line.removeprefix(own)}" for line in e.lines])
    except Exception as e:  # a task's or a plugin's own bug: that task fails, the model's other tasks still run
        if not_the_tasks(e):
            raise
        return task_crashed(name, task.name, task_dir, e)
    _log_score(name, task.name, summary)
    return _evidence(lm, cfg, profile, task, task_dir, plan, scores)


def _log_score(model: str, task: str, summary: dict[str, Any]) -> None:
    log(f"{model} / {task}: {100 * summary['score']:.1f}% "
        f"[{100 * summary['ci_low']:.1f}, {100 * summary['ci_high']:.1f}] n={summary['n']}"
        + (f", MUI {summary['mui']:.2f}%" if "mui" in summary else "")
        + (f" ({summary['seconds']:.1f} s)" if isinstance(summary.get("seconds"), (int, float)) else ""))


def _evidence(lm: Any, cfg: RunConfig, profile: Profile, task: TaskConfig, task_dir: Path, plan: Any,
              scores: _Scores | None = None) -> list[str]:
    """Every task-scope evidence pass of one task that is not done (a failing pass: its lines; the rest still run)."""
    name = lm.spec.name
    ctx = EvidenceContext(lm=lm, profile=profile, seed=cfg.seed, directory=task_dir, plan=plan,
                          score_cache=scores.mode if scores is not None else "off")
    failures: list[str] = []
    passes = []
    for ev in evidence_passes(profile, lm.spec, "task", task):
        if ev.done(task_dir) and (why := stale_reason(ev, task, task_dir, cfg.seed)) is not None:
            log(f"{name} / {task.name}: {ev.label}: {why}: measuring it again")
            try:
                ev.forget(task_dir)
            except Exception as e:  # noqa: BLE001 - a plugin's bug: that pass's failure, the others still run
                failures += _failed(name, task.name, ev.label, UserError(f"forgetting its stale artifacts failed: {e}"))
                continue
        clear_step_error(task_dir, ev.name)
        try:
            with blamed(f"evidence pass '{ev.name}'"), torch.no_grad():
                ev.prepare(ctx)
            passes.append(ev)
        except UserError as e:
            failures += _failed(name, task.name, ev.label, e, task_dir, ev.name)
        except Exception as e:  # a bug in the pass (a plugin's), or no memory: its failure alone, the others run
            failures += _crashed(name, task.name, ev, task_dir, e)
    for ev in passes:
        if ev.done(task_dir):
            continue
        try:
            with blamed(f"evidence pass '{ev.name}'"), torch.no_grad():
                ev.run(ctx)
        except UserError as e:
            failures += _failed(name, task.name, ev.label, e, task_dir, ev.name)
        except Exception as e:  # a bug in the pass (a plugin's), or no memory: its failure alone, the others run
            failures += _crashed(name, task.name, ev, task_dir, e)
    if scores is not None:
        scores.record(task.name, ctx.scores)
    return failures


def _collect_lm_eval(lm: Any, cfg: RunConfig, profile: Profile, members: list[TaskConfig], rd: RunDir,
                     progress: bool, scores: _Scores | None = None) -> list[str]:
    """One lm-eval entry (a task, or a group's leaf tasks): reporter answers its requests, lm-eval scores them,
    then every evidence pass of each leaf (:mod:`reporter.collect.lm_eval_run`, :mod:`reporter.collect.lm_eval_score`).
    """
    from . import lm_eval_run as run
    from . import lm_eval_score as score
    from .lm_eval_lm import ReporterLM

    name = lm.spec.name
    dirs = {t.name: rd.task_dir(lm.spec.slug, t.name) for t in members}
    group = members[0].lm_eval_group
    groups_path = rd.model_dir(lm.spec.slug) / run.GROUPS
    if all(task_done(profile, lm.spec, t, dirs[t.name], cfg.seed) for t in members) and (
            group is None or group in (read_json(groups_path) or {})):
        return []
    label = f"task '{group}'" if group else f"task '{members[0].name}'"
    for d in dirs.values():
        (d / ERROR).unlink(missing_ok=True)
    try:
        resolved = run.resolve_entry(profile, members[0])
        rlm = ReporterLM(lm)
        with run.lm_eval_bars(progress):
            plans = [run.plan_leaf(rlm, resolved, t, cfg.seed) for t in members]
        done = {t.name: run.leaf_complete(profile, dirs[t.name]) for t in members}
        if not all(done.values()) or (group is not None and group not in (read_json(groups_path) or {})):
            spent: dict[str, float] = {}  # each leaf's own requests; lm-eval's scoring of the entry is shared
            for lp in plans:
                if done[lp.config.name]:
                    rlm.store.update(read_json(dirs[lp.config.name] / run.RESPONSES))
                else:
                    t0 = time.perf_counter()
                    run.execute_leaf(lm, rlm, profile, lp, dirs[lp.config.name], seed=cfg.seed, progress=progress)
                    spent[lp.config.name] = time.perf_counter() - t0
            with run.lm_eval_bars(progress):
                result = score.score_entry(rlm, resolved, plans)
            if rlm.misses:
                log(f"{name} / {label}: {rlm.misses} lm-eval requests were not among the answers reporter collected")
            if group is not None:
                write_json(groups_path, {**(read_json(groups_path) or {}), **score.group_results(result, resolved)})
            for lp in plans:
                if not done[lp.config.name]:
                    collection, fallback = run.leaf_collection(lm, profile, lp)
                    summary = score.finish_leaf(lm, profile, lp, dirs[lp.config.name], result, seed=cfg.seed,
                                              collection=collection, fallback=fallback,
                                              spent=spent.get(lp.config.name))
                    _log_score(name, lp.config.name, summary)
    except UserError as e:
        return _task_failed(f"{name} / {label}", [dirs[t.name] for t in members if not task_done(
            profile, lm.spec, t, dirs[t.name], cfg.seed)], [f"model '{name}', {label}: {line.removeprefix(f'{label}: ')}"
                                                            for line in e.lines])
    except Exception as e:  # lm-eval's or a plugin's own error on this entry: the model's other tasks still run
        if not_the_tasks(e):
            raise
        return task_crashed(name, group or members[0].name, dirs[members[0].name], e,
                            also=[dirs[t.name] for t in members[1:]
                                  if not task_done(profile, lm.spec, t, dirs[t.name], cfg.seed)])
    failures: list[str] = []
    for lp in plans:
        failures += _evidence(lm, cfg, profile, lp.config, dirs[lp.config.name], lp.plan, scores)
    return failures


def _task_failed(who: str, task_dirs: list[Path], lines: list[str]) -> list[str]:
    """A task's failure for a reason of its own (its data, its definition): its lines, also kept in each of its
    directories' ``error.json`` (the card says why the task is missing; the task's next run removes it).
    """
    for d in task_dirs:
        with contextlib.suppress(OSError, UserError):
            write_json(d / ERROR, {"error": "\n".join(lines)})
    return failed(who, lines)


def _crashed(model: str, task: str, ev: EvidencePass, task_dir: Path, e: Exception) -> list[str]:
    """The failure line of one evidence pass of one task that raised unexpectedly or ran out of memory; an
    environment failure (every pass would meet it) is raised on.
    """
    if the_environments(e):
        raise e
    lines = step_crashed(f"{model} / {task} / {ev.label}",
                         f"model '{model}', task '{task}', evidence pass '{ev.name}'", task_dir, ev.name, e)
    _free_memory(e)
    return lines


def _failed(model: str, task: str, label: str, e: UserError, task_dir: Path | None = None,
            name: str | None = None) -> list[str]:
    """The failure lines of one evidence pass of one task (and its progress line), kept in its ``errors/<name>.json``
    (the card's test says why it was not measured).
    """
    lines = [f"model '{model}', task '{task}', {label}: {line}" for line in e.lines]
    if task_dir is not None and name is not None:
        record_step_failure(task_dir, name, "\n".join(lines), f"failed: {e.lines[0] if e.lines else e}")
    return failed(f"{model} / {task} / {label}", lines)


def _work_record(mdir: Path) -> dict[str, Any]:
    """The model's ``model_work.json`` (which model-only work was computed, which cached): a record, not a result,
    so a damaged one is started again (rewritten as this run's steps finish) instead of stopping every resume.
    """
    try:
        return dict(read_json(mdir / MODEL_WORK) or {})
    except UserError:
        write_json(mdir / MODEL_WORK, {})
        return {}
