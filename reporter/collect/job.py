"""The collect stage for one model (a job): load it, measure, write artifacts.

Self-contained so that an executor can run it anywhere that sees the run directory. Each
finished piece of work is written as soon as it exists, so a failed or interrupted job loses
nothing and a rerun picks up where it stopped. Steps: load, ``model.json``, the smoke
perplexity, every enabled model-scope collector (e.g. LPP), one pass over held-out text (the
Min-K% reference log-probs and the verbatim chance rate: :mod:`reporter.collect.reference`),
then per task the task run, the contamination evidence (option order, then verbatim
completion, partly from the same pass; benchmarks only) and, when asked, the ablation check.
"""
from __future__ import annotations

import gc
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..config import ModelSpec, Profile, RunConfig, TaskConfig
from ..errors import UserError
from ..models.loading import load_model
from ..store.atomic import json_ok, read_json, write_json
from ..store.layout import (
    ERROR,
    MODEL_META,
    OPTION_ORDER,
    REFERENCE_LOGPROBS,
    REFERENCE_VERBATIM,
    SMOKE,
    SPLIT_REFERENCE,
    VALIDATION,
    VERBATIM,
    RunDir,
)
from ..store.ragged import ragged_ok
from ..tasks import Task, is_probe
from .ablation import validate_neurons
from .collectors import enabled_collectors
from .option_order import collect_option_order
from .plan import plan_task
from .reference import collect_reference
from .smoke import smoke
from .split_reference import collect_split_reference
from .task_run import run_task, task_complete
from .verbatim import collect_verbatim, verbatim_tokens


def log(msg: str) -> None:
    """Progress messages go to stderr (stdout carries only the final summary)."""
    tqdm.write(msg, file=sys.stderr)


def _validating(profile: Profile) -> bool:
    return profile.mui.validate_neurons and profile.mui.enabled


def task_done(profile: Profile, task: TaskConfig, task_dir: Path, evidence: bool = True) -> bool:
    """Whether every artifact of one task of one model exists (summary, collectors, evidence, ablation)."""
    if not task_complete(profile, task_dir):
        return False
    if _validating(profile) and not json_ok(task_dir / VALIDATION):
        return False
    return not evidence or is_probe(task.name) or all(
        json_ok(task_dir / name) for name in (VERBATIM, OPTION_ORDER, SPLIT_REFERENCE))


def wants_evidence(spec: ModelSpec, profile: Profile) -> bool:
    """Whether a model gets contamination evidence: not an untrained (``random:``) baseline,
    unless ``contamination.untrained`` asks for it.

    An untrained model cannot have seen any data, and with no knowledge of language its option
    orders and continuations are chance by construction: evidence on it would only cost time.
    """
    return spec.source_type != "random" or profile.contamination.untrained


def _needs_reference(profile: Profile) -> bool:
    """Whether a task has published text (the held-out reference is its counterpart; probes have none)."""
    return any(not is_probe(t.name) for t in profile.tasks)


def model_done(rd: RunDir, slug: str, profile: Profile, evidence: bool = True) -> bool:
    """Whether every artifact of one model exists."""
    mdir = rd.model_dir(slug)
    if not json_ok(mdir / MODEL_META) or not json_ok(mdir / SMOKE):
        return False
    if not all(p.model_done(profile, mdir) for p in enabled_collectors(profile)):
        return False
    if evidence and _needs_reference(profile) and not (json_ok(mdir / REFERENCE_VERBATIM)
                                                        and ragged_ok(mdir / REFERENCE_LOGPROBS)):
        return False
    return all(task_done(profile, t, rd.task_dir(slug, t.name), evidence) for t in profile.tasks)


