"""What each size of the contamination evidence costs, in the tokens its passes run (issue #35).

``evidence_power.py`` says what a size buys; this says what it costs, without a model: the tokenizer
alone. For a task's first ``n`` evaluated items (as a run takes them) and each size it counts

- the option-order pass: the tokens the prefix tree runs (every distinct prefix of an item's orders once,
  each text cut after its last scored token) and the positions the LM head scores (each option line's
  window);
- the other split's pass: the tokens of its texts (both halves of each pair, cut to 64 tokens), and how many
  of the evaluated half the option-order pass already runs (its published-order texts): those cost the
  LM head only, at every position, for Min-K%.

On SmolLM2-135M on a 2-vCPU CPU a body token costs about four times an LM-head position (a 576-wide model with a
49,152-token head), which ``units`` weighs in: body tokens + head positions / 4.

Usage::

    python benchmarks/evidence_cost.py --task arc_challenge --run-items 120 --sizes 32x8:32,48x3:48,48x4:48
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

#: an LM-head position, in body tokens (SmolLM2-135M: 576 x 49,152 head against ~105M body parameters, ~1/4)
HEAD_WEIGHT = 0.25


def cost(tokenizer: Any, task: Any, items: Sequence[Any], n_items: int, n_orders: int, n_pairs: int, *,
         window: int = 6, shared: bool = True, seed: int = 0) -> dict[str, Any]:
    """Tokens and head positions of the option-order and other-split passes at one size.

    ``shared``: the other split's evaluated texts come from the option-order pass where it runs them (today's
    code); ``False`` counts them as a pass of their own (the code before).
    """
    from reporter.collect.evidence import evidence_order
    from reporter.collect.option_order import _scored_positions, order_variants
    from reporter.collect.split_reference import split_pairs, split_text_ids
    from reporter.instrument.tree import tree_tokens

    items = evidence_order(items, seed)  # as a run orders them for both tests
    plan, texts, starts, _ = order_variants(tokenizer, items, n_perms=n_orders, max_items=n_items, seed=seed)
    where = _scored_positions(plan, texts, starts, window)
    pubs = {p["id"]: texts[p["first"]] for p in plan}
    pairs, _ = split_pairs(task, items, task.other_split(), n_pairs, seed)
    ev = [split_text_ids(tokenizer, a) for a, _, _ in pairs]
    ref = [split_text_ids(tokenizer, b) for _, b, _ in pairs]
    given = [shared and str(a.id) in pubs and pubs[str(a.id)][:len(t)] == t for (a, _, _), t in zip(pairs, ev)]
    extra = {str(a.id): len(t) for (a, _, _), t, g in zip(pairs, ev, given) if g}
    last = [max(w, default=s) for w, s in zip(where, starts)]  # each text runs up to its last scored token
    for p in plan:  # the published order also up to the other split's text
        last[p["first"]] = max(last[p["first"]], extra.get(p["id"], 0) - 1)
    cut = [t[:j + 1] for t, j in zip(texts, last)]
    groups = [k for k, p in enumerate(plan) for _ in range(1 + len(p["perms"]))]
    order_body = tree_tokens(cut, groups)
    order_head = sum(len(w) for w in where) + sum(n - 1 for n in extra.values())
    split_body = sum(len(t) for t in ref) + sum(len(t) for t, g in zip(ev, given) if not g)
    split_head = sum(len(t) - 1 for t in ref) + sum(len(t) - 1 for t, g in zip(ev, given) if not g)
    body, head = order_body + split_body, order_head + split_head
    return {"items": len(plan), "orders": n_orders, "pairs": len(pairs), "shared": shared,
            "evaluated_from_order_pass": sum(given),
            "order": {"body_tokens": order_body, "head_positions": order_head},
            "split": {"body_tokens": split_body, "head_positions": split_head},
            "body_tokens": body, "head_positions": head, "units": round(body + HEAD_WEIGHT * head)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="arc_challenge")
    ap.add_argument("--run-items", type=int, default=120, help="the run's evaluated items (its first n, seed 0)")
    ap.add_argument("--sizes", default="32x8:32,48x3:48,48x4:48",
                    help="ITEMSxORDERS:PAIRS, comma-separated; the first is also counted without the shared pass")
    ap.add_argument("--tokenizer", default=None, help="a tokenizer directory (default: the packaged SmolLM2's)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from reporter.models.loading import load_tokenizer
    from reporter.models.packaged import PACKAGED, tokenizer_dir
    from reporter.tasks import get_task, select_items

    tok = load_tokenizer(a.tokenizer or str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    task = get_task(a.task)
    items, _ = select_items(task, a.run_items, seed=0, shots=0)
    rows = []
    for k, size in enumerate(a.sizes.split(",")):
        io, pairs = size.split(":")
        n, m = (int(x) for x in io.split("x"))
        if k == 0:
            rows.append(cost(tok, task, items, n, m, int(pairs), shared=False))
        rows.append(cost(tok, task, items, n, m, int(pairs)))
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{a.task}, the run's first {len(items)} items (seed 0)\n")
    print("| size | evaluated texts from the option-order pass | option order: tokens / head | "
          "other split: tokens / head | units | vs first row |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['items']} × {r['orders']}, {r['pairs']} pairs{'' if r['shared'] else ' (separate passes)'} | "
              f"{r['evaluated_from_order_pass']} | {r['order']['body_tokens']:,} / {r['order']['head_positions']:,} | "
              f"{r['split']['body_tokens']:,} / {r['split']['head_positions']:,} | {r['units']:,} | "
              f"{r['units'] / rows[0]['units']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
