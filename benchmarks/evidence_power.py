"""What a smaller contamination-evidence budget keeps of the tests' power (issue #35).

The first run of a model spends most of its evidence time on two per-task tests whose cost grows
with their size: the option-order test (``contamination.order_items`` items, each scored in its
published order and ``order_permutations`` other orders) and Min-K% against the other split
(``split_items`` pairs). Issue #35's first-run targets need about a fifth of today's evidence
tokens, which is a question of power, not of speed. This script answers it with data.

It reads a contamination control's run (``benchmarks/contamination_control.py -o DIR``: SmolLM2
fine-tuned on a seeded half of the items, a clean SmolLM2, tasks nobody trained on) and, for every
model x task and every size, draws ``--draws`` bootstrap samples of what the run scored: ``n`` of the
items, drawn with replacement, and for each item ``m`` of its other orders, drawn without (the orders
are a seeded random draw of distinct permutations, so a random subset of them is what a run with
``order_permutations: m`` would score). Each sample goes
through reporter's own signal functions (:func:`reporter.analyse.contamination.option_order_signal`
with the task's null, :func:`~reporter.analyse.contamination.split_signal`), so the p-value, the
effect and its floor are the run's. Per size it reports:

- the median p-value;
- ``fires``: the share of samples that would fire in a run of ``K`` tests (``p * K < 0.01`` and the
  effect floor met; ``p * K`` bounds the Benjamini-Hochberg adjusted p of any of a run's p-values
  from above, so this is a lower bound on firing);
- ``strong``: the share of draws that fire with ``p * K <= 1e-6``, the level at which one test
  alone makes a warning strong;
- the cost: option lines the prefix tree runs per item (the stem runs once per item whatever
  ``m`` is), relative to the run's own size, and pairs for the other split.

``--ship`` pools the contaminated pairs of every control given (the models named ``*contaminated*`` on
the control's contaminated tasks) and writes ``reporter/data/evidence_power.json``: per test and size,
the share of samples that fire in a run of K tests, for a grid of K, pooled and per control. The card states that power at each
run's own sizes and K (:mod:`reporter.analyse.control_power`), so that "no test fires" says how much
it could have seen. ``--ship-task TASK`` writes controls fine-tuned on another benchmark as that task's own
table (``by_task``), which the card reads that task's tests against.

Usage::

    python benchmarks/contamination_control.py -o /tmp/ctl --tasks arc_challenge --untouched arc_easy:30
    python benchmarks/evidence_power.py /tmp/ctl --items 8,16,24,32 --orders 2,4,8 --tests 3,48
    python benchmarks/evidence_power.py /tmp/ctl-1234 /tmp/ctl-2027 --ship
    python benchmarks/evidence_power.py /tmp/ctlhs-1234 /tmp/ctlhs-2027 --ship-task hellaswag
"""
from __future__ import annotations

import argparse
import json
import sys
from itertools import permutations
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from reporter.analyse.contamination import FDR_Q, STRONG_P
from reporter.analyse.order_null import order_null_for
from reporter.analyse.signals import _ranks, option_order_signal, split_signal


def tree_lines(orders: Iterable[Sequence[int]]) -> int:
    """Option lines a prefix tree runs for these orders of one item: one per distinct prefix.

    >>> tree_lines([(0, 1, 2, 3), (0, 1, 3, 2), (1, 0, 2, 3)])
    10
    """
    return len({tuple(o[:k]) for o in orders for k in range(1, len(o) + 1)})


def subsample_order(rec: Mapping[str, Any], n_items: int, n_orders: int, rng: np.random.Generator, *,
                    replace: bool = True) -> dict[str, Any]:
    """``option_order.json`` as a run with ``n_items`` items and ``n_orders`` other orders would have scored it.

    Items are drawn with replacement (a bootstrap sample of the control's items: drawn without it, a size near
    the control's own would vary too little and overstate power); each item keeps ``n_orders`` of its orders,
    drawn without replacement, as a run draws distinct orders. ``replace=False`` draws distinct items (at most all).
    """
    items = list(rec["per_item"])
    pick = rng.choice(len(items), size=n_items if replace else min(n_items, len(items)), replace=replace)
    out = [keep_orders(items[int(i)], n_orders, rng) for i in sorted(pick)]
    return {**rec, "n": len(out), "per_item": out}


