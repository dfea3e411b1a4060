"""The leaderboard's statistics: who is ranked, rank intervals and tiers, chance, ties, power.

* Ranked: trained models (not untrained references, not failed) that finished every benchmark
  task (LPP probes are not benchmarks). Their score is the mean of the task scores, an lm-eval
  group counting as one task (:mod:`reporter.analyse.task_weights`; the references' means too); rank
  intervals and tiers come from the paired item bootstrap of :mod:`reporter.metrics.ranking`
  on the items every ranked model answered.
* References: untrained models, shown below the ranked models as "reference: untrained" rows with
  their score, never with a rank; the theoretical chance level; and, where some task's most common
  answer scores more than chance, always giving each task's most common answer.
* Chance: each (model, benchmark task) is tested against the task's chance level, or the share
  its most common answer gets where that is higher (BoolQ's "yes")
  (:func:`reporter.metrics.stats.above_chance`, one-sided, α = 0.05, not adjusted).
* Ties: for the top two ranked models, on how many benchmark tasks their paired difference is
  not significant after the Holm adjustment of results.json's comparisons.
* Power: for the top two ranked models, per benchmark task, the smallest difference the run
  could detect and the items needed for a 5-point difference (:mod:`reporter.metrics.power`).

>>> from reporter.analyse.results import build_results
>>> res = build_results(run_dir)
>>> sorted(leaderboard(res, per_item_scores(res, run_dir), seed=0, n_resamples=200))
['above_chance', 'not_ranked', 'power', 'ranking', 'references', 'ties']
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Required, TypedDict

import numpy as np

from ..metrics.power import (
    POWER,
    min_detectable_mcnemar,
    n_needed_mcnemar,
    ttest_min_detectable,
    ttest_n_needed,
)
from ..metrics.ranking import bootstrap_ranks
from ..metrics.stats import ALPHA, above_chance
from ..schema import NotRanked, Ties, is_untrained
from ..store.layout import SAMPLES, RunDir
from ..store.samples import item_scores
from ..tasks import is_probe
from .task_weights import SHARES_RULE, groups_of, sizes_of, task_shares, weighted_mean

__all__ = ["leaderboard", "per_item_scores", "PLANNED_DIFFERENCE", "FALLBACK_CHANCE", "Leaderboard", "PowerAdvice"]

#: the difference (a fraction) the sample-size advice plans for: 5 percentage points
PLANNED_DIFFERENCE = 0.05
#: chance levels by scorer for runs whose summaries predate the ``chance`` field (multiple choice
#: needs the option counts, so it has none here)
FALLBACK_CHANCE = {"bool": 0.5, "exact": 0.0, "numeric": 0.0, "math": 0.0, "code": 0.0}

PerItem = dict[str, dict[str, dict[str, float]]]  # {model: {task: {item id: score}}}


class ReferenceRow(TypedDict, total=False):
    """An untrained model's score, or the theoretical chance level or the most common answers' (``model`` null),
    below the ranking; ``evaluated_score``: the most common answers' score on the evaluated items.
    """

    model: Required[str | None]
    score: Required[float]
    kind: Required[str]
    reason: Required[str]
    evaluated_score: float


class PowerRow(TypedDict, total=False):
    """One task's power for the top two models (:class:`reporter.schema.PowerRow`; null: nothing to plan from)."""

    task: str
    n: int
    observed_diff: float
    test: str
    discordance: float
    sd_diff: float
    min_detectable: float | None
    n_needed: int | None
    reason: str
    underpowered: bool


class PowerAdvice(TypedDict):
    """``analysis.power`` (:class:`reporter.schema.Power`): the top two models' power per task, and the headline."""

    models: list[str]
    alpha: float
    power: float
    planned_difference: float
    per_task: list[PowerRow]
    underpowered: list[str]
    headline: dict[str, Any] | None


class Leaderboard(TypedDict):
    """What :func:`leaderboard` returns: the ranking keys of ``analysis`` (:class:`reporter.schema.Analysis`)."""

    ranking: dict[str, Any] | None
    references: list[ReferenceRow]
    not_ranked: list[NotRanked]
    above_chance: list[dict[str, Any]]
    ties: Ties | None
    power: PowerAdvice | None


