"""End-to-end evaluation speed against lm-evaluation-harness, side by side, ratios in one run.

The same loaded model, the same items, byte-identical prompts, greedy decoding with the same
``max_new_tokens`` and stop sequences, the same batch size, through these paths:

``lm-eval``
    (a) lm-evaluation-harness 0.4.x: its ``hf`` model (``HFLM`` around the very model object) and
    ``generate_until`` tasks whose YAML reads the benchmark's JSONL offline (one task per
    reporter task: each has its own stop sequences and token budget).
``reporter``
    (b) reporter's task runner with every task-scope collector on (MUI score mode, token log-probs,
    option probabilities), fed by the generation's own forward passes (``collection: fused``).
``reporter-tf``
    (b') the same collectors fed by a second, teacher-forced pass (``collection: teacher-forced``),
    the path before fusion: what fusion saves.
``reporter-bare``
    (c) reporter with no collector: generation, scoring, samples on disk.

Each path plans its tasks (prompts, tokenisation) and writes its outputs inside the timed region;
model loading is outside it and the same for all (one model object). After one untimed warm-up
batch, ``--rounds`` rounds run every path once each, order rotated per round; times are medians.
Peak memory is measured apart from the timing, in one fresh process per path that loads the
model, resets the peak and runs the path once: on CPU its peak resident set during the path
(VmHWM after ``/proc/self/clear_refs``; the weights, already resident, count), on CUDA
``max_memory_allocated``. ``--no-memory`` skips it.

The check: every path's response text per item, against lm-eval's (a); differences are listed.
``--profile`` runs path (b) once more under ``cProfile`` and prints the top of the profile.

``--mode lm-eval-task`` (issue 31) compares log-likelihood scoring of lm-eval's own ``arc_challenge``
instead (``make identity``): see ``benchmarks/lm_eval_task_bench.py``.

Usage (lm-eval is the optional benchmark extra: ``pip install -e '.[bench]'``)::

    python benchmarks/throughput.py --json
    python benchmarks/throughput.py --shape smollm2-135m --rounds 3      # random weights of a shape
    python benchmarks/throughput.py --device cuda --dtype bfloat16 --batch-size 32 --json
    python benchmarks/throughput.py --mode lm-eval-task --docs 100 --shots 0,5 --rounds 3
    python benchmarks/throughput.py --process --items 120 --rounds 3   # fresh processes, start to exit

``--process`` (issue 35) runs ``lm_eval run`` and ``reporter run`` as fresh processes, timed from start
to exit, on reporter's ARC-Challenge prompts as a ``generate_until`` task: see
``benchmarks/process_bench.py``.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as _dt
import gc
import io
import json
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

from reporter.collect.collectors import enabled_collectors
from reporter.collect.plan import TaskPlan, plan_task
from reporter.collect.task_run import run_task
from reporter.config import LPPConfig, ModelSpec, MUIConfig, Profile, TaskConfig
from reporter.models.loading import load_model
from reporter.store.samples import read_samples

#: the item set: (task, items, max_new_tokens)
ITEMS = (("arc_challenge", 40, 24), ("gsm8k", 10, 96), ("humaneval", 5, 96))
TARGETS = {"reporter-bare": 1.0, "reporter": 1.15}
PATHS = ("lm-eval", "reporter", "reporter-tf", "reporter-bare")


def _task_yaml(name: str, data: Path, stop: tuple[str, ...], max_new: int) -> str:
    return json.dumps({
        "task": f"rb_{name}", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test", "output_type": "generate_until", "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{gold}}", "target_delimiter": "",
        "generation_kwargs": {"until": list(stop), "max_gen_toks": max_new, "do_sample": False},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1}}, indent=1)


def write_lm_eval_tasks(plans: dict[str, TaskPlan], where: Path) -> list[str]:
    """One JSONL of the plans' prompts and one task YAML (JSON is YAML) per task; returns task names."""
    names = []
    for name, plan in plans.items():
        data = where / f"{name}.jsonl"
        with data.open("w") as f:
            for it, prompt in zip(plan.items, plan.prompts):
                f.write(json.dumps({"id": it.id, "prompt": prompt, "gold": str(it.answer)}) + "\n")
        (where / f"rb_{name}.yaml").write_text(_task_yaml(name, data, plan.stop, plan.task.max_new_tokens))
        names.append(f"rb_{name}")
    return names


