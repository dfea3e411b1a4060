"""What the card says about a run's lm-evaluation-harness tasks: their blocks, lm-eval's group aggregates
folded into one row per group, and the task rows every list of tasks on the card walks.

>>> stderr_key("acc,none")
'acc_stderr,none'
"""
from __future__ import annotations

from typing import Any

from ..analyse.task_weights import Group, task_shares, weighs_by_size


def stderr_key(metric: str) -> str:
    """lm-eval's name of a metric's standard error: ``acc,none`` -> ``acc_stderr,none``.

    >>> stderr_key("acc,none"), stderr_key("exact_match,flexible-extract"), stderr_key("acc")
    ('acc_stderr,none', 'exact_match_stderr,flexible-extract', 'acc_stderr')
    """
    name, comma, filt = metric.partition(",")
    return f"{name}_stderr{comma}{filt}"


def lm_eval_view(card: dict[str, Any]) -> dict[str, Any] | None:
    """What the card says about the run's lm-eval tasks (None when it has none).

    ``tasks``: each lm-eval task's ``lm_eval`` block (the first model's); ``groups``: the groups whose leaves
    the card folds into one row, each with lm-eval's own aggregate per model (``cells``: value, stderr,
    n; lm-eval's number, not reporter's mean) and the other groups lm-eval aggregated inside it
    (``subgroups``, e.g. ``mmlu_stem`` inside ``mmlu``); ``harnesses``; ``mc``: whether a task is
    lm-eval ``multiple_choice`` (the card then says how MUI reads its answer); ``own_tasks``: whether the run
    also has reporter's own tasks; ``shots`` and ``chat_template``: the settings the lm-eval tasks ran with.
    """
    blocks: dict[str, dict[str, Any]] = {}
    for m in card["models"]:
        for t, s in m["tasks"].items():
            if s.get("lm_eval") and t not in blocks:
                blocks[t] = s["lm_eval"]
    if not blocks:
        return None
    leaves: dict[str, list[str]] = {}
    for t in card["benchmarks"]:
        if (b := blocks.get(t)) and b.get("group"):
            leaves.setdefault(b["group"], []).append(t)
    aggregates = {g: info for m in card["models"] for g, info in (m.get("lm_eval_groups") or {}).items()}
    groups = []
    for g, members in leaves.items():
        if g not in aggregates:  # a tag, or a group lm-eval did not aggregate: its leaves stay rows of their own
            continue
        metric = blocks[members[0]]["metric"]
        chances = [c for t in members if (c := _first(card, t, "chance")) is not None]
        inside = [x for x in aggregates if x != g and x not in leaves and x in aggregates[g].get("subtasks", [])]
        groups.append({"name": g, "tasks": members, "metric": metric, "version": aggregates[g].get("version"),
                       "harness": aggregates[g].get("harness"),
                       "n_shot": sorted({blocks[t].get("n_shot") for t in members} - {None}),
                       "task_versions": sorted({str(v) for t in members if (v := blocks[t].get("version")) is not None}),
                       "output_types": sorted({blocks[t].get("output_type") for t in members} - {None}),
                       "chance": _group_chance(card, members, aggregates[g], metric) if len(chances) == len(members) else None,
                       "cells": _group_cells(card, g, metric),
                       "subgroups": [{"name": x, "metric": metric, "cells": _group_cells(card, x, metric)}
                                     for x in inside]})
    return {"tasks": blocks, "groups": groups,
            "harnesses": sorted({b["harness"] for b in blocks.values() if b.get("harness")}),
            "mc": any(b.get("output_type") == "multiple_choice" for b in blocks.values()),
            "own_tasks": any(t not in blocks for t in [*card["benchmarks"], *card.get("probes", [])]),
            "shots": sorted({b["n_shot"] for b in blocks.values() if b.get("n_shot") is not None}),
            "chat_template": sorted({bool(b.get("chat_template")) for b in blocks.values()})}


def _group_chance(card: dict[str, Any], members: list[str], info: dict[str, Any], metric: str | None = None) -> float:
    """A group's chance level: its tasks' chance levels weighted as lm-eval's aggregate of the group weighs their
    scores of ``metric`` (by their items unless the group's YAML sets ``weight_by_size: false`` for it), so that it
    is the score of chance-level answers on every task, where the group row shows lm-eval's aggregate.

    >>> card = {"models": [{"tasks": {"a": {"chance": 0.25, "n": 30}, "b": {"chance": 0.5, "n": 10}}}]}
    >>> _group_chance(card, ["a", "b"], {}), _group_chance(card, ["a", "b"], {"weight_by_size": {"acc": False}})
    (0.3125, 0.375)
    """
    shares, units = task_shares(members, {t: Group("group", weighs_by_size(info, metric)) for t in members},
                                {t: _first(card, t, "n") or 0 for t in members})
    return float(sum(shares[t] * _first(card, t, "chance") for t in members) / units)


def _first(card: dict[str, Any], task: str, key: str) -> Any:
    return next((m["tasks"][task][key] for m in card["models"] if m["tasks"].get(task, {}).get(key) is not None),
                None)


def _group_cells(card: dict[str, Any], group: str, metric: str) -> dict[str, dict[str, Any]]:
    """lm-eval's aggregate of ``group`` per model: {model: {"value", "stderr", "n"}} (as lm-eval reports it)."""
    out = {}
    for m in card["models"]:
        info = (m.get("lm_eval_groups") or {}).get(group)
        if info and isinstance(v := (info.get("metrics") or {}).get(metric), (int, float)):
            metrics = info["metrics"]
            count = metrics.get("sample_count")
            out[m["name"]] = {"value": v, "stderr": metrics.get(stderr_key(metric)),
                              "n": count.get(metric) if isinstance(count, dict) else None}
    return out


def task_rows(card: dict[str, Any]) -> list[dict[str, Any]]:
    """The benchmark tasks as the card lists them: ``{"kind": "task", "name"}`` each, except that the leaves of an
    lm-eval group lm-eval aggregated fold into one ``{"kind": "group", "name", "tasks", ...}`` row (the group of
    :func:`lm_eval_view`) where its first leaf stands; ``label`` is what a list of tasks names.

    >>> [r["label"] for r in task_rows({"benchmarks": ["a", "b"], "lm_eval": None})]
    ['a', 'b']
    """
    groups = {t: g for g in (card["lm_eval"] or {}).get("groups", []) for t in g["tasks"]}
    out: list[dict[str, Any]] = []
    for t in card["benchmarks"]:
        if (g := groups.get(t)) is None:
            out.append({"kind": "task", "name": t, "label": t})
        elif t == g["tasks"][0]:
            out.append({**g, "kind": "group", "label": f"{g['name']} ({len(g['tasks'])} lm-eval tasks)"})
    return out