def per_item_scores(results: dict[str, Any], run_dir: str | Path) -> PerItem:
    """Per-item scores of every model and finished task, from ``samples.jsonl`` (a file that holds another number of
    items than the task's ``n``, e.g. cut after the task finished, is left out: :func:`reporter.store.samples.item_scores`).
    """
    rd = RunDir(run_dir)
    out: PerItem = {}
    for name, e in (results.get("models") or {}).items():
        for task, summary in (e.get("tasks") or {}).items():
            scores = item_scores(rd.task_dir(e.get("slug", name), task) / SAMPLES, (summary or {}).get("n"))
            if scores is not None:
                out.setdefault(name, {})[task] = scores
    return out


def _chance(summary: dict[str, Any]) -> float | None:
    if "chance" in summary:
        c = summary["chance"]
        return float(c) if isinstance(c, (int, float)) else None
    return FALLBACK_CHANCE.get(str(summary.get("scorer")))


def _majority(summary: dict[str, Any]) -> tuple[str, float] | None:
    """A task's most common answer and its share (results.json from before it was recorded: none)."""
    m = summary.get("majority")
    if isinstance(m, dict) and isinstance(m.get("share"), (int, float)):
        return str(m.get("answer")), float(m["share"])
    return None


def leaderboard(results: dict[str, Any], per_item: PerItem, *, seed: int, n_resamples: int = 2000) -> Leaderboard:
    """The ``ranking``, ``references``, ``not_ranked``, ``above_chance``, ``ties`` and ``power`` of a run."""
    models = results.get("models") or {}
    usable = {n: e for n, e in models.items() if e.get("status") != "failed"}
    benchmarks = sorted({t for e in usable.values() for t in (e.get("tasks") or {}) if not is_probe(t)})
    groups = groups_of(usable, benchmarks)  # an lm-eval group's tasks count as one task in every mean
    chance: dict[str, float | None] = {}
    majority: dict[str, float | None] = {}
    answer: dict[str, str] = {}
    evaluated: dict[str, float | None] = {}  # the constant answer's share of the evaluated items, where recorded
    for t in benchmarks:
        levels = {_chance(e["tasks"][t]) for e in usable.values() if t in (e.get("tasks") or {})}
        chance[t] = levels.pop() if len(levels) == 1 else None
        # the one answer and share every model that recorded it agrees on (a board may merge runs from before it was
        # recorded: those models are tested against it too); models that disagree on it: none
        shares = {x for e in usable.values() if t in (e.get("tasks") or {}) if (x := _majority(e["tasks"][t])) is not None}
        agreed = shares.pop() if len(shares) == 1 else None
        majority[t] = agreed[1] if agreed else None
        if agreed:
            answer[t] = agreed[0]
            here = {float(v) for e in usable.values() if isinstance(m := (e.get("tasks") or {}).get(t, {}).get("majority"),
                                                                      dict) and isinstance(v := m.get("evaluated"), (int, float))}
            evaluated[t] = here.pop() if len(here) == 1 else None
    ranked: list[str] = []
    not_ranked: list[NotRanked] = []
    references: list[str] = []
    for name, e in models.items():
        missing = [t for t in benchmarks if t not in (e.get("tasks") or {}) or name not in per_item
                   or not per_item[name].get(t)]
        if e.get("status") == "failed":
            not_ranked.append({"model": name, "reason": "failed to evaluate"})
        elif missing:
            not_ranked.append({"model": name, "reason": f"did not finish {', '.join(missing)}"})
        elif is_untrained(e):
            references.append(name)
        else:
            ranked.append(name)
    out: Leaderboard = {"ranking": None, "references": [], "not_ranked": not_ranked, "above_chance": [],
                        "ties": None, "power": None}
    if ranked and benchmarks:
        common = {t: sorted(set.intersection(*(set(per_item[m][t]) for m in ranked))) for t in benchmarks}
        tasks = [t for t in benchmarks if common[t]]
        scores = {t: {m: np.array([per_item[m][t][i] for i in common[t]]) for m in ranked} for t in tasks}
        rshares, runits = task_shares(tasks, groups, {t: len(common[t]) for t in tasks})
        out["ranking"] = {**bootstrap_ranks(scores, seed=seed, n_resamples=n_resamples, shares=rshares, units=runits),
                          "alpha": ALPHA,
                          "method": "paired item bootstrap over the items every ranked model answered; tasks fixed"
                                    + ("; " + SHARES_RULE if any(v != 1.0 for v in rshares.values()) else "")}
    # the references' means weigh the tasks by the same rule as the ranking; a group's tasks by their number of items
    # in the task (the ranking: by the items every ranked model answered, the same where every model answered all)
    wshares, wunits = task_shares(benchmarks, groups, sizes_of(usable, benchmarks))

    def mean(values: dict[str, float]) -> float:
        return weighted_mean(values, wshares, wunits)

    for name in references if benchmarks else []:  # no finished benchmark: no score to show
        s = mean({t: models[name]["tasks"][t]["score"] for t in benchmarks})
        out["references"].append({"model": name, "score": s, "kind": "chance",
                                  "reason": "untrained reference: what a model that learnt nothing scores; never ranked"})
    theoretical = [chance[t] for t in benchmarks]
    known = [c for c in theoretical if c is not None]
    if benchmarks and len(known) == len(theoretical):
        out["references"].append({"model": None, "score": mean(dict(zip(benchmarks, known))), "kind": "theoretical",
                                  "reason": "theoretical chance: 1/#options for multiple choice, 1/2 for yes/no, "
                                            "0 for generative tasks, averaged over the tasks of the mean score ("
                                            + ", ".join(benchmarks) + ")"})
        floor = {t: max(c, m) if (m := majority[t]) is not None else c for t, c in zip(benchmarks, known)}
        # the same rule on the items the models answered: the better of guessing and the split's constant answer's
        # share of them; unknown where a task has a constant answer but recorded no share of its items (a run from
        # before it was recorded, an lm-eval generated-answer task)
        on_items = {t: max(c, e) if (e := evaluated.get(t)) is not None else c if majority[t] is None else None
                for t, c in zip(benchmarks, known)}
        complete = all(v is not None for v in on_items.values())
        trivial = [t for t, c in zip(benchmarks, known) if floor[t] > c]
        lopsided = [t for t, c in zip(benchmarks, known) if complete and (on_items[t] or 0.0) > c and t not in trivial]
        if trivial or lopsided:
            # a trivial answer that scores more than guessing somewhere: the floor a model must clear
            ref: ReferenceRow = {
                "model": None, "score": mean(floor), "kind": "majority",
                "reason": ("always each task's most common answer where that scores more than chance ("
                           + ", ".join(trivial) + "), chance elsewhere, averaged over the tasks of the mean score"
                           if trivial else "chance on every task over its split: no task's most common answer scores "
                                           "more there")
                          + (f"; on the evaluated items the most common answer also beats chance on "
                             f"{', '.join(lopsided)}" if lopsided else "")}
            if complete:
                ref["evaluated_score"] = mean({t: float(on_items[t] or 0.0) for t in benchmarks})
            out["references"].append(ref)
    for name in ranked + references:
        for t in benchmarks:
            if t in (models[name].get("tasks") or {}) and per_item.get(name, {}).get(t):
                # the model's own chance level, over the items it answered: models of another kind may answer another
                # set (a base model's shot held out of a file without a few-shot split), where the task has no one
                # level for the references but each model still has its own to be tested against
                own = _chance(models[name]["tasks"][t])
                row = above_chance(list(per_item[name][t].values()), own if own is not None else chance[t],
                                   majority=majority[t])
                if row.get("baseline_kind") == "majority":
                    row["majority_answer"] = answer[t]
                out["above_chance"].append({"model": name, "task": t, "reference": name in references, **row})
    if len(ranked) >= 2 and out["ranking"]:
        a, b = (r["model"] for r in out["ranking"]["models"][:2])
        out["ties"] = _ties(a, b, benchmarks, results.get("comparisons") or [])
        out["power"] = _power(a, b, benchmarks, per_item)
    return out


