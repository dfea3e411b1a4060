"""Positive and negative controls for the contamination warnings (issue #12).

Builds a model that is contaminated on purpose and checks that reporter's warnings catch it,
and that they stay silent where nothing was contaminated:

1. Takes the items a run evaluates for the contaminated tasks (default ARC-Challenge, GSM8K
   and MATH-500, ``--items`` each, chosen exactly as ``reporter run`` chooses them) and a seeded random
   half of them as the "trained-on" items.
2. Fine-tunes SmolLM2-135M-Instruct (packaged, offline) on those items, in two formats:
   (a) raw pretraining-style text (question with its options, then the answer) and
   (b) the chat-formatted evaluation prompt followed by the gold answer. Full fine-tuning
   on the CPU with AdamW, a few epochs; each result is saved as a local model directory.
3. Runs ``reporter run`` on the clean model, both contaminated ones and the untrained baseline,
   over the contaminated tasks and tasks nobody trained on (``--untouched``).
4. Reports, per signal, the item-level AUC between trained-on and held-out items of the same
   task, the task-level verdicts, and the false-alarm rates (clean model, untrained baseline,
   untouched tasks).

Usage::

    python benchmarks/contamination_control.py -o control            # the full control (~45 min, 2 CPUs)
    python benchmarks/contamination_control.py -o control --json     # the same, machine-readable on stdout
    python benchmarks/contamination_control.py -o control --extra-clean Gemma-3-270M=packaged:gemma-3-270m
    python benchmarks/contamination_control.py -o c --items 16 --epochs 1 --tasks arc_challenge --untouched arc_easy:8

The test suite runs a small version of it on a tiny model (tests/test_contamination_control.py).
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import yaml

SIGNALS = ("option_order", "split_min_k", "verbatim", "min_k")
#: the signals that are tests (the severity rule counts them; Min-K% against prose is descriptive)
TESTS = ("option_order", "split_min_k", "verbatim", "law_residual")


# ----------------------------------------------------------------------------- items and training text

def run_items(task: str, limit: int, seed: int, *, kind: str = "instruct") -> list[Any]:
    """The items ``reporter run`` evaluates for ``task`` at ``limit`` and ``seed`` (same selection code)."""
    from reporter.collect.plan import build_task
    from reporter.config import TaskConfig
    from reporter.tasks import select_items

    shots = 0 if kind == "instruct" else 1
    items, _ = select_items(build_task(TaskConfig(name=task, limit=limit)), limit, seed, shots)
    return items


def trained_half(items: Sequence[Any], seed: int) -> set[str]:
    """A seeded random half of the items' ids: the ones the contaminated model is trained on."""
    ids = sorted(str(it.id) for it in items)
    return set(random.Random(seed).sample(ids, len(ids) // 2))


def _answer_text(it: Any) -> str:
    if it.choices is not None:
        from reporter.tasks.base import LETTERS

        j = LETTERS.index(it.answer) if it.answer in LETTERS else None
        return f"{it.answer}. {it.choices[j]}" if j is not None and j < len(it.choices) else str(it.answer)
    return str(it.demo_answer or it.answer)


def raw_text(it: Any, label: str = "Question: ") -> str:
    """Format (a): pretraining-style text, the question (options included) and its answer."""
    return f"{label}{it.question}\nAnswer: {_answer_text(it)}"


def chat_text(lm: Any, task: str, it: Any) -> str:
    """Format (b): the evaluation's own chat-formatted prompt followed by the gold answer."""
    from reporter.collect.plan import build_task
    from reporter.config import TaskConfig
    from reporter.tasks.prompts import build_prompt

    prompt = build_prompt(lm, build_task(TaskConfig(name=task)), it, [])
    return prompt + _answer_text(it) + (lm.tokenizer.eos_token or "")


def finetune(model: Any, tokenizer: Any, texts: Sequence[str], *, epochs: int, lr: float, batch_size: int = 4,
             seed: int = 0, max_tokens: int = 512, log: Any = None, on_step: Any = None) -> list[float]:
    """Full fine-tuning (AdamW, causal-LM loss on every token) of ``model`` on ``texts``; returns the epoch losses.

    ``on_step(step)`` is called after each optimizer step (1, 2, ...): the showcase saves its checkpoints there.
    """
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    losses = []
    step = 0
    for ep in range(epochs):
        order = list(range(len(texts)))
        rng.shuffle(order)
        total = 0.0
        for s in range(0, len(order), batch_size):
            ids = [tokenizer(texts[i], add_special_tokens=False)["input_ids"][:max_tokens] for i in order[s:s + batch_size]]
            T = max(len(x) for x in ids)
            inp = torch.full((len(ids), T), pad, dtype=torch.long)
            am = torch.zeros((len(ids), T), dtype=torch.long)
            for b, x in enumerate(ids):
                inp[b, :len(x)] = torch.tensor(x)
                am[b, :len(x)] = 1
            labels = inp.masked_fill(am == 0, -100)
            loss = model(input_ids=inp, attention_mask=am, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(ids)
            step += 1
            if on_step is not None:
                on_step(step)
        losses.append(total / len(texts))
        if log:
            log(f"  epoch {ep + 1}/{epochs}: loss {losses[-1]:.3f}")
    model.eval()
    return losses


# ----------------------------------------------------------------------------- reading a run

def auc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """P(a trained-on item's statistic > a held-out item's), ties half (the Mann-Whitney AUC)."""
    if not len(pos) or not len(neg):
        return None
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(pos, neg).statistic) / (len(pos) * len(neg))


def item_statistics(row: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per signal, each item's statistic (higher = more contaminated-looking), as the analysis stored it
    in a results.json contamination row (``item_ids`` / ``item_values`` of each signal).
    """
    sig = row.get("signals") or {}
    return {k: dict(zip((sig.get(k) or {}).get("item_ids") or [], (sig.get(k) or {}).get("item_values") or []))
            for k in SIGNALS}


def summarise(run_dir: Path, trained: dict[str, set[str]], contaminated: Sequence[str], clean: Sequence[str],
              baseline: Sequence[str]) -> dict[str, Any]:
    """Item-level AUCs, verdicts and false-alarm rates from a finished run directory."""
    res = json.loads((run_dir / "results.json").read_text())
    rows = {(r["model"], r["task"]): r for r in res["analysis"]["contamination"]}
    aucs = []
    for m in contaminated:
        for task, ids in trained.items():
            stats = item_statistics(rows[(m, task)])
            for sig in SIGNALS:
                vals = stats[sig]
                pos = [v for k, v in vals.items() if k in ids]
                neg = [v for k, v in vals.items() if k not in ids]
                aucs.append({"model": m, "task": task, "signal": sig, "n_trained": len(pos), "n_held_out": len(neg),
                             "auc": auc(pos, neg)})
    verdicts = []
    for (m, task), r in sorted(rows.items()):
        fired = [k for k, s in r["signals"].items() if isinstance(s, dict) and s.get("fires")]
        role = ("contaminated" if m in contaminated and task in trained else
                "untouched task" if m in contaminated else "clean" if m in clean else
                "untrained baseline" if m in baseline else "other")
        verdicts.append({"model": m, "task": task, "role": role, "severity": r["severity"], "fired": fired,
                         "p_adjusted": {k: s.get("p_adjusted") for k, s in r["signals"].items()
                                        if isinstance(s, dict) and s.get("test") and s.get("measured")}})
    neg = [v for v in verdicts if v["role"] in ("clean", "untrained baseline", "untouched task")]
    pos = [v for v in verdicts if v["role"] == "contaminated"]
    power = {}
    for sig in TESTS:
        measured = [v for v in pos if sig in v["p_adjusted"]]
        power[sig] = {"fired": sum(sig in v["fired"] for v in measured), "of": len(measured)}
    return {"aucs": aucs, "verdicts": verdicts, "power": power,
            "false_alarms": {"warned": sum(v["severity"] != "none" for v in neg), "of": len(neg)},
            "detected": {"weak_or_strong": sum(v["severity"] != "none" for v in pos),
                         "strong": sum(v["severity"] == "strong" for v in pos), "of": len(pos)}}


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    """The control's tables in Markdown (what goes into benchmarks/RESULTS.md)."""
    lines = [f"Control: {meta['items']} items per contaminated task ({', '.join(meta['tasks'])}), half of them trained on "
             f"for {meta['epochs']} epoch(s) at lr {meta['lr']:g}; untouched tasks: {', '.join(meta['untouched']) or 'none'}; "
             f"collection {meta.get('run_s', 0):.0f} s, fine-tuning {meta.get('finetune_s', 0):.0f} s.", "",
             *(["Other splits from files: " + ", ".join(f"{t} = {f}" for t, f in meta["other_split"].items()), ""]
               if meta.get("other_split") else []),
             "Item-level AUC, trained-on vs held-out items of the same task (1.0 = perfect separation):", "",
             "| model | task | " + " | ".join(SIGNALS) + " |", "|---|---|" + "---|" * len(SIGNALS)]
    by = {}
    for a in summary["aucs"]:
        by.setdefault((a["model"], a["task"]), {})[a["signal"]] = a["auc"]
    for (m, t), d in by.items():
        lines.append(f"| {m} | {t} | " + " | ".join("—" if d.get(s) is None else f"{d[s]:.2f}" for s in SIGNALS) + " |")
    lines += ["", "Verdicts (adjusted p of each test; fired tests in bold):", "",
              "| model | task | role | severity | " + " | ".join(t.replace("_", " ") for t in TESTS) + " |",
              "|---|---|---|---|" + "---|" * len(TESTS)]
    for v in summary["verdicts"]:
        cells = []
        for sig in TESTS:
            p = v["p_adjusted"].get(sig)
            cell = "n/a" if p is None else f"{p:.2g}"
            cells.append(f"**{cell}**" if sig in v["fired"] else cell)
        lines.append(f"| {v['model']} | {v['task']} | {v['role']} | {v['severity']} | " + " | ".join(cells) + " |")
    fa, det = summary["false_alarms"], summary["detected"]
    lines += ["", f"Detected: {det['weak_or_strong']} of {det['of']} contaminated model × task pairs at least weak, "
                  f"{det['strong']} strong. False alarms: {fa['warned']} of {fa['of']} clean, baseline and untouched pairs.",
              "Positive-control power (fired / contaminated pairs where measured): "
              + ", ".join(f"{k} {v['fired']}/{v['of']}" for k, v in summary["power"].items())]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the whole control

def build_contaminated(base_dir: Path, out_dir: Path, texts: Sequence[str], *, epochs: int, lr: float,
                       seed: int, log: Any) -> list[float]:
    """Fine-tune a copy of the model in ``base_dir`` on ``texts`` and save it to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    losses = finetune(model, tok, texts, epochs=epochs, lr=lr, seed=seed, log=log)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return losses


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=Path, required=True, help="work directory (models, run, tables)")
    ap.add_argument("--items", type=int, default=60, help="items per contaminated task (half are trained on)")
    ap.add_argument("--tasks", default="arc_challenge,gsm8k,math500",
                    help="contaminated tasks (MATH-500: a generated-answer task whose other split ships offline)")
    ap.add_argument("--untouched", default="arc_easy:30,mmlu:30,boolq:20",
                    help="tasks nobody trains on, as name:limit")
    ap.add_argument("--formats", default="a,b", help="a = raw text, b = chat prompt + gold answer")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-new-tokens", type=int, default=64, help="generation length of the generative tasks")
    ap.add_argument("--extra-clean", default="",
                    help="more clean models, as name=source,... (e.g. Gemma-3-270M=packaged:gemma-3-270m): "
                         "negative controls of another family, and with 4 trained models the law residual is measurable")
    ap.add_argument("--other-split", action="append", default=[], metavar="TASK=PATH",
                    help="a JSON-lines file of a task's other split, for the Min-K%% test where nothing installed "
                         "ships one (e.g. gsm8k=train.jsonl from openai/grade-school-math); repeatable")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON instead of Markdown")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    from reporter.config.models import parse_config
    from reporter.models.loading import load_model
    from reporter.models.packaged import PACKAGED, model_dir

    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tasks = [t for t in args.tasks.split(",") if t]
    untouched = [u.split(":") for u in args.untouched.split(",") if u]
    base = model_dir(PACKAGED["smollm2-135m-instruct"])
    items = {t: run_items(t, args.items, args.seed) for t in tasks}
    trained = {t: trained_half(its, args.seed) for t, its in items.items()}
    (out / "trained_items.json").write_text(json.dumps({t: sorted(s) for t, s in trained.items()}, indent=1))
    models = [{"name": "SmolLM2-clean", "source": "packaged:smollm2-135m-instruct"}]
    t0 = time.perf_counter()
    for fmt in [f for f in args.formats.split(",") if f]:
        mdir = out / "models" / f"contaminated-{fmt}"
        if not (mdir / "config.json").is_file():
            spec = parse_config({"models": [{"name": "base", "source": "packaged:smollm2-135m-instruct"}]}).models[0]
            lm = load_model(spec, run_device="cpu")
            texts = [raw_text(it) if fmt == "a" else chat_text(lm, t, it)
                     for t, its in items.items() for it in its if str(it.id) in trained[t]]
            del lm
            log(f"fine-tuning format ({fmt}) on {len(texts)} texts")
            build_contaminated(base, mdir, texts, epochs=args.epochs, lr=args.lr, seed=args.seed, log=log)
        models.append({"name": f"SmolLM2-contaminated-{fmt}", "source": str(mdir), "kind": "instruct"})
    finetune_s = time.perf_counter() - t0
    extra = [e.split("=", 1) for e in args.extra_clean.split(",") if e]
    models += [{"name": n, "source": src} for n, src in extra]
    models.append({"name": "Random-init baseline", "source": "random:llama", "kind": "base"})
    (out / "models.yaml").write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    gen = {"gsm8k", "math500", "humaneval", "mbpp"}
    other_split = dict(o.split("=", 1) for o in args.other_split)
    other_split = {t: str(Path(f).resolve()) for t, f in other_split.items()}
    profile = {"name": "contamination-control", "mui": {"top_ratio": 0.001, "mode": "score"},
               "lpp": {"enabled": False},
               "contamination": {"verbatim_items": args.items, "order_items": args.items, "order_permutations": 8,
                                 "reference_texts": 64, "split_items": args.items},
               "smoke_texts": 4,
               "tasks": [{"name": t, "limit": args.items, **({"max_new_tokens": args.max_new_tokens} if t in gen else {}),
                          **({"other_split": other_split[t]} if t in other_split else {})}
                         for t in tasks]
               + [{"name": n, "limit": int(k), **({"max_new_tokens": args.max_new_tokens} if n in gen else {}),
                   **({"other_split": other_split[n]} if n in other_split else {})}
                  for n, k in untouched]}
    (out / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    t1 = time.perf_counter()
    cmd = [str(Path(sys.executable).with_name("reporter")), "run", str(out / "models.yaml"), "--profile",
           str(out / "profile.yaml"), "-o", str(out / "run"), "--seed", str(args.seed), "--no-progress"]
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    run_s = time.perf_counter() - t1
    names = [m["name"] for m in models]
    summary = summarise(out / "run", trained, [n for n in names if "contaminated" in n],
                        ["SmolLM2-clean"] + [n for n, _ in extra], ["Random-init baseline"])
    meta = {"items": args.items, "tasks": tasks, "other_split": other_split, "untouched": [n for n, _ in untouched], "epochs": args.epochs, "extra_clean": [n for n, _ in extra],
            "lr": args.lr, "seed": args.seed, "finetune_s": finetune_s, "run_s": run_s}
    (out / "control.json").write_text(json.dumps({"meta": meta, **summary}, indent=1))
    (out / "control.md").write_text(markdown(summary, meta) + "\n")
    print(json.dumps({"meta": meta, **summary}, indent=1) if args.json else markdown(summary, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
