"""Negative control of the other-split Min-K% test: clean models, many pairs, no fine-tuning.

For each model and task, pairs ``--items`` evaluated items with items of the task's other split,
exactly as ``reporter run`` does (:func:`reporter.collect.split_reference.collect_split_reference`),
and prints the test's raw one-sided p-value and the share of pairs the evaluated item wins. A clean
model has not seen either split more than the other, so these p-values should look uniform: small
ones across models and tasks would mean the splits are not exchangeable for that task.

Usage::

    python benchmarks/other_split_null.py                      # Gemma-3-270M and SmolLM2, 60 pairs, seed 2027
    python benchmarks/other_split_null.py --items 30 --tasks mmlu --models smollm2-135m-instruct
    python benchmarks/other_split_null.py --tasks gsm8k --other-split gsm8k=train.jsonl  # openai/grade-school-math's
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gemma-3-270m,smollm2-135m-instruct", help="packaged model names")
    ap.add_argument("--tasks", default="arc_challenge,arc_easy,mmlu,math500")
    ap.add_argument("--items", type=int, default=60)
    ap.add_argument("--seed", type=int, default=2027)
    ap.add_argument("--other-split", action="append", default=[], metavar="TASK=PATH",
                    help="a JSON-lines file of a task's other split (as a profile's tasks[].other_split); repeatable")
    args = ap.parse_args(argv)
    files = dict(o.split("=", 1) for o in args.other_split)

    from reporter.analyse.contamination import split_signal
    from reporter.collect.split_reference import collect_split_reference
    from reporter.config import ContaminationConfig
    from reporter.config.models import parse_config
    from reporter.models.loading import load_model
    from reporter.tasks import get_task, select_items

    print("| model | task | pairs | raw p | share won | seconds |\n|---|---|---|---|---|---|")
    for name in [m for m in args.models.split(",") if m]:
        spec = parse_config({"models": [{"name": name, "source": f"packaged:{name}"}]}).models[0]
        lm = load_model(spec, run_device="cpu")
        for task in [t for t in args.tasks.split(",") if t]:
            t = get_task(task)
            if task in files:
                t.use_other_split_file(files[task])
            items, _ = select_items(t, args.items, seed=args.seed, shots=0)
            t0 = time.perf_counter()
            rec = collect_split_reference(lm, t, items, Path(tempfile.mkdtemp()),
                                          ContaminationConfig(split_items=args.items), seed=args.seed)
            s = split_signal(rec)
            if not s.get("measured"):
                print(f"| {name} | {task} | 0 | not measured: {s.get('reason')} | | |")
                continue
            print(f"| {name} | {task} | {s['n']} | {s['p_value']:.3g} | {s['share']:.2f} | "
                  f"{time.perf_counter() - t0:.1f} |", flush=True)
        del lm
    return 0


if __name__ == "__main__":
    sys.exit(main())