def run_lm_eval(lm: Any, plans: dict[str, TaskPlan], where: Path, batch_size: int) -> dict[str, dict[str, str]]:
    """Path (a): lm-eval's ``simple_evaluate`` on the exported tasks; responses per task and item id."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    names = write_lm_eval_tasks(plans, where)
    hflm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=batch_size, device=str(lm.device))
    res = lm_eval.simple_evaluate(model=hflm, tasks=names, task_manager=TaskManager(include_path=str(where)),
                                  log_samples=True, num_fewshot=0, verbosity="ERROR")
    out: dict[str, dict[str, str]] = {}
    for name in plans:
        out[name] = {s["doc"]["id"]: s["resps"][0][0] for s in res["samples"][f"rb_{name}"]}
    return out


def run_reporter(lm: Any, where: Path, profile: Profile, collectors: bool, seed: int) -> dict[str, dict[str, str]]:
    """Paths (b), (b') and (c): reporter's task runner, fresh directories; responses per task and item id."""
    out: dict[str, dict[str, str]] = {}
    for cfg in profile.tasks:
        plan = plan_task(lm, cfg, seed)  # planning (prompts, tokenisation) is part of the timed work
        d = where / cfg.name
        run_task(lm, profile, cfg, plan, d, seed=seed, progress=False,
                 plugins=None if collectors else [])
        out[cfg.name] = {i: r["response"] for i, r in read_samples(d / "samples.jsonl").items()}
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    _sync(device)
    t0 = time.perf_counter()
    result = fn()
    _sync(device)
    return time.perf_counter() - t0, result


def _peak_bytes(device: torch.device) -> int:
    """CUDA: ``max_memory_allocated``; CPU: the process's peak resident set (VmHWM), weights included."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated())
    with contextlib.suppress(OSError):
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_memory_mb(argv: list[str], path: str) -> float | None:
    """Peak memory (MB) of a fresh process that loads the model and runs ``path`` once."""
    proc = subprocess.run([sys.executable, __file__, *argv, "--memory-worker", path], capture_output=True, text=True)
    try:
        return float(json.loads(proc.stdout.strip().splitlines()[-1])["peak_mb"])
    except (ValueError, IndexError, KeyError):
        print(f"memory worker for {path} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None


def _machine(device: torch.device) -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpu = f", {torch.cuda.get_device_name(0)}" if device.type == "cuda" else ""
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads){gpu}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="packaged:smollm2-135m-instruct", help="a reporter model source")
    ap.add_argument("--shape", default=None, help="instead: random weights of a family, e.g. llama (random:<arch> source)")
    ap.add_argument("--random", default=None, help="with --shape: the random: block as JSON, e.g. "
                    "'{\"layers\": 16, \"hidden\": 2048, \"intermediate\": 8192, \"heads\": 32, \"kv_heads\": 8}'")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup-rounds", type=int, default=None,
                    help="untimed rounds of every path over every task first (default: 1 on cuda, 0 on cpu); on cuda "
                         "the peak memory of each path is read in that round, with no memory-worker processes")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the item counts (e.g. 0.25 for a smoke run)")
    ap.add_argument("--mode", choices=("generate", "lm-eval-task"), default="generate",
                    help="generate: reporter's generative tasks (default); lm-eval-task: lm-eval's arc_challenge")
    ap.add_argument("--paths", default=None, help=f"comma-separated subset of {', '.join(PATHS)} "
                    "(--mode lm-eval-task: of lm-eval-hf, reporter-lm, reporter-collect, reporter-collect-tf)")
    ap.add_argument("--docs", type=int, default=100, help="--mode lm-eval-task: documents (select_docs)")
    ap.add_argument("--shots", default="0,5", help="--mode lm-eval-task: comma-separated shot counts")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--profile", action="store_true", help="also profile path (b) once and print the top")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-memory", action="store_true", help="skip the per-path peak-memory processes")
    ap.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--process", action="store_true",
                    help="both command lines as fresh processes, start to exit (benchmarks/process_bench.py)")
    ap.add_argument("--items", type=int, default=120, help="--process: ARC-Challenge items")
    ap.add_argument("--max-new-tokens", type=int, default=24, help="--process: tokens generated per item")
    ap.add_argument("--keep", action="store_true", help="--process: keep the work directory")
    ap.add_argument("--tasks", default=None, help=f"comma-separated subset of {', '.join(n for n, _, _ in ITEMS)}")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    if args.process:
        from process_bench import main_process  # this directory is on sys.path when run as a script
        return main_process(args)
    from lm_eval_task_bench import TASK_PATHS, main_lm_eval_task  # this directory is on sys.path as a script

    known = TASK_PATHS if args.mode == "lm-eval-task" else PATHS
    paths = [p for p in (args.paths or ",".join(known)).split(",") if p]
    bad = [p for p in paths if p not in known]
    if bad:
        ap.error(f"unknown path(s) {', '.join(bad)}; choose from {', '.join(known)}")

    source = f"random:{args.shape}" if args.shape else args.model
    spec = ModelSpec(name="bench", source=source, dtype=args.dtype, kind="instruct",
                     max_batch_size=args.batch_size, random=json.loads(args.random) if args.random else {})
    t0 = time.perf_counter()
    lm = load_model(spec, run_device=args.device, run_dtype=args.dtype, run_seed=args.seed)
    load_s = time.perf_counter() - t0
    if args.mode == "lm-eval-task":
        return main_lm_eval_task(args, raw_argv, lm, source, load_s, paths)
    chosen = [n for n, _, _ in ITEMS] if not args.tasks else args.tasks.split(",")
    tasks = tuple(TaskConfig(name=n, limit=max(1, round(k * args.scale)), max_new_tokens=m) for n, k, m in ITEMS
                  if n in chosen)
    base = Profile(name="bench", tasks=tasks, mui=MUIConfig(mode="score"), lpp=replace(LPPConfig(), enabled=False))
    profiles = {"reporter": base, "reporter-tf": replace(base, collection="teacher-forced"), "reporter-bare": base}
    plans = {t.name: plan_task(lm, t, args.seed) for t in tasks}
    n_items = sum(len(p.items) for p in plans.values())

    def call(path: str, where: Path) -> dict[str, dict[str, str]]:
        if path == "lm-eval":
            return run_lm_eval(lm, plans, where, args.batch_size)
        return run_reporter(lm, where, profiles[path], path != "reporter-bare", args.seed)

    if args.memory_worker:  # a fresh process: load, run the path once, report the peak
        if lm.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        else:
            gc.collect()
            with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # Linux: reset the peak resident set (VmHWM), so loading does not count
        with tempfile.TemporaryDirectory() as tmp:
            call(args.memory_worker, Path(tmp))
        print(json.dumps({"peak_mb": round(_peak_bytes(lm.device) / 2 ** 20, 1)}))
        return 0

    with tempfile.TemporaryDirectory() as tmp:  # warm-up: one small batch through both libraries' code
        first = plans[tasks[0].name]
        warm = {tasks[0].name: replace(first, items=first.items[:2], prompts=first.prompts[:2],
                                       prompt_ids=first.prompt_ids[:2])}
        if "lm-eval" in paths:
            run_lm_eval(lm, warm, Path(tmp), args.batch_size)
        run_reporter(lm, Path(tmp) / "r", replace(base, tasks=(replace(tasks[0], limit=2),)), True, args.seed)

    warmup_rounds = args.warmup_rounds if args.warmup_rounds is not None else (1 if lm.device.type == "cuda" else 0)
    cuda_peaks: dict[str, float] = {}
    for r in range(warmup_rounds):  # untimed: every path over every task's shapes (a GPU's kernels, its clock)
        for path in paths:
            if lm.device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            with tempfile.TemporaryDirectory() as tmp:
                dt, _ = timed(lambda: call(path, Path(tmp)), lm.device)
            if lm.device.type == "cuda":  # live bytes only: the same figure a fresh process gives
                cuda_peaks[path] = round(_peak_bytes(lm.device) / 2 ** 20, 1)
            print(f"warm-up {r + 1}: {path:14s} {dt:7.2f} s", file=sys.stderr)

    times: dict[str, list[float]] = {p: [] for p in paths}
    responses: dict[str, dict[str, dict[str, str]]] = {}
    for r in range(args.rounds):
        for path in paths[r % len(paths):] + paths[:r % len(paths)]:
            with tempfile.TemporaryDirectory() as tmp:
                dt, resp = timed(lambda: call(path, Path(tmp)), lm.device)
            times[path].append(dt)
            responses.setdefault(path, resp)
            print(f"round {r + 1}: {path:14s} {dt:7.2f} s", file=sys.stderr)

    worker_argv = [a for a in raw_argv if a not in ("--json", "--profile")]
    # on a GPU the warm-up round measured each path's peak in this process (max_memory_allocated counts live
    # tensors, so a fresh process would give the same figure); on a CPU the resident set needs a fresh process
    peaks = {p: None if args.no_memory else cuda_peaks[p] if p in cuda_peaks else peak_memory_mb(worker_argv, p)
             for p in paths}
    gen_tokens = 0
    ref_path = "lm-eval" if "lm-eval" in paths else paths[0]
    for name, plan in plans.items():
        for it in plan.items:
            text = responses[ref_path][name].get(it.id, "")
            gen_tokens += len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    med = {p: statistics.median(v) for p, v in times.items()}
    result: dict[str, Any] = {
        "machine": _machine(lm.device), "date": _dt.date.today().isoformat(), "model": source,
        "dtype": args.dtype, "device": str(lm.device), "batch_size": args.batch_size, "rounds": args.rounds,
        "warmup_rounds": warmup_rounds,
        "peak_mb_method": ("max_memory_allocated in the warm-up round" if cuda_peaks
                           else "a fresh process per path" if not args.no_memory else None),
        "items": {n: len(p.items) for n, p in plans.items()}, "max_new_tokens": {n: m for n, _, m in ITEMS},
        "load_seconds": round(load_s, 2), "generated_tokens_ref": gen_tokens,
        "collectors_b": [p.name for p in enabled_collectors(base)],
        "paths": {p: {"median_s": round(med[p], 3), "all_s": [round(x, 3) for x in times[p]],
                      "items_per_s": round(n_items / med[p], 3), "tokens_per_s": round(gen_tokens / med[p], 2),
                      "peak_mb": peaks[p]} for p in paths}}
    if "lm-eval" in med:
        result["ratios_to_lm_eval"] = {p: round(med[p] / med["lm-eval"], 3) for p in paths if p != "lm-eval"}
        result["targets"] = TARGETS
    diffs = []
    for p in paths:
        if p == ref_path:
            continue
        for name, plan in plans.items():
            for it in plan.items:
                a, b = responses[ref_path][name].get(it.id), responses[p][name].get(it.id)
                if a != b:
                    diffs.append({"path": p, "task": name, "id": it.id, ref_path: a, p: b})
    result["identical_responses"] = {p: sum(1 for d in diffs if d["path"] == p) == 0 for p in paths if p != ref_path}
    result["differences"] = diffs[:20]
    result["n_differences"] = len(diffs)
    if "reporter-bare" in responses:  # do the collectors change what is generated? (they must not)
        bare = responses["reporter-bare"]
        result["n_differences_to_bare"] = {
            p: sum(responses[p][name].get(it.id) != bare[name].get(it.id) for name, plan in plans.items()
                   for it in plan.items) for p in paths if p not in ("reporter-bare", "lm-eval")}

    if args.profile:
        prof = cProfile.Profile()
        with tempfile.TemporaryDirectory() as tmp:
            prof.enable()
            call("reporter", Path(tmp))
            prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
        result["profile_top"] = buf.getvalue()

    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['machine']}; {source} {args.dtype}, batch {args.batch_size}, {n_items} items, "
              f"{args.rounds} rounds")
        for p in paths:
            r = result["paths"][p]
            ratio = result.get("ratios_to_lm_eval", {}).get(p)
            peak = f"  peak {r['peak_mb']} MB" if r["peak_mb"] is not None else ""
            print(f"  {p:14s} {r['median_s']:8.2f} s  {r['items_per_s']:6.2f} items/s  {r['tokens_per_s']:7.1f} tok/s"
                  + peak + (f"  {ratio:.3f}x lm-eval" if ratio else ""))
        print(f"  identical responses: {result['identical_responses']} ({len(diffs)} differences)")
        if args.profile:
            print(result["profile_top"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
