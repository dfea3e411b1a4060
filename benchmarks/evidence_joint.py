"""Whether the two per-item contamination tests lean together on clean items (issue #35).

The option-order test and Min-K% against the other split take the first items of one seeded order
(:func:`reporter.collect.evidence.evidence_order`), so they test the same items, and the card's rule counts two
tests that fire as two pieces of evidence ("strong"). That is right only if, without contamination, the two tests
do not single out the same items. This script measures it on contamination controls' runs
(``benchmarks/contamination_control.py -o DIR``), where both tests scored every item:

- per model x task, Spearman's correlation of the item statistics over the shared items (:func:`item_statistics`),
  and of the two tests' p-values over bootstrap samples of shared items, each run through the run's own test
  functions; how often each test fires, and both, against the product of the two;
- the clean rows (every model x task but the ``*contaminated*`` models on the control's trained tasks) pooled by
  Fisher's z (:func:`pooled_rho`), with a 95 % interval.

Usage::

    python benchmarks/evidence_joint.py /tmp/ctl/s1234 /tmp/ctl/s2027 --items 48 --orders 3 --tests 1,3,50 --draws 400
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from reporter.analyse.contamination import FDR_Q
from reporter.analyse.order_null import order_null_for
from reporter.analyse.signals import MIN_TOKENS, MINK_K, _ranks, option_order_signal, split_signal
from reporter.metrics.min_k import min_k_percent_prob
from reporter.metrics.rank_tests import MIN_ITEMS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evidence_power import _read, keep_orders  # noqa: E402 - the power study's sampling, shared


def shared_items(rec_o: Mapping[str, Any], rec_s: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The items both per-item tests scored: (option-order item, other-split pair), in the pairs' order. A pair whose
    texts have fewer than the Min-K% comparison's tokens is left out, as :func:`split_signal` leaves it out.
    """
    by_id = {str(it["id"]): it for it in rec_o.get("per_item") or []}
    return [(by_id[str(pr["benchmark_id"])], pr) for pr in rec_s.get("pairs") or []
            if str(pr["benchmark_id"]) in by_id
            and min(len(pr["benchmark_logprobs"]), len(pr["reference_logprobs"])) >= MIN_TOKENS]