def collect_model(cfg: RunConfig, index: int, root: str, profile: Profile, *, force: bool = False,
                  progress: bool = True) -> list[str]:
    """Load model ``index`` of ``cfg``, measure it and write its artifacts under ``root``; returns failure lines."""
    rd = RunDir(root)
    spec = cfg.models[index]
    mdir = rd.model_dir(spec.slug)
    if force and mdir.exists():
        shutil.rmtree(mdir)
    elif model_done(rd, spec.slug, profile, wants_evidence(spec, profile)):
        log(f"{spec.name}: already complete in {mdir}, skipping")
        return []
    (mdir / ERROR).unlink(missing_ok=True)
    try:
        lm = load_model(spec, run_device=cfg.device, run_dtype=cfg.dtype, run_seed=cfg.seed)
        for plugin in enabled_collectors(profile):  # e.g. an SAE that does not fit this model: fail before any work
            plugin.check_model(lm, profile)
    except UserError as e:
        write_json(mdir / ERROR, {"error": str(e)})
        log(f"{spec.name}: FAILED: {e}")
        return list(e.lines)
    failures: list[str] = []
    write_json(mdir / MODEL_META, {"name": spec.name, **lm.meta})
    if not json_ok(mdir / SMOKE):
        write_json(mdir / SMOKE, smoke(lm, n_texts=profile.smoke_texts, progress=progress))
    if not math.isfinite(read_json(mdir / SMOKE)["perplexity"]):
        (mdir / SMOKE).unlink()
        line = (f"model '{spec.name}': the model gives NaN or infinite log-probabilities on plain text; its weights "
                "are damaged or it does not run in this dtype (try dtype: float32)")
        write_json(mdir / ERROR, {"error": line})
        log(f"{spec.name}: FAILED: {line}")
        return [line]
    for plugin in enabled_collectors(profile):
        if plugin.model_done(profile, mdir):
            continue
        try:
            plugin.run_model(lm, profile, mdir)
        except UserError as e:
            failures.extend(f"model '{spec.name}', {plugin.label}: {line}" for line in e.lines)
            log(f"{spec.name} / {plugin.label}: FAILED: {e}")
    if wants_evidence(spec, profile) and _needs_reference(profile):
        try:
            collect_reference(lm, mdir, profile.contamination, seed=cfg.seed)
        except UserError as e:
            failures.extend(f"model '{spec.name}', held-out reference text: {line}" for line in e.lines)
            log(f"{spec.name} / held-out reference text: FAILED: {e}")
    for task in profile.tasks:
        failures += _collect_task(lm, cfg, profile, task, rd.task_dir(spec.slug, task.name), progress)
    del lm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return failures


def _collect_task(lm: Any, cfg: RunConfig, profile: Profile, task: TaskConfig, task_dir: Path,
                  progress: bool) -> list[str]:
    """One task: run it, then its contamination evidence and ablation check; the plan is built once."""
    name = lm.spec.name
    evidence = wants_evidence(lm.spec, profile)
    if task_done(profile, task, task_dir, evidence):
        return []
    try:
        plan = plan_task(lm, task, cfg.seed)
        summary = run_task(lm, profile, task, plan, task_dir, seed=cfg.seed, progress=progress)
        if evidence and not plan.task.probe:  # generated probes have no published text that could have leaked
            _collect_evidence(lm, plan.task, plan.items, task_dir, profile, cfg.seed)
        if _validating(profile):
            validate_neurons(lm, plan, task_dir, seed=cfg.seed)
    except UserError as e:
        log(f"{name} / {task.name}: FAILED: {e}")
        return [f"model '{name}', task '{task.name}': {line}" for line in e.lines]
    log(f"{name} / {task.name}: {100 * summary['score']:.1f}% "
        f"[{100 * summary['ci_low']:.1f}, {100 * summary['ci_high']:.1f}] n={summary['n']}"
        + (f", MUI {summary['mui']:.2f}%" if "mui" in summary else ""))
    return []


def _collect_evidence(lm: Any, task: Task, items: Any, task_dir: Path, profile: Profile, seed: int) -> None:
    """A task's option orders, then its verbatim check (the option-order pass over each item's
    published-order text gives the verbatim answers of the items it covers on the way), then its
    items against as many of its other split (the Min-K% test's format-matched reference).
    """
    settings = profile.contamination
    # asked for even when verbatim.json exists: the answers change where the pass splits each text, so
    # the option-order numbers are the same in a fresh and in a resumed run
    greedy_for = verbatim_tokens(lm, items, settings, seed=seed)
    order = collect_option_order(lm, items, task_dir, settings, seed=seed, greedy_for=greedy_for)
    collect_verbatim(lm, items, task_dir, settings, seed=seed, known=order.get("greedy"))
    collect_split_reference(lm, task, items, task_dir, settings, seed=seed)

