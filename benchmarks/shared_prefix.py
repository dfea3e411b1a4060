"""The fused generation with and without the batch's shared prefix run once, in one process.

    python benchmarks/shared_prefix.py --items 40 --rounds 3
    python benchmarks/shared_prefix.py --model packaged:gemma-3-270m --items 40
    python benchmarks/shared_prefix.py --device cuda --dtype bfloat16 --task gsm8k --shots 5 --items 64

For each round (order alternated) the script runs reporter's task runner on ARC-Challenge (``--task``) with
the default profile's collectors (MUI, the prompt's and response's log-probs, option
probabilities; LPP off, no evidence passes: the generation alone), once as the code runs it
(:func:`reporter.instrument.decode.shared_prefix_length` decides) and once with sharing turned
off (``SHARED_PREFIX_MIN`` set out of reach, the threshold the loop reads). It prints each
path's median wall time, the prompt tokens the prefills embedded, and how the two runs' results
compare: responses, the stored prompt and response log-probs (largest difference) and MUI's
key-neuron sets (mean Jaccard).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from reporter.collect.plan import plan_task
from reporter.collect.task_run import run_task
from reporter.config import LPPConfig, ModelSpec, Profile, TaskConfig
from reporter.instrument import decode
from reporter.models.loading import load_model
from reporter.store.logprobs import load_logprobs
from reporter.store.neurons import load_neuron_sets
from reporter.store.samples import read_samples


def _run(lm, profile, cfg, plan, where: Path, seed: int, share: bool) -> tuple[float, int]:
    """Wall seconds of one task run, and the tokens its forwards embedded."""
    old = decode.SHARED_PREFIX_MIN
    decode.SHARED_PREFIX_MIN = old if share else 10 ** 9
    seen = [0]
    handle = lm.model.get_input_embeddings().register_forward_hook(
        lambda m, i, o: seen.__setitem__(0, seen[0] + int(i[0].numel())))
    try:
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        run_task(lm, profile, cfg, plan, where, seed=seed, progress=False)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, seen[0]
    finally:
        handle.remove()
        decode.SHARED_PREFIX_MIN = old


def _compare(a: Path, b: Path) -> dict:
    ra, rb = read_samples(a / "samples.jsonl"), read_samples(b / "samples.jsonl")
    differ = sum(ra[k]["response"] != rb[k]["response"] for k in ra)
    la, _ = load_logprobs(a / "logprobs.npz")
    lb, _ = load_logprobs(b / "logprobs.npz")
    diff = 0.0
    for k in la:
        for part in ("prompt", "response"):
            x, y = la[k][part], lb[k][part]
            if x.shape == y.shape and x.size:
                ok = ~np.isnan(x)
                if (ok != ~np.isnan(y)).any():
                    return {"responses_differ": differ, "logprob_nan_layout_differs": k}
                diff = max(diff, float(np.abs(x[ok] - y[ok]).max(initial=0.0)))
    ia, sa, _ = load_neuron_sets(a / "neurons.npz")
    ib, sb, _ = load_neuron_sets(b / "neurons.npz")
    by_b = dict(zip(ib, sb))
    jac = [len(set(x.tolist()) & set(by_b[i].tolist())) / max(1, len(set(x.tolist()) | set(by_b[i].tolist())))
           for i, x in zip(ia, sa)]
    return {"responses_differ": differ, "logprob_max_abs_diff": diff, "mui_mean_jaccard": round(float(np.mean(jac)), 6),
            "mui_sets_equal": sum(j == 1.0 for j in jac), "items": len(jac)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="packaged:smollm2-135m-instruct")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--task", default="arc_challenge", help="a reporter task (e.g. gsm8k: few-shot examples)")
    ap.add_argument("--shots", type=int, default=None, help="the task's few-shot examples (default: its own)")
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    lm = load_model(ModelSpec(name="bench", source=args.model, dtype=args.dtype, max_batch_size=args.batch_size),
                    run_device=args.device, run_dtype=args.dtype, run_seed=args.seed)
    cfg = TaskConfig(name=args.task, limit=args.items, max_new_tokens=args.max_new_tokens, shots=args.shots)
    profile = Profile(name="bench", tasks=(cfg,), lpp=replace(LPPConfig(), enabled=False))
    plan = plan_task(lm, cfg, args.seed)
    paths = ("shared", "whole")
    times: dict[str, list[float]] = {p: [] for p in paths}
    tokens: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        _run(lm, profile, cfg, replace(plan, items=plan.items[:2], prompts=plan.prompts[:2],
                                       prompt_ids=plan.prompt_ids[:2]), Path(tmp) / "warm", args.seed, True)
        for r in range(args.rounds):
            for p in (paths if r % 2 == 0 else paths[::-1]):
                dt, n = _run(lm, profile, cfg, plan, Path(tmp) / f"{p}-{r}", args.seed, p == "shared")
                times[p].append(dt)
                tokens[p] = n
                print(f"round {r + 1}: {p:6s} {dt:6.2f} s, {n} tokens embedded", file=sys.stderr)
        same = _compare(Path(tmp) / "shared-0", Path(tmp) / "whole-0")
    med = {p: statistics.median(v) for p, v in times.items()}
    print(json.dumps({"model": args.model, "device": str(lm.device), "dtype": args.dtype, "task": args.task, "shots": args.shots, "items": len(plan.items),
                      "prompt_tokens": sum(len(x) for x in plan.prompt_ids), "batch_size": args.batch_size,
                      "max_new_tokens": args.max_new_tokens, "threads": torch.get_num_threads(),
                      "median_s": {p: round(v, 2) for p, v in med.items()},
                      "all_s": {p: [round(x, 2) for x in v] for p, v in times.items()},
                      "ratio_shared_to_whole": round(med["shared"] / med["whole"], 3),
                      "tokens_embedded": tokens, "compare": same}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
