"""``throughput.py --mode lm-eval-task`` (issue 31; ``make identity``): lm-eval's OWN task, log-likelihood scoring.

``arc_challenge`` from reporter's offline copy of lm-eval's YAML (``lm_eval_include: [packaged]``),
``--docs`` documents chosen by :func:`reporter.tasks.lm_eval_source.select_docs` and given to every
path as ``samples=``, at each of ``--shots`` (default 0 and 5), through these paths:

``lm-eval-hf``
    lm-eval's ``hf`` model (``HFLM`` around the very model object) through
    ``lm_eval.evaluator.evaluate``: every (context, option) pair runs whole.
``reporter-lm``
    :class:`reporter.collect.lm_eval_lm.ReporterLM` through the same ``evaluate``, no collector:
    each distinct context runs once, its KV cache serving every option.
``reporter-collect``
    reporter's collect path of an lm-eval task with every collector of the default profile on
    (``lm_eval_run.plan_leaf`` → ``execute_leaf`` → ``lm_eval_score.score_entry`` → ``finish_leaf``, as
    ``collect.job`` chains them, without the evidence passes): the option log-likelihoods with the
    collectors riding those passes (``collection: fused``, the default): MUI on every option's pass,
    the answer's token log-probs from them and the prompt's from the LM head on the context's pass.
``reporter-collect-tf``
    the same with ``collection: teacher-forced``: the option log-likelihoods, then one teacher-forced
    hooked pass over context + the option the model ranks first (the way before the collectors rode
    the option passes).

The check: per document, lm-eval's ``acc`` and ``acc_norm`` of every reporter path equal the
peer's, and the largest |Δ log-likelihood| over the requests is reported. Timing, rounds and
memory are as in throughput.py's default mode; the exit status is 1 when a per-item metric differs.

Usage::

    python benchmarks/throughput.py --mode lm-eval-task --docs 100 --shots 0,5 --rounds 3
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from throughput import _machine, _peak_bytes, peak_memory_mb, timed  # this directory is on sys.path as a script

from reporter.collect.collectors import enabled_collectors
from reporter.config import Profile, TaskConfig

#: ``--mode lm-eval-task``: the paths, the lm-eval task, and the targets (reporter / lm-eval's ``hf`` wall time)
TASK_PATHS = ("lm-eval-hf", "reporter-lm", "reporter-collect", "reporter-collect-tf")
TASK_NAME = "arc_challenge"
TASK_TARGETS = {"reporter-lm": 0.8, "reporter-collect": 1.0, "reporter-collect-tf": 1.0}


def _task_config(n_docs: int, shots: int) -> TaskConfig:
    return TaskConfig(name=TASK_NAME, lm_eval=TASK_NAME, limit=n_docs, shots=shots)


def _task_profile(cfg: TaskConfig) -> Profile:
    """The default profile's collectors (MUI score mode, token log-probs, calibration; LPP is model-scope)."""
    return Profile(name="bench", tasks=(cfg,), lm_eval_include=("packaged",))