def keep_orders(it: Mapping[str, Any], n_orders: int, rng: np.random.Generator) -> dict[str, Any]:
    """One item of ``option_order.json`` with ``n_orders`` of its other orders, drawn without replacement."""
    k = len(it["perm_ll"])
    keep = sorted(rng.choice(k, size=min(n_orders, k), replace=False).tolist())
    return {**it, "perm_ll": [it["perm_ll"][j] for j in keep],
            "perms": [it["perms"][j] for j in keep] if it.get("perms") else None}


def subsample_split(rec: Mapping[str, Any], n_pairs: int, rng: np.random.Generator, *,
                    replace: bool = True) -> dict[str, Any]:
    """``split_reference.json`` with ``n_pairs`` of its pairs, drawn with replacement (as :func:`subsample_order`)."""
    pairs = list(rec.get("pairs") or [])
    pick = sorted(rng.choice(len(pairs), size=n_pairs if replace else min(n_pairs, len(pairs)), replace=replace).tolist())
    return {**rec, "n": len(pick), "pairs": [pairs[i] for i in pick]}


def _cost_lines(rec: Mapping[str, Any]) -> float:
    """Mean option lines per item that the run's own orders ran as a tree (published order included)."""
    out = []
    for it in rec["per_item"]:
        perms = it.get("perms") or []
        if not perms:
            continue
        ident = tuple(range(len(perms[0])))
        out.append(tree_lines([ident, *map(tuple, perms)]))
    return float(np.mean(out)) if out else float("nan")


def expected_tree_lines(n_options: int, n_orders: int, rng: np.random.Generator, draws: int = 2000) -> float:
    """Mean option lines of a tree over the published order and ``n_orders`` distinct random other orders."""
    ident = tuple(range(n_options))
    others = [p for p in permutations(range(n_options)) if p != ident]
    tot = 0
    for _ in range(draws):
        pick = rng.choice(len(others), size=min(n_orders, len(others)), replace=False)
        tot += tree_lines([ident, *(others[int(i)] for i in pick)])
    return tot / draws


def power(signals: Sequence[Mapping[str, Any]], tests: int) -> dict[str, float]:
    """Median p, and the shares of draws that fire / fire strongly in a run of ``tests`` tests."""
    ps = np.asarray([s["p_value"] for s in signals if s.get("measured")], np.float64)
    if ps.size == 0:
        return {"median_p": float("nan"), "fires": float("nan"), "strong": float("nan")}
    meets = np.asarray([bool(s.get("meets_effect")) for s in signals if s.get("measured")])
    adj = np.minimum(ps * tests, 1.0)
    fires = (adj < FDR_Q) & meets
    return {"median_p": float(np.median(ps)), "fires": float(np.mean(fires)),
            "strong": float(np.mean(fires & (adj <= STRONG_P)))}


def study(run: Path, *, items: Sequence[int], orders: Sequence[int], pairs: Sequence[int], tests: Sequence[int],
          draws: int, seed: int, replace: bool = True) -> list[dict[str, Any]]:
    """One row per model x task x test x size (see the module's docstring)."""
    rows: list[dict[str, Any]] = []
    for mdir in sorted((run / "models").iterdir()):
        for tdir in sorted((mdir / "tasks").glob("*")):
            rec_o = _read(tdir / "option_order.json")
            if rec_o and rec_o.get("per_item"):
                null = order_null_for(tdir.name)
                full = option_order_signal(rec_o, null)
                lines = _cost_lines(rec_o)
                for n in items:
                    for m in orders:
                        rng = np.random.default_rng([seed, n, m])
                        sigs = [option_order_signal(subsample_order(rec_o, n, m, rng, replace=replace), null)
                                for _ in range(draws)]
                        sub = subsample_order(rec_o, n, m, np.random.default_rng([seed, n, m, 1]), replace=replace)
                        rows.append({"model": mdir.name, "task": tdir.name, "test": "option_order",
                                     "n": n if replace else min(n, rec_o["n"]),
                                     "orders": m, "lines_per_item": _cost_lines(sub), "run_lines_per_item": lines,
                                     "run_n": rec_o["n"], "run_p": full["p_value"], "null": null["name"],
                                     **{f"K={k}": power(sigs, k) for k in tests}})
            rec_s = _read(tdir / "split_reference.json")
            if rec_s and rec_s.get("pairs"):
                full_s = split_signal(rec_s)
                for n in pairs:
                    rng = np.random.default_rng([seed, n, 0])
                    sigs = [split_signal(subsample_split(rec_s, n, rng, replace=replace)) for _ in range(draws)]
                    rows.append({"model": mdir.name, "task": tdir.name, "test": "split_min_k",
                                 "n": n if replace else min(n, len(rec_s["pairs"])), "run_n": len(rec_s["pairs"]),
                                 "run_p": full_s.get("p_value"), **{f"K={k}": power(sigs, k) for k in tests}})
    return rows


