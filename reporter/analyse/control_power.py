"""How much "no test fires" can say: a contamination test's positive-control power at a run's own size.

The positive control (``benchmarks/contamination_control.py``) measures each test at the control's size
(60 items, every usable one scored). A run scores fewer (``contamination.order_items``, ``split_items``) and
corrects more tests together, and both cost power. ``benchmarks/evidence_power.py --ship`` draws bootstrap
samples of the controls' scored items at a grid of sizes, runs each through the run's own signal function,
and writes ``reporter/data/evidence_power.json``: per test and size, the share of samples that fire in a run
of K tests, pooled and per control (Benjamini-Hochberg's adjusted p of any of a run's p-values is at most
p * K, so the share is a lower bound). :func:`power_at_size` reads it at a run's size, rounding every
coordinate the cautious way: the largest tabled size at most the run's, the fewest other orders any item
had, and the smallest tabled K at least the run's. The file's main table comes from controls fine-tuned on
ARC-Challenge; ``by_task`` holds tables from controls fine-tuned on another benchmark's items
(``evidence_power.py --ship-task TASK``), which that task's tests are read against (``control`` names the one).

>>> p = power_at_size("option_order", items=44, orders=8, n_tests=4)
>>> (p["table_items"], p["table_orders"], p["table_tests"]), 0.0 <= p["power"] <= 1.0
((40, 8, 5), True)
>>> power_at_size("option_order", items=5, orders=8, n_tests=4) is None  # below the table: not stated
True
"""
from __future__ import annotations

import bisect
import hashlib
import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

from ..schema import PowerAtSize

__all__ = ["POWER_TESTS", "power_at_size", "power_summary", "power_table", "table_for", "why_not"]

#: the tests the table holds (verbatim and the law residual have no subset structure to draw from)
POWER_TESTS = ("option_order", "split_min_k")
#: the power, in the weaker control, from which the card says such a model "would very likely get a warning"
SURE = 0.9


