"""Coverage, width and agreement of the paired interval for partial-credit scores: what the card used before (BCa
bootstrap beside a Wilcoxon test), the sign-flip test simply inverted (Hartigan 1969), and the shipped melded
interval (:mod:`reporter.metrics.sign_flip`).

Each scenario draws ``n`` items; a share ``tied`` of them scores the same for both models (difference 0), the
others differ by ``mu`` plus a symmetric spread (the sign-flip test's assumption), clipped to [-1, 1], or (skewed, against
that assumption) by +0.1 nine times in ten and -0.9 once, whose mean is 0. The true mean difference is computed
from a large sample of the same law. Printed per scenario and method: coverage of the true
mean, mean width, and how often the interval and its test disagree (one excludes 0 and the other does not reject,
or the reverse).

    python benchmarks/paired_partial_credit.py --reps 400
"""
from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
from scipy import stats

from reporter.metrics.sign_flip import _subset_means, sign_flip
from reporter.metrics.stats import score_ci

SCENARIOS = [  # (n, tied share, mu, spread); spread None: skewed, +0.1 nine times in ten and -0.9 once (mean 0)
    (12, 0.0, 0.12, 0.5), (30, 0.0, 0.05, 0.4), (30, 0.7, 0.3, 0.5), (30, 0.9, 0.3, 0.5), (60, 0.95, 0.5, 0.5),
    (100, 0.5, 0.1, 0.4), (200, 0.8, 0.2, 0.4), (30, 0.0, 0.0, None), (60, 0.8, 0.0, None), (200, 0.0, 0.0, None),
]


def _draw(rng: np.random.Generator, size: int, mu: float, spread: float | None) -> np.ndarray:
    if spread is None:
        return np.where(rng.random(size) < 0.9, 0.1, -0.9)
    return np.clip(mu + rng.choice([-1, 1], size) * rng.uniform(0, spread, size), -1, 1)


def hartigan(d: np.ndarray, seed: int, draws: int = 1999) -> tuple[float, float, float]:
    """The sign-flip test on all n differences, inverted: order statistics of subset means of all n items."""
    exact = d.size <= 18
    means, empty = _subset_means(d, exact=exact, draws=draws, seed=seed)
    total, base = means.size + 1 + empty, 1 + empty
    upper, lower = base + int(np.sum(means <= 0)), base + int(np.sum(means >= 0))
    p = min(1.0, 2 * min(upper, lower) / total)
    k = int(np.ceil(0.05 * total / 2 - 1e-9)) - base
    ordered = np.sort(means)
    return p, (float(ordered[k - 1]) if k >= 1 else -1.0), (float(ordered[-k]) if k >= 1 else 1.0)


def old(d: np.ndarray, seed: int) -> tuple[float, float, float]:
    """Wilcoxon's p-value and the BCa bootstrap interval of the mean, as the card had them."""
    p = 1.0 if not np.any(d != 0) else float(stats.wilcoxon(d, zero_method="wilcox").pvalue)
    r = score_ci(d, seed=seed)
    return p, r.ci_low, r.ci_high


def shipped(d: np.ndarray, seed: int) -> tuple[float, float, float]:
    r = sign_flip(d, seed=seed, draws=1999)
    return r.p_value, r.low, r.high


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    out = []
    for n, tied, mu, spread in SCENARIOS:
        big = _draw(rng, 400_000, mu, spread)
        true = (1 - tied) * float(big.mean())
        rows = {name: {"covered": 0, "width": 0.0, "disagree": 0} for name in ("bca+wilcoxon", "hartigan", "melded")}
        for i in range(args.reps):
            differ = rng.random(n) >= tied
            d = np.where(differ, _draw(rng, n, mu, spread), 0.0)
            for name, fn in (("bca+wilcoxon", old), ("hartigan", hartigan), ("melded", shipped)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    p, lo, hi = fn(d, i)
                r = rows[name]
                r["covered"] += lo <= true <= hi
                r["width"] += hi - lo
                r["disagree"] += (p < 0.05) != (not lo <= 0 <= hi)
        for name, r in rows.items():
            out.append({"n": n, "tied": tied, "mu": mu, "skewed": spread is None, "method": name, "coverage": r["covered"] / args.reps,
                        "mean_width": r["width"] / args.reps, "disagreement": r["disagree"] / args.reps})
            print(f"n={n:4d} tied={tied:.2f} mu={mu:.2f} {'skewed' if spread is None else 'symmetric':9s} {name:13s} coverage {r['covered'] / args.reps:.3f}  "
                  f"width {100 * r['width'] / args.reps:5.1f} pp  test/interval disagree {r['disagree'] / args.reps:.3f}")
    print(json.dumps({"reps": args.reps, "seed": args.seed, "rows": out}))


if __name__ == "__main__":
    main()
