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

__all__ = ["Group", "by_size", "group_of", "groups_of", "sizes_of", "task_shares", "weighted_mean", "SHARES_RULE"]

#: the rule, in words, for the card's methods and a document's ``weights`` block
SHARES_RULE = ("an lm-eval group counts as one task, its tasks weighted as the group's YAML weighs them (by their "
               "items where it sets weight_by_size, lm-eval's default; else equally); every other task counts as one")


class Group(str):
    """A group's name that also says how the group weighs its tasks: ``by_size`` (lm-eval's ``weight_by_size``,
    its default) by their items, else each task as one.

    >>> g = Group("bbh", by_size=False)
    >>> g == "bbh", g.by_size, Group("mmlu").by_size
    (True, False, True)
    """

    by_size: bool

    def __new__(cls, name: str, by_size: bool = True) -> "Group":
        """The group ``name``, weighing its tasks by their items where ``by_size``."""
        obj = super().__new__(cls, name)
        obj.by_size = by_size
        return obj


def by_size(entry: Mapping[str, Any] | None, summary: Mapping[str, Any] | None, group: str) -> bool:
    """Whether ``group`` weighs its tasks by their items for the metric of ``summary`` (a task summary of the model
    entry ``entry``): the ``weight_by_size`` lm-eval's group YAML gives for that metric (``lm_eval_groups.json``),
    or the task summary's own ``lm_eval_group_by_size`` (a board's copy); lm-eval's default, by items, where
    neither says.

    >>> e = {"lm_eval_groups": {"bbh": {"weight_by_size": {"exact_match": False}}}}
    >>> by_size(e, {"lm_eval": {"metric": "exact_match,get-answer"}}, "bbh"), by_size({}, {}, "mmlu")
    (False, True)
    """
    if isinstance(summary, Mapping) and isinstance(summary.get("lm_eval_group_by_size"), bool):
        return bool(summary["lm_eval_group_by_size"])
    info = ((entry or {}).get("lm_eval_groups") or {}).get(group) if isinstance(entry, Mapping) else None
    flags = info.get("weight_by_size") if isinstance(info, Mapping) else None
    if not isinstance(flags, Mapping) or not flags:
        return True
    block = (summary or {}).get("lm_eval") if isinstance(summary, Mapping) else None
    metric = str((block or {}).get("metric") or "").split(",")[0] if isinstance(block, Mapping) else ""
    flag = flags.get(metric, next(iter(flags.values())))
    return bool(flag) if isinstance(flag, bool) else True


def group_of(summary: Mapping[str, Any] | None) -> str | None:
    """The lm-eval group a task summary's task was run as part of (``lm_eval.group``), or None.

    >>> group_of({"lm_eval": {"group": "mmlu"}}), group_of({"lm_eval_group": "mmlu"}), group_of({"score": 1.0})
    ('mmlu', 'mmlu', None)
    """
    if not isinstance(summary, Mapping):
        return None
    block = summary.get("lm_eval")
    g = (block.get("group") if isinstance(block, Mapping) else None) or summary.get("lm_eval_group")
    return g if isinstance(g, str) and g else None


def groups_of(models: Mapping[str, Mapping[str, Any]], tasks: Sequence[str]) -> dict[str, str]:
    """{task: group} for the tasks of ``tasks`` that some model's summary places in an lm-eval group
    (``models``: results.json's ``models``, each with its ``tasks``).

    >>> groups_of({"a": {"tasks": {"anatomy": {"lm_eval": {"group": "mmlu"}}, "arc": {}}}}, ["anatomy", "arc"])
    {'anatomy': 'mmlu'}
    """
    out: dict[str, str] = {}
    for t in tasks:
        for e in models.values():
            summary = ((e or {}).get("tasks") or {}).get(t)
            if (g := group_of(summary)) is not None:
                out[t] = Group(g, by_size(e, summary, g))
                break
    return out


def sizes_of(models: Mapping[str, Mapping[str, Any]], tasks: Sequence[str]) -> dict[str, int]:
    """{task: its number of items} (the largest ``n`` any model's summary of it records).

    >>> sizes_of({"a": {"tasks": {"t": {"n": 8}}}, "b": {"tasks": {"t": {"n": 6}, "u": {"n": 2}}}}, ["t", "u"])
    {'t': 8, 'u': 2}
    """
    out: dict[str, int] = {}
    for t in tasks:
        ns = [n for e in models.values() if isinstance(n := (((e or {}).get("tasks") or {}).get(t) or {}).get("n"), int)]
        out[t] = max(ns, default=0)
    return out


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
