"""Evaluate one model on one task: generate, score, one hooked teacher-forced pass, save.

Per batch: greedy generation → scoring → one teacher-forced hooked pass over prompt +
response (MUI key neurons) → the batch's neuron sets, then its sample lines, are written
and flushed. A rerun recomputes only batches with a missing sample, so a run killed at
any moment (even SIGKILL) resumes to the same results as an uninterrupted run.

Files in the task directory::

    samples.jsonl     one line per item: id, prompt, response, extracted, gold, score, token counts
    neurons/          per-batch key-neuron sets while the task runs
    neurons.npz       all items' key-neuron sets (int32 flat ids layer*d_ff+i), when finished
    summary.json      score, CI, n, seed, MUI … — written last: its presence marks the task done
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .artifacts import read_json, write_json
from .calibration import CalibrationCollector, calibration_summary, letter_token_ids
from .forward import PassBatch, hooked_pass
from .generation import generate, left_pad
from .mui import (MUICollector, ablate, load_neuron_sets, merge_neuron_sets, per_layer_utilization,
                  random_neurons_like, save_neuron_sets, utilization)
from .logprobs import TokenLogProbCollector, merge_logprobs, question_span, save_logprobs
from .probes import ar_metrics
from .prompts import build_prompt, encode_prompt
from .scoring import get_scorer
from .stats import score_ci
from .tasks import Item, Task, get_task, jsonl_task, pick_shots, select_items


def make_task(tcfg: dict) -> Task:
    """A Task from a profile entry (built-in name or ``type: jsonl``), with overrides applied."""
    if tcfg.get("type") == "jsonl":
        task = jsonl_task(tcfg["name"], tcfg["path"], tcfg["prompt_field"], tcfg["answer_field"], tcfg["scorer"],
                          choices_field=tcfg.get("choices_field"), instruction=tcfg.get("instruction", ""))
    else:
        task = get_task(tcfg["name"])
        if tcfg.get("instruction"):
            task.instruction = tcfg["instruction"]
    if tcfg.get("max_new_tokens"):
        task.max_new_tokens = tcfg["max_new_tokens"]
    if tcfg.get("stop") is not None:
        task.stop = task.base_stop = tuple(tcfg["stop"])
    return task


def read_samples(path: Path) -> dict[str, dict]:
    """Finished samples by id; a torn last line (killed mid-write) is ignored."""
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    with open(path) as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.setdefault(rec["id"], rec)
    return out


def _append_lines(path: Path, recs: list[dict]) -> None:
    blob = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)
    with open(path, "a") as fh:
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())


def teacher_forced_batch(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int,
                         device) -> PassBatch:
    """Left-padded prompt+response sequences with a mask of the response tokens."""
    seqs = [p + r for p, r in zip(prompt_ids, response_ids)]
    ids, mask = left_pad(seqs, pad_id, device)
    resp = torch.zeros_like(mask, dtype=torch.bool)
    width = ids.shape[1]
    for i, r in enumerate(response_ids):
        if r:
            resp[i, width - len(r):] = True
    return PassBatch(ids, mask, resp)


def mui_meta(lm, mui_cfg: dict) -> dict:
    return {"model": lm.spec.name, "n_layers": lm.adapter.n_layers, "d_ff": lm.adapter.d_ff,
            "top_ratio": mui_cfg["top_ratio"], "mode": mui_cfg["mode"], "rho": mui_cfg["rho"],
            "dtype": str(lm.dtype).replace("torch.", "")}


def plan(lm, task: Task, tcfg: dict, seed: int) -> tuple[list[Item], list[list[int]], list[str], int, tuple[str, ...]]:
    """Evaluated items, their token ids and prompts, the shot count and stop sequences."""
    shots = tcfg.get("shots")
    if shots is None:
        shots = 0 if lm.kind == "instruct" else 1  # the Utility Law paper's settings
    items, pool = select_items(task, tcfg.get("limit"), seed, shots)
    demos = pick_shots(pool, shots, seed)
    prompts = [build_prompt(lm, task, it, demos) for it in items]
    ids = [encode_prompt(lm, p) for p in prompts]
    stop = task.stop if lm.use_chat_template else task.base_stop
    return items, ids, prompts, shots, stop


def run_task(lm, tcfg: dict, task_dir: Path, *, seed: int, mui_cfg: dict, progress: bool = True) -> dict:
    """Evaluate ``lm`` on one profile task, resuming from ``task_dir``; returns the summary."""
    task_dir.mkdir(parents=True, exist_ok=True)
    summary_path = task_dir / "summary.json"
    if summary_path.is_file():
        return read_json(summary_path)
    task = make_task(tcfg)
    scorer = get_scorer(task.scorer)
    items, ids, prompts, shots, stop = plan(lm, task, tcfg, seed)
    samples_path = task_dir / "samples.jsonl"
    ndir = task_dir / "neurons"
    ndir.mkdir(exist_ok=True)
    done = read_samples(samples_path)
    bs = lm.spec.max_batch_size
    order = sorted(range(len(items)), key=lambda i: (-len(ids[i]), i))
    batches = [order[i:i + bs] for i in range(0, len(order), bs)]
    todo = [(b, idx) for b, idx in enumerate(batches) if any(items[i].id not in done for i in idx)]
    use_mui = mui_cfg.get("enabled", True)
    meta = mui_meta(lm, mui_cfg)
    n_opts = max((len(it.choices) for it in items if it.choices), default=0)
    letter_ids = letter_token_ids(lm.tokenizer, n_opts) if task.scorer == "choice" and n_opts else None
    bar = tqdm(total=len(items), initial=len(items) - sum(len(i) for _, i in todo), disable=not progress,
               desc=f"{lm.spec.name}: {task.name}", leave=False)
    for b, idx in todo:
        gens = generate(lm, [ids[i] for i in idx], max_new_tokens=task.max_new_tokens, stop=stop,
                        batch_size=len(idx))
        recs = []
        for i, g in zip(idx, gens):
            extracted, score = scorer(g.text, items[i].scorer_item())
            recs.append({"id": items[i].id, "prompt": prompts[i], "response": g.text, "extracted": extracted,
                         "gold": items[i].answer, "score": float(score), "prompt_tokens": len(g.prompt_ids),
                         "response_tokens": len(g.response_ids), "stopped_by": g.stopped_by, "batch": b})
        lpc = TokenLogProbCollector()
        collectors = [lpc]
        if use_mui:
            col = MUICollector(top_ratio=mui_cfg["top_ratio"], mode=mui_cfg["mode"], rho=mui_cfg["rho"])
            collectors.append(col)
        if letter_ids is not None:
            cal = CalibrationCollector(letter_ids, n_options=[len(items[i].choices or []) for i in idx])
            collectors.append(cal)
        # ONE teacher-forced pass feeds every collector (MUI, calibration, token log-probs)
        pb = teacher_forced_batch([g.prompt_ids for g in gens], [g.response_ids for g in gens],
                                  lm.tokenizer.pad_token_id, lm.device)
        hooked_pass(lm.model, lm.adapter, pb, collectors)
        spans = [question_span(lm.tokenizer, prompts[i], items[i].question, ids[i]) for i in idx]
        save_logprobs(ndir / f"logprobs-{b:05d}.npz", [items[i].id for i in idx], lpc.prompt_results(),
                      lpc.response_results(), spans, {"model": lm.spec.name})
        if letter_ids is not None:
            for r, probs in zip(recs, cal.probs):
                r["option_probs"] = [round(float(x), 6) for x in probs]
                r["answer_source"] = "response"
                if r["extracted"] is None and len(probs):
                    # no option letter in the response: fall back to the letter the model itself
                    # puts most probability on at the answer position (lm-eval's log-likelihood
                    # reading), so a model that ignores the format scores at its real preference
                    # (an untrained model: chance) instead of zero
                    letter = chr(ord("A") + int(np.argmax(probs)))
                    r.update(extracted=letter, score=float(letter == r["gold"]), answer_source="logprob")
        if use_mui:
            save_neuron_sets(ndir / f"batch-{b:05d}.npz", [items[i].id for i in idx], col.results(), meta)
        _append_lines(samples_path, recs)
        bar.update(len(idx))
    bar.close()
    return finish_task(lm.spec.name, task, items, task_dir, seed=seed, shots=shots, mui_cfg=mui_cfg if use_mui else None,
                       n_layers=lm.adapter.n_layers, d_ff=lm.adapter.d_ff)


def finish_task(model_name: str, task: Task, items: list[Item], task_dir: Path, *, seed: int, shots: int,
                mui_cfg: dict | None, n_layers: int, d_ff: int) -> dict:
    samples = read_samples(task_dir / "samples.jsonl")
    scores = [samples[it.id]["score"] for it in items]
    ci = score_ci(scores, seed=seed)
    summary = {"task": task.name, "scorer": task.scorer, "shots": shots, "limit": len(items),
               **ci.to_dict(), "source": task.source, "description": task.description,
               "mean_response_tokens": float(np.mean([samples[it.id]["response_tokens"] for it in items])) if items else 0.0}
    lp_parts = sorted((task_dir / "neurons").glob("logprobs-*.npz"))
    if lp_parts:
        merge_logprobs(task_dir / "logprobs.npz", lp_parts)
    if mui_cfg is not None:
        parts = sorted((task_dir / "neurons").glob("batch-*.npz"))
        merge_neuron_sets(task_dir / "neurons.npz", parts)
        ids_, sets, _ = load_neuron_sets(task_dir / "neurons.npz")
        by_id = dict(zip(ids_, sets))
        ordered = [by_id[it.id] for it in items]
        summary.update(
            mui=100.0 * utilization(ordered, n_layers, d_ff),
            mui_per_layer=[100.0 * v for v in per_layer_utilization(ordered, n_layers, d_ff)],
            mui_settings={"mode": mui_cfg["mode"], "top_ratio": mui_cfg["top_ratio"], "rho": mui_cfg["rho"],
                          "n_samples": len(items), "n_layers": n_layers, "d_ff": d_ff},
        )
    if task.scorer == "choice" and items:
        summary["answer_from_logprob_share"] = float(np.mean(
            [samples[it.id].get("answer_source") == "logprob" for it in items]))
    if task.scorer == "choice" and items and all("option_probs" in samples[it.id] for it in items):
        gold = [ord(it.answer) - ord("A") for it in items]
        summary["calibration"] = calibration_summary([samples[it.id]["option_probs"] for it in items], gold)
    if task.scorer == "ar":
        summary["ar"] = ar_metrics([samples[it.id]["response"] for it in items], items)
    write_json(task_dir / "summary.json", summary)
    shutil.rmtree(task_dir / "neurons", ignore_errors=True)
    return summary


def contamination_evidence(lm, tcfg: dict, task_dir: Path, *, seed: int, max_items: int = 16) -> dict:
    """Verbatim-completion evidence for the contamination analysis (``verbatim.json``)."""
    from .contamination import collect_contamination_evidence

    task = make_task(tcfg)
    items, *_ = plan(lm, task, tcfg, seed)
    return collect_contamination_evidence(lm, items, task_dir, max_items=max_items, seed=seed,
                                          batch_size=lm.spec.max_batch_size)


def validate_neurons(lm, tcfg: dict, task_dir: Path, *, seed: int, progress: bool = True) -> dict:
    """The paper's check: re-score with the task's key neurons zeroed, and with as many random ones."""
    out_path = task_dir / "validation.json"
    if out_path.is_file():
        return read_json(out_path)
    task = make_task(tcfg)
    scorer = get_scorer(task.scorer)
    items, ids, _, _, stop = plan(lm, task, tcfg, seed)
    _, sets, _ = load_neuron_sets(task_dir / "neurons.npz")
    key = np.unique(np.concatenate(sets)) if sets else np.zeros(0, dtype=np.int64)
    rnd = random_neurons_like(key, lm.adapter.n_layers, lm.adapter.d_ff, seed=seed)
    res = {"n_neurons": int(key.size)}
    for label, neurons in (("key", key), ("random", rnd)):
        with ablate(lm.model, lm.adapter, neurons):
            gens = generate(lm, ids, max_new_tokens=task.max_new_tokens, stop=stop, batch_size=lm.spec.max_batch_size)
        scores = [scorer(g.text, it.scorer_item())[1] for g, it in zip(gens, items)]
        res[f"score_ablated_{label}"] = float(np.mean(scores)) if scores else float("nan")
    res["score"] = read_json(task_dir / "summary.json")["score"]
    write_json(out_path, res)
    return res