def not_above_constant(references: list[ReferenceRow] | list[dict[str, Any]],
                       means: dict[str, float | None]) -> tuple[float, list[str]] | None:
    """The constant answers' mean score on the evaluated items (the ``majority`` reference's ``evaluated_score``) and
    the models of ``means`` (name: mean score over the same tasks) that do not score above it, in ``means``'s order;
    None where no such level was recorded (a run from before it was) or every model is above it.

    >>> refs = [{"model": None, "kind": "majority", "score": 0.19, "evaluated_score": 0.28, "reason": "…"}]
    >>> not_above_constant(refs, {"a": 0.27, "b": 0.6, "c": None})
    (0.28, ['a'])
    >>> not_above_constant(refs[:0], {"a": 0.27}) is None
    True
    """
    row = next((r for r in references if r.get("kind") == "majority"), None) or {}
    level = row.get("evaluated_score")
    if not isinstance(level, (int, float)):
        return None
    below = [m for m, v in means.items() if v is not None and v <= float(level) + 1e-12]
    return (float(level), below) if below else None


def constant_answer_caution(level: float, named: str, where: str = "On the evaluated items") -> str:
    """The sentence for :func:`not_above_constant`'s finding (``named``: the models with their scores, joined).

    >>> constant_answer_caution(0.283, "a (27.4%)")[:60]
    "On the evaluated items, always giving each task's most commo"
    """
    return (f"{where}, always giving each task's most common answer (or guessing, where that does better) scores "
            f"{100 * level:.1f}%, as much as or more than {named}: on these items their mean scores show nothing a "
            "constant answer would not get.")


