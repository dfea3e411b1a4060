"""The contamination signals, one function each: what a model's evidence files say, test by test.

Each function turns one test's evidence (``option_order.json``, ``verbatim.json`` with ``reference_verbatim.json``,
``split_reference.json``, a point's residual on its task's Utility Law) into a :class:`SignalResult`: its p-value,
its smallest attainable p-value, its effect against the signal's floor, or why it was not measured. Whether a
signal fires, and what the row's severity is, :mod:`reporter.analyse.contamination` decides over the whole run
(its docstring states every test's null).

>>> s = law_residual_signal(None, 40.0, 50.0, n_points=3); s["measured"], s["reason"][:34]
(False, "not measurable: the task's law has")
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from ..config import ContaminationConfig
from ..metrics.min_k import min_k_percent_prob
from ..metrics.rank_tests import MIN_ITEMS, order_fisher_pvalue, order_null_pvalue
from ..schema import Signal
from .numbers import finite_or_none as _f
from .order_null import EXCHANGEABLE, OrderNull

__all__ = ["SignalResult", "not_measured", "law_residual_signal", "option_order_signal", "verbatim_signal", "min_k_signal",
           "split_signal", "LAW_MIN_POINTS", "MINK_K", "MIN_TOKENS", "ORDER_MIN_EXCESS", "SPLIT_MIN_EXCESS",
           "VERBATIM_MIN_EXACT", "VERBATIM_MIN_EXCESS", "VERBATIM_N_TOKENS", "N_DRIVERS"]

LAW_MIN_POINTS = 4  # a leave-one-out residual needs the law fitted on >= 3 other points
MINK_K = 0.2
MIN_TOKENS = 4  # a text with fewer scored tokens is left out of the Min-K% comparison
ORDER_MIN_EXCESS = 0.10  # option order: top share minus chance share
SPLIT_MIN_EXCESS = 0.10  # Min-K% vs the other split: share of pairs won minus 1/2
VERBATIM_MIN_EXACT = 2
VERBATIM_MIN_EXCESS = 0.10  # verbatim: benchmark rate minus held-out rate
VERBATIM_N_TOKENS = ContaminationConfig.verbatim_tokens
N_DRIVERS = 5  # items listed as driving a warning


class SignalResult(Signal, total=False):
    """One signal as the functions below return it: the keys of :class:`reporter.schema.Signal` (what the card
    reads, and each signal's own figures), null where a number is not finite.
    """


def not_measured(reason: str) -> SignalResult:
    """A signal that was not measured, and why (it never fires)."""
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
        return not_measured(f"not measurable: the task's law has {n_points} trained model(s); a leave-one-out "
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
        return not_measured(why)
    items = list(order["per_item"])
    if len(items) < MIN_ITEMS:
        return not_measured(f"{len(items)} multiple-choice item(s) could be permuted; the test needs at least {MIN_ITEMS}"
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
        return not_measured("no verbatim-completion check was run" if not v else "no item was long enough")
    if not reference or not reference.get("n"):
        return not_measured("no held-out chance rate (reference_verbatim.json) for this model")
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
        return not_measured(f"{b.size} benchmark and {r.size} reference texts with >= {MIN_TOKENS} tokens; "
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
        return not_measured("no split_reference.json for this task")
    if not record.get("n"):
        return not_measured(str(record.get("reason") or "no item could be paired with the task's other split"))
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
        return not_measured(f"{len(b)} item(s) paired with the other split (each text with >= {MIN_TOKENS} tokens); "
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
