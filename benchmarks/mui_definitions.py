"""How much the MUI definition matters: paper, contribution and mui-eval on the same items and responses.

Loads a model (default: the packaged SmolLM2-135M-Instruct, offline), answers ``--items`` ARC-Challenge
questions greedily with reporter's prompts, then runs ONE hooked teacher-forced pass per batch with
the three definitions' collectors attached together, so every definition sees the same tokens and
activations. Reports, per definition, the MUI of the union over the items (top_ratio as given), and
for each pair of definitions the mean per-item Jaccard of the key-neuron sets.

Usage::

    python benchmarks/mui_definitions.py --items 24 --json
    python benchmarks/mui_definitions.py --model packaged:gemma3-270m --items 24 --top-ratio 0.001
"""
from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import platform
import sys
import time

import numpy as np
import torch

from reporter.collect.collectors.mui import make_collector
from reporter.collect.plan import plan_task
from reporter.config import ModelSpec, TaskConfig
from reporter.instrument.batch import teacher_forced_batch
from reporter.instrument.hooked_pass import hooked_pass
from reporter.metrics.mui import DEFINITIONS, utilization
from reporter.models.generation import generate
from reporter.models.loading import load_model


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|a ∩ b| / |a ∪ b| of two id sets (1.0 when both are empty)."""
    union = np.union1d(a, b).size
    return float(np.intersect1d(a, b).size / union) if union else 1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="packaged:smollm2-135m-instruct")
    ap.add_argument("--task", default="arc_challenge")
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--top-ratio", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    lm = load_model(ModelSpec(name=args.model, source=args.model, max_batch_size=args.batch))
    plan = plan_task(lm, TaskConfig(name=args.task, limit=args.items), seed=args.seed)
    t0 = time.perf_counter()
    gens = generate(lm, plan.prompt_ids, max_new_tokens=plan.task.max_new_tokens, stop=plan.stop,
                    batch_size=args.batch)
    t_gen = time.perf_counter() - t0
    cols = {d: make_collector(d, args.top_ratio, vocab_size=lm.tokenizer.vocab_size) for d in DEFINITIONS}
    t0 = time.perf_counter()
    for i in range(0, len(gens), args.batch):
        chunk = gens[i:i + args.batch]
        pb = teacher_forced_batch([g.prompt_ids for g in chunk], [g.response_ids for g in chunk],
                                  lm.tokenizer.pad_token_id, lm.device)
        hooked_pass(lm.model, lm.adapter, pb, list(cols.values()))
    t_pass = time.perf_counter() - t0
    L, F = lm.adapter.n_layers, lm.adapter.d_ff
    sets = {d: c.results() for d, c in cols.items()}
    out = {
        "model": args.model, "task": args.task, "items": len(gens), "top_ratio": args.top_ratio,
        "n_layers": L, "d_ff": F, "dtype": str(lm.dtype).replace("torch.", ""),
        "mean_response_tokens": float(np.mean([len(g.response_ids) for g in gens])),
        "mui_percent": {d: 100 * utilization(s, L, F) for d, s in sets.items()},
        "mean_keys_per_item": {d: float(np.mean([x.size for x in s])) for d, s in sets.items()},
        "mean_jaccard": {f"{a} vs {b}": float(np.mean([jaccard(x, y) for x, y in zip(sets[a], sets[b])]))
                         for a, b in itertools.combinations(DEFINITIONS, 2)},
        "seconds": {"generation": round(t_gen, 1), "hooked_passes": round(t_pass, 1)},
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "threads": torch.get_num_threads(), "torch": torch.__version__},
        "date": _dt.date.today().isoformat(),
    }
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{args.model} on {len(gens)} {args.task} items, top_ratio {args.top_ratio}:")
        for d in DEFINITIONS:
            print(f"  {d:>12}: MUI {out['mui_percent'][d]:.3f}%  ({out['mean_keys_per_item'][d]:.1f} key neurons/item)")
        for pair, j in out["mean_jaccard"].items():
            print(f"  Jaccard {pair}: {j:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