def _significant(c: dict[str, Any]) -> bool:
    if "significant" in c:
        return bool(c["significant"])
    return bool(c["ci_low"] > 0 or c["ci_high"] < 0)  # results.json from before the Holm adjustment


def _ties(a: str, b: str, benchmarks: list[str], comparisons: list[dict[str, Any]]) -> Ties:
    cells = [c for c in comparisons if {c["model_a"], c["model_b"]} == {a, b} and c["task"] in benchmarks]
    tied = sorted(c["task"] for c in cells if not _significant(c))
    return {"models": [a, b], "tied": tied, "n_tasks": len(cells),
            "separated": sorted(c["task"] for c in cells if _significant(c))}


def _power(a: str, b: str, benchmarks: list[str], per_item: PerItem) -> PowerAdvice:
    """Per task: smallest detectable difference at this n, and the n for a 5-point difference."""
    rows: list[PowerRow] = []
    for t in benchmarks:
        ids = sorted(set(per_item[a][t]) & set(per_item[b][t]))
        if not ids:
            continue
        x = np.array([per_item[a][t][i] for i in ids])
        y = np.array([per_item[b][t][i] for i in ids])
        n = len(ids)
        row: PowerRow = {"task": t, "n": n, "observed_diff": float(x.mean() - y.mean())}
        if np.all((x == 0) | (x == 1)) and np.all((y == 0) | (y == 1)):
            psi = float(np.mean(x != y))
            row.update({"test": "mcnemar-exact (exact power)", "discordance": psi})
            if psi > 0:
                row.update({"min_detectable": min_detectable_mcnemar(n, psi),
                            "n_needed": n_needed_mcnemar(max(psi, PLANNED_DIFFERENCE), PLANNED_DIFFERENCE)})
            else:
                row.update({"min_detectable": None, "n_needed": None,
                            "reason": "the two models never disagreed on these items: no discordance to plan from"})
        else:
            d = x - y
            sd = float(np.std(d, ddof=1)) if n > 1 else 0.0
            row.update({"test": "paired t (statsmodels TTestPower)", "sd_diff": sd,
                        "min_detectable": ttest_min_detectable(n, sd),
                        "n_needed": ttest_n_needed(sd, PLANNED_DIFFERENCE)})
            if not sd > 0:
                row["reason"] = "the paired differences do not vary: no spread to plan from"
        needed = row["n_needed"]
        row["underpowered"] = needed is None or n < needed
        rows.append(row)
    under = [r for r in rows if r["underpowered"]]
    known = [r for r in under if r["n_needed"] is not None]
    headline = max(known, key=lambda r: (r["n"], -(r["n_needed"] or 0))) if known else None
    return {"models": [a, b], "alpha": ALPHA, "power": POWER, "planned_difference": PLANNED_DIFFERENCE,
            "per_task": rows, "underpowered": [r["task"] for r in under],
            "headline": None if headline is None else {k: headline[k] for k in ("task", "n", "n_needed")}}
