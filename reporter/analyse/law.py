"""The Utility Law (Cao et al., arXiv 2504.07440): MUI = a + b ln P fitted across models.

The law: across models, effort falls as performance rises, logarithmically::

    MUI = a + b * ln(P)        (b < 0; P = performance in %, MUI in %)

fitted by ordinary least squares of MUI on ln P (:func:`scipy.stats.linregress`), with
pairs-bootstrap percentile CIs of slope ``b`` and intercept ``a`` (seeded numpy resampling
of (P, MUI) pairs; resamples whose ln P are all equal have no slope and are skipped).

Rules for the points (:func:`fit_points`):

* a point with P <= 0 (or a non-finite value) has no ln P: it is left out of the fit and
  listed in ``excluded`` with the reason;
* fewer than ``MIN_POINTS`` (3) usable points, fewer than ``MIN_POINTS`` distinct (P, MUI) points (a point
  twice is one point: a line through two points fits them perfectly), or all ln P equal: no fit, a reason string;
* untrained baselines are never points of the law (the caller leaves them out; see
  :mod:`reporter.analyse.analysis`).

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
from typing import Any, Sequence, TypedDict, cast

import numpy as np
from scipy import stats

from .numbers import finite_or_none as _f

__all__ = ["LawFit", "LawError", "fit_utility_law", "fit_points", "describe_fit", "MIN_POINTS", "FitDict",
           "FitDescription"]

MIN_POINTS = 3


class FitDict(TypedDict):
    """A fit as JSON-ready data (:meth:`LawFit.to_dict`; null where a number is not finite)."""

    slope: float | None
    intercept: float | None
    r2: float | None
    n: int
    slope_ci: list[float | None]
    intercept_ci: list[float | None]
    slope_stderr: float | None
    p_value: float | None
    residual_std: float | None
    confidence: float
    n_resamples: int
    n_resamples_used: int
    seed: int
    equation: str
    excluded: list[dict[str, Any]]


class FitDescription(TypedDict, total=False):
    """A law fit with its points (:func:`describe_fit`; :data:`reporter.schema.LawFitOrReason`): the fields of
    :class:`FitDict` when there is a fit, ``reason`` when there is none. The per-model average adds the tasks used.
    """

    slope: float | None
    intercept: float | None
    r2: float | None
    n: int
    slope_ci: list[float | None]
    intercept_ci: list[float | None]
    slope_stderr: float | None
    p_value: float | None
    residual_std: float | None
    confidence: float
    n_resamples: int
    n_resamples_used: int
    seed: int
    equation: str
    excluded: list[dict[str, Any]]
    reason: str | None
    n_points: int
    points: list[dict[str, Any]]
    tasks: list[str]
    tasks_dropped: list[str]

class LawError(ValueError):
    """No fit is possible; ``reason`` says why in one sentence."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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
    #: the pairs-bootstrap fits behind the CIs (slope, intercept per resample), for the uncertainty of
    #: what is derived from the law (:func:`reporter.analyse.fairness.adjusted_rank_intervals`)
    boot_slopes: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    boot_intercepts: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)

    def predict_mui(self, performance_pct):
        """MUI (%) the law predicts at performance P (%)."""
        return self.intercept + self.slope * np.log(np.asarray(performance_pct, dtype=np.float64))

    def invert(self, mui_pct):
        """P_law (%): the performance the law predicts for effort MUI (%), exp((MUI - a) / b)."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return np.exp((np.asarray(mui_pct, dtype=np.float64) - self.intercept) / self.slope)

    @property
    def ln_p(self) -> np.ndarray:
        """ln P of the fitted points."""
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

    def to_dict(self) -> FitDict:
        """The fit as JSON-ready data (NaN as None)."""
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
        return nan, nan, 0, slope, icpt
    q = [50 * (1 - confidence), 50 * (1 + confidence)]
    return (tuple(float(v) for v in np.percentile(slope, q)), tuple(float(v) for v in np.percentile(icpt, q)),
            int(slope.size), slope, icpt)


def fit_utility_law(performance_pct: Sequence[float], mui_pct: Sequence[float], *,
                    labels: Sequence[str] | None = None, seed: int = 0, n_resamples: int = 2000,
                    confidence: float = 0.95) -> LawFit:
    """Fit MUI = a + b ln P by OLS; P <= 0 / non-finite points are excluded (listed in ``excluded``).

    Raises :class:`LawError` (with ``reason``) with fewer than 3 usable points, fewer than 3 distinct points,
    constant ln P or constant MUI.

    >>> f = fit_utility_law([0, 10, 30, 90], [12, 8, 6, 3], labels=["z", "a", "b", "c"])
    >>> f.n, [e["label"] for e in f.excluded]
    (3, ['z'])
    >>> fit_utility_law([10, 20], [5, 4])
    Traceback (most recent call last):
    ...
    reporter.analyse.law.LawError: 2 usable points (P > 0); the law needs at least 3
    >>> fit_utility_law([10, 10, 20], [5, 5, 4])
    Traceback (most recent call last):
    ...
    reporter.analyse.law.LawError: 2 distinct (P, MUI) points among the 3 usable ones (equal points are one point); the law needs at least 3
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
    distinct = len(set(zip(P.tolist(), M.tolist())))
    if distinct < MIN_POINTS:
        raise LawError(f"{distinct} distinct (P, MUI) points among the {len(keep)} usable ones (equal points are one "
                       f"point); the law needs at least {MIN_POINTS}")
    x = np.log(P)
    if np.ptp(x) <= 1e-12:
        raise LawError("all points have the same performance; the slope is undefined")
    if np.ptp(M) <= 1e-12:  # R² is 0/0 (it reached results.json as null, which the schema refused: no analysis)
        raise LawError(f"all points have the same MUI ({float(M[0]):.4g}%); the law's slope and R² say nothing")
    r = stats.linregress(x, M)
    s_ci, i_ci, used, b_slopes, b_icpts = _bootstrap(x, M, seed, n_resamples, confidence)
    return LawFit(slope=float(r.slope), intercept=float(r.intercept), r2=float(r.rvalue ** 2), n=int(P.size),
                  slope_ci=s_ci, intercept_ci=i_ci, slope_stderr=float(r.stderr), p_value=float(r.pvalue),
                  performance=P, mui=M, labels=[labels[i] for i in keep], excluded=excluded,
                  confidence=confidence, n_resamples=n_resamples, n_resamples_used=used, seed=seed,
                  boot_slopes=b_slopes, boot_intercepts=b_icpts)


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


def describe_fit(fit: LawFit | None, reason: str | None, points: Sequence[dict]) -> FitDescription:
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
    head: dict[str, Any] = dict(fit.to_dict()) if fit is not None else {}
    return cast(FitDescription, {**head, "reason": None if fit is not None else reason, "n_points": len(points), "points": rows})