@lru_cache(maxsize=1)
def power_table() -> dict[str, Any]:
    """``reporter/data/evidence_power.json`` with its content hash (``sha256``)."""
    raw = files("reporter.data").joinpath("evidence_power.json").read_bytes()
    return {**json.loads(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def table_for(test: str, task: str | None = None) -> dict[str, Any]:
    """The table ``test`` on ``task`` is read against: the task's own (``by_task``) where it holds that test,
    else the main one.

    >>> table_for("option_order", "hellaswag")["short"].count("hellaswag"), "arc_challenge" in table_for("option_order")["short"]
    (1, True)
    >>> table_for("option_order", "my-own-data") is table_for("option_order")
    True
    """
    tab = power_table()
    own = (tab.get("by_task") or {}).get(task) if task else None
    return own if own and own.get(test) else tab


def power_at_size(test: str, *, items: int, n_tests: int, orders: int | None = None,
                  task: str | None = None) -> PowerAtSize | None:
    """The share of the positive control's samples of this size that fire in a run of ``n_tests`` tests.

    ``items``: the items (option order) or pairs (other split) the run's test scored; ``orders``: the fewest
    other orders any of its items was scored in (option order only; ignored for the other split); ``task``: the
    run's task, whose own control is used where the file has one (:func:`table_for`). None where
    the table cannot say (:func:`why_not` says why): a test it does not hold, an option-order test without
    ``orders``, fewer items or orders than its smallest size, or more tests than its largest K.
    """
    if why_not(test, items=items, n_tests=n_tests, orders=orders, task=task) is not None:
        return None
    tab = table_for(test, task)
    ks = list(tab["tests"])
    j = bisect.bisect_left(ks, max(int(n_tests), 1))
    by_orders = test == "option_order"
    cells = [c for c in tab[test] if c["items"] <= items and (not by_orders or c["orders"] <= int(orders or 0))]
    cell = max(cells, key=lambda c: (c["items"], c.get("orders", 0)))
    out: PowerAtSize = {"power": float(cell["power"][j]), "items": int(items), "n_tests": int(n_tests),
                        "table_items": int(cell["items"]), "table_tests": int(ks[j]), "draws": int(cell["draws"]),
                        "power_range": [float(min(v[j] for v in cell["by_control"].values())),
                                        float(max(v[j] for v in cell["by_control"].values()))],
                        "source": str(tab["name"]), "control": str(tab["short"]),
                        "table_sha256": str(power_table()["sha256"])}
    if by_orders:
        out["orders"] = int(orders or 0)
        out["table_orders"] = int(cell["orders"])
    return out


def why_not(test: str, *, items: int, n_tests: int, orders: int | None = None, task: str | None = None) -> str | None:
    """Why :func:`power_at_size` cannot state a power at this size, or None when it can.

    >>> why_not("option_order", items=6, n_tests=3, orders=8)
    "below the table's smallest size of 8 items"
    """
    if test not in POWER_TESTS:
        return f"the table holds no {test} test"
    tab = table_for(test, task)
    if n_tests > max(tab["tests"]):
        return f"the run corrects more tests ({n_tests}) than the table holds ({max(tab['tests'])})"
    low = min(c["items"] for c in tab[test])
    if items < low:
        return f"below the table's smallest size of {low} {'items' if test == 'option_order' else 'pairs'}"
    if test == "option_order":
        fewest = min(c["orders"] for c in tab[test])
        if orders is None:
            return "the test did not record how many orders its items were scored in"
        if orders < fewest:
            return f"an item was scored in {orders} other order(s), below the table's smallest {fewest}"
    return None


def power_summary(rows: list[Any]) -> list[dict[str, Any]]:
    """The power behind each "no test fires" of a run, grouped by size: one entry per test x size x K.

    ``rows``: the analysis' contamination rows. Only rows of trained models with no warning count; each
    entry has ``test``, ``items``, ``orders`` (option order), ``n_tests``, ``power`` (None below the table,
    ``reason`` then says why), ``low`` (under :data:`SURE` in the weaker control, or not stated), ``control`` (the
    positive control it was read against, :func:`table_for`) and the ``tasks`` it covers.

    >>> sig = {"measured": True, "test": True, "n": 32, "orders": 8, "n_tests": 3}
    >>> sig["power_at_size"] = power_at_size("option_order", items=32, orders=8, n_tests=3)
    >>> rows = [{"model": "m", "task": "arc_challenge", "severity": "none", "measured": True, "baseline": False,
    ...          "signals": {"option_order": sig}}]
    >>> [(g["test"], g["items"], g["orders"], g["tasks"]) for g in power_summary(rows)]
    [('option_order', 32, 8, ['arc_challenge'])]
    """
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        if row.get("baseline") or row.get("severity") != "none" or row.get("measured") is False:
            continue
        for test in POWER_TESTS:
            s = (row.get("signals") or {}).get(test)
            if not isinstance(s, dict) or not s.get("measured") or not s.get("test"):
                continue
            at, reason = s.get("power_at_size"), s.get("power_reason")
            if at is None and reason is None:
                continue  # an analysis written before the table: nothing to say
            control = at.get("control") if at else None
            key = (test, int(s.get("n") or 0), s.get("orders") if test == "option_order" else None,
                   int(s.get("n_tests") or 0), control or "")
            g = groups.setdefault(key, {
                "test": test, "items": key[1], "orders": key[2], "n_tests": key[3], "control": control,
                "power": at["power"] if at else None, "power_range": at.get("power_range") if at else None,
                "table_items": at["table_items"] if at else None,
                "table_orders": at.get("table_orders") if at else None, "table_tests": at["table_tests"] if at else None,
                "reason": reason, "tasks": []})
            # "low": under SURE in the weaker control (or not stated), so no warning does not clear the model
            g["low"] = g["power"] is None or min(g["power_range"] or [g["power"]]) < SURE
            if row["task"] not in g["tasks"]:
                g["tasks"].append(row["task"])
    return sorted(groups.values(), key=lambda g: (POWER_TESTS.index(g["test"]), -g["items"], -(g["orders"] or 0)))