def item_statistics(shared: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> tuple[np.ndarray, np.ndarray]:
    """Per shared item, what each test adds up: the published order's rank share ``(rank + 1/2) / (m + 1)`` (the
    test's own ranks; small = the published order on top) and the pair's Min-K% difference, evaluated minus other
    split (large = the evaluated item more familiar). Contamination drives the first down and the second up.
    """
    r, m = _ranks([o for o, _ in shared])
    d = [min_k_percent_prob(np.asarray(pr["benchmark_logprobs"], np.float64), MINK_K)
         - min_k_percent_prob(np.asarray(pr["reference_logprobs"], np.float64), MINK_K) for _, pr in shared]
    return (r + 0.5) / (m + 1.0), np.asarray(d, np.float64)


def joint_rows(run: Path, contaminated: set[tuple[str, str]], *, n: int, orders: int, tests: Sequence[int],
               draws: int, seed: int) -> list[dict[str, Any]]:
    """Whether the two per-item tests are independent when they test the same items (issue #35: both take the first
    items of one seeded order), per model x task that has both records.

    - ``rho_items``: Spearman's correlation, over the shared items, of the item statistics
      (:func:`item_statistics`; negative = the two tests lean the same way on the same items), and its p-value;
    - ``rho_p``: Spearman's correlation of the two tests' p-values over ``draws`` bootstrap samples of ``n`` shared
      items (each test scores the same sample, the option-order test at ``orders`` other orders), through the run's
      own test functions;
    - per K: the share of draws where each test fires, where both fire, and the product of the first two (what
      independence predicts).
    """
    rows: list[dict[str, Any]] = []
    for mdir in sorted((run / "models").iterdir()):
        for tdir in sorted((mdir / "tasks").glob("*")):
            rec_o, rec_s = _read(tdir / "option_order.json"), _read(tdir / "split_reference.json")
            if not rec_o or not rec_s:
                continue
            shared = shared_items(rec_o, rec_s)
            if len(shared) < MIN_ITEMS:
                continue
            u, d = item_statistics(shared)
            rho = stats.spearmanr(u, d)
            null = order_null_for(tdir.name)
            rng = np.random.default_rng([seed, n, orders, 3])
            sig_o, sig_s = [], []
            for _ in range(draws):
                pick = rng.choice(len(shared), size=n, replace=True)
                items = [keep_orders(shared[int(i)][0], orders, rng) for i in pick]
                sig_o.append(option_order_signal({**rec_o, "n": n, "per_item": items}, null))
                sig_s.append(split_signal({**rec_s, "n": n, "pairs": [shared[int(i)][1] for i in pick]}))
            po = np.asarray([s["p_value"] for s in sig_o], np.float64)
            ps = np.asarray([s["p_value"] for s in sig_s], np.float64)
            row: dict[str, Any] = {"model": mdir.name, "task": tdir.name,
                                   "contaminated": (mdir.name, tdir.name) in contaminated, "n_shared": len(shared),
                                   "rho_items": float(rho.statistic), "p_items": float(rho.pvalue),
                                   "rho_p": float(stats.spearmanr(po, ps).statistic), "n": n, "orders": orders}
            for k in tests:
                fo = (np.minimum(po * k, 1.0) < FDR_Q) & np.asarray([bool(s["meets_effect"]) for s in sig_o])
                fs = (np.minimum(ps * k, 1.0) < FDR_Q) & np.asarray([bool(s["meets_effect"]) for s in sig_s])
                row[f"K={k}"] = {"option_order": float(fo.mean()), "split_min_k": float(fs.mean()),
                                 "both": float((fo & fs).mean()), "product": float(fo.mean() * fs.mean())}
            rows.append(row)
    return rows


def pooled_rho(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The item-level correlations of ``rows`` pooled by Fisher's z, weighted by ``n - 3``, with a 95 % interval.

    >>> r = pooled_rho([{"rho_items": 0.5, "n_shared": 103}, {"rho_items": -0.5, "n_shared": 103}])
    >>> round(r["rho"], 6), round(r["high"], 3)
    (0.0, 0.138)
    """
    w = np.asarray([r["n_shared"] - 3.0 for r in rows])
    z = float(np.sum(w * np.arctanh([r["rho_items"] for r in rows])) / np.sum(w))
    se = 1.0 / math.sqrt(float(np.sum(w)))
    return {"rho": math.tanh(z), "low": math.tanh(z - 1.96 * se), "high": math.tanh(z + 1.96 * se),
            "items": float(np.sum(w) + 3 * len(rows)), "rows": float(len(rows))}




def report(controls: Sequence[Path], *, n: int, orders: int, tests: Sequence[int], draws: int, seed: int,
                 as_json: bool) -> int:
    rows = []
    for c in controls:
        meta = (_read(c / "control.json") or {}).get("meta", {})
        run = c / "run" if (c / "run" / "models").is_dir() else c
        hot = {(m.name, t) for m in (run / "models").iterdir() if "contaminated" in m.name for t in meta.get("tasks", [])}
        rows += [{"control": c.name, **r} for r in joint_rows(run, hot, n=n, orders=orders, tests=tests, draws=draws,
                                                               seed=seed)]
    clean = [r for r in rows if not r["contaminated"]]
    pooled = pooled_rho(clean) if clean else None
    if as_json:
        print(json.dumps({"rows": rows, "pooled_clean": pooled}, indent=1))
        return 0
    print("| control | model | task | trained on | shared items | rho, items (p) | rho, p-values | "
          + " | ".join(f"K={k}: fires o / s / both (product)" for k in tests) + " |")
    print("|---|---|---|---|---|---|---|" + "---|" * len(tests))
    for r in rows:
        cells = [f"{r[f'K={k}']['option_order']:.3f} / {r[f'K={k}']['split_min_k']:.3f} / {r[f'K={k}']['both']:.3f} "
                 f"({r[f'K={k}']['product']:.3f})" for k in tests]
        print(f"| {r['control']} | {r['model']} | {r['task']} | {'yes' if r['contaminated'] else 'no'} | "
              f"{r['n_shared']} | {r['rho_items']:.3f} ({r['p_items']:.2g}) | {r['rho_p']:.3f} | " + " | ".join(cells) + " |")
    if pooled:
        print(f"\nclean rows pooled ({int(pooled['rows'])} rows, {int(pooled['items'])} items): item-level rho "
              f"{pooled['rho']:.3f} (95 % {pooled['low']:.3f} to {pooled['high']:.3f})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("control", type=Path, nargs="+", help="contamination controls' directories (their run/ is read)")
    ap.add_argument("--items", type=int, default=48, help="shared items per bootstrap sample (the default's 48)")
    ap.add_argument("--orders", type=int, default=3, help="other orders per item (the default's 3)")
    ap.add_argument("--tests", default="1,3,50", help="tests in the run (Benjamini-Hochberg's K)")
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    for c in a.control:
        if not (c / "run" / "models").is_dir() and not (c / "models").is_dir():
            print(f"evidence_joint: {c}: no run/models directory (a contamination control's -o DIR)", file=sys.stderr)
            return 2
    return report(a.control, n=a.items, orders=a.orders, tests=[int(x) for x in a.tests.split(",") if x],
                  draws=a.draws, seed=a.seed, as_json=a.json)


if __name__ == "__main__":
    sys.exit(main())
