"""How much each task weighs in a model's mean over tasks: an lm-eval group counts as one task.

A profile that names lm-eval's ``mmlu`` runs its 57 subjects as 57 tasks. Counted one each, they would make
the mean over tasks (the leaderboard's score, the Utility Law's per-model average, the law-adjusted score)
almost all MMLU, where every leaderboard that reports MMLU beside ARC or HellaSwag counts it once. So a
group is one *unit*, like a task of its own, and its tasks share that unit as the group's own aggregate weighs them:
by their number of items where its YAML sets ``weight_by_size`` (lm-eval's default, MMLU's), else equally; a task
outside any group is one unit. The mean over tasks is
``sum(share[t] * score[t]) / units``: with no group every share is 1 and it is the plain mean, to the bit.

>>> shares, units = task_shares(["arc", "anatomy", "virology", "boolq"],
...                             {"anatomy": "mmlu", "virology": "mmlu"}, {"anatomy": 30, "virology": 10})
>>> shares, units
({'arc': 1.0, 'anatomy': 0.75, 'virology': 0.25, 'boolq': 1.0}, 3)
>>> weighted_mean({"arc": 0.5, "anatomy": 0.4, "virology": 0.8, "boolq": 0.6}, shares, units)
0.5333333333333333
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["Group", "aggregated_groups", "grouping", "groups_of", "sizes_of", "task_shares", "weighted_mean",
           "weighs_by_size", "task_metric", "SHARES_RULE"]

#: the rule, in words, for the ranking's ``method``
SHARES_RULE = ("an lm-eval group that lm-eval aggregates counts as one task, its tasks weighted as the group's YAML "
               "weighs them (by their items, lm-eval's default, unless it sets weight_by_size: false); every other "
               "task counts as one")


class Group(str):
    """A group's name that also says how the group weighs its tasks: ``by_size`` (lm-eval's ``weight_by_size``,
    its default) by their items, else each task as one.

    >>> g = Group("bbh", by_size=False)
    >>> g == "bbh", g.by_size, Group("mmlu").by_size
    (True, False, True)
    """

    by_size: bool
    #: whether the weighting was recorded (``weight_by_size`` in lm_eval_groups.json), not lm-eval's default assumed
    recorded: bool

    def __new__(cls, name: str, by_size: bool = True, recorded: bool = True) -> "Group":
        """The group ``name``, weighing its tasks by their items where ``by_size``."""
        obj = super().__new__(cls, name)
        obj.by_size, obj.recorded = by_size, recorded
        return obj


def aggregated_groups(entry: Mapping[str, Any] | None) -> dict[str, Group]:
    """{task: the outermost group lm-eval aggregated it in} for one model entry, from its ``lm_eval_groups``
    (``models/<slug>/lm_eval_groups.json``: only groups lm-eval computed a score for, each with its ``leaves``, or in
    older runs its ``subtasks``, which may be subgroups). A tag (``ai2_arc``) or a group without an aggregate
    (``openllm``) is in none, so its tasks stay tasks of their own, and a group inside it that lm-eval aggregated
    (``openllm``'s ``mmlu``) is the unit of its tasks. Each group weighs its tasks by their items unless its YAML set
    ``weight_by_size: false`` for the metric its tasks recorded (:func:`weighs_by_size`; ``weight_by_size`` is
    recorded per metric, absent in older runs: by items).

    >>> e = {"lm_eval_groups": {"mmlu": {"subtasks": ["mmlu_stem"], "weight_by_size": {"acc": True}},
    ...                         "mmlu_stem": {"subtasks": ["mmlu_anatomy"], "weight_by_size": {"acc": False}},
    ...                         "bbh": {"subtasks": ["bbh_navigate"], "weight_by_size": {"exact_match": False}}}}
    >>> sorted((t, g, g.by_size) for t, g in aggregated_groups(e).items())
    [('bbh_navigate', 'bbh', False), ('mmlu_anatomy', 'mmlu', True)]
    """
    groups = (entry or {}).get("lm_eval_groups") if isinstance(entry, Mapping) else None
    if not isinstance(groups, Mapping):
        return {}
    members = {g: [str(x) for x in (info.get("leaves") or info.get("subtasks") or [])] for g, info in groups.items()
               if isinstance(info, Mapping)}

    def leaves(g: str, seen: frozenset[str] = frozenset()) -> list[str]:
        out: list[str] = []
        for x in members.get(g, []):
            out += leaves(x, seen | {g}) if x in members and x not in seen | {g} else [x]
        return list(dict.fromkeys(out))

    flat = {g: leaves(g) for g in members}
    inner = {x for g, info in groups.items() if isinstance(info, Mapping) for x in (info.get("subtasks") or [])
             if x in members and x != g}
    out: dict[str, Group] = {}
    # the largest group holding a task is the outermost; of two the same size (a wrapper around one subgroup), the
    # one no other group lists among its subtasks
    for g in sorted(flat, key=lambda g: (-len(flat[g]), g in inner, g)):
        flags = (groups[g] or {}).get("weight_by_size")
        recorded = isinstance(flags, Mapping) and bool(flags)
        by_size = weighs_by_size(groups[g], task_metric(entry, flat[g]))
        for t in flat[g]:
            out.setdefault(t, Group(g, by_size, recorded))
    return out


def weighs_by_size(info: Mapping[str, Any] | None, metric: str | None = None) -> bool:
    """Whether a group of ``lm_eval_groups.json`` (``info``) weighs its tasks by their items for ``metric`` (the
    tasks' metric, ``acc`` or lm-eval's ``acc,none``): lm-eval decides it per aggregated metric (its YAML's
    ``weight_by_size``), so the flag of that metric where the group recorded one; otherwise, unless it set
    ``weight_by_size: false`` for any metric it aggregates (not recorded, as in older runs: lm-eval's default, by
    items).

    >>> weighs_by_size({"weight_by_size": {"acc": True}}), weighs_by_size({"weight_by_size": {"acc": False}})
    (True, False)
    >>> weighs_by_size({})
    True
    >>> mixed = {"weight_by_size": {"acc": True, "acc_norm": False}}
    >>> weighs_by_size(mixed, "acc,none"), weighs_by_size(mixed, "acc_norm,none"), weighs_by_size(mixed)
    (True, False, False)
    """
    flags = (info or {}).get("weight_by_size")
    if not isinstance(flags, Mapping):
        return True
    name = metric.partition(",")[0] if isinstance(metric, str) else None
    if name is not None and isinstance(flags.get(name), bool):
        return bool(flags[name])
    return not any(v is False for v in flags.values())


def task_metric(entry: Mapping[str, Any] | None, tasks: Sequence[str]) -> str | None:
    """The lm-eval metric (``acc,none``) the first of ``tasks`` that ``entry`` (a model of results.json) ran with
    records: the metric reporter reads of a group's tasks, and so the one whose ``weight_by_size`` weighs them.

    >>> task_metric({"tasks": {"b": {"lm_eval": {"metric": "acc_norm,none"}}}}, ["a", "b"])
    'acc_norm,none'
    """
    summaries = (entry or {}).get("tasks") if isinstance(entry, Mapping) else None
    for t in tasks:
        block = ((summaries or {}).get(t) or {}).get("lm_eval") if isinstance(summaries, Mapping) else None
        if isinstance(block, Mapping) and isinstance(block.get("metric"), str):
            return str(block["metric"])
    return None


def groups_of(models: Mapping[str, Mapping[str, Any]], tasks: Sequence[str]) -> dict[str, Group]:
    """{task: its lm-eval group} for the tasks of ``tasks`` that lm-eval aggregated in a group
    (:func:`aggregated_groups`; ``models``: results.json's ``models``). A board's copy of a task summary carries
    its group as ``lm_eval_unit`` (None: in no aggregated group) and the group's weighting as
    ``lm_eval_group_by_size`` (None: not recorded). A task is in the first group any model places it in; a group
    weighs its tasks as the first model that recorded its weighting says (lm-eval's default, by items, where none
    did), so one group has one weighting whichever model comes first.

    >>> e = {"lm_eval_groups": {"mmlu": {"subtasks": ["anatomy", "virology"]}}, "tasks": {"anatomy": {}, "arc": {}}}
    >>> groups_of({"a": e}, ["anatomy", "arc"])
    {'anatomy': 'mmlu'}
    >>> copy = lambda unit, flag: {"tasks": {"anatomy": {"lm_eval_unit": unit, "lm_eval_group_by_size": flag}}}
    >>> placed = groups_of({"a": copy(None, None), "b": copy("mmlu", None), "c": copy("mmlu", False)}, ["anatomy"])
    >>> placed, placed["anatomy"].by_size
    ({'anatomy': 'mmlu'}, False)
    """
    candidates: dict[str, list[Group]] = {}
    for e in models.values():
        placed = aggregated_groups(e)
        for t in tasks:
            summary = ((e or {}).get("tasks") or {}).get(t)
            if isinstance(summary, Mapping) and "lm_eval_unit" in summary:  # a board's copy
                unit, flag = summary.get("lm_eval_unit"), summary.get("lm_eval_group_by_size")
                if isinstance(unit, str) and unit:
                    candidates.setdefault(t, []).append(Group(unit, flag is not False, isinstance(flag, bool)))
            elif t in placed:
                candidates.setdefault(t, []).append(placed[t])
    weighting: dict[str, Group] = {}  # per group: the first recorded weighting, else the first default
    for found in candidates.values():
        for g in found:
            kept = weighting.get(str(g))
            if kept is None or (g.recorded and not kept.recorded):
                weighting[str(g)] = g
    return {t: weighting[str(candidates[t][0])] for t in tasks if candidates.get(t)}


def sizes_of(models: Mapping[str, Mapping[str, Any]], tasks: Sequence[str]) -> dict[str, int]:
    """{task: its number of items} (the largest ``n`` any model's summary of it records).

    >>> sizes_of({"a": {"tasks": {"t": {"n": 8}}}, "b": {"tasks": {"t": {"n": 6}, "u": {"n": 2}}}}, ["t", "u"])
    {'t': 8, 'u': 2}
    """
    out: dict[str, int] = {}
    for t in tasks:
        ns = [n for e in models.values()
              if isinstance(n := (((e or {}).get("tasks") or {}).get(t) or {}).get("n"), int)]
        out[t] = max(ns, default=0)
    return out


def grouping(models: Mapping[str, Mapping[str, Any]],
             tasks: Sequence[str] | None = None) -> tuple[dict[str, Group], dict[str, int]]:
    """{task: its lm-eval group} (:func:`groups_of`) and {task: its number of items} (:func:`sizes_of`) of
    ``models`` (results.json's ``models``, a board's rows), over ``tasks`` (default: every task any model has):
    what :func:`task_shares` needs.

    >>> grouping({"a": {"lm_eval_groups": {"g": {"subtasks": ["x", "y"]}}, "tasks": {"x": {"n": 3}, "y": {"n": 1}}}})
    ({'x': 'g', 'y': 'g'}, {'x': 3, 'y': 1})
    """
    if tasks is None:
        tasks = sorted({t for e in models.values() for t in ((e or {}).get("tasks") or {})})
    return groups_of(models, tasks), sizes_of(models, tasks)


def task_shares(tasks: Sequence[str], groups: Mapping[str, str], sizes: Mapping[str, float]) -> tuple[dict[str, float],
                                                                                                    int]:
    """Each task's share of one unit, and the number of units (see the module docstring).

    ``groups``: {task: its lm-eval group} (tasks not in it are ungrouped); ``sizes``: each grouped task's number of
    items (a group whose sizes are all missing or zero shares its unit equally).
    """
    members: dict[str, list[str]] = {}
    for t in tasks:
        if t in groups:
            members.setdefault(groups[t], []).append(t)
    shares: dict[str, float] = {}
    for t in tasks:
        if t not in groups:
            shares[t] = 1.0
            continue
        leaves = members[groups[t]]
        total = float(sum(max(0.0, float(sizes.get(x) or 0)) for x in leaves))
        if getattr(groups[t], "by_size", True) and total > 0:
            shares[t] = max(0.0, float(sizes.get(t) or 0)) / total
        else:  # a group that weighs each of its tasks as one (weight_by_size: false), or sizes unknown
            shares[t] = 1.0 / len(leaves)
    return shares, len([t for t in tasks if t not in groups]) + len(members)


def weighted_mean(values: Mapping[str, float], shares: Mapping[str, float], units: int) -> float:
    """``sum(shares[t] * values[t]) / units`` over the tasks of ``shares`` (the mean over tasks, groups as one);
    with no group, NumPy's mean of the values, as every mean over tasks was computed before groups weighed one.
    """
    if all(s == 1.0 for s in shares.values()):
        return float(np.mean([values[t] for t in shares]))
    return float(sum(values[t] * s for t, s in shares.items()) / units)
