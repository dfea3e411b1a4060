"""The score step of lm-eval tasks: lm-eval's ``evaluate`` on the answers reporter collected, then each leaf's
samples and summary (step 3 of :mod:`reporter.collect.lm_eval_run`).

``score_entry`` runs lm-eval's filters, ``process_results`` and aggregation over an entry's task dict with every
answer taken from the model's store; ``finish_leaf`` turns lm-eval's per-item metrics into reporter's samples (one
metric's value is the item's score) and writes the leaf's summary with its CI, chance and constant answers;
``group_results`` keeps lm-eval's aggregate of each group.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..config import Profile
from ..errors import UserError
from ..metrics.stats import score_ci
from ..store.atomic import json_ok, read_json, write_json
from ..store.checked import check_before_writing, merge_fields
from ..store.layout import SAMPLES, SUMMARY
from ..store.samples import append_samples, read_samples
from ..tasks.lm_eval_source import FEWSHOT_SEED, Resolved, lm_eval_version
from .collectors import CollectorPlugin, TaskContext, enabled_collectors
from .failures import blamed
from .lm_eval_majority import generated_share, majority_generated, majority_option, option_share
from .lm_eval_run import RESPONSES, LeafPlan, configure


def score_entry(rlm: Any, resolved: Resolved, leaves: Sequence[LeafPlan], *, bootstrap_iters: int = 100000
                ) -> dict[str, Any]:
    """lm-eval's ``evaluate`` over the entry's task dict, every answer from the model's store.

    Answers missing from the store (none, when every leaf was executed) are computed on the spot
    without collectors, and counted in ``rlm.misses``.
    """
    from lm_eval.evaluator import evaluate

    for lp in leaves:
        configure(lp.task, lp.config)
    chat = any(lp.chat_template for lp in leaves)
    samples = {lp.config.lm_eval: lp.ids for lp in leaves}
    loaded = resolved.loaded
    rlm.misses = 0
    if set(samples) != set(loaded["tasks"]):  # a subset of a group's leaves: score them alone
        loaded = {"tasks": {n: loaded["tasks"][n] for n in samples}, "groups": {}, "group_map": {}}
    with contextlib.redirect_stdout(sys.stderr):  # lm-eval prints ("bootstrapping for stddev: …"): stdout is the summary's
        out = evaluate(rlm, loaded, samples=samples, log_samples=True, bootstrap_iters=bootstrap_iters,
                       apply_chat_template=chat, fewshot_as_multiturn=chat)
    if out is None:
        raise UserError("lm-eval returned no results (a distributed rank other than 0)")
    return out  # type: ignore[no-any-return]


def primary_metric(lp: LeafPlan, samples: Sequence[dict[str, Any]]) -> str:
    """Reporter's score of the leaf: ``metric:`` of the profile, else lm-eval's first metric under its first filter,
    as ``name,filter`` (``acc,none``, ``exact_match,strict-match``).
    """
    filters = list(dict.fromkeys(s["filter"] for s in samples))
    names = [f"{m},{f}" for f in filters for m in next(s["metrics"] for s in samples if s["filter"] == f)]
    want = lp.config.metric
    if want is None:
        return names[0]
    if want in names:
        return want
    matches = [n for n in names if n.split(",")[0] == want]
    if len(matches) >= 1:
        return matches[0]
    raise UserError(f"task '{lp.config.name}': metric '{want}' is not one lm-eval reports for it; it reports "
                    f"{', '.join(names)}")


def finish_leaf(lm: Any, profile: Profile, lp: LeafPlan, task_dir: Path, result: dict[str, Any], *, seed: int,
                collection: str, plugins: list[CollectorPlugin] | None = None,
                fallback: str | None = None, spent: float | None = None) -> dict[str, Any]:
    """Write one leaf's samples (lm-eval's per-item metrics) and summary; merge the collectors' batches.

    ``spent``: the seconds :func:`execute_leaf` took on this leaf; the summary's ``seconds`` is that plus this
    call's own time (lm-eval's scoring of the whole entry, shared by its leaves, is in neither).
    """
    t0 = time.perf_counter()
    leaf = lp.config.lm_eval
    assert leaf is not None
    ctx = TaskContext(lm=lm, profile=profile, config=lp.config, plan=lp.plan, task_dir=task_dir, seed=seed)
    plugins = enabled_collectors(profile) if plugins is None else plugins
    logged = result["samples"][leaf]
    metric = primary_metric(lp, logged)
    name, filt = metric.split(",", 1)
    by_doc: dict[str, dict[str, Any]] = {}
    for s in logged:
        by_doc.setdefault(str(s["doc_id"]), {})[s["filter"]] = s
    no_answer = no_answer_values(lp.task, filt) if lp.output_type == "generate_until" else None
    partial: dict[str, dict[str, Any]] = {}
    store: dict[str, Any] = {}
    for part in ctx.parts("lm_eval", ".json"):
        doc = read_json(part)
        store.update(doc["store"])
        partial.update({r["id"]: r for r in doc["records"]})
    if json_ok(task_dir / RESPONSES):
        store = {**read_json(task_dir / RESPONSES), **store}
    records = []
    for it in lp.plan.items:
        per = by_doc[it.id]
        s = per[filt]
        value = s[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= float(value) <= 1:
            raise UserError(f"task '{lp.config.name}': lm-eval's metric '{metric}' gives {value!r} for an item, not a "
                            "score in [0, 1]; choose another with metric: (per-item scores in [0, 1]: acc, acc_norm, "
                            "exact_match …)")
        metrics = {f"{m},{f}": _plain(x[m]) for f, x in per.items() for m in x["metrics"]}
        rec = {**partial.get(it.id, {"id": it.id}), "gold": it.answer, "score": float(value),
               "extracted": _plain(s["filtered_resps"][0]) if lp.output_type == "generate_until" else
               partial.get(it.id, {}).get("response"), "lm_eval_metrics": metrics}
        if no_answer is not None:  # the filter found no answer in the reply: its fallback, or nothing
            rec["unread"] = isinstance(rec["extracted"], str) and rec["extracted"].strip() in no_answer
        records.append(rec)
    (task_dir / SAMPLES).unlink(missing_ok=True)
    append_samples(task_dir / SAMPLES, records)
    write_json(task_dir / RESPONSES, store)
    samples = read_samples(task_dir / SAMPLES)
    ci = score_ci([r["score"] for r in records], seed=seed, exact_binary=True)
    chance = None
    if lp.output_type == "multiple_choice" and name in ("acc", "acc_norm"):
        chance = float(np.mean([1.0 / len(it.choices or [1]) for it in lp.plan.items]))
    elif lp.output_type == "generate_until" and name == "exact_match":
        chance = 0.0
    summary: dict[str, Any] = {
        "task": lp.config.name, "scorer": "lm_eval", "shots": int(result["n-shot"].get(leaf, lp.plan.shots)),
        "limit": len(lp.ids), "items_sha256": lp.plan.items_sha256, **ci.to_dict(), "source": lp.plan.task.source, "description": lp.plan.task.description,
        "mean_response_tokens": float(np.mean([r.get("response_tokens", 0) for r in records])) if records else 0.0,
        "collection": collection, "lm_eval": lm_eval_info(lp, result, metric)}
    if fallback:
        summary["collection_fallback"] = fallback
    if chance is not None:
        summary["chance"] = chance
        chosen = [lp.task.eval_docs[i] for i in lp.ids] if lp.config.items is not None else None
        best = (majority_option(lp.task, docs=chosen) if lp.output_type == "multiple_choice"
                else majority_generated(lp.task, metric, docs=chosen))
        if best is not None:
            summary["majority"] = dict(best)
            evaluated_docs = [lp.task.eval_docs[i] for i in lp.ids]
            here = (option_share(lp.task, best["answer"], evaluated_docs) if lp.output_type == "multiple_choice"
                    else generated_share(lp.task, metric, best["answer"], evaluated_docs))
            if here is not None:
                summary["majority"]["evaluated"] = here  # the same answer on the evaluated documents
    for p in plugins:
        with blamed(f"collector '{p.name}'"):
            merge_fields(summary, p.finish_task(ctx, samples), f"collector '{p.label or p.name}'")
    if spent is not None:
        summary["seconds"] = round(spent + time.perf_counter() - t0, 3)
    check_before_writing(summary, "summary", f"task '{lp.config.name}'")
    write_json(task_dir / SUMMARY, summary)
    shutil.rmtree(ctx.parts_dir, ignore_errors=True)
    return summary


def no_answer_values(task: Any, filter_name: str) -> frozenset[str]:
    """What lm-eval's filter pipeline ``filter_name`` of ``task`` gives for a reply in which it found no answer:
    nothing, or the fallback each of its filters is built with (the regex filters' ``[invalid]`` by default, or the
    one the task's YAML sets).

    >>> from lm_eval.filters import build_filter_ensemble
    >>> class T:
    ...     _filters = [build_filter_ensemble("strict", [["regex", {"regex_pattern": "#### ([0-9]+)",
    ...                                                             "fallback": "NONE"}], ["take_first", None]])]
    >>> sorted(no_answer_values(T(), "strict"))
    ['', 'NONE']
    """
    values = {""}
    for ensemble in getattr(task, "_filters", None) or ():
        if getattr(ensemble, "name", None) != filter_name:
            continue
        for make in getattr(ensemble, "filters", ()):
            try:
                fallback = getattr(make(), "fallback", None)
            except Exception:  # noqa: BLE001 - a filter that cannot be built alone: its fallback is not known
                continue
            if isinstance(fallback, str):
                values.add(fallback.strip())
    return frozenset(values)


def lm_eval_info(lp: LeafPlan, result: dict[str, Any], metric: str) -> dict[str, Any]:
    """What the card and results.json say about an lm-eval task: its name, version, shots, metrics and data."""
    leaf = lp.config.lm_eval
    assert leaf is not None
    cfg = lp.task.dump_config()
    values = {k: _plain(v) for k, v in result["results"].get(leaf, {}).items() if k not in ("alias", "name", "sample_len")}
    return {"task": leaf, "group": lp.config.lm_eval_group, "version": result.get("versions", {}).get(leaf),
            "n_shot": int(result["n-shot"].get(leaf, 0)), "output_type": lp.output_type, "metric": metric,
            "metrics": values, "higher_is_better": dict(result.get("higher_is_better", {}).get(leaf, {})),
            "harness": f"lm-eval {lm_eval_version()}", "dataset": {"path": cfg.get("dataset_path"),
                                                                    "name": cfg.get("dataset_name"),
                                                                    "split": _eval_split(lp.task)},
            "digest": lp.config.lm_eval_digest, "chat_template": lp.chat_template, "fewshot_seed": FEWSHOT_SEED,
            "doc_ids": list(lp.ids)}


def _eval_split(task: Any) -> str | None:
    """The split lm-eval evaluates a task on: its ``test_split`` where it has test documents, else its
    ``validation_split`` (lm-eval's ``eval_docs``).
    """
    cfg = task.config
    split = cfg.test_split if task.has_test_docs() else cfg.validation_split if task.has_validation_docs() else None
    return str(split) if split else None


def _plain(v: Any) -> Any:
    """A value as JSON: numpy scalars as numbers, tuples as lists, N/A stderr as None."""
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, str) and v == "N/A":
        return None
    if isinstance(v, float) and v != v:
        return None
    return v


def group_results(result: dict[str, Any], resolved: Resolved) -> dict[str, Any]:
    """lm-eval's aggregate of each group of the entry (its metrics and its members), as JSON, with how the group's
    YAML weighs its tasks per metric (``weight_by_size``: lm-eval averages every leaf task by its items, or each
    leaf as one): a mean over tasks weighs the group's tasks the same way (:mod:`reporter.analyse.task_weights`).
    """
    out: dict[str, Any] = {}
    for group in result.get("groups", {}) or {}:
        values = {k: _plain(v) for k, v in result["groups"][group].items() if k not in ("alias", "name", "sample_len")}
        out[group] = {"metrics": values, "subtasks": list(result.get("group_subtasks", {}).get(group, [])),
                      "version": result.get("versions", {}).get(group), "harness": f"lm-eval {lm_eval_version()}"}
        obj = (resolved.loaded.get("groups") or {}).get(group)
        if weighting := _weight_by_size(obj):
            out[group]["weight_by_size"] = weighting
        if leaves := _leaves(obj):  # every task the aggregate is over, subgroups expanded (lm-eval's get_all_tasks)
            out[group]["leaves"] = leaves
    return out


def _leaves(group: Any) -> list[str]:
    """The names of every leaf task of an lm-eval group object (its ``get_all_tasks()``), or [] where it has none."""
    try:
        return [str(t.task_name) for t in group.get_all_tasks()] if group is not None else []
    except Exception:  # another lm-eval's group object: the subtasks list stays the record
        return []


def _weight_by_size(group: Any) -> dict[str, bool]:
    """{metric: weight_by_size} of an lm-eval group object's ``aggregate_metric_list`` (empty where it has none)."""
    out: dict[str, bool] = {}
    for agg in getattr(group, "aggregate_metric_list", None) or ():
        metric = agg.get("metric") if isinstance(agg, dict) else getattr(agg, "metric", None)
        flag = agg.get("weight_by_size", True) if isinstance(agg, dict) else getattr(agg, "weight_by_size", True)
        if isinstance(metric, str) and metric not in out:
            out[metric] = bool(flag)
    return out
