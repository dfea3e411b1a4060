"""``throughput.py --process``: both command lines as fresh processes, start to exit, on a generation task.

What a user waits for, measured as a user runs both tools (issue #35):

``lm-eval``
    ``lm_eval run --model hf --model_args pretrained=DIR,dtype=DTYPE --tasks rb_arc_challenge
    --include_path WORK --batch_size B --device DEVICE --log_samples``: a ``generate_until`` task
    whose JSONL holds reporter's own prompts (chat template applied, byte for byte), the same stop
    sequences and ``max_new_tokens``.
``reporter-first``
    ``reporter run MODELS --no-render`` with every measurement of the default profile on (MUI,
    token log-probs, calibration, the contamination evidence; LPP off, as in the issue's table),
    and an empty cache (``XDG_CACHE_HOME`` fresh): the first run of a model, model-only work
    (smoke perplexity, the held-out reference pass) included.
``reporter-warm``
    The same with the cache of an earlier run of the same model: model-only work is read back.
``reporter-bare``
    (``--paths``) The same with MUI and the evidence off (token log-probs and calibration, which
    ride the generation's own passes, stay on).

Each round runs every path once, order rotated; wall time is start to exit of the process,
peak memory its peak resident set (``/usr/bin/time -f %M``). The model is the converted
directory of a packaged model, so no path pays a conversion. Per item, the responses of every
reporter path must equal lm-eval's. From the first reporter run's artifacts the script also
reports where its time went (the ``seconds`` the evidence artifacts record, generation, load).

Usage::

    python benchmarks/throughput.py --process --items 120 --rounds 3
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROCESS_PATHS = ("lm-eval", "reporter-first", "reporter-warm", "reporter-bare")
#: issue #35's targets (reporter / lm-eval, median wall): first run at 120 and at 40 items, warm run
PROCESS_TARGETS = {"reporter-first@120": 0.9, "reporter-first@40": 1.0, "reporter-warm": 0.8,
                   "evidence_share_first": 0.15, "peak_rss_vs_lm_eval": 1.3}


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def run_timed(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, float]:
    """Wall seconds and peak resident set (GB) of one fresh process, start to exit."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M", *cmd], env=env, stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}); see {log}:\n{text[-3000:]}")
    rss = next(int(x.split()[1]) for x in text.splitlines() if x.startswith("MAXRSS"))
    return wall, rss / 1e6


def _profile_yaml(items: int, max_new: int, bare: bool) -> str:
    off = ("mui: {enabled: false}\n"
           "contamination: {verbatim_items: 0, reference_texts: 0, order_items: 0, split_items: 0}\n") if bare else ""
    return (f"lpp: {{enabled: false}}\n{off}"
            f"tasks:\n  - {{name: arc_challenge, limit: {items}, max_new_tokens: {max_new}}}\n")


#: the artifacts of each model-only step (``model_work.json`` says which were read back from the cache)
_STEP_FILES = {"smoke": ("smoke.json",), "reference": ("reference_logprobs.npz", "reference_verbatim.json")}


