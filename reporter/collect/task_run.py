"""Evaluate one model on one task: generate, score, one hooked teacher-forced pass, save.

Per batch: greedy generation, scoring, then ONE teacher-forced hooked pass over prompt +
response that feeds every enabled collector plugin (:mod:`reporter.collect.collectors`); each
plugin writes its per-batch artifact, then the batch's sample lines are appended and flushed.
A rerun recomputes only batches with a missing sample or a missing plugin artifact, so a run
killed at any moment (even SIGKILL) resumes to the same results as an uninterrupted run.
``summary.json`` is written last: its presence (with every plugin's final artifact) marks the
task done.

>>> from reporter.config import Profile, TaskConfig
>>> from reporter.collect.plan import plan_task
>>> import tempfile, pathlib
>>> cfg = TaskConfig(name="arc_easy", limit=2, max_new_tokens=4)
>>> s = run_task(lm, Profile(name="doc", tasks=(cfg,)), cfg, plan_task(lm, cfg, seed=0),
...              pathlib.Path(tempfile.mkdtemp()), seed=0, progress=False)
>>> s["n"], 0 <= s["score"] <= 1, "mui" in s, "calibration" in s
(2, True, True, True)
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Profile, TaskConfig
from ..errors import UserError
from ..instrument.batch import teacher_forced_batch
from ..instrument.hooked_pass import hooked_pass
from ..metrics.stats import score_ci
from ..models.generation import fusable_generation, generate, generate_collecting
from ..scoring import ANSWER_LAST, SCORERS, answer_share, chance_level, get_scorer, majority_answer
from ..store.atomic import read_json, write_json
from ..store.checked import check_before_writing, document_ok, merge_fields
from ..store.layout import SAMPLES, SUMMARY
from ..store.samples import append_samples, read_samples
from .collectors import BatchContext, CollectorPlugin, TaskContext, enabled_collectors
from .failures import blamed, log
from .plan import TaskPlan


def task_complete(profile: Profile, task_dir: Path) -> bool:
    """Whether the task's summary, its samples and every enabled collector's final artifact are there, whole.

    A damaged or truncated artifact (a torn ``samples.jsonl``, an ``.npz`` that fails its checksum,
    a summary that is not JSON or not what its schema says) makes the task incomplete, so a rerun recomputes it.
    """
    if not document_ok(task_dir / SUMMARY, "summary"):
        return False
    n = read_json(task_dir / SUMMARY).get("n")
    if not isinstance(n, int) or len(read_samples(task_dir / SAMPLES)) < n:
        return False
    return all(p.task_done(task_dir, n) for p in enabled_collectors(profile))


def stale_answers(plan: TaskPlan, task_dir: Path) -> str | None:
    """Why what ``task_dir`` holds answers other items than ``plan``'s, or None (it answers these, or nothing yet).

    A task's data can change under the same names (a new copy of a packaged dataset, an edited file): its
    ``summary.json`` records the items' and few-shot examples' digest (``items_sha256``), and each sample line its
    item's digest (``item_sha256``). A line of an item the plan does not hold, or whose digest is not the plan's
    item's, or a summary of other data, makes every artifact of the task stale (its collectors' and evidence
    passes' files were made from the same items). So does a summary or a line of a task that prompted or scored
    otherwise (``task_sha256``: :meth:`~reporter.tasks.Task.settings_sha256`). The prompt itself is not compared: a
    chat template may put today's date in it, and a task interrupted one day would start over the next.

    >>> from reporter.collect.plan import TaskPlan
    >>> from reporter.store.samples import append_samples
    >>> from reporter.tasks import Item, Task
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> old = TaskPlan(Task("t", "exact", "", "", load=list), [Item("1", "2+2?", "4")], ["2+2?"], [[1]], 0, ())
    >>> append_samples(d / "samples.jsonl", [{"id": "1", "prompt": "2+2?", "item_sha256": old.item_digests[0]}])
    >>> stale_answers(old, d) is None
    True
    >>> stale_answers(TaskPlan(old.task, [Item("1", "2+2?", "5")], ["2+2?"], [[1]], 0, ()), d)
    "item '1' is not the one answered before (the task's data changed)"
    >>> stale_answers(TaskPlan(old.task, [Item("2", "3+3?", "6")], ["3+3?"], [[1]], 0, ()), d)
    "item '1' was answered but is not among the task's items (the task's data changed)"
    """
    try:
        recorded = read_json(task_dir / SUMMARY, {})
    except UserError:  # damaged: the task is redone whatever it holds
        recorded = {}
    digest = recorded.get("items_sha256") if isinstance(recorded, dict) else None
    if isinstance(digest, str) and digest != plan.items_sha256:
        return "its items or few-shot examples are not the ones it was measured on (the task's data changed)"
    settings, now = recorded.get("task_sha256") if isinstance(recorded, dict) else None, plan.task.settings_sha256()
    planned = {it.id: d for it, d in zip(plan.items, plan.item_digests)}
    samples = read_samples(task_dir / SAMPLES)
    if any(isinstance(s, str) and s != now for s in (settings, *(r.get("task_sha256") for r in samples.values()))):
        return ("its instruction, answer prefix, scorer, token limit or stop sequences are not the ones it was "
                "measured with (the task changed)")  # a finished task's summary, or an interrupted one's lines
    for rid, r in samples.items():
        if rid not in planned:  # the configuration (limit, seed, core set) is the same: the data changed
            return f"item {rid[:60]!r} was answered but is not among the task's items (the task's data changed)"
        if r.get("item_sha256", planned[rid]) != planned[rid]:
            return f"item {rid[:60]!r} is not the one answered before (the task's data changed)"
    return None


def run_task(lm: Any, profile: Profile, config: TaskConfig, plan: TaskPlan, task_dir: Path, *, seed: int,
             progress: bool = True, plugins: list[CollectorPlugin] | None = None) -> dict[str, Any]:
    """Evaluate ``lm`` on one planned task, resuming from ``task_dir``; returns the summary.

    ``plugins``: the collectors to run (default: every one ``profile`` enables; ``[]`` gives
    generation and scoring alone, the benchmark's "collectors off"); with explicit plugins a
    finished ``summary.json`` is not reused (it says nothing about which plugins wrote it).
    """
    t0 = time.perf_counter()
    task_dir.mkdir(parents=True, exist_ok=True)
    summary_path = task_dir / SUMMARY
    if (why := stale_answers(plan, task_dir)) is not None:
        log(f"{lm.spec.name} / {plan.task.name}: {why}: measuring it again")
        shutil.rmtree(task_dir)
        task_dir.mkdir(parents=True)
    if plugins is None and task_complete(profile, task_dir):
        return read_json(summary_path)  # type: ignore[no-any-return]
    summary_path.unlink(missing_ok=True)  # a collector's final artifact is missing: recompute it
    ctx = TaskContext(lm=lm, profile=profile, config=config, plan=plan, task_dir=task_dir, seed=seed)
    ctx.parts_dir.mkdir(exist_ok=True)
    plugins = enabled_collectors(profile) if plugins is None else plugins
    scorer = get_scorer(plan.task.scorer)
    samples_path = task_dir / SAMPLES
    done = read_samples(samples_path)
    items, ids = plan.items, plan.prompt_ids
    settings = plan.task.settings_sha256()  # on every line: an interrupted task's lines say how they were prompted
    bs = lm.spec.max_batch_size
    order = sorted(range(len(items)), key=lambda i: (-len(ids[i]), i))
    batches = [order[i:i + bs] for i in range(0, len(order), bs)]
    todo = [(b, idx) for b, idx in enumerate(batches)
            if any(items[i].id not in done for i in idx) or not all(p.batch_done(ctx, b) for p in plugins)]
    bar = tqdm(total=len(items), initial=len(items) - sum(len(i) for _, i in todo), disable=not progress,
               desc=f"{lm.spec.name}: {plan.task.name}", leave=False)
    path, fallback = collection_choice(lm, profile, plugins)
    fused = path == "fused"
    for b, idx in todo:
        batch = BatchContext(task=ctx, index=b, positions=idx, generations=[])
        riders = [(p, p.for_generation(batch)) for p in plugins] if fused else []
        try:
            if fused:  # the collectors ride the generation's own forward passes
                batch.generations = generate_collecting(
                    lm, [ids[i] for i in idx], max_new_tokens=plan.task.max_new_tokens, stop=plan.stop,
                    collectors=[c for _, c in riders if c is not None])
            else:
                batch.generations = generate(lm, [ids[i] for i in idx], max_new_tokens=plan.task.max_new_tokens,
                                             stop=plan.stop, batch_size=len(idx))
        except FloatingPointError:  # reporter's greedy loop checks the logits it decodes from
            raise UserError(_nan_message(lm, plan)) from None
        for i, g in zip(idx, batch.generations):
            extracted, score = scorer(g.text, items[i].scorer_item())
            batch.records.append({"id": items[i].id, "item_sha256": plan.item_digests[i], "task_sha256": settings,
                                  "prompt": plan.prompts[i], "response": g.text,
                                  "extracted": extracted, "gold": items[i].answer, "score": float(score),
                                  "prompt_tokens": len(g.prompt_ids), "response_tokens": len(g.response_ids),
                                  "stopped_by": g.stopped_by, "batch": b})
        if fused:
            for p, c in riders:
                p.save_batch(c, batch)
        else:
            _collect(lm, batch, plugins)
        append_samples(samples_path, [r for r in batch.records if r["id"] not in done])
        bar.update(len(idx))
    bar.close()
    return finish_task(ctx, plugins, fused, fallback, started=t0)


def collection_path(lm: Any, profile: Profile, plugins: list[CollectorPlugin] | None = None) -> str:
    """``"fused"`` when the profile asks for it and the model and every enabled collector can ride
    generation (:func:`~reporter.models.generation.fusable_generation`,
    :meth:`~reporter.collect.collectors.CollectorPlugin.fusable`); else ``"teacher-forced"``.

    >>> from reporter.config import Profile
    >>> collection_path(lm, Profile(name="doc")), collection_path(lm, Profile(name="doc", collection="teacher-forced"))
    ('fused', 'teacher-forced')
    """
    return collection_choice(lm, profile, plugins)[0]


def collection_choice(lm: Any, profile: Profile, plugins: list[CollectorPlugin] | None = None
                      ) -> tuple[str, str | None]:
    """:func:`collection_path`, and why a task that asked for the fused path falls back to the slower
    teacher-forced pass (None when it does not: it rides generation, or the profile asked for the pass).

    The reason lands in the task's ``summary.json`` (``collection_fallback``), the manifest and the
    card's methods section.

    >>> from reporter.config import Profile
    >>> from reporter.collect.collectors import COLLECTORS
    >>> collection_choice(lm, Profile(name="doc"), [COLLECTORS.get("mui")])
    ('fused', None)
    >>> class TeacherForcedOnly(CollectorPlugin):
    ...     name = "tf_only"
    ...     def for_batch(self, batch): return None
    >>> collection_choice(lm, Profile(name="doc"), [COLLECTORS.get("lpp"), TeacherForcedOnly()])
    ('teacher-forced', "collector 'tf_only' cannot ride generation under this profile")
    """
    if profile.collection != "fused":
        return "teacher-forced", None
    why = fusable_generation(lm)
    if why is not None:
        return "teacher-forced", f"the model's generation cannot carry the collectors: {why}"
    plugins = enabled_collectors(profile) if plugins is None else plugins
    slow = [p.name for p in plugins if not p.fusable(profile)]
    if slow:
        names = ", ".join(f"'{n}'" for n in slow)
        return "teacher-forced", f"collector{'s' if len(slow) > 1 else ''} {names} cannot ride generation under this profile"
    return "fused", None


def _nan_message(lm: Any, plan: TaskPlan) -> str:
    return (f"model '{lm.spec.name}', task '{plan.task.name}': the model gives NaN or infinite logits; "
            "its weights are damaged or it does not run in this dtype")


def _collect(lm: Any, batch: BatchContext, plugins: list[CollectorPlugin]) -> None:
    """ONE teacher-forced pass feeds every plugin's collector; then each saves its batch artifact."""
    collectors = [(p, p.for_batch(batch)) for p in plugins]
    active = [c for _, c in collectors if c is not None]
    if active:
        gens = batch.generations
        pb = teacher_forced_batch([g.prompt_ids for g in gens], [g.response_ids for g in gens],
                                  lm.tokenizer.pad_token_id, lm.device)
        logits = hooked_pass(lm.model, lm.adapter, pb, active)
        # per position, not a masked copy of [B, T, V] (amax/amin carry a NaN or an infinity through)
        finite = torch.isfinite(logits.amax(-1)) & torch.isfinite(logits.amin(-1))
        if not bool(finite[pb.attention_mask.bool().to(logits.device)].all()):
            raise UserError(_nan_message(lm, batch.task.plan))
    for p, c in collectors:
        p.save_batch(c, batch)


def finish_task(ctx: TaskContext, plugins: list[CollectorPlugin], fused: bool,
                fallback: str | None = None, started: float | None = None) -> dict[str, Any]:
    """Score with a CI, let every plugin merge its batches into summary fields, write ``summary.json``.

    ``started``: a :func:`time.perf_counter` reading at the task's start; the summary then records ``seconds``,
    the wall time from it to the summary (generation, the collectors, scoring, the collectors' merge).
    """
    plan = ctx.plan
    samples = read_samples(ctx.task_dir / SAMPLES)
    recs = [samples[it.id] for it in plan.items]
    ci = score_ci([r["score"] for r in recs], seed=ctx.seed, exact_binary=True)
    summary: dict[str, Any] = {
        "task": plan.task.name, "scorer": plan.task.scorer, "shots": plan.shots, "limit": len(plan.items),
        "items_sha256": plan.items_sha256, "task_sha256": plan.task.settings_sha256(), **ci.to_dict(),
        "chance": chance_level(plan.task.scorer, [it.scorer_item() for it in plan.items]),
        "source": plan.task.source, **({"split": plan.task.split} if plan.task.split else {}),
        "description": plan.task.description,
        "mean_response_tokens": float(np.mean([r["response_tokens"] for r in recs])) if recs else 0.0,
        "collection": "fused" if fused else "teacher-forced",
        **({"answer_last": True} if plan.task.scorer in ANSWER_LAST and not SCORERS.builtin(plan.task.scorer)
           else {})}  # a plugin's scorer that reads the answer last: the analysis, without the plugin, reads it here
    # over the whole split, of which the evaluated items are a seeded sample; items chosen by id (a core set) are no
    # sample of it, so there the level is what the constant answer scores on those very items
    population = plan.items if ctx.config.items is not None else plan.task.items()
    if (best := majority_answer(plan.task.scorer, [it.scorer_item() for it in population])) is not None:
        summary["majority"] = {"answer": best[0], "share": best[1], "over": len(population),
                               "evaluated": answer_share(plan.task.scorer, best[0],
                                                         [it.scorer_item() for it in plan.items])}
    if fallback:
        summary["collection_fallback"] = fallback
    for p in plugins:
        with blamed(f"collector '{p.name}'"):
            merge_fields(summary, p.finish_task(ctx, samples), f"collector '{p.label or p.name}'")
    if plan.task.summarize is not None:
        merge_fields(summary, plan.task.summarize([r["response"] for r in recs], plan.items),
                     f"task '{plan.task.name}': its summarize")
    if started is not None:
        summary["seconds"] = round(time.perf_counter() - started, 3)
    check_before_writing(summary, "summary", f"task '{plan.task.name}'")
    write_json(ctx.task_dir / SUMMARY, summary)
    shutil.rmtree(ctx.parts_dir, ignore_errors=True)
    return summary
