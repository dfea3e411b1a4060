"""Would a shorter option-order test keep its power? The test scored on a window of tokens.

The option-order test (:mod:`reporter.collect.option_order`) sums each variant's log-probs over
every token after the prefix the variants share (the option block). Any fixed function of the
variant's text keeps the published order's rank uniform without contamination, so summing only
the first ``W`` tokens of the block is an exactly valid test too, and cheaper (the LM head on
the option block is most of its cost). This script measures what it costs in power on the
contamination control (``benchmarks/contamination_control.py -o DIR`` writes ``DIR/models`` and
``DIR/trained_items.json``): for each model and window, the exact p-value of the summed ranks and
the item-level AUC between trained-on and held-out items of the published order's z-score.
Each variant's log-probs are computed once; every window is a prefix sum of them (causal model).
``--score logit`` scores each token by its raw logit (the LM head's output for the token, no
log-softmax) instead of its log-prob: also a fixed function of the text, so also an exact test,
and one that needs only the target token's row of the LM head. p-values: Fisher's combination of
the items' rank p-values (the test's statistic since 2026-12-01) and the summed ranks.

Usage::

    python benchmarks/option_order_window.py --control control --models clean,contaminated-a \\
        --task arc_challenge --items 60 --windows 8,16,24,32,all
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

from reporter.collect.option_order import option_windows, order_variants
from reporter.collect.plan import build_task
from reporter.collect.text_scores import token_logprobs
from reporter.config import ModelSpec, TaskConfig
from reporter.metrics.rank_tests import order_fisher_pvalue, order_null_pvalue
from reporter.models.loading import load_model
from reporter.tasks import select_items

CLEAN = "packaged:smollm2-135m-instruct"


def window_stats(lps: list[np.ndarray], plan: list[dict], window: int | None, trained: set[str],
                 starts: list[int] | None = None, texts: list[list[int]] | None = None) -> dict:
    """p-value, top share and trained-vs-held-out AUC of the test scored on the first ``window`` tokens.

    With ``starts`` and ``texts``: on the first ``window`` tokens of each option line instead
    (:func:`reporter.collect.option_order.option_windows`).
    """
    ranks, m, z, ids = [], [], [], []
    for p in plan:
        n = 1 + len(p["perms"])
        if starts is None or texts is None:
            ll = np.array([np.sum(np.asarray(lps[p["first"] + k], np.float64)[:window]) for k in range(n)])
        else:
            ll = np.zeros(n)
            for k in range(n):
                i = p["first"] + k
                pos = [j - starts[i] for j in option_windows(p["option_starts"][k], len(texts[i]), window)
                       if j >= starts[i]]
                ll[k] = np.sum(np.asarray(lps[i], np.float64)[pos])
        tol = 1e-6 * max(1.0, abs(ll[0]))
        ranks.append(int(np.sum(ll[1:] >= ll[0] - tol)))  # ties count against contamination, as in the test
        m.append(n - 1)
        sd = float(np.std(ll[1:], ddof=1))
        z.append((ll[0] - ll[1:].mean()) / sd if sd > 0 else 0.0)
        ids.append(p["id"])
    yes = [v for v, i in zip(z, ids) if i in trained]
    no = [v for v, i in zip(z, ids) if i not in trained]
    auc = float(mannwhitneyu(yes, no).statistic) / (len(yes) * len(no)) if yes and no else None
    return {"window": window or "all", "n": len(ranks), "p": order_fisher_pvalue(ranks, m),
            "p_rank_sum": order_null_pvalue(ranks, m),
            "top_share": float(np.mean(np.asarray(ranks) == 0)), "auc_trained_vs_held_out": auc}


def target_logits(lm, texts: list[list[int]], starts: list[int]) -> list[np.ndarray]:
    """Per text, the raw logit of each token from ``starts[i]`` on (one plain forward pass per text)."""
    import torch

    out = []
    with torch.inference_mode():
        for ids, s0 in zip(texts, starts):
            x = torch.tensor([ids])
            logits = lm.model(input_ids=x).logits[0, s0 - 1:-1].double()
            out.append(logits.gather(-1, x[0, s0:, None]).squeeze(-1).numpy())
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--control", required=True, help="output directory of contamination_control.py")
    ap.add_argument("--models", default="clean,contaminated-a,contaminated-b")
    ap.add_argument("--task", default="arc_challenge")
    ap.add_argument("--items", type=int, default=60, help="the control's --items")
    ap.add_argument("--perms", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1234, help="the run seed (item choice and permutations)")
    ap.add_argument("--windows", default="8,16,24,32,all")
    ap.add_argument("--score", choices=("logprob", "logit"), default="logprob",
                    help="score a token by its log-prob (the test's) or by its raw logit")
    ap.add_argument("--option-windows", default="", help="also: the first W tokens of each option line, e.g. 3,4,6")
    args = ap.parse_args(argv)
    control = Path(args.control)
    trained = set(json.loads((control / "trained_items.json").read_text()).get(args.task, []))
    windows = [None if w == "all" else int(w) for w in args.windows.split(",")]
    items, _ = select_items(build_task(TaskConfig(name=args.task, limit=args.items)), args.items, args.seed, 0)
    out = []
    for name in args.models.split(","):
        source = CLEAN if name == "clean" else str(control / "models" / name)
        lm = load_model(ModelSpec(name=name, source=source, dtype="float32", kind="instruct"),
                        run_device="cpu", run_dtype="float32", run_seed=args.seed)
        plan, texts, starts, _ = order_variants(lm.tokenizer, items, n_perms=args.perms, max_items=None,
                                                seed=args.seed)
        lps = token_logprobs(lm, texts, starts=starts) if args.score == "logprob" else \
            target_logits(lm, texts, starts)
        for w in windows:
            row = {"model": name, "task": args.task, **window_stats(lps, plan, w, trained)}
            out.append(row)
            auc = row["auc_trained_vs_held_out"]
            print(f"{name:16s} window {str(row['window']):>4s}  n {row['n']}  p {row['p']:.2g} (rank sum {row['p_rank_sum']:.2g})  "
                  f"top {row['top_share']:.2f}  AUC {'-' if auc is None else f'{auc:.2f}'}", flush=True)
        for w in [int(x) for x in args.option_windows.split(",") if x]:
            row = {"model": name, "task": args.task, **window_stats(lps, plan, w, trained, starts, texts),
                   "per_option": True}
            out.append(row)
            auc = row["auc_trained_vs_held_out"]
            print(f"{name:16s} per-option window {w:>3d}  n {row['n']}  p {row['p']:.2g} (rank sum {row['p_rank_sum']:.2g})  "
                  f"top {row['top_share']:.2f}  AUC {'-' if auc is None else f'{auc:.2f}'}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
