"""One device script (``benchmarks/device.sh`` runs it): every speed and memory figure of one machine, one JSON document.

Sections, each a fresh process (its own figures plus the process's peak resident set):

``hook_overhead``
    ``hook_overhead.py`` at the Llama-3.1-8B shape, random weights, bf16 (``--small``: the
    ``tiny`` shape): the hooked pass against the plain forward pass, every MUI mode, peak memory.
``throughput_1b``
    ``throughput.py`` on a random model of the Llama-3.2-1B shape (16 layers, hidden 2048, FFN
    8192, 32 heads, 8 KV heads, 128,256-token vocabulary): lm-eval against reporter's task
    runner with every collector on and with none, the same items and prompts.
``throughput_smollm2``
    ``throughput.py`` on the packaged SmolLM2-135M-Instruct (converted once into the cache).
``reporter_run``
    ``reporter run --no-render`` of the 1B-shape random model on a few ARC-Challenge items with
    every collector (MUI, LPP, token log-probs, calibration) and the contamination evidence on,
    against a plain forward pass of the same model over the same prompts (peak memory of each,
    in a process of its own); at two depths (8 and 16 layers), so that what the collectors add
    can be read per layer.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` as each benchmark reports it; on the
CPU the process's peak resident set (``ru_maxrss`` of that child). ``--small`` shrinks every
model and item count so that the whole script runs in about a minute on two CPU cores (it is
part of ``make test``: ``make device-check``); the figures it prints there are not
measurements of anything.

Usage::

    bash benchmarks/device.sh                      # a GPU: cuda, full size (over 10 min on an H200 on 2026-12-04: use --budget)
    bash benchmarks/device.sh --device cpu --small # the check make test runs
    python benchmarks/device.py --device cpu --sections reporter_run   # issue 35 item 5 on a CPU
    python benchmarks/device.py --check FILE       # validate a document device.sh printed
    bash benchmarks/device.sh --budget 500 --out DIR  # a lent GPU: stop within 500 s, each section saved when done
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SECTIONS = ("hook_overhead", "throughput_1b", "throughput_smollm2", "reporter_run")
#: Llama-3.2-1B's shape as a ``random:`` block (its vocabulary is 128,256 tokens)
LLAMA_1B = {"layers": 16, "hidden": 2048, "intermediate": 8192, "heads": 32, "kv_heads": 8, "vocab": 128256}
#: with less of ``--budget`` left than this, a section is not started
MIN_SECTION_S = 20.0
TINY = {"layers": 2, "hidden": 64, "intermediate": 256, "heads": 4, "kv_heads": 2}


#: the process group of the benchmark running now (for :func:`_stop_on_sigterm`)
_RUNNING: list[int] = []
#: the time left for the whole script (``--budget``), as a ``time.perf_counter()`` deadline; None: no limit
_DEADLINE: list[float | None] = [None]


def _time_left() -> float | None:
    return None if _DEADLINE[0] is None else _DEADLINE[0] - time.perf_counter()


def child(cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Run one fresh process; its stdout's last JSON document, wall seconds and peak resident set (MB).

    The process leads a process group of its own. ``timeout`` (default: what ``--budget`` leaves) kills that group,
    the benchmark's own workers included; the record then says so. The exit is seen before the process is reaped
    (``waitid`` with ``WNOWAIT``), so the kill can never reach a process group id that was reused.
    """
    t0 = time.perf_counter()
    left = _time_left()
    if left is not None:
        timeout = left if timeout is None else min(timeout, left)
    lock = threading.Lock()
    state = {"exited": False, "killed": False}

    def _kill(proc: subprocess.Popen[bytes]) -> None:
        with lock:
            if state["exited"]:
                return
            state["killed"] = True
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        _RUNNING[:] = [p.pid]
        timer = threading.Timer(max(timeout, 0.0), _kill, (p,)) if timeout is not None else None
        if timer:
            timer.start()
        try:
            os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
            with lock:
                state["exited"] = True
            _, status, usage = os.wait4(p.pid, 0)
        except KeyboardInterrupt:
            _kill(p)
            raise
        finally:
            if timer:
                timer.cancel()
            _RUNNING.clear()
        p.returncode = os.waitstatus_to_exitcode(status)
        # stopped by the budget: killed by our signal (a process that finished just as time ran out keeps its result)
        stopped = state["killed"] and os.WIFSIGNALED(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    rec: dict[str, Any] = {"command": " ".join(cmd[1:]) if cmd[0] == sys.executable else " ".join(cmd),
                           "wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
                           "returncode": p.returncode}
    if stopped:
        rec["error"] = f"stopped after {wall:.0f} s: the time --budget left ran out"
        rec["stderr_tail"] = errors[-2000:]
        return rec
    if p.returncode != 0:
        rec["error"] = errors.strip().splitlines()[-1] if errors.strip() else f"exit {p.returncode}"
        rec["stderr_tail"] = errors[-2000:]
        return rec
    start = text.find("{")
    try:
        rec["result"] = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        rec["error"] = "the benchmark printed no JSON document"
        rec["stdout_tail"] = text[-2000:]
    return rec


def hook_overhead(args: argparse.Namespace) -> dict[str, Any]:
    """The hooked pass against the plain forward pass (``hook_overhead.py``)."""
    if args.small:
        extra = ["--shape", "tiny", "--repeats", "2", "--batch", "2", "--seq", "64", "--response", "16"]
    else:
        extra = ["--shape", "llama-3.1-8b", "--dtype", "bfloat16" if args.device == "cuda" else "float32"]
    return child([sys.executable, str(HERE / "hook_overhead.py"), "--device", args.device, "--json", *extra])


def _throughput(args: argparse.Namespace, model: list[str]) -> dict[str, Any]:
    """Speed and memory in the dtype a user runs (bf16 on a GPU); on a GPU also the responses' identity in float32.

    In bf16 on an H200 the responses parted from lm-eval's at near-ties (2026-12-04; benchmarks/RESULTS.md, cause
    not found): bf16 differences are reported, and the identity the paths must keep is checked in float32
    (``identity_float32``), as on the CPU, where differences are a problem.
    """
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    cmd = [sys.executable, str(HERE / "throughput.py"), "--device", args.device, "--json", *model]
    if args.small:
        size = ["--scale", "0.05", "--rounds", "1", "--no-memory", "--batch-size", "2", "--tasks", "arc_challenge",
                "--paths", "lm-eval,reporter"]
    else:  # on cuda: one untimed warm-up round (also reads each path's peak memory), then 3 timed rounds
        size = ["--rounds", "3" if args.device == "cuda" else "2", "--batch-size", "32" if args.device == "cuda" else "8"]
    rec = child([*cmd, "--dtype", dtype, *size])
    if dtype != "float32" and "error" not in rec:
        ident = child([*cmd, "--dtype", "float32", "--rounds", "1", "--warmup-rounds", "0", "--no-memory",
                       "--batch-size", "32"])
        res = ident.get("result") or {}
        rec["identity_float32"] = ({"error": ident["error"]} if "error" in ident else
                                   {"identical_responses": res.get("identical_responses"),
                                    "n_differences": res.get("n_differences"),
                                    "differences": (res.get("differences") or [])[:5], "wall_s": ident["wall_s"]})
    return rec


def throughput_1b(args: argparse.Namespace) -> dict[str, Any]:
    """lm-eval against reporter's task runner on the 1B-shape random model."""
    shape = {**TINY, "vocab": 49152} if args.small else LLAMA_1B
    return _throughput(args, ["--shape", "llama", "--random", json.dumps(shape)])


def throughput_smollm2(args: argparse.Namespace) -> dict[str, Any]:
    """lm-eval against reporter's task runner on the packaged SmolLM2."""
    return _throughput(args, ["--model", "packaged:smollm2-135m-instruct"])


def _run_files(work: Path, shape: dict[str, int], args: argparse.Namespace) -> Path:
    """A models YAML and profile: the random model of ``shape`` on a few ARC-Challenge items, everything on."""
    items = 2 if args.small else 8
    profile = work / "profile.yaml"
    profile.write_text(
        "mui: {mode: score}\n"
        f"lpp: {{corpus: coqa, n_texts: {2 if args.small else 4}, context: 128}}\n"
        f"contamination: {{verbatim_items: {items}, reference_texts: {4 if args.small else 16}, order_items: {items}, "
        f"order_permutations: 3, split_items: 0, untrained: true}}\n"
        "smoke_texts: 2\n"
        f"tasks:\n  - {{name: arc_challenge, limit: {items}, max_new_tokens: {8 if args.small else 24}}}\n")
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    models = work / "models.yaml"
    models.write_text(f"profile: {profile}\nseed: 1\ndevice: {args.device}\nmodels:\n"
                      f"  - name: R\n    source: random:llama\n    dtype: {dtype}\n    max_batch_size: 8\n"
                      f"    random: {json.dumps(shape)}\n")
    (work / "plain.json").write_text(json.dumps({"shape": shape, "dtype": dtype, "device": args.device,
                                                 "items": items, "max_new": 8 if args.small else 24}))
    return models


def _worker(mode: str, models: Path, out: Path) -> int:
    """In this process: ``run`` (reporter run, then the peak) or ``plain`` (load + one plain forward, then the peak).

    ``plain`` reads ``models``' sibling ``plain.json`` (the spec and task the run's YAML describes).
    """
    import torch

    cuda = False
    if mode == "run":
        from reporter.cli import main as cli
        try:
            cli(["run", str(models), "-o", str(out), "--no-render", "--no-progress"], standalone_mode=False)
        except SystemExit as e:
            if e.code:
                raise
        cuda = torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0
    else:
        from reporter.collect.plan import plan_task
        from reporter.config import ModelSpec, TaskConfig
        from reporter.instrument.batch import left_pad
        from reporter.models.loading import load_model

        rec = json.loads((models.parent / "plain.json").read_text())
        spec = ModelSpec(name="R", source="random:llama", dtype=rec["dtype"], max_batch_size=8, random=rec["shape"])
        lm = load_model(spec, run_device=rec["device"], run_dtype=rec["dtype"], run_seed=1)
        plan = plan_task(lm, TaskConfig(name="arc_challenge", limit=rec["items"], max_new_tokens=rec["max_new"]), 1)
        ids, mask = left_pad([list(p) for p in plan.prompt_ids[:spec.max_batch_size]],
                             lm.tokenizer.pad_token_id or 0, lm.device)
        with torch.inference_mode():
            lm.model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        cuda = rec["device"] == "cuda"
    print(json.dumps({"cuda_peak_mb": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else None}))
    return 0


def reporter_run(args: argparse.Namespace) -> dict[str, Any]:
    """``reporter run`` with everything on against a plain forward pass, at two depths of the 1B shape."""
    base = {**TINY, "vocab": 49152} if args.small else LLAMA_1B
    depths = (1, 2) if args.small else (8, 16)
    out: dict[str, Any] = {"shape": base, "depths": {}}
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    for layers in depths:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            models = _run_files(work, {**base, "layers": layers}, args)
            rec = {}
            for mode in ("plain", "run"):
                r = child([sys.executable, __file__, "--worker", mode, str(models), str(work / "run")], env=env)
                if "error" in r:  # the depths already measured stay in the record
                    return {**out, "error": f"{mode} at {layers} layers: {r['error']}",
                            "stderr_tail": r.get("stderr_tail")}
                cuda = (r.get("result") or {}).get("cuda_peak_mb")
                rec[mode] = {"wall_s": r["wall_s"], "peak_mb": round(cuda, 1) if cuda else r["peak_rss_mb"]}
            rec["run_over_plain"] = round(rec["run"]["peak_mb"] / rec["plain"]["peak_mb"], 3)
            rec["run_minus_plain_mb"] = round(rec["run"]["peak_mb"] - rec["plain"]["peak_mb"], 1)
            out["depths"][str(layers)] = rec
    a, b = (out["depths"][str(d)] for d in depths)
    out["extra_mb_per_layer"] = round((b["run_minus_plain_mb"] - a["run_minus_plain_mb"]) / (depths[1] - depths[0]), 2)
    return out


def _machine(device: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = ""
    if device == "cuda":
        import torch
        gpu = f", {torch.cuda.get_device_name(0)}"
    return f"{cpu}, {os.cpu_count()} CPUs{gpu}"


def check(doc: dict[str, Any]) -> list[str]:
    """What is wrong with a document this script printed (empty: nothing)."""
    problems = []
    for name in doc.get("sections_run", []):
        sec = doc.get(name)
        if not isinstance(sec, dict):
            problems.append(f"{name}: missing")
            continue
        if "error" in sec:
            problems.append(f"{name}: {sec['error']}")
            continue
        if name == "reporter_run":
            for d, rec in sec["depths"].items():
                for mode in ("plain", "run"):
                    if not rec[mode]["peak_mb"] > 0:
                        problems.append(f"reporter_run {d} layers: no peak memory for {mode}")
            if not math.isfinite(sec["extra_mb_per_layer"]):
                problems.append("reporter_run: extra memory per layer is not a number")
            continue
        res = sec.get("result") or {}
        if name == "hook_overhead" and not res.get("ratio_score"):
            problems.append("hook_overhead: no results")
        if name.startswith("throughput"):
            ident = sec.get("identity_float32")
            if ident is not None:  # bf16 on a GPU: identity is asked of the float32 run
                if "error" in ident:
                    problems.append(f"{name}: the float32 identity run failed: {ident['error']}")
                elif not all(ident.get("identical_responses", {}).values()):
                    problems.append(f"{name}: float32 responses differ from lm-eval's ({ident.get('n_differences')})")
            elif not all(v for v in res.get("identical_responses", {}).values()):
                problems.append(f"{name}: responses differ from lm-eval's ({res.get('n_differences')})")
            if not res.get("ratios_to_lm_eval"):
                problems.append(f"{name}: no ratio to lm-eval")
        if not sec.get("peak_rss_mb", 0) > 0:
            problems.append(f"{name}: no peak memory")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    ap.add_argument("--small", action="store_true", help="tiny models and item counts (the make test check)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {', '.join(SECTIONS)}")
    ap.add_argument("--check", default=None, metavar="FILE", help="validate a document this script printed")
    ap.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="stop within this many seconds: a benchmark still running then is stopped, later sections "
                         "are skipped, and the document says which (for a device lent for a fixed time)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="also write each section's record to DIR/<section>.json as soon as it is done, and the "
                         "whole document to DIR/device.json (what is done survives a run stopped from outside)")
    ap.add_argument("--worker", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker[0], Path(args.worker[1]), Path(args.worker[2]))
    if args.check:
        problems = check(json.loads(Path(args.check).read_text()))
        for p in problems:
            print(f"device check: {p}", file=sys.stderr)
        return 1 if problems else 0
    if args.device is None:
        import torch
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    names = [s for s in args.sections.split(",") if s]
    bad = [s for s in names if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    doc: dict[str, Any] = {"machine": _machine(args.device), "device": args.device, "small": args.small,
                           "date": _dt.date.today().isoformat(), "sections_run": names}
    fns = {"hook_overhead": hook_overhead, "throughput_1b": throughput_1b, "throughput_smollm2": throughput_smollm2,
           "reporter_run": reporter_run}
    t0 = time.perf_counter()
    if args.budget is not None:
        _DEADLINE[0] = t0 + args.budget
        doc["budget_s"] = args.budget
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    for name in names:
        left = _time_left()
        if left is not None and left < MIN_SECTION_S:
            doc[name] = {"error": f"skipped: {max(left, 0):.0f} s of the --budget left"}
        else:
            print(f"device.py: {name} ...", file=sys.stderr, flush=True)
            doc[name] = fns[name](args)
        print(f"device.py: {name} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if out:
            (out / f"{name}.json").write_text(json.dumps(doc[name], indent=1))
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    doc["problems"] = check(doc)
    if out:
        (out / "device.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))
    return 1 if doc["problems"] else 0


def _stop_on_sigterm() -> None:
    """A SIGTERM to this script (a lease ending, ``timeout``) also ends the benchmark it runs: each benchmark leads a
    process group of its own, which a signal to this script's group would not reach.
    """
    def handler(signum: int, _frame: Any) -> None:
        for pgid in list(_RUNNING):
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    _stop_on_sigterm()
    sys.exit(main())
