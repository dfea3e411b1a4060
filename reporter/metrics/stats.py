"""Statistics for the benchmark report: bootstrap CIs, paired comparisons, McNemar.

Everything is deterministic for a given ``seed`` (``np.random.default_rng(seed)``
is the only source of randomness) and built on :mod:`scipy.stats`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Literal, Mapping, Sequence

import numpy as np
from scipy import stats

from .mcnemar_ci import mcnemar_ci
from .sign_flip import DRAWS, sign_flip

__all__ = ["ScoreCI", "PairedComparison", "score_ci", "paired_comparison",
           "mcnemar_exact", "all_pairs", "holm", "above_chance", "ALPHA", "EXACT_PAIRED_CI"]

#: the significance level of every test on the card
ALPHA = 0.05

#: ``method`` of a paired difference's interval that is exact and agrees with the exact McNemar test
EXACT_PAIRED_CI = "mcnemar-compatible-exact"

BootMethod = Literal["bca", "percentile"]
# Resamples (and BCa jackknife rows) are drawn in batches of about this many
# elements, so memory stays bounded for large tasks. Batching does not change
# the numbers: numpy draws the same index stream either way.
_BATCH_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class ScoreCI:
    """Mean score with a bootstrap confidence interval."""

    score: float  # raw mean of the per-item scores (a fraction for 0/1 scores)
    ci_low: float
    ci_high: float
    n: int
    seed: int
    method: str  # "bootstrap-bca", "bootstrap-percentile", "exact-binomial", "exact-bounded" or "degenerate"

    def to_dict(self) -> dict:
        """Plain JSON-ready dict, e.g. ``{"score": 0.5, "ci_low": ..., "n": 4, ...}``."""
        return asdict(self)


@dataclass(frozen=True)
class PairedComparison:
    """Model A minus model B on the items both answered for one task."""

    model_a: str
    model_b: str
    task: str
    n: int  # items both models answered (matched by item id)
    mean_diff: float  # mean(a - b)
    ci_low: float  # CI of mean(a - b) agreeing with the test: exact McNemar-compatible, or sign-flip-compatible
    ci_high: float
    mcnemar_p: float | None  # exact McNemar p-value; None unless both are 0/1
    n01: int | None  # a wrong, b right
    n10: int | None  # a right, b wrong
    method: str = ""  # CI method: EXACT_PAIRED_CI, "sign-flip-exact" or "sign-flip-monte-carlo"
    p_value: float | None = None  # the paired test's two-sided p-value (McNemar exact, or sign-flip)
    test: str | None = None  # "mcnemar-exact" for 0/1 scores, "sign-flip" otherwise (older runs: "wilcoxon")

    def to_dict(self) -> dict:
        """Plain JSON-ready dict, e.g. ``{"model_a": "m1", "mean_diff": 0.1, ...}``."""
        return asdict(self)


def _as_scores(scores: Sequence[float], what: str) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{what} must be a 1-D sequence of numbers, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{what} is empty: a confidence interval needs at least one item")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what} contains NaN or infinite values")
    return x


def score_ci(scores: Sequence[float], *, seed: int, confidence: float = 0.95,
             n_resamples: int = 2000, method: BootMethod = "bca", exact_binary: bool = False) -> ScoreCI:
    """Confidence interval of the mean score.

    ``exact_binary`` (a task's score: every item in [0, 1]) where every item is right or wrong (0 or 1): the exact
    binomial interval (Clopper–Pearson, ``scipy.stats.binomtest``; method ``"exact-binomial"``), whatever the
    number right: a bootstrap of few right/wrong items gave 1 of 4 right [0, 100 %] in one order of the items and
    [0, 75 %] in another, where the exact interval is [0.6, 80.6 %]. Where every item scored the same partial credit
    c, the exact bound for a score in [0, 1] at c (:func:`constant_score_bounds`; method ``"exact-bounded"``): a
    score X in [0, 1] with mean m has P(X = 0) <= 1 - m, so n zeros have probability at most (1 - m)^n, the
    Bernoulli case. Otherwise (partial credit, or a difference of two models' scores, which is not a score in
    [0, 1]) the bootstrap (``scipy.stats.bootstrap``), ``method`` ``"bca"`` (default) or ``"percentile"``, over the
    scores in sorted order, so that the same scores in another order give the same interval; one item, or all
    scores equal, gives the zero-width interval ``(score, score)`` with method ``"degenerate"``. Raises
    ``ValueError`` for no items or non-finite scores.

    >>> r = score_ci([1, 0, 1, 1], seed=0)
    >>> r.score, r.method
    (0.75, 'bootstrap-bca')
    >>> score_ci([1, 1, 1], seed=0).to_dict()["ci_low"]
    1.0
    >>> r = score_ci([0, 0, 0, 0, 0], seed=0, exact_binary=True); r.method, r.ci_low, round(r.ci_high, 4)
    ('exact-binomial', 0.0, 0.5218)
    >>> r = score_ci([0, 0, 0, 1], seed=0, exact_binary=True); r.method, round(r.ci_low, 4), round(r.ci_high, 4)
    ('exact-binomial', 0.0063, 0.8059)
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 2:
        raise ValueError(f"n_resamples must be >= 2, got {n_resamples}")
    if method not in ("bca", "percentile"):
        raise ValueError(f"method must be 'bca' or 'percentile', got {method!r}")
    x = _as_scores(scores, "scores")
    score = float(np.mean(x))
    if exact_binary and bool(np.all((x == 0.0) | (x == 1.0))):
        ci = stats.binomtest(int(x.sum()), int(x.size)).proportion_ci(confidence, method="exact")
        return ScoreCI(score, float(ci.low), float(ci.high), int(x.size), seed, "exact-binomial")
    x = np.sort(x)  # the mean's interval is the scores' as a set: another order of the items, the same resamples
    if x.size == 1 or np.all(x == x[0]):
        if exact_binary and 0.0 < x[0] < 1.0:
            low, high = constant_score_bounds(float(x[0]), int(x.size), confidence)
            return ScoreCI(score, low, high, int(x.size), seed, "exact-bounded")
        return ScoreCI(score, score, score, int(x.size), seed, "degenerate")

    def boot(m: str, previous=None):
        return stats.bootstrap(
            (x,), np.mean, vectorized=True, n_resamples=0 if previous else n_resamples,
            batch=max(1, _BATCH_ELEMENTS // x.size),
            confidence_level=confidence, method=m, bootstrap_result=previous,
            rng=np.random.default_rng(seed))

    # BCa is undefined (NaN) when every resample falls on one side of the
    # estimate (only likely with tiny n_resamples): fall back to percentile.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = boot(method)
        used = method
        ci = res.confidence_interval
        if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
            used = "percentile"
            ci = boot(used, previous=res).confidence_interval
    return ScoreCI(score, float(ci.low), float(ci.high), int(x.size), seed,
                   f"bootstrap-{used}")


def constant_score_bounds(c: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact interval of the mean m of a score in [0, 1] whose n items all scored c.

    Among the scores in [0, 1] with mean m > c, the one most likely to give c every time puts mass at c and at 1
    only, P(X = c) = (1 - m) / (1 - c); below c, at c and at 0, P(X = c) = m / c. So n items all at c have
    probability at most ((1 - m) / (1 - c))^n, or (m / c)^n, and the means not refused at level 1 - confidence
    (each side half of it) are [c·(α/2)^(1/n), 1 - (1 - c)·(α/2)^(1/n)]. At c = 0 or 1 it is Clopper–Pearson's.

    >>> [round(v, 4) for v in constant_score_bounds(0.5, 5)]
    [0.2391, 0.7609]
    >>> [round(v, 4) for v in constant_score_bounds(0.0, 5)]  # Clopper-Pearson's 0 of 5
    [0.0, 0.5218]
    """
    if not 0.0 <= c <= 1.0 or n < 1:
        raise ValueError(f"need a score in [0, 1] and n >= 1, got {c}, {n}")
    tail = ((1.0 - confidence) / 2.0) ** (1.0 / n)
    return c * tail, 1.0 - (1.0 - c) * tail


def mcnemar_exact(n01: int, n10: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of ``n01`` vs ``n10`` at p=1/2.

    Returns 1.0 when there are no discordant pairs.

    >>> mcnemar_exact(0, 5)  # 2 * (1/2)**5
    0.0625
    >>> mcnemar_exact(3, 3)
    1.0
    """
    n01, n10 = int(n01), int(n10)
    if n01 < 0 or n10 < 0:
        raise ValueError(f"discordant counts must be >= 0, got n01={n01}, n10={n10}")
    if n01 + n10 == 0:
        return 1.0
    return float(min(1.0, stats.binomtest(n01, n01 + n10, 0.5).pvalue))


def paired_comparison(model_a: str, scores_a: Mapping[str, float],
                      model_b: str, scores_b: Mapping[str, float], *, task: str,
                      seed: int, confidence: float = 0.95,
                      n_resamples: int = DRAWS) -> PairedComparison:
    """Compare two models on the item ids they share (sorted for determinism).

    When every shared score is 0 or 1, the p-value is the exact McNemar test on the discordant pairs and the CI
    the exact interval compatible with it (:func:`reporter.metrics.mcnemar_ci.mcnemar_ci`, Fay & Lumbard 2021;
    method :data:`EXACT_PAIRED_CI`): it excludes 0 exactly when p < 1 - ``confidence``. Otherwise (partial credit)
    the p-value is the paired sign-flip test of ``mean(a - b)`` and the CI the one that agrees with it
    (:func:`reporter.metrics.sign_flip.sign_flip`; method ``sign-flip-exact`` up to 18 items that differ, else
    ``sign-flip-monte-carlo`` with ``n_resamples`` seeded arrangements): the same agreement. Raises ``ValueError``
    if no item id is shared.

    >>> c = paired_comparison("m1", {"q1": 1, "q2": 1, "q3": 0},
    ...                       "m2", {"q1": 0, "q2": 1, "q4": 1}, task="t", seed=0)
    >>> c.n, c.mean_diff, c.n10, c.n01, c.mcnemar_p, c.method
    (2, 0.5, 1, 0, 1.0, 'mcnemar-compatible-exact')
    """
    ids = sorted(set(scores_a) & set(scores_b))
    if not ids:
        raise ValueError(
            f"{model_a!r} and {model_b!r} share no item ids on task {task!r}")
    a = _as_scores([scores_a[i] for i in ids], f"scores of {model_a!r} on {task!r}")
    b = _as_scores([scores_b[i] for i in ids], f"scores of {model_b!r} on {task!r}")
    p = n01 = n10 = None
    if np.all((a == 0) | (a == 1)) and np.all((b == 0) | (b == 1)):
        n01 = int(np.sum((a == 0) & (b == 1)))
        n10 = int(np.sum((a == 1) & (b == 0)))
        p = mcnemar_exact(n01, n10)
        test, p_value = "mcnemar-exact", p
        low, high = mcnemar_ci(n10, n01, len(ids), confidence)
        ci = ScoreCI(float(np.mean(a - b)), low, high, len(ids), seed, EXACT_PAIRED_CI)
    else:
        flip = sign_flip(a - b, seed=seed, confidence=confidence, draws=n_resamples)
        test, p_value = "sign-flip", flip.p_value
        ci = ScoreCI(float(np.mean(a - b)), flip.low, flip.high, len(ids), seed,
                     "sign-flip-exact" if flip.exact else "sign-flip-monte-carlo")
    return PairedComparison(model_a, model_b, task, len(ids), ci.score, ci.ci_low,
                            ci.ci_high, p, n01, n10, ci.method, p_value, test)


def all_pairs(per_model: Mapping[str, Mapping[str, Mapping[str, float]]], *,
              seed: int) -> list[PairedComparison]:
    """Paired comparisons for every unordered model pair on every shared task.

    ``per_model[model][task][item_id] = score``. Pairs follow the model order
    given (a before b); tasks follow model a's order. Task pairs with no shared
    item id are skipped. Every comparison uses the same ``seed``.

    >>> res = all_pairs({"m1": {"t": {"q": 1, "r": 0}},
    ...                  "m2": {"t": {"q": 0, "r": 0}}, "m3": {}}, seed=0)
    >>> [(c.model_a, c.model_b, c.task, c.mean_diff) for c in res]
    [('m1', 'm2', 't', 0.5)]
    """
    out = []
    for ma, mb in combinations(list(per_model), 2):
        for task, items_a in per_model[ma].items():
            items_b = per_model[mb].get(task)
            if items_b is None or not set(items_a) & set(items_b):
                continue
            out.append(paired_comparison(ma, items_a, mb, items_b, task=task, seed=seed))
    return out


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, input order kept: the k-th smallest of m times (m - k + 1), made
    non-decreasing along that order and capped at 1.

    The family is every p-value given; "significant" means adjusted p < :data:`ALPHA`. The values equal
    ``statsmodels``' ``multipletests(method="holm")`` bit for bit (``tests/test_ranking.py``), which is not called:
    its Holm branch runs ``gc.collect()`` on every call: 40 ms in a bare process, 160 ms in one that imported
    reporter's stages, and more the more objects a process holds, for four array operations.

    >>> holm([0.01, 0.04, 0.03, 0.2])
    [0.04, 0.09, 0.09, 0.2]
    >>> holm([])
    []
    """
    p = np.asarray(p_values, dtype=np.float64)
    if not p.size:
        return []
    order = np.argsort(p)
    stepped = np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1, dtype=np.float64))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(stepped, 1.0)
    return [float(x) for x in adjusted]


def above_chance(scores: Sequence[float], chance: float | None, *, alpha: float = ALPHA,
                 majority: float | None = None) -> dict:
    """Whether a model beats a task's chance level significantly (one-sided).

    The level tested against (``baseline``) is the higher of ``chance`` (random guessing) and
    ``majority`` (the share the task's most common answer gets, always given: BoolQ's "yes" is 62 %);
    ``baseline_kind`` says which. For 0/1 scores: the exact binomial test of ``k`` correct of ``n``
    against it (``alternative="greater"``). With a varying number of options the mean chance level is
    used; the binomial is then conservative (a sum of unequal Bernoullis varies less). For other
    scores: whether the BCa bootstrap 95% CI lies above it. ``chance`` None: not tested.

    >>> r = above_chance([1, 0, 0, 1, 0, 0, 0, 0], 0.25)
    >>> r["above"], round(r["p"], 3)
    (False, 0.633)
    >>> above_chance([1] * 8, 0.25)["above"]
    True
    >>> r = above_chance([1] * 130 + [0] * 70, 0.5, majority=0.62)  # 65 % on a task 62 % "yes"
    >>> r["baseline_kind"], r["above"], above_chance([1] * 130 + [0] * 70, 0.5)["above"]
    ('majority', False, True)
    """
    x = _as_scores(scores, "scores")
    out: dict = {"chance": chance, "n": int(x.size), "score": float(x.mean()), "p": None, "test": None,
                 "above": None}
    if chance is None:
        out["test"] = "none: the task has no chance level"
        return out
    baseline, kind = float(chance), "chance"
    if majority is not None:
        out["majority"] = float(majority)
        if majority > baseline:
            baseline, kind = float(majority), "majority"
    out.update(baseline=baseline, baseline_kind=kind)
    if np.all((x == 0) | (x == 1)):
        k = int(x.sum())
        if baseline <= 0:
            p = 0.0 if k > 0 else 1.0
        else:
            p = float(stats.binomtest(k, int(x.size), min(baseline, 1.0), alternative="greater").pvalue)
        out.update(p=p, test="binomial-exact-one-sided", above=p < alpha)
    else:
        ci = score_ci(x.tolist(), seed=0)
        out.update(test="bootstrap-ci", above=ci.ci_low > baseline)
    return out
