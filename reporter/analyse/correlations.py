"""Across models: correlations between LPP latent metrics and benchmark scores.

Untrained (``random:``) baselines are left out: they would dominate any correlation.
With fewer than 5 models a correlation is marked unreliable; with fewer than 3 it is not computed.

>>> res = {"models": {f"m{i}": {"meta": {"source_type": "hub"}, "lpp": {"entropy_floor": e},
...        "tasks": {"t": {"score": s}}} for i, (e, s) in enumerate([(.2, .9), (.3, .7), (.5, .4)])}}
>>> [round(c["pearson_r"], 3) for c in lpp_correlations(res) if c["task"] == "t" and c["metric"] == "entropy_floor"]
[-0.997]
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, TypedDict

import numpy as np
from scipy import stats

from ..schema import is_untrained
from .task_weights import grouping, task_shares, weighted_mean

LATENT_METRICS = ("entropy_floor", "participation_ratio", "effective_rank")
MIN_RELIABLE = 5


class Correlation(TypedDict, total=False):
    """One latent metric against one task's score (:class:`reporter.schema.LPPCorrelation`; null: not computed)."""

    metric: str
    task: str
    n: int
    reliable: bool
    pearson_r: float | None
    pearson_p: float | None
    spearman_r: float | None
    spearman_p: float | None
    reason: str


def lpp_correlations(results: Mapping[str, Any]) -> list[Correlation]:
    """Pearson and Spearman (with p-values and n) of each latent metric against each task score."""
    models = {n: m for n, m in results.get("models", {}).items() if m.get("lpp") and not is_untrained(m)}
    tasks = sorted({t for m in models.values() for t in m.get("tasks", {})})
    everyone = results.get("models") or {}  # an lm-eval group counts as one task in the mean, as in the ranking
    groups, sizes = grouping(everyone, tasks)
    out: list[Correlation] = []
    for metric in LATENT_METRICS:
        for task in tasks + ["mean"]:
            xs: list[float] = []
            ys: list[float] = []
            for m in models.values():
                x = m["lpp"].get(metric)
                if task == "mean":
                    scores = {t: s["score"] for t, s in m.get("tasks", {}).items() if "score" in s}
                    shares, units = task_shares(list(scores), groups, sizes)
                    y = weighted_mean(scores, shares, units) if scores else None
                else:
                    y = m.get("tasks", {}).get(task, {}).get("score")
                if x is not None and y is not None and np.isfinite(x) and np.isfinite(y):
                    xs.append(float(x))
                    ys.append(float(y))
            row: Correlation = {"metric": metric, "task": task, "n": len(xs), "reliable": len(xs) >= MIN_RELIABLE}
            if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
                row.update({"pearson_r": None, "pearson_p": None, "spearman_r": None, "spearman_p": None,
                            "reason": "fewer than 3 models with varying values" if len(xs) < 3 else "no variation"})
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    pr = stats.pearsonr(xs, ys)
                    sr = stats.spearmanr(xs, ys)
                row.update({"pearson_r": float(pr.statistic), "pearson_p": float(pr.pvalue),
                            "spearman_r": float(sr.statistic), "spearman_p": float(sr.pvalue)})
            out.append(row)
    return out