def _per_doc(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per document id: lm-eval's ``acc``, ``acc_norm`` and every option's log-likelihood, from ``evaluate``."""
    out: dict[int, dict[str, Any]] = {}
    for s in result["samples"][TASK_NAME]:
        out[int(s["doc_id"])] = {"acc": float(s["acc"]), "acc_norm": float(s["acc_norm"]),
                                 "lls": [float(r[0][0]) for r in s["resps"]]}
    return out


def run_task_path(path: str, lm: Any, resolved: Any, cfg: TaskConfig, ids: list[int], where: Path, batch_size: int,
                  seed: int) -> dict[int, dict[str, Any]]:
    """One path of ``--mode lm-eval-task`` over documents ``ids``; per-document metrics and log-likelihoods."""
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM

    from reporter.collect import lm_eval_run, lm_eval_score
    from reporter.collect.lm_eval_lm import ReporterLM
    from reporter.tasks.lm_eval_source import FEWSHOT_SEED

    task = resolved.task(TASK_NAME)
    if path == "lm-eval-hf":  # what lm-eval's simple_evaluate does with --num_fewshot, then its evaluate
        task.set_config(key="num_fewshot", value=cfg.shots)
        task.set_fewshot_seed(seed=FEWSHOT_SEED)
        hflm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=batch_size, device=str(lm.device))
        return _per_doc(evaluate(hflm, resolved.loaded, samples={TASK_NAME: ids}, log_samples=True,
                                 verbosity="ERROR"))
    if path == "reporter-lm":
        lm_eval_run.configure(task, cfg)
        rlm = ReporterLM(lm, batch_size=batch_size)
        return _per_doc(evaluate(rlm, resolved.loaded, samples={TASK_NAME: ids}, log_samples=True,
                                 verbosity="ERROR"))
    if path in ("reporter-collect", "reporter-collect-tf"):  # collect.job's chain, without the evidence passes
        profile = _task_profile(cfg)
        if path == "reporter-collect-tf":
            profile = replace(profile, collection="teacher-forced")
        rlm = ReporterLM(lm, batch_size=batch_size)
        lp = lm_eval_run.plan_leaf(rlm, resolved, cfg, seed)
        if lp.ids != ids:
            raise AssertionError(f"plan_leaf chose other documents than select_docs: {lp.ids[:5]} vs {ids[:5]}")
        task_dir = where / TASK_NAME
        lm_eval_run.execute_leaf(lm, rlm, profile, lp, task_dir, seed=seed, progress=False)
        result = lm_eval_score.score_entry(rlm, resolved, [lp])
        if rlm.misses:
            raise AssertionError(f"{rlm.misses} lm-eval requests were not among the answers execute_leaf collected")
        collection, fallback = lm_eval_run.leaf_collection(lm, profile, lp)
        want = "teacher-forced" if path == "reporter-collect-tf" else "fused"
        if collection != want:
            raise AssertionError(f"{path}: the collectors were fed {collection!r}, not {want!r} ({fallback})")
        lm_eval_score.finish_leaf(lm, profile, lp, task_dir, result, seed=seed, collection=collection, fallback=fallback)
        return _per_doc(result)
    raise ValueError(f"unknown path {path!r}")


def compare_task_paths(ref: dict[int, dict[str, Any]], other: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per-document acc / acc_norm differences and the largest |Δ log-likelihood| of ``other`` against ``ref``.

    >>> a = {3: {"acc": 1.0, "acc_norm": 0.0, "lls": [-1.0, -2.0]}}
    >>> b = {3: {"acc": 1.0, "acc_norm": 1.0, "lls": [-1.0, -2.5]}}
    >>> c = compare_task_paths(a, b)
    >>> c["acc_differs"], c["acc_norm_differs"], c["max_abs_dll"], c["n_requests"]
    (0, 1, 0.5, 2)
    """
    if set(ref) != set(other):
        raise AssertionError(f"different documents: {sorted(set(ref) ^ set(other))[:5]}")
    diffs = [{"doc_id": d, "metric": m, "ref": ref[d][m], "other": other[d][m]}
             for d in sorted(ref) for m in ("acc", "acc_norm") if ref[d][m] != other[d][m]]
    dll = [abs(a - b) for d in ref for a, b in zip(ref[d]["lls"], other[d]["lls"], strict=True)]
    return {"acc_differs": sum(x["metric"] == "acc" for x in diffs),
            "acc_norm_differs": sum(x["metric"] == "acc_norm" for x in diffs),
            "max_abs_dll": max(dll) if dll else 0.0, "n_requests": len(dll), "differences": diffs[:10]}


def main_lm_eval_task(args: argparse.Namespace, raw_argv: list[str], lm: Any, source: str, load_s: float,
                      paths: list[str]) -> int:
    """``--mode lm-eval-task``: the three paths on lm-eval's arc_challenge at each shot count; a markdown table."""
    from reporter.collect.lm_eval_run import configure, resolve_entry
    from reporter.tasks.lm_eval_source import lm_eval_version, select_docs

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    shots_list = [int(x) for x in str(args.shots).split(",") if x != ""]
    configs = {k: _task_config(args.docs, k) for k in shots_list}
    resolved = resolve_entry(_task_profile(configs[shots_list[0]]), configs[shots_list[0]])  # data loads here, untimed
    # reporter's configure() reads the task's own num_fewshot the first time it sees the (cached, shared) task object:
    # let it see the YAML's, before the lm-eval path sets num_fewshot on the same object
    configure(resolved.task(TASK_NAME), configs[shots_list[0]])
    n_all = len(resolved.task(TASK_NAME).eval_docs)
    ids = select_docs(n_all, TASK_NAME, limit=args.docs, seed=args.seed)

    def call(path: str, k: int, where: Path, docs: list[int] | None = None) -> dict[int, dict[str, Any]]:
        cfg = configs[k] if docs is None else replace(configs[k], limit=len(docs))
        return run_task_path(path, lm, resolved, cfg, ids if docs is None else docs, where, args.batch_size,
                             args.seed)

    if args.memory_worker:  # a fresh process: load, run the path once at the one shot count, report the peak
        gc.collect()
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        if lm.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory() as tmp:
            call(args.memory_worker, shots_list[0], Path(tmp))
        print(json.dumps({"peak_mb": round(_peak_bytes(lm.device) / 2 ** 20, 1)}))
        return 0

    with tempfile.TemporaryDirectory() as tmp:  # warm-up: two documents through every path
        warm = select_docs(n_all, TASK_NAME, limit=2, seed=args.seed)
        for p in paths:
            call(p, shots_list[0], Path(tmp) / p, warm)

    per_shot: dict[str, Any] = {}
    all_identical = True
    for k in shots_list:
        times: dict[str, list[float]] = {p: [] for p in paths}
        cpu: dict[str, list[float]] = {p: [] for p in paths}  # the process's CPU seconds (all threads)
        answers: dict[str, dict[int, dict[str, Any]]] = {}
        for r in range(args.rounds):
            for path in paths[r % len(paths):] + paths[:r % len(paths)]:
                with tempfile.TemporaryDirectory() as tmp:
                    c0 = time.process_time()
                    dt, got = timed(lambda: call(path, k, Path(tmp)), lm.device)
                    cpu[path].append(time.process_time() - c0)
                times[path].append(dt)
                answers.setdefault(path, got)
                print(f"{k}-shot round {r + 1}: {path:16s} {dt:7.2f} s  cpu {cpu[path][-1]:7.2f} s  load "
                      f"{os.getloadavg()[0]:.2f}", file=sys.stderr)
        worker_argv = [a for a in raw_argv if a not in ("--json", "--profile")] + ["--shots", str(k)]
        peaks = {p: None if args.no_memory else peak_memory_mb(worker_argv, p) for p in paths}
        med = {p: statistics.median(v) for p, v in times.items()}
        med_cpu = {p: statistics.median(v) for p, v in cpu.items()}
        ref_path = "lm-eval-hf" if "lm-eval-hf" in paths else paths[0]
        ref = answers[ref_path]
        others = [p for p in paths if p != ref_path]
        entry: dict[str, Any] = {
            "paths": {p: {"median_s": round(med[p], 3), "all_s": [round(x, 3) for x in times[p]],
                          "docs_per_s": round(len(ids) / med[p], 3), "cpu_median_s": round(med_cpu[p], 3),
                          "cpu_all_s": [round(x, 3) for x in cpu[p]], "peak_mb": peaks[p]} for p in paths},
            "acc": round(statistics.mean(d["acc"] for d in ref.values()), 4),
            "acc_norm": round(statistics.mean(d["acc_norm"] for d in ref.values()), 4),
            "n_requests": sum(len(d["lls"]) for d in ref.values())}
        if ref_path == "lm-eval-hf":
            entry["ratios_to_lm_eval"] = {p: round(med[p] / med[ref_path], 3) for p in others}
            entry["cpu_ratios_to_lm_eval"] = {p: round(med_cpu[p] / med_cpu[ref_path], 3) for p in others}
        entry["identity_reference"] = ref_path
        entry["identity"] = {p: compare_task_paths(ref, answers[p]) for p in others}
        all_identical = all_identical and all(c["acc_differs"] == 0 and c["acc_norm_differs"] == 0
                                              for c in entry["identity"].values())
        per_shot[str(k)] = entry

    result: dict[str, Any] = {
        "mode": "lm-eval-task", "machine": _machine(lm.device), "date": _dt.date.today().isoformat(),
        "model": source, "dtype": args.dtype, "device": str(lm.device), "batch_size": args.batch_size,
        "rounds": args.rounds, "task": f"{TASK_NAME} (lm-eval {lm_eval_version()}, lm_eval_include: [packaged])",
        "docs": len(ids), "docs_available": n_all, "doc_ids_head": ids[:8], "load_seconds": round(load_s, 2),
        "collectors": [p.name for p in enabled_collectors(_task_profile(configs[shots_list[0]]))],
        "targets": TASK_TARGETS, "shots": per_shot, "identical_acc_and_acc_norm": all_identical}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(task_table(result, paths))
    return 0 if all_identical else 1


def task_table(result: dict[str, Any], paths: list[str]) -> str:
    """The markdown table of a ``--mode lm-eval-task`` result."""
    lines = [f"{result['machine']}; {result['model']} {result['dtype']} on {result['device']}, batch "
             f"{result['batch_size']}, {result['task']}, {result['docs']} documents, {result['rounds']} rounds "
             "(medians)", "",
             "| shots | path | median s | docs/s | ratio to lm-eval hf | target | CPU s (ratio) | peak RSS MB | "
             "acc / acc_norm differ | max abs Δ ll |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k, e in result["shots"].items():
        for p in paths:
            r = e["paths"][p]
            ratio = e.get("ratios_to_lm_eval", {}).get(p)
            target = result["targets"].get(p)
            ident = e["identity"].get(p)
            lines.append(
                f"| {k} | {p} | {r['median_s']:.2f} | {r['docs_per_s']:.2f} | "
                + (f"{ratio:.3f}×" if ratio is not None else "1 (peer)" if p == "lm-eval-hf" else "—") + " | "
                + (f"≤ {target}× {'met' if ratio <= target else 'MISSED'}" if target and ratio is not None else "—")
                + f" | {r['cpu_median_s']:.1f}"
                + (f" ({e['cpu_ratios_to_lm_eval'][p]:.3f}×)" if p in e.get("cpu_ratios_to_lm_eval", {}) else "")
                + f" | {r['peak_mb'] if r['peak_mb'] is not None else '—'} | "
                + (f"{ident['acc_differs']} / {ident['acc_norm_differs']} of {result['docs']}" if ident else "—")
                + " | " + (f"{ident['max_abs_dll']:.2e} ({ident['n_requests']} requests)" if ident else "—") + " |")
    acc = ", ".join(f"{k}-shot {e['acc']:.3f}" for k, e in result["shots"].items())
    acc_norm = ", ".join(f"{k}-shot {e['acc_norm']:.3f}" for k, e in result["shots"].items())
    lines += ["", f"acc {acc}; acc_norm {acc_norm}; collectors: {', '.join(result['collectors'])}; identical "
              f"per-item acc and acc_norm: {result['identical_acc_and_acc_norm']}"]
    return "\n".join(lines)
