"""The Utility Law (Cao et al., arXiv 2504.07440) and the law-adjusted fairness score.

The law: across models, effort falls as performance rises, logarithmically::

    MUI = a + b * ln(P)        (b < 0; P = performance in %, MUI in %)

fitted by ordinary least squares of MUI on ln P (:func:`scipy.stats.linregress`), with
pairs-bootstrap percentile CIs of slope ``b`` and intercept ``a`` (seeded numpy resampling
of (P, MUI) pairs; resamples whose ln P are all equal have no slope and are skipped).

Rules for the points (:func:`fit_points`):

* a point with P <= 0 (or a non-finite value) has no ln P: it is left out of the fit and
  listed in ``excluded`` with the reason;
* fewer than ``MIN_POINTS`` (3) usable points, or all ln P equal: no fit, a reason string;
* untrained baselines are never points of the law (the caller leaves them out; see
  :mod:`reporter.analyse`).

Residuals: ``e_i = MUI_i - (a + b ln P_i)``; ``std_residuals`` = e_i / s with
``s = sqrt(SSE / (n - 2))``; ``studentized_residuals`` = externally studentised (leave-one-out)
``e_i / (s_(i) sqrt(1 - h_ii))`` — the point's distance from the law fitted WITHOUT it, in
units of that fit's prediction error; needs n >= 4 (NaN otherwise).

>>> fit = fit_utility_law([20, 40, 60, 80], [9.0, 6.1, 4.0, 3.1], seed=0)
>>> fit.slope < 0, fit.n, round(fit.r2, 3)
(True, 4, 0.996)
>>> round(float(fit.invert(fit.predict_mui(50.0))), 6)
50.0
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from scipy import stats

__all__ = ["LawFit", "LawError", "fit_utility_law", "fit_points", "describe_fit", "fairness",
           "adjusted_scores", "FAIRNESS_DEFINITION", "MIN_POINTS"]

MIN_POINTS = 3

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


class LawError(ValueError):
    """No fit is possible; ``reason`` says why in one sentence."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _f(x: Any) -> float | None:
    """JSON-safe float: None for NaN / infinity."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass
class LawFit:
    """A fitted Utility Law MUI = intercept + slope * ln(P) (P, MUI in percent)."""

    slope: float
    intercept: float
    r2: float
    n: int
    slope_ci: tuple[float, float]
    intercept_ci: tuple[float, float]
    slope_stderr: float
    p_value: float  # two-sided test of slope == 0 (linregress)
    performance: np.ndarray  # P (%) of the fitted points
    mui: np.ndarray  # MUI (%) of the fitted points
    labels: list[str] = field(default_factory=list)
    excluded: list[dict] = field(default_factory=list)  # {"label", "P", "MUI", "reason"}
    confidence: float = 0.95
    n_resamples: int = 2000
    n_resamples_used: int = 0
    seed: int = 0

    def predict_mui(self, performance_pct):
        """MUI (%) the law predicts at performance P (%)."""
        return self.intercept + self.slope * np.log(np.asarray(performance_pct, dtype=np.float64))

    def invert(self, mui_pct):
        """P_law (%): the performance the law predicts for effort MUI (%), exp((MUI - a) / b)."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return np.exp((np.asarray(mui_pct, dtype=np.float64) - self.intercept) / self.slope)

    @property
    def ln_p(self) -> np.ndarray:
        return np.log(self.performance)

    @property
    def residuals(self) -> np.ndarray:
        """MUI - law(P): positive = more effort than the law expects for this performance."""
        return self.mui - self.predict_mui(self.performance)

    @property
    def residual_std(self) -> float:
        """s = sqrt(SSE / (n - 2)) (NaN with 2 points)."""
        dof = self.n - 2
        return float(np.sqrt(np.sum(self.residuals ** 2) / dof)) if dof > 0 else float("nan")

    @property
    def std_residuals(self) -> np.ndarray:
        """Residuals divided by ``residual_std``."""
        s = self.residual_std
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.residuals / s if s > 0 else np.full(self.n, np.nan)

    @property
    def studentized_residuals(self) -> np.ndarray:
        """Externally studentised residuals (leave-one-out); NaN when n < 4."""
        n, e = self.n, self.residuals
        if n < 4:
            return np.full(n, np.nan)
        x = self.ln_p
        h = 1.0 / n + (x - x.mean()) ** 2 / np.sum((x - x.mean()) ** 2)
        sse = np.sum(e ** 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            s_i2 = np.maximum(sse - e ** 2 / (1 - h), 0.0) / (n - 3)
            t = e / np.sqrt(s_i2 * (1 - h))
        t[(e == 0)] = 0.0
        return t

    def to_dict(self) -> dict:
        return {"slope": _f(self.slope), "intercept": _f(self.intercept), "r2": _f(self.r2), "n": self.n,
                "slope_ci": [_f(v) for v in self.slope_ci], "intercept_ci": [_f(v) for v in self.intercept_ci],
                "slope_stderr": _f(self.slope_stderr), "p_value": _f(self.p_value),
                "residual_std": _f(self.residual_std), "confidence": self.confidence,
                "n_resamples": self.n_resamples, "n_resamples_used": self.n_resamples_used, "seed": self.seed,
                "equation": f"MUI = {self.intercept:.4g} + ({self.slope:.4g}) * ln(P)",
                "excluded": list(self.excluded)}


def _bootstrap(x: np.ndarray, y: np.ndarray, seed: int, n_resamples: int, confidence: float):
    rng = np.random.default_rng(seed)
    n = x.size
    idx = rng.integers(0, n, size=(n_resamples, n))
    xs, ys = x[idx], y[idx]
    xc = xs - xs.mean(axis=1, keepdims=True)
    sxx = np.sum(xc ** 2, axis=1)
    ok = sxx > 1e-12 * max(1.0, float(np.sum((x - x.mean()) ** 2)))
    slope = np.sum(xc[ok] * (ys[ok] - ys[ok].mean(axis=1, keepdims=True)), axis=1) / sxx[ok]
    icpt = ys[ok].mean(axis=1) - slope * xs[ok].mean(axis=1)
    if slope.size == 0:
        nan = (float("nan"), float("nan"))
        return nan, nan, 0
    q = [50 * (1 - confidence), 50 * (1 + confidence)]
    return (tuple(float(v) for v in np.percentile(slope, q)), tuple(float(v) for v in np.percentile(icpt, q)),
            int(slope.size))


def fit_utility_law(performance_pct: Sequence[float], mui_pct: Sequence[float], *,
                    labels: Sequence[str] | None = None, seed: int = 0, n_resamples: int = 2000,
                    confidence: float = 0.95) -> LawFit:
    """Fit MUI = a + b ln P by OLS; P <= 0 / non-finite points are excluded (listed in ``excluded``).

    Raises :class:`LawError` (with ``reason``) with fewer than 3 usable points or constant ln P.

    >>> f = fit_utility_law([0, 10, 30, 90], [12, 8, 6, 3], labels=["z", "a", "b", "c"])
    >>> f.n, [e["label"] for e in f.excluded]
    (3, ['z'])
    >>> fit_utility_law([10, 20], [5, 4])
    Traceback (most recent call last):
    ...
    reporter.law.LawError: 2 usable points (P > 0); the law needs at least 3
    """
    P = np.asarray(performance_pct, dtype=np.float64).ravel()
    M = np.asarray(mui_pct, dtype=np.float64).ravel()
    if P.shape != M.shape:
        raise ValueError("performance and MUI must have the same length")
    labels = [str(v) for v in labels] if labels is not None else [str(i) for i in range(P.size)]
    excluded, keep = [], []
    for i, (p, m) in enumerate(zip(P, M)):
        if not (math.isfinite(p) and math.isfinite(m)):
            excluded.append({"label": labels[i], "P": _f(p), "MUI": _f(m), "reason": "missing or non-finite value"})
        elif p <= 0:
            excluded.append({"label": labels[i], "P": float(p), "MUI": float(m),
                             "reason": "P = 0 has no ln P; left out of the fit"})
        else:
            keep.append(i)
    if len(keep) < MIN_POINTS:
        raise LawError(f"{len(keep)} usable point{'s' * (len(keep) != 1)} (P > 0); the law needs at least {MIN_POINTS}")
    P, M = P[keep], M[keep]
    x = np.log(P)
    if np.ptp(x) <= 1e-12:
        raise LawError("all points have the same performance; the slope is undefined")
    r = stats.linregress(x, M)
    s_ci, i_ci, used = _bootstrap(x, M, seed, n_resamples, confidence)
    return LawFit(slope=float(r.slope), intercept=float(r.intercept), r2=float(r.rvalue ** 2), n=int(P.size),
                  slope_ci=s_ci, intercept_ci=i_ci, slope_stderr=float(r.stderr), p_value=float(r.pvalue),
                  performance=P, mui=M, labels=[labels[i] for i in keep], excluded=excluded,
                  confidence=confidence, n_resamples=n_resamples, n_resamples_used=used, seed=seed)


def fit_points(points: Sequence[dict], *, seed: int = 0, n_resamples: int = 2000) -> tuple[LawFit | None, str | None]:
    """Fit the law to ``points`` (dicts with "label", "P", "MUI"); ``(fit, None)`` or ``(None, reason)``.

    >>> fit_points([{"label": "m1", "P": 50, "MUI": 3}])
    (None, '1 usable point (P > 0); the law needs at least 3')
    """
    try:
        return fit_utility_law([p["P"] for p in points], [p["MUI"] for p in points],
                               labels=[p["label"] for p in points], seed=seed, n_resamples=n_resamples), None
    except LawError as e:
        return None, e.reason


def describe_fit(fit: LawFit | None, reason: str | None, points: Sequence[dict]) -> dict:
    """JSON-ready description: the fit's fields (or only ``reason`` when there is none) and every point.

    With a fit: ``slope``, ``intercept``, ``r2``, ``n``, ``slope_ci``, ``intercept_ci`` … (``LawFit.to_dict``)
    and ``reason`` None; without: no ``slope`` key, ``reason`` the sentence why.

    Points keep their extra keys (model, task …); fitted points get ``residual``, ``std_residual``
    and ``studentized`` (leave-one-out), excluded ones ``excluded`` (the reason).

    >>> pts = [{"label": "a", "P": 0, "MUI": 9}, {"label": "b", "P": 20, "MUI": 8}]
    >>> describe_fit(*fit_points(pts), pts)["points"][0]["excluded"]
    'P = 0 has no ln P; left out of the fit'
    """
    rows = []
    by_label: dict[str, tuple] = {}
    if fit is not None:
        for lab, e, z, t in zip(fit.labels, fit.residuals, fit.std_residuals, fit.studentized_residuals):
            by_label[lab] = (e, z, t)
    if fit is not None:
        excl = {e["label"]: e["reason"] for e in fit.excluded}
    else:  # no fit: still say which points could never be in one
        excl = {p["label"]: ("P = 0 has no ln P; left out of the fit" if _f(p["P"]) is not None and _f(p["MUI"]) is not None
                             else "missing or non-finite value")
                for p in points if not (_f(p["P"]) is not None and _f(p["MUI"]) is not None and p["P"] > 0)}
    for p in points:
        row = {k: (_f(v) if isinstance(v, (float, np.floating)) else v) for k, v in p.items()}
        if p["label"] in by_label:
            e, z, t = by_label[p["label"]]
            row.update(residual=_f(e), std_residual=_f(z), studentized=_f(t),
                       studentized_inf=bool(np.isinf(t)))
        elif p["label"] in excl:
            row["excluded"] = excl[p["label"]]
        rows.append(row)
    head = fit.to_dict() if fit is not None else {}
    return {**head, "reason": None if fit is not None else reason, "n_points": len(points), "points": rows}


def adjusted_scores(fit: LawFit, points: Sequence[dict]) -> list[dict]:
    """Law-adjusted score P x MUI_law(P) / MUI per point (see ``FAIRNESS_DEFINITION``), with ranks.

    ``MUI_law`` = a + b ln P is the effort the law expects at this performance and
    ``effort_ratio`` = MUI / MUI_law (below 1: less effort than expected); ``P_law`` inverts the law. ``P``, ``P_law``, ``MUI`` are in %;
    ``score`` = P / 100 and ``p_law`` = P_law / 100 are fractions (like task scores), ``mui`` = MUI.

    Ranks: 1 = best; ties broken by label. ``shift`` = raw rank - adjusted rank (positive = moves up).

    >>> f = fit_utility_law([20, 40, 80], [8, 6, 4])
    >>> rows = adjusted_scores(f, [{"label": "a", "P": 20, "MUI": 9}, {"label": "b", "P": 80, "MUI": 3}])
    >>> [(r["label"], round(r["adjusted"], 1), r["rank_adjusted"], r["shift"]) for r in rows]
    [('a', 17.8, 2, 0), ('b', 106.7, 1, 0)]
    """
    rows = []
    for p in points:
        P, M = float(p["P"]), float(p["MUI"])
        p_law = float(fit.invert(M))
        m_law = float(fit.predict_mui(P)) if P > 0 else float("nan")
        # a law that predicts no effort at this P (extrapolated past MUI_law = 0) gives no adjustment
        adj = 0.0 if P <= 0 else (P * m_law / M if m_law > 0 and M > 0 else float("nan"))
        rows.append({**p, "P_law": _f(p_law), "adjusted": _f(adj), "MUI_law": _f(m_law),
                     "effort_ratio": _f(M / m_law) if m_law > 0 else None,
                     # the same in the card's units: scores as fractions, MUI in %
                     "model": p.get("model", p["label"]), "score": P / 100.0, "mui": M, "p_law": _f(p_law / 100.0)})
    raw = sorted(rows, key=lambda r: (-float(r["P"]), str(r["label"])))
    adj_order = sorted(rows, key=lambda r: (-(r["adjusted"] if r["adjusted"] is not None else -np.inf), str(r["label"])))
    for k, r in enumerate(raw, 1):
        r["rank_raw"] = k
    for k, r in enumerate(adj_order, 1):
        r["rank_adjusted"] = k
        r["shift"] = r["rank_raw"] - k
    return rows


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def _fair_block(fit: LawFit | None, reason: str | None, points: Sequence[dict], what: str) -> dict:
    if fit is None:
        return {"available": False, "reason": f"no fair adjustment is possible: {reason}", "rows": []}
    if not fit.slope < 0:
        return {"available": False, "rows": [],
                "reason": (f"no fair adjustment is possible: the fitted slope b = {fit.slope:.3g} is not negative, "
                           f"so the Utility Law does not hold across these {what}")}
    out = {"available": True, "reason": None, "fit": fit.to_dict(), "rows": adjusted_scores(fit, points)}
    lo, hi = fit.slope_ci
    if not (hi < 0):
        out["caution"] = (f"the {int(100 * fit.confidence)}% bootstrap CI of the slope ({lo:.3g}, {hi:.3g}) "
                          f"includes 0: the law is weakly determined by these {fit.n} {what}")
    return out


def _sentence(block: dict, n_models: int) -> str:
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


def fairness(model_points: Sequence[dict], per_task_points: dict[str, Sequence[dict]] | None = None, *,
             seed: int = 0, n_resamples: int = 2000, reference_rows: Sequence[dict] = ()) -> dict:
    """Law-adjusted fairness per model (on per-model averages) and per task.

    ``model_points``: one dict per model with "label", "P" (average %), "MUI" (average %);
    ``per_task_points``: {task: [points]}; ``reference_rows``: untrained baselines, shown
    as-is and never fitted or ranked. Fewer than 3 models: ``available`` is False with the reason.

    >>> out = fairness([{"label": "a", "P": 10, "MUI": 9}, {"label": "b", "P": 50, "MUI": 5}])
    >>> out["available"], out["reason"]
    (False, 'no fair adjustment is possible: 2 models were compared; the law needs at least 3')
    """
    out: dict[str, Any] = {"definition": FAIRNESS_DEFINITION, "reference_rows": list(reference_rows)}
    if len(model_points) < MIN_POINTS:
        n = len(model_points)
        out.update(available=False, per_model=[], sentence=None, per_task={},
                   reason=f"no fair adjustment is possible: {n} model{' was' if n == 1 else 's were'} compared; "
                          f"the law needs at least {MIN_POINTS}")
    else:
        fit, reason = fit_points(model_points, seed=seed, n_resamples=n_resamples)
        blk = _fair_block(fit, reason, model_points, "models")
        out.update(available=blk["available"], reason=blk["reason"], per_model=blk["rows"],
                   fit=blk.get("fit"), caution=blk.get("caution"))
        out["sentence"] = _sentence(blk, fit.n) if blk["available"] else None
        if blk["available"] and blk.get("caution"):
            out["sentence"] += f" Caution: {blk['caution']}."
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
