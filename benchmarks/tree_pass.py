"""The option-order pass on the prefix tree against the KV-cache path it replaced (issue #35, item 1).

The option-order test scores each item in its published order and 8 others. The KV-cache path
(:mod:`reporter.instrument.prefix`) runs an item's stem once and every order's option block on the
stem's cache; the prefix tree (:mod:`reporter.instrument.tree`) also runs once each option line that
several orders begin with, and packs an item's orders into one row under a tree attention mask.
This script runs :func:`~reporter.collect.option_order.option_order_evidence` both ways on real
models and benchmark items that ship offline (the run's settings: 32 items, 8 orders, the 6-token
window, batch 8), the paths alternated and rotated over ``--rounds``, in one process, and prints per
model x benchmark the tokens each path runs, the seconds (median), the largest difference of an
order's log-likelihood, and whether the test's p-values are equal.

Usage::

    python benchmarks/tree_pass.py --rounds 2                      # both packaged models, 4 benchmarks
    python benchmarks/tree_pass.py --models packaged:smollm2-135m-instruct --benchmarks arc_challenge --json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

BENCHMARKS = "arc_challenge,arc_easy,mmlu,hellaswag"
MODELS = "packaged:smollm2-135m-instruct,packaged:gemma-3-270m"


def token_counts(lm: Any, items: Sequence[Any], *, n_perms: int, max_items: int, seed: int, window: int
                 ) -> dict[str, int]:
    """Tokens the model runs for the option-order pass: on the KV-cache path (each distinct stem once, every
    order's block after it) and on the tree (each group's distinct prefixes once), both cut after the last
    scored token as the pass cuts them.
    """
    from reporter.collect import option_order as oo
    from reporter.instrument.tree import tree_tokens

    plan, texts, starts, _ = oo.order_variants(lm.tokenizer, items, n_perms=n_perms, max_items=max_items, seed=seed)
    where = oo._scored_positions(plan, texts, starts, window)
    cut = [t[:max(w, default=s) + 1] for t, w, s in zip(texts, where, starts)]
    stems = {tuple(t[:s - 1]) for t, s in zip(cut, starts)}
    groups: dict[tuple[int, ...], int] = {}
    owners = [groups.setdefault(tuple(t[:s - 1]), len(groups)) for t, s in zip(cut, starts)]
    return {"cache": sum(len(s) for s in stems) + sum(len(t) - s + 1 for t, s in zip(cut, starts)),
            "tree": tree_tokens(cut, owners), "texts": len(cut)}


def measure(lm: Any, items: Sequence[Any], *, rounds: int, n_perms: int = 8, max_items: int = 32, seed: int = 0,
            window: int = 6, batch_size: int = 8) -> dict[str, Any]:
    """Both paths on one model x benchmark: seconds per round, the largest |Δ ll|, the test's p-values."""
    import reporter.collect.option_order as oo
    from reporter.analyse.contamination import option_order_signal

    seconds: dict[str, list[float]] = {"cache": [], "tree": []}
    ev: dict[str, Any] = {}
    for k in range(rounds):
        for path in (("cache", "tree") if k % 2 == 0 else ("tree", "cache")):
            t0 = time.perf_counter()
            ev[path] = oo.option_order_evidence(lm, items, n_perms=n_perms, max_items=max_items, seed=seed,
                                                batch_size=batch_size, window=window, path=path)
            seconds[path].append(time.perf_counter() - t0)
    diff = max(abs(u - v) for a, b in zip(ev["cache"]["per_item"], ev["tree"]["per_item"])
               for u, v in zip([a["ll"], *a["perm_ll"]], [b["ll"], *b["perm_ll"]]))
    sig = {p: option_order_signal(ev[p]) for p in ev}
    return {"n": ev["tree"]["n"], "seconds": {p: statistics.median(s) for p, s in seconds.items()},
            "rounds": seconds, "max_abs_ll_diff": diff,
            "p_value": {p: sig[p].get("p_value") for p in sig},
            "tokens": token_counts(lm, items, n_perms=n_perms, max_items=max_items, seed=seed, window=window)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=MODELS, help=f"comma-separated sources (default {MODELS})")
    ap.add_argument("--benchmarks", default=BENCHMARKS, help=f"comma-separated (default {BENCHMARKS})")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print the JSON document only")
    args = ap.parse_args(argv)
    import torch
    from option_order_null import benchmark_items

    from reporter.config import ModelSpec
    from reporter.models.loading import load_model

    out: list[dict[str, Any]] = []
    for source in [m for m in args.models.split(",") if m]:
        lm = load_model(ModelSpec(name=source, source=source, dtype="float32"), run_device="cpu",
                        run_dtype="float32", run_seed=0)
        for bench in [b for b in args.benchmarks.split(",") if b]:
            rec = {"model": source, "benchmark": bench, **measure(lm, benchmark_items(bench), rounds=args.rounds)}
            out.append(rec)
            print(f"{source} {bench}: cache {rec['seconds']['cache']:.1f} s, tree {rec['seconds']['tree']:.1f} s; "
                  f"tokens {rec['tokens']['cache']} -> {rec['tokens']['tree']}; max |dll| {rec['max_abs_ll_diff']:.1e}",
                  file=sys.stderr, flush=True)
        del lm
    doc = {"torch": torch.__version__, "threads": torch.get_num_threads(), "results": out}
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print("| model | benchmark | items | tokens: cache → tree | cache s | tree s | ratio | max abs Δll | p equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in out:
        s, t = r["seconds"], r["tokens"]
        same = r["p_value"]["cache"] == r["p_value"]["tree"]
        print(f"| {r['model']} | {r['benchmark']} | {r['n']} | {t['cache']:,} → {t['tree']:,} | {s['cache']:.1f} | "
              f"{s['tree']:.1f} | {s['tree'] / s['cache']:.2f} | {r['max_abs_ll_diff']:.1e} | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