def _recorded_seconds(p: Path) -> float | None:
    """The ``seconds`` an artifact records (JSON, or an npz's ``meta``), or None."""
    try:
        if p.suffix == ".npz":
            import numpy as np
            with np.load(p, allow_pickle=False) as z:
                rec = json.loads(str(z["meta"])) if "meta" in z.files else {}
        else:
            rec = json.loads(p.read_text())
    except (OSError, ValueError, KeyError):
        return None
    value = rec.get("seconds") if isinstance(rec, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def where_time_went(run: Path, model: str) -> dict[str, Any]:
    """The seconds a reporter run's artifacts record (load, smoke, each task's generation with its collectors,
    each evidence pass) and the sums of the tasks (``tasks_s``) and of the evidence (``evidence_s``).

    Artifacts of a model-only step the run read back from the cache count 0 (``cached``).
    """
    mdir = run / "models" / model
    out: dict[str, Any] = {"load_s": json.loads((mdir / "model.json").read_text()).get("load_seconds")}
    try:
        work = json.loads((mdir / "model_work.json").read_text())
    except (OSError, ValueError):
        work = {}
    cached = {f for step, files in _STEP_FILES.items() if work.get(step) == "cached" for f in files}
    ev = tasks = 0.0
    for p in sorted([*mdir.rglob("*.json"), *mdir.rglob("*.npz")]):
        if p.name in ("model.json", "model_work.json", "error.json"):
            continue
        if p.name == "summary.json":  # the task itself: generation, its collectors, scoring
            sec = _recorded_seconds(p)
            if sec is not None:
                out[str(p.relative_to(mdir))] = round(sec, 2)
                tasks += sec
            continue
        sec = _recorded_seconds(p)
        if sec is None:
            continue
        name = str(p.relative_to(mdir))
        if p.name in cached:
            out[name] = "cached"
            continue
        out[name] = round(sec, 2)
        if p.name != "smoke.json":
            ev += sec
    out["tasks_s"] = round(tasks, 2)
    out["evidence_s"] = round(ev, 2)
    out["model_work"] = work
    return out


def main_process(args: Any) -> int:
    """Run the ``--process`` comparison; print a table (or JSON with ``--json``)."""
    from throughput import _machine, write_lm_eval_tasks

    from reporter.collect.plan import plan_task
    from reporter.config import ModelSpec, TaskConfig
    from reporter.models.loading import load_model
    from reporter.models.packaged import PACKAGED, entry_dir

    entry = args.model.split(":", 1)[1] if args.model.startswith("packaged:") else None
    if entry is None or entry not in PACKAGED:
        raise SystemExit("--process needs a packaged model (--model packaged:NAME): its converted directory is "
                         "what both tools load")
    lm = load_model(ModelSpec(name="bench", source=args.model, dtype=args.dtype, max_batch_size=args.batch_size),
                    run_device=args.device, run_dtype=args.dtype, run_seed=args.seed)  # converted once, untimed
    model_dir = entry_dir(PACKAGED[entry]) / "model"
    work = Path(tempfile.mkdtemp(prefix="process_bench-"))
    plan = plan_task(lm, TaskConfig(name="arc_challenge", limit=args.items, max_new_tokens=args.max_new_tokens),
                     args.seed)
    (work / "lm_eval").mkdir()
    names = write_lm_eval_tasks({"arc_challenge": plan}, work / "lm_eval")
    models: dict[str, Path] = {}
    for kind in ("all", "bare"):
        prof = work / f"profile-{kind}.yaml"
        prof.write_text(_profile_yaml(args.items, args.max_new_tokens, kind == "bare"))
        models[kind] = work / f"models-{kind}.yaml"
        models[kind].write_text(f"profile: {prof}\nseed: {args.seed}\ndevice: {args.device}\nmodels:\n"
                                f"  - {{name: M, source: {model_dir}, dtype: {args.dtype}, "
                                f"max_batch_size: {args.batch_size}}}\n")
    base = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    base.setdefault("HF_HOME", str(Path.home() / ".cache" / "huggingface"))  # both tools: the same datasets cache
    warm_cache = work / "cache-warm"
    paths = [p for p in (args.paths or "lm-eval,reporter-first,reporter-warm").split(",") if p]
    bad = [p for p in paths if p not in PROCESS_PATHS]
    if bad:
        raise SystemExit(f"unknown --process path(s) {', '.join(bad)}; choose from {', '.join(PROCESS_PATHS)}")

    def command(path: str, out: Path, r: int) -> tuple[list[str], dict[str, str]]:
        if path == "lm-eval":
            return [_bin("lm_eval"), "run", "--model", "hf", "--model_args",
                    f"pretrained={model_dir},dtype={args.dtype}", "--tasks", ",".join(names),
                    "--include_path", str(work / "lm_eval"), "--batch_size", str(args.batch_size),
                    "--device", args.device, "--output_path", str(out), "--log_samples"], dict(base)
        cache = warm_cache if path == "reporter-warm" else work / f"cache-{path}-{r}"
        env = dict(base, XDG_CACHE_HOME=str(cache))
        return [_bin("reporter"), "run", str(models["bare" if path == "reporter-bare" else "all"]), "-o", str(out),
                "--no-render", "--no-progress"], env

    if "reporter-warm" in paths:  # the earlier run of the same model that fills the cache (untimed)
        cmd, env = command("reporter-warm", work / "warmup", 0)
        run_timed(cmd, env, work / "warmup.log")
    times: dict[str, list[float]] = {p: [] for p in paths}
    rss: dict[str, list[float]] = {p: [] for p in paths}
    outs: dict[str, Path] = {}
    for r in range(args.rounds):
        for path in paths[r % len(paths):] + paths[:r % len(paths)]:
            out = work / f"{path}-{r}"
            cmd, env = command(path, out, r)
            wall, peak = run_timed(cmd, env, work / f"{path}-{r}.log")
            times[path].append(wall)
            rss[path].append(peak)
            outs.setdefault(path, out)
            print(f"round {r + 1}: {path:15s} {wall:7.1f} s  {peak:.2f} GB", file=sys.stderr)
    responses: dict[str, dict[str, str]] = {}
    if "lm-eval" in outs:
        sample_file = next(outs["lm-eval"].glob(f"*/samples_{names[0]}_*.jsonl"))
        responses["lm-eval"] = {json.loads(x)["doc"]["id"]: json.loads(x)["resps"][0][0]
                                for x in sample_file.read_text().splitlines()}
    for p in paths:
        if p != "lm-eval":
            f = outs[p] / "models" / "M" / "tasks" / "arc_challenge" / "samples.jsonl"
            responses[p] = {json.loads(x)["id"]: json.loads(x)["response"] for x in f.read_text().splitlines()}
    ref = responses.get("lm-eval")
    differ = {p: sorted(k for k in ref if ref[k] != v.get(k)) for p, v in responses.items() if ref and p != "lm-eval"}
    med = {p: statistics.median(v) for p, v in times.items()}
    result: dict[str, Any] = {
        "machine": _machine(lm.device), "model": args.model, "dtype": args.dtype, "device": args.device,
        "batch_size": args.batch_size, "items": len(plan.items), "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds,
        "paths": {p: {"median_s": round(med[p], 2), "all_s": [round(x, 2) for x in times[p]],
                      "peak_rss_gb": round(max(rss[p]), 3)} for p in paths},
        "responses_differ": {p: len(v) for p, v in differ.items()}, "targets": PROCESS_TARGETS}
    if "lm-eval" in med:
        result["ratios_to_lm_eval"] = {p: round(med[p] / med["lm-eval"], 3) for p in paths if p != "lm-eval"}
        result["peak_rss_vs_lm_eval"] = {p: round(max(rss[p]) / max(rss["lm-eval"]), 3)
                                         for p in paths if p != "lm-eval"}
    for p in ("reporter-first", "reporter-warm"):
        if p in outs:
            spent = where_time_went(outs[p], "M")
            spent["evidence_share"] = round(spent["evidence_s"] / times[p][0], 3)
            result.setdefault("breakdown", {})[p] = spent
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['machine']}; {args.model} {args.dtype}, batch {args.batch_size}, {len(plan.items)} items, "
              f"{args.max_new_tokens} new tokens, {args.rounds} rounds")
        print("| path | median wall s | ratio | peak RSS GB | RSS ratio | responses differ |\n|---|---|---|---|---|---|")
        for p in paths:
            ratio = result.get("ratios_to_lm_eval", {}).get(p, 1.0)
            rr = result.get("peak_rss_vs_lm_eval", {}).get(p, 1.0)
            print(f"| {p} | {med[p]:.1f} | {ratio:.2f} | {max(rss[p]):.2f} | {rr:.2f} | "
                  f"{len(differ.get(p, []))} |")
        for p, spent in result.get("breakdown", {}).items():
            print(f"{p}: {json.dumps(spent)}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}", file=sys.stderr)
    return 1 if any(differ.values()) else 0