def null_study_record(rec: Mapping[str, Any]) -> dict[str, Any]:
    """A null study's record of one model x benchmark (``option_order_null.py``: per item every scored order and its
    log-likelihood, the published order first) as the ``option_order.json`` that a run with those orders writes.

    >>> r = null_study_record({"n": 1, "per_item": [{"id": "q", "orders": [[0, 1], [1, 0]], "ll": [-1.0, -2.0]}]})
    >>> r["per_item"][0]["perms"], r["per_item"][0]["perm_ll"]
    ([[1, 0]], [-2.0])
    """
    return {"n": len(rec["per_item"]), "per_item": [
        {"id": it["id"], "ll": it["ll"][0], "perm_ll": list(it["ll"][1:]), "perms": [list(o) for o in it["orders"][1:]]}
        for it in rec["per_item"]]}


def null_rows(study_dir: Path, *, items: Sequence[int], orders: Sequence[int], tests: Sequence[int], draws: int,
              seed: int) -> list[dict[str, Any]]:
    """The negative control of the option-order test at a run's sizes: clean models' scores from a null study
    (``option_order_null.py -o DIR --perms 23``: every order of every item), sampled like :func:`study` and run
    through the test with each benchmark's null. Per size: the median p, the share that fires in a run of K tests,
    and the published order's top share among ``m + 1`` orders against the null's chance share ``w + (1 - w)/(m + 1)``
    (a preference graded over the orders, not all-or-nothing as the calibrated null has it, would show here first:
    the fewer the orders, the more a graded preference puts the published order on top).
    """
    rows: list[dict[str, Any]] = []
    for f in sorted(Path(study_dir).glob("*/*.json")):
        raw = json.loads(f.read_text())
        if "per_item" not in raw or "benchmark" not in raw:
            continue
        rec = null_study_record(raw)
        null = order_null_for(raw["benchmark"])
        w = float(null["preference"])
        for m in orders:
            rng = np.random.default_rng([seed, m, 2])
            # the test's own ranks (ties count against the published order)
            tops = [float(np.mean(_ranks(subsample_order(rec, len(rec["per_item"]), m, rng, replace=False)["per_item"])[0]
                                  == 0)) for _ in range(max(1, draws // 10))]
            for n in items:
                rng = np.random.default_rng([seed, n, m])
                sigs = [option_order_signal(subsample_order(rec, n, m, rng), null) for _ in range(draws)]
                rows.append({"model": raw["model"], "task": raw["benchmark"], "test": "option_order", "n": n,
                             "orders": m, "null": null["name"], "preference": w, "run_n": rec["n"],
                             "top_share": float(np.mean(tops)), "null_chance": w + (1 - w) / (m + 1),
                             **{f"K={k}": power(sigs, k) for k in tests}})
    return rows


def _read(p: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(p.read_text()))
    except (OSError, ValueError):
        return None


#: the grid of run sizes (tests corrected together) that the shipped table holds
SHIP_TESTS = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 500, 1000)
SHIP_ITEMS = (8, 12, 16, 24, 32, 40, 48)
SHIP_ORDERS = (2, 3, 4, 8)


def _fire_share(ps: np.ndarray, meets: np.ndarray, tests: int) -> float:
    return float(np.mean((np.minimum(ps * tests, 1.0) < FDR_Q) & meets))


def ship(controls: Sequence[Path], *, draws: int, seed: int) -> dict[str, Any]:
    """The shipped power table (``reporter/data/evidence_power.json``) from contamination controls.

    Per test and size, the share of draws that fire in a run of K tests, pooled over every contaminated
    model x task pair of the controls (``draws`` per pair), for each K of :data:`SHIP_TESTS`; ``by_control``
    gives each control's own share (they differ: how strongly a fine-tune shows varies from control to control).
    """
    pairs: list[tuple[str, str, str, Path]] = []
    meta = []
    for c in controls:
        ctl = json.loads((c / "control.json").read_text())
        m = ctl["meta"]
        meta.append({"name": c.name, **{k: m.get(k) for k in ("seed", "items", "tasks", "epochs", "lr")}})
        for mdir in sorted((c / "run" / "models").iterdir()):
            if "contaminated" in mdir.name:
                pairs += [(c.name, f"{c.name}/{mdir.name}", t, mdir / "tasks" / t) for t in m["tasks"]]

    def cell(test: str, n: int, m: int | None) -> dict[str, Any] | None:
        ps: dict[str, list[float]] = {}
        meets: dict[str, list[bool]] = {}
        for j, (ctl_name, _, task, tdir) in enumerate(pairs):
            rec = _read(tdir / ("option_order.json" if test == "option_order" else "split_reference.json"))
            if not rec or not (rec.get("per_item") if test == "option_order" else rec.get("pairs")):
                continue
            rng = np.random.default_rng([seed, n, m or 0, j])
            for _ in range(draws):
                s = (option_order_signal(subsample_order(rec, n, m or 0, rng), order_null_for(task))
                     if test == "option_order" else split_signal(subsample_split(rec, n, rng)))
                ps.setdefault(ctl_name, []).append(s["p_value"])
                meets.setdefault(ctl_name, []).append(bool(s["meets_effect"]))
        if not ps:  # no pair measured this test (HellaSwag has no other split)
            return None
        every_p = np.concatenate([np.asarray(v) for v in ps.values()])
        every_meets = np.concatenate([np.asarray(v) for v in meets.values()])
        out: dict[str, Any] = {"items": n, **({"orders": m} if m is not None else {}), "draws": int(every_p.size),
                               "power": [round(_fire_share(every_p, every_meets, k), 3) for k in SHIP_TESTS],
                               "by_control": {name: [round(_fire_share(np.asarray(ps[name]), np.asarray(meets[name]), k), 3)
                                                     for k in SHIP_TESTS] for name in ps}}
        return out

    table = {"option_order": [c for n in SHIP_ITEMS for m in SHIP_ORDERS if (c := cell("option_order", n, m))],
             "split_min_k": [c for n in SHIP_ITEMS if (c := cell("split_min_k", n, None))]}
    seeds = ", ".join(str(m["seed"]) for m in meta)
    return {"name": (f"positive-control power by size (benchmarks/evidence_power.py over contamination controls with "
                     f"seeds {seeds}: SmolLM2-135M-Instruct fine-tuned {meta[0]['epochs']} epochs on a seeded half of "
                     f"{meta[0]['items']} {', '.join(meta[0]['tasks'])} items, raw-text and chat formats; "
                     f"{draws} bootstrap samples of the scored items per contaminated pair)"),
            "short": (f"SmolLM2-135M-Instruct fine-tuned {meta[0]['epochs']} epochs on half of {meta[0]['items']} "
                      f"{', '.join(meta[0]['tasks'])} items; {len(controls)} controls, 2 formats"),
            "controls": meta, "pairs": [p for _, p, _, _ in pairs], "draws_per_pair": draws, "seed": seed,
            "fdr_q": FDR_Q, "tests": list(SHIP_TESTS), **table}


def ship_into(current: Mapping[str, Any], controls: Sequence[Path], *, task: str | None, draws: int,
              seed: int) -> dict[str, Any]:
    """The shipped file with the controls' table in it: the main table (``task`` None; ``by_task`` kept), or
    ``by_task[task]``, the table that ``task``'s tests are read against (the rest kept). Every control of a task's
    table must be fine-tuned on that task alone (``ValueError`` otherwise).
    """
    if task is None:
        return {**ship(controls, draws=draws, seed=seed), **({"by_task": current["by_task"]} if "by_task" in current else {})}
    for c in controls:
        tasks = json.loads((c / "control.json").read_text())["meta"]["tasks"]
        if list(tasks) != [task]:
            raise ValueError(f"{c}: a control fine-tuned on {', '.join(tasks)}, not on {task} alone")
    return {**current, "by_task": {**(current.get("by_task") or {}), task: ship(controls, draws=draws, seed=seed)}}


def compact_json(doc: Any) -> str:
    """JSON with one line per list of numbers (the shipped table stays readable in a diff).

    >>> print(compact_json({"a": [1, 2.5], "b": "x"}))
    {
     "a": [1, 2.5],
     "b": "x"
    }
    """
    import re

    text = json.dumps(doc, indent=1)
    return re.sub(r"\[\s*([-0-9.e,\s]+?)\s*\]", lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                  text)


def markdown(rows: Sequence[Mapping[str, Any]], tests: Sequence[int]) -> str:
    head = ["model", "task", "test", "items", "orders", "lines/item", "median p",
            *[f"fires, {k} tests" for k in tests], *[f"strong, {k} tests" for k in tests]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["task"], r["test"], str(r["n"]), str(r.get("orders", "")),
                 f"{r['lines_per_item']:.1f}" if "lines_per_item" in r else "",
                 f"{r[f'K={tests[0]}']['median_p']:.2g}",
                 *[f"{r[f'K={k}']['fires']:.2f}" for k in tests], *[f"{r[f'K={k}']['strong']:.2f}" for k in tests]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("control", type=Path, nargs="+", help="contamination controls' directories (their run/ is read)")
    ap.add_argument("--items", default="8,16,24,32", help="option-order items per task")
    ap.add_argument("--orders", default="2,3,4,8", help="other orders per item")
    ap.add_argument("--pairs", default="8,16,24,32", help="other-split pairs per task")
    ap.add_argument("--tests", default="3,48", help="tests in the run (Benjamini-Hochberg's K): one model x task, a demo")
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ship", action="store_true", help="write reporter/data/evidence_power.json from the controls")
    ap.add_argument("--ship-task", metavar="TASK",
                    help="write the controls' table into reporter/data/evidence_power.json as TASK's own (by_task), "
                         "keeping the rest; every control must be fine-tuned on TASK alone")
    ap.add_argument("--null-study", action="store_true",
                    help="the directories are null studies (option_order_null.py -o DIR --perms 23): the option-order "
                         "test on clean models at each size, against the null's chance share")
    ap.add_argument("--without-replacement", action="store_true",
                    help="draw distinct items (at most the control's own): the run itself at its own size")
    a = ap.parse_args(argv)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    if a.null_study:
        tests = ints(a.tests)
        rows = [r for c in a.control for r in null_rows(c, items=ints(a.items), orders=ints(a.orders), tests=tests,
                                                         draws=a.draws, seed=a.seed)]
        if a.json:
            print(json.dumps(rows, indent=1))
            return 0
        print("| model | task | items | orders | top share (all items) | null's chance share | median p | "
              + " | ".join(f"fires, {k} tests" for k in tests) + " |")
        print("|---|---|---|---|---|---|---|" + "---|" * len(tests))
        for r in rows:
            print(f"| {r['model']} | {r['task']} | {r['n']} | {r['orders']} | {r['top_share']:.3f} | "
                  f"{r['null_chance']:.3f} | {r[f'K={tests[0]}']['median_p']:.2g} | "
                  + " | ".join(f"{r[f'K={k}']['fires']:.3f}" for k in tests) + " |")
        return 0
    for c in a.control:
        if not (c / "run" / "models").is_dir() and not (c / "models").is_dir():
            print(f"evidence_power: {c}: no run/models directory (a contamination control's -o DIR)", file=sys.stderr)
            return 2
    if a.ship or a.ship_task:
        dest = Path(__file__).resolve().parents[1] / "reporter" / "data" / "evidence_power.json"
        try:
            doc = ship_into(json.loads(dest.read_text()), a.control, task=a.ship_task, draws=a.draws, seed=a.seed)
        except ValueError as e:
            print(f"evidence_power: {e}", file=sys.stderr)
            return 2
        dest.write_text(compact_json(doc) + "\n")
        print(f"wrote {dest}")
        return 0
    run = a.control[0] / "run" if (a.control[0] / "run" / "models").is_dir() else a.control[0]
    tests = ints(a.tests)
    rows = study(run, items=ints(a.items), orders=ints(a.orders), pairs=ints(a.pairs), tests=tests,
                 draws=a.draws, seed=a.seed, replace=not a.without_replacement)
    rng = np.random.default_rng(a.seed)
    cost = {m: expected_tree_lines(4, m, rng) for m in ints(a.orders)}
    if a.json:
        print(json.dumps({"rows": rows, "expected_lines_per_item_4_options": cost}, indent=1))
    else:
        print(markdown(rows, tests))
        print("\nexpected option lines per 4-option item (published + m other orders as a tree): "
              + ", ".join(f"m={m}: {v:.1f}" for m, v in cost.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
