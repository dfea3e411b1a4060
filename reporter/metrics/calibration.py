"""Calibration of multiple-choice answers: expected calibration error and the Brier score.

Inputs are per-item option probabilities (how the collect stage reads them from the hooked
pass: :mod:`reporter.collect.collectors.calibration`) and the gold option index.

>>> probs = np.array([[0.9, 0.1], [0.6, 0.4]]); gold = np.array([0, 1])
>>> round(brier_score(probs, gold), 3), round(expected_calibration_error(probs.max(1), probs.argmax(1) == gold), 3)
(0.37, 0.35)
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def expected_calibration_error(confidences, correct, n_bins: int = 10) -> float:
    """Standard ECE: equal-width bins (lo, hi] over [0, 1] (confidence 0 goes to the first bin);
    ECE = sum over bins of |bin| / N * |accuracy(bin) - mean confidence(bin)|.

    >>> round(expected_calibration_error([0.95, 0.95, 0.55, 0.55], [1, 1, 1, 0]), 12)
    0.05
    """
    conf = np.asarray(confidences, dtype=np.float64).ravel()
    corr = np.asarray(correct, dtype=np.float64).ravel()
    if conf.shape != corr.shape:
        raise ValueError("confidences and correct must have the same length")
    if conf.size == 0:
        return float("nan")
    bounds = np.linspace(0.0, 1.0, n_bins + 1)  # bin k = (bounds[k], bounds[k+1]], as Guo et al. (2017)
    b = np.clip(np.searchsorted(bounds, conf, side="left") - 1, 0, n_bins - 1)
    ece = 0.0
    for k in range(n_bins):
        sel = b == k
        if sel.any():
            ece += sel.sum() / conf.size * abs(corr[sel].mean() - conf[sel].mean())
    return float(ece)


def brier_score(probs, gold_idx) -> float:
    """Multi-class Brier score: mean over items of sum_k (p_k - 1[k = gold])^2 (0 best, 2 worst).

    >>> brier_score([[1.0, 0.0], [0.5, 0.5]], [0, 1])
    0.25
    """
    p = np.asarray(probs, dtype=np.float64)
    g = np.asarray(gold_idx, dtype=int).ravel()
    if p.ndim != 2 or p.shape[0] != g.size:
        raise ValueError("probs must be [N, K] with one gold index per row")
    if p.shape[0] == 0:
        return float("nan")
    onehot = np.zeros_like(p)
    onehot[np.arange(g.size), g] = 1.0
    return float(((p - onehot) ** 2).sum(1).mean())


def calibration_summary(probs: Sequence[Sequence[float]], gold_idx: Sequence[int],
                        n_bins: int = 10) -> dict[str, Any]:
    """Per-task calibration from per-item option probabilities (rows may differ in length).

    Returns ``{n, accuracy, mean_confidence, ece, brier, n_bins}``; accuracy is of the argmax
    option (the model's most probable letter, not its generated text).

    >>> calibration_summary([[0.9, 0.1], [0.6, 0.4]], [0, 1])["accuracy"]
    0.5
    """
    rows = [np.asarray(p, dtype=np.float64) for p in probs]
    g = np.asarray(gold_idx, dtype=int)
    if not rows:
        return {"n": 0, "accuracy": float("nan"), "mean_confidence": float("nan"), "ece": float("nan"),
                "brier": float("nan"), "n_bins": n_bins}
    conf = np.array([r.max() for r in rows])
    correct = np.array([int(r.argmax() == gi) for r, gi in zip(rows, g)])
    brier = float(np.mean([brier_score(r[None], [gi]) for r, gi in zip(rows, g)]))
    return {"n": len(rows), "accuracy": float(correct.mean()), "mean_confidence": float(conf.mean()),
            "ece": expected_calibration_error(conf, correct, n_bins), "brier": brier, "n_bins": n_bins}
