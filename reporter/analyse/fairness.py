"""The law-adjusted fairness score: performance relative to the effort the Utility Law predicts.

Law-adjusted score = P x MUI_law(P) / MUI, where MUI_law(P) = a + b ln P is the effort the law
(:mod:`reporter.analyse.law`), fitted across the compared models, expects at performance P. A
model that reaches its score with less of its network than the law expects moves up; one that
needs more (a point above the law, as memorisation produces) moves down. (P / P_law(MUI) would
reward points above the law, because b < 0, so the effort side is used.)

>>> out = fairness([{"label": "a", "P": 10, "MUI": 9}, {"label": "b", "P": 50, "MUI": 5}])
>>> out["available"]
False
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence, TypedDict, cast

import numpy as np

from .law import MIN_POINTS, FitDict, LawFit, fit_points
from .numbers import finite_or_none as _f
from .task_weights import task_shares

__all__ = ["FAIRNESS_DEFINITION", "adjusted_scores", "adjusted_rank_intervals", "joint_rank_intervals", "fairness",
           "AdjustedRow", "FairBlock", "FairnessResult"]


class AdjustedRow(TypedDict, total=False):
    """One point with its law-adjusted score and ranks (:func:`adjusted_scores`; :class:`reporter.schema.FairRow`).

    The point's own keys (``label``, ``P``, ``MUI``, ``model``, ``task``, ``n_tasks`` ...) are kept.
    """

    label: str
    model: str
    task: str
    n_tasks: int
    P: float
    MUI: float
    P_law: float | None
    adjusted: float | None
    MUI_law: float | None
    effort_ratio: float | None
    score: float
    mui: float
    p_law: float | None
    rank_raw: int
    rank_adjusted: int
    shift: int
    rank_adjusted_interval: list[int]
    p_first: float


class FairBlock(TypedDict, total=False):
    """The adjustment on one set of points (the per-model averages or one task's points), or why there is none."""

    available: bool
    reason: str | None
    fit: FitDict
    rows: list[AdjustedRow]
    caution: str
    rank_uncertainty: dict[str, Any]


class FairnessResult(TypedDict, total=False):
    """``analysis.fairness`` (:class:`reporter.schema.Fairness`) as :func:`fairness` builds it."""

    definition: str
    reference_rows: list[dict[str, Any]]
    available: bool
    per_model: list[AdjustedRow]
    sentence: str | None
    per_task: dict[str, FairBlock]
    reason: str | None
    fit: FitDict | None
    caution: str | None
    rank_uncertainty: dict[str, Any] | None

FAIRNESS_DEFINITION = (
    "Law-adjusted score = P x MUI_law(P) / MUI. The Utility Law MUI = a + b*ln(P) is fitted (OLS of MUI on "
    "ln P, P and MUI in percent) on the compared models' per-model averages (per task: on that task's "
    "points); MUI_law(P) = a + b*ln(P) is the effort (share of FFN neurons) the law expects from a model "
    "at performance P. The score is the performance scaled by how much less effort than the law expects "
    "the model needed (effort_ratio = MUI / MUI_law below 1 raises it), and scaled down when it needed "
    "more: a capable model reaches high performance with low effort, while a point above the law line "
    "(more effort than its performance warrants, e.g. memorisation) is penalised rather than rewarded. "
    "P_law(MUI) = exp((MUI - a) / b), the performance the law expects for the model's effort, is reported "
    "alongside. Untrained baselines are never points of the fit. It needs at least 3 models with P > 0 "
    "and a negative fitted slope b; otherwise no adjustment is given.")


def adjusted_scores(fit: LawFit, points: Sequence[dict[str, Any]]) -> list[AdjustedRow]:
    """Law-adjusted score P x MUI_law(P) / MUI per point (see ``FAIRNESS_DEFINITION``), with ranks.

    ``MUI_law`` = a + b ln P is the effort the law expects at this performance and
    ``effort_ratio`` = MUI / MUI_law (below 1: less effort than expected); ``P_law`` inverts the law. ``P``, ``P_law``, ``MUI`` are in %;
    ``score`` = P / 100 and ``p_law`` = P_law / 100 are fractions (like task scores), ``mui`` = MUI.

    Ranks: 1 = best; equal scores (to 9 decimals) share their raw rank, other ties are broken by label. ``shift`` = raw rank - adjusted rank (positive = moves up).

    >>> from reporter.analyse.law import fit_utility_law
    >>> f = fit_utility_law([20, 40, 80], [8, 6, 4])
    >>> rows = adjusted_scores(f, [{"label": "a", "P": 20, "MUI": 9}, {"label": "b", "P": 80, "MUI": 3}])
    >>> [(r["label"], round(r["adjusted"], 1), r["rank_adjusted"], r["shift"]) for r in rows]
    [('a', 17.8, 2, 0), ('b', 106.7, 1, 0)]
    """
    rows: list[AdjustedRow] = []
    for p in points:
        P, M = float(p["P"]), float(p["MUI"])
        p_law = float(fit.invert(M))
        m_law = float(fit.predict_mui(P)) if P > 0 else float("nan")
        # a law that predicts no effort at this P (extrapolated past MUI_law = 0) gives no adjustment
        adj = 0.0 if P <= 0 else (P * m_law / M if m_law > 0 and M > 0 else float("nan"))
        rows.append(cast(AdjustedRow, {**p, "P_law": _f(p_law), "adjusted": _f(adj), "MUI_law": _f(m_law),
                     "effort_ratio": _f(M / m_law) if m_law > 0 else None,
                     # the same in the card's units: scores as fractions, MUI in %
                     "model": p.get("model", p["label"]), "score": P / 100.0, "mui": M,
                                        "p_law": _f(p_law / 100.0)}))
    # equal scores share a raw rank (the leaderboard's), whatever float noise their means carry (32.708333333333336
    # and 32.70833333333333 are one score)
    raw = sorted(rows, key=lambda r: (-round(float(r["P"]), 9), str(r["label"])))
    adj_order = sorted(rows, key=lambda r: (-(r["adjusted"] if r["adjusted"] is not None else -np.inf), str(r["label"])))
    before: tuple[float | None, int] = (None, 0)  # the previous row's score and raw rank
    for k, r in enumerate(raw, 1):
        score = round(float(r["P"]), 9)
        r["rank_raw"] = before[1] if score == before[0] else k
        before = (score, r["rank_raw"])
    for k, r in enumerate(adj_order, 1):
        r["rank_adjusted"] = k
        r["shift"] = r["rank_raw"] - k
    return rows


def adjusted_rank_intervals(fit: LawFit, rows: list[AdjustedRow]) -> dict[str, Any]:
    """The law's uncertainty carried to the adjusted ranks: each row's rank under every bootstrap fit.

    For each pairs-bootstrap resample of the law (``fit.boot_slopes`` / ``boot_intercepts``) with a
    negative slope, the law-adjusted scores are recomputed with that resample's a and b, and the rows
    ranked as :func:`adjusted_scores` ranks them (1 = best, ties by label, no adjustment = last). Each row
    gets ``rank_adjusted_interval`` (the central ``fit.confidence`` interval of its ranks, widened to whole
    ranks) and ``p_first`` (the share of those resamples in which it ranks first). Returns the block's
    ``rank_uncertainty``: resamples used, and the share whose slope was not negative (no adjustment there).
    The performances are taken as measured: the interval is the law's uncertainty, not the items'.

    >>> from reporter.analyse.law import fit_utility_law
    >>> f = fit_utility_law([20, 40, 60, 80], [9.0, 6.1, 4.0, 3.1], seed=0)
    >>> rows = adjusted_scores(f, [{"label": "a", "P": 20, "MUI": 9.0}, {"label": "b", "P": 80, "MUI": 2.0}])
    >>> u = adjusted_rank_intervals(f, rows); [r["rank_adjusted_interval"] for r in rows], u["resamples"] > 0
    ([[2, 2], [1, 1]], True)
    """
    b, a = np.asarray(fit.boot_slopes, np.float64), np.asarray(fit.boot_intercepts, np.float64)
    neg = b < 0
    out: dict[str, Any] = {"resamples": int(neg.sum()), "of": int(b.size),
                           "share_slope_not_negative": float(1 - neg.mean()) if b.size else None,
                           "confidence": fit.confidence,
                           "what": "ranks under the law's pairs-bootstrap fits (slope < 0); scores as measured"}
    if not neg.any() or not rows:
        return out
    P = np.array([float(r["P"]) for r in rows])
    M = np.array([float(r["MUI"]) for r in rows])
    _rank_rows(rows, _adjusted(P, M, a[neg][:, None], b[neg][:, None]), fit.confidence)
    return out


def _adjusted(P: np.ndarray, M: np.ndarray, a: Any, b: Any) -> np.ndarray:
    """The law-adjusted score P x MUI_law(P) / MUI of :func:`adjusted_scores`, vectorised over laws (a, b):
    0 at P <= 0, -inf (ranked last) where the law predicts no effort.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        m_law = a + b * np.log(np.where(P > 0, P, np.nan))
        adj = np.where(P <= 0, 0.0, np.where((m_law > 0) & (M > 0), P * m_law / M, -np.inf))
    return np.nan_to_num(adj, nan=-np.inf)


def _rank_rows(rows: list[AdjustedRow], adj: np.ndarray, confidence: float) -> None:
    """Rank ``adj`` (resamples x rows; -inf = no adjustment) as adjusted_scores does; store each row's interval."""
    order = np.argsort([str(r["label"]) for r in rows], kind="stable")
    tie = np.empty(len(rows), int)
    tie[order] = np.arange(len(rows))  # label order breaks ties, as adjusted_scores does
    better = (adj[:, None, :] > adj[:, :, None]) | ((adj[:, None, :] == adj[:, :, None]) & (tie[None, :] < tie[:, None])[None])
    ranks = 1 + better.sum(axis=2)  # (resamples, rows)
    q = 50 * (1 - confidence), 50 * (1 + confidence)
    for j, r in enumerate(rows):
        lo, hi = np.percentile(ranks[:, j], q[0], method="lower"), np.percentile(ranks[:, j], q[1], method="higher")
        r["rank_adjusted_interval"] = [int(lo), int(hi)]
        r["p_first"] = float(np.mean(ranks[:, j] == 1))


def joint_rank_intervals(rows: list[AdjustedRow], items: Mapping[str, Mapping[str, Mapping[str, float]]],
                         tasks: Sequence[str], *, seed: int = 0, n_resamples: int = 2000,
                         confidence: float = 0.95, groups: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The items' and the law's uncertainty together, carried to the adjusted ranks.

    Each resample (``numpy.random.default_rng(seed)``, in this order): per task of ``tasks``, one draw of the
    items every model answered (``integers(0, n, n)``, the same items for every model: paired), giving each
    model's P* = 100 x the mean over tasks of its resampled task means; then one pairs-bootstrap draw of the
    models (``integers(0, m, m)``) and the law refitted (OLS of MUI on ln P*, points with P* > 0) on them. With a
    negative slope, every row's adjusted score is recomputed from its P*, its MUI as measured and that law, and
    the rows ranked. Each row's ``rank_adjusted_interval`` / ``p_first`` are replaced; None (nothing changed)
    when a task has no item every model answered or a row has no items.

    >>> rows = [{"label": m, "P": p, "MUI": u} for m, p, u in (("a", 20.0, 9.0), ("b", 50.0, 5.0), ("c", 80.0, 2.0))]
    >>> items = {m: {"t": {str(i): float(i < p / 10) for i in range(10)}} for m, p in (("a", 20), ("b", 50), ("c", 80))}
    >>> joint_rank_intervals(rows, items, ["t"], seed=0, n_resamples=200)["resamples"] > 0, rows[2]["rank_adjusted_interval"]
    (True, [1, 2])
    """
    labels = [str(r.get("model", r["label"])) for r in rows]
    if not rows or not tasks or any(lab not in items for lab in labels):
        return None
    per_task = []
    for t in tasks:
        ids = sorted(set.intersection(*(set(items[lab].get(t) or {}) for lab in labels)))
        if not ids:
            return None
        per_task.append(np.array([[float(items[lab][t][i]) for i in ids] for lab in labels], np.float64))
    shares, units = task_shares(list(tasks), groups or {}, {t: s.shape[1] for t, s in zip(tasks, per_task)})
    weights = None if all(v == 1.0 for v in shares.values()) else np.array([shares[t] for t in tasks]) / units
    M = np.array([float(r["MUI"]) for r in rows])
    rng = np.random.default_rng(seed)
    kept, n_neg = [], 0
    for _ in range(n_resamples):
        means = [s[:, rng.integers(0, s.shape[1], s.shape[1])].mean(axis=1) for s in per_task]
        # the mean over tasks, an lm-eval group counting as one task (as in the per-model averages)
        P = 100.0 * (np.mean(means, axis=0) if weights is None else np.tensordot(weights, np.array(means), axes=1))
        j = rng.integers(0, len(rows), len(rows))
        j = j[P[j] > 0]
        x = np.log(P[j]) if j.size else np.empty(0)
        if j.size < 2 or np.ptp(x) <= 1e-12:
            continue
        xc = x - x.mean()
        b = float(np.sum(xc * (M[j] - M[j].mean())) / np.sum(xc ** 2))
        if not b < 0:
            continue
        n_neg += 1
        kept.append(_adjusted(P, M, float(M[j].mean() - b * x.mean()), b))
    out: dict[str, Any] = {"resamples": n_neg, "of": n_resamples, "share_slope_not_negative": 1 - n_neg / n_resamples,
                           "confidence": confidence,
                           "what": ("ranks under resampled items (paired, per task) and a pairs-bootstrap refit of the "
                                    "law on the resampled scores (slope < 0); MUI as measured")}
    if kept:
        _rank_rows(rows, np.array(kept), confidence)
    return out


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def _fair_block(fit: LawFit | None, reason: str | None, points: Sequence[dict[str, Any]], what: str) -> FairBlock:
    if fit is None:
        return {"available": False, "reason": f"no fair adjustment is possible: {reason}", "rows": []}
    if not fit.slope < 0:
        return {"available": False, "rows": [],
                "reason": (f"no fair adjustment is possible: the fitted slope b = {fit.slope:.3g} is not negative, "
                           f"so the Utility Law does not hold across these {what}")}
    out: FairBlock = {"available": True, "reason": None, "fit": fit.to_dict(), "rows": adjusted_scores(fit, points)}
    out["rank_uncertainty"] = adjusted_rank_intervals(fit, out["rows"])
    lo, hi = fit.slope_ci
    if not (hi < 0):
        out["caution"] = (f"the {int(100 * fit.confidence)}% bootstrap CI of the slope ({lo:.3g}, {hi:.3g}) "
                          f"includes 0: the law is weakly determined by these {fit.n} {what}")
    return out


def _sentence(block: FairBlock, n_models: int) -> str:
    rows = sorted(block["rows"], key=lambda r: r["rank_adjusted"])
    best = rows[0]
    moved = [r for r in rows if r["shift"] != 0]
    if moved:
        big = max(moved, key=lambda r: (abs(r["shift"]), -r["rank_adjusted"]))
        change = (f"this reorders the plain score ranking for {len(moved)} of {len(rows)} models "
                  f"({big['label']} moves from {_ordinal(big['rank_raw'])} to {_ordinal(big['rank_adjusted'])})")
    else:
        change = "the order is the same as by plain score"
    effort = best.get("effort_ratio")
    how = (f"it scores {best['P']:.1f}% while using {effort:.2f}x the share of its network that the Utility Law, "
           f"fitted on these {n_models} models, expects at that score" if effort is not None else
           f"it scores {best['P']:.1f}%")
    return (f"Taking effort into account, {best['label']} gets the most performance for the share of its network it "
            f"uses ({how}); {change}.")


def fairness(model_points: Sequence[dict[str, Any]], per_task_points: dict[str, Sequence[dict[str, Any]]] | None = None,
             *, seed: int = 0, n_resamples: int = 2000,
             reference_rows: Sequence[dict[str, Any]] = (),
             items: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
             tasks: Sequence[str] = (), groups: Mapping[str, str] | None = None) -> FairnessResult:
    """Law-adjusted fairness per model (on per-model averages) and per task.

    ``model_points``: one dict per model with "label", "P" (average %), "MUI" (average %);
    ``per_task_points``: {task: [points]}; ``reference_rows``: untrained baselines, shown
    as-is and never fitted or ranked. Fewer than 3 models: ``available`` is False with the reason.
    ``items`` ({model: {task: {id: score}}}) with ``tasks`` (the tasks the averages use) give the per-model
    ranks intervals under the items' and the law's uncertainty (:func:`joint_rank_intervals`); without them,
    under the law's alone (:func:`adjusted_rank_intervals`); ``groups`` ({task: lm-eval group}) weigh a group's
    tasks as one task there, as in the averages.

    >>> out = fairness([{"label": "a", "P": 10, "MUI": 9}, {"label": "b", "P": 50, "MUI": 5}])
    >>> out["available"], out["reason"]
    (False, 'no fair adjustment is possible: 2 trained models were compared; the law needs at least 3')
    """
    out: FairnessResult = {"definition": FAIRNESS_DEFINITION, "reference_rows": list(reference_rows)}
    if len(model_points) < MIN_POINTS:
        n = len(model_points)
        out.update({"available": False, "per_model": [], "sentence": None, "per_task": {},
                    "reason": f"no fair adjustment is possible: {n} trained model{' was' if n == 1 else 's were'} compared; "
                              f"the law needs at least {MIN_POINTS}"})
    else:
        fit, reason = fit_points(model_points, seed=seed, n_resamples=n_resamples)
        blk = _fair_block(fit, reason, model_points, "models")
        if blk["available"] and items is not None:  # the per-model ranking: the items' uncertainty too
            joint = joint_rank_intervals(blk["rows"], items, tasks, seed=seed, n_resamples=n_resamples,
                                         groups=groups)
            if joint is not None:
                blk["rank_uncertainty"] = joint
        out.update({"available": blk["available"], "reason": blk["reason"], "per_model": blk["rows"],
                    "fit": blk.get("fit"), "caution": blk.get("caution"),
                    "rank_uncertainty": blk.get("rank_uncertainty")})
        sentence = _sentence(blk, fit.n) if fit is not None and blk["available"] else None
        if sentence is not None and blk.get("caution"):  # a sentence means the adjustment is available
            sentence += f" Caution: {blk['caution']}."
        out["sentence"] = sentence
    out["per_task"] = {}
    for task, pts in (per_task_points or {}).items():
        if len(pts) < MIN_POINTS:
            out["per_task"][task] = {"available": False, "rows": [],
                                     "reason": f"no fair adjustment is possible: {len(pts)} models on this task; "
                                               f"the law needs at least {MIN_POINTS}"}
            continue
        fit, reason = fit_points(pts, seed=seed, n_resamples=n_resamples)
        out["per_task"][task] = _fair_block(fit, reason, pts, "models")
    return out
