"""The power behind "no test fires": the positive control's power at a run's own size (issue #35's power study).

``reporter/data/evidence_power.json`` (``benchmarks/evidence_power.py --ship``) holds, per test and size, the
share of the controls' bootstrap samples that fire in a run of K tests. :func:`power_at_size` must read it the
cautious way (the largest tabled size at most the run's, the smallest tabled K at least the run's), the
analysis must attach it to every measured option-order and other-split signal, and the card must state it
under "no test fires", or say why it cannot.
"""
from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from reporter.analyse.control_power import power_at_size, power_summary, power_table, why_not
from reporter.card.format import fmt_pct
from reporter.card.render import render

DATA = Path(__file__).parent / "data"


def _reference(test, items, n_tests, orders=None, task=None):
    """power_at_size by plain loops over the shipped file's cells (the task's own table where it has that test)."""
    tab = json.loads((Path(__file__).resolve().parents[1] / "reporter" / "data" / "evidence_power.json").read_text())
    for name, own in tab.get("by_task", {}).items():
        if name == task and own[test]:
            tab = own
    if test == "option_order" and orders is None:
        return None  # without the fewest orders an item had, no cell is known to be at most the run's
    if test == "split_min_k":
        orders = None
    k_index = None
    for i, k in enumerate(tab["tests"]):
        if k >= n_tests:
            k_index = i
            break
    if k_index is None:
        return None
    best = None
    for c in tab[test]:
        if c["items"] > items or (orders is not None and c["orders"] > orders):
            continue
        if best is None or (c["items"], c.get("orders", 0)) > (best["items"], best.get("orders", 0)):
            best = c
    return None if best is None else (best["power"][k_index], best["items"], best.get("orders"), tab["tests"][k_index])


def test_power_at_size_reads_the_table_cautiously():
    rng = np.random.default_rng(0)
    tab = power_table()
    assert tab["tests"] == sorted(tab["tests"]) and {c["items"] for c in tab["option_order"]} >= {8, 32}
    for _ in range(300):
        items, orders, k = int(rng.integers(1, 80)), int(rng.integers(1, 12)), int(rng.integers(1, 1500))
        task = [None, "arc_challenge", "hellaswag", "my-own-data"][int(rng.integers(4))]
        for test, o in (("option_order", orders), ("option_order", None), ("split_min_k", None),
                        ("split_min_k", orders)):
            got = power_at_size(test, items=items, n_tests=k, orders=o, task=task)
            ref = _reference(test, items, k, o, task)
            if ref is None:
                assert got is None, (test, items, o, k)
                continue
            assert (got["power"], got["table_items"], got.get("table_orders"), got["table_tests"]) == ref
            assert got["table_items"] <= items and got["table_tests"] >= k
            assert got["table_sha256"] == tab["sha256"] and got["items"] == items and got["n_tests"] == k
            lo, hi = got["power_range"]
            assert lo - 1e-3 <= got["power"] <= hi + 1e-3  # the pool is the controls' mean (each rounded to 1e-3)
    assert power_at_size("verbatim", items=40, n_tests=3) is None  # no subset structure: not in the table


def test_the_table_is_a_power_curve():
    """Per cell, power can only fall as more tests are corrected together (it is the share with p * K < 0.01),
    and every cell was drawn as often; in the main table and in every task's own."""
    for tab in (power_table(), *power_table()["by_task"].values()):
        for test in ("option_order", "split_min_k"):
            for c in tab[test]:
                assert len(c["power"]) == len(tab["tests"])
                assert all(0.0 <= a <= 1.0 for a in c["power"])
                assert all(a >= b for a, b in zip(c["power"], c["power"][1:])), c
                assert c["draws"] == tab["draws_per_pair"] * len(tab["pairs"])


def test_a_task_with_its_own_control_is_read_against_it(tmp_path):
    """HellaSwag's option-order test is read against the controls fine-tuned on HellaSwag items (``by_task``), every
    other task against the ARC-Challenge controls, and the card names the control of each line."""
    tab = power_table()
    own, main = tab["by_task"]["hellaswag"], tab
    assert all(c["tasks"] == ["hellaswag"] for c in own["controls"]) and "hellaswag" in own["short"]
    hs = power_at_size("option_order", items=48, orders=3, n_tests=3, task="hellaswag")
    arc = power_at_size("option_order", items=48, orders=3, n_tests=3, task="arc_challenge")
    assert hs["control"] == own["short"] and arc["control"] == main["short"] and hs["power"] != arc["power"]
    assert (hs["power"], hs["table_items"], hs["table_orders"], hs["table_tests"]) == _reference(
        "option_order", 48, 3, 3, "hellaswag")
    # HellaSwag's controls have no other split: a task's own table without a test leaves it to the main one
    assert not own["split_min_k"]
    assert power_at_size("split_min_k", items=32, n_tests=3, task="hellaswag")["control"] == main["short"]

    root = tmp_path / "run"
    shutil.copytree(DATA / "full", root)
    res = json.loads((root / "results.json").read_text())
    quiet = [r for r in res["analysis"]["contamination"] if r["severity"] == "none" and not r["baseline"]
             and r["signals"]["option_order"].get("measured")]
    assert len({r["task"] for r in quiet}) >= 2
    renamed = quiet[0]["task"]
    for r in quiet:
        if r["task"] == renamed:
            r["task"] = "hellaswag"
        s = r["signals"]["option_order"]
        s.update({"n": 48, "orders": 3})
        s["power_at_size"] = power_at_size("option_order", items=48, orders=3, n_tests=s["n_tests"], task=r["task"])
    (root / "results.json").write_text(json.dumps(res))
    text = _power_paragraph(render(root, formats=("html",))["html"].read_text())
    assert "How often each test caught a positive control (each line names its own)" in text
    assert f"(hellaswag; control: {own['short']}): " in text
    assert f"; control: {main['short']}): " in text


def _full_with_sizes(tmp_path, items, orders):
    root = tmp_path / "run"
    shutil.copytree(DATA / "full", root)
    res = json.loads((root / "results.json").read_text())
    for row in res["analysis"]["contamination"]:
        s = row["signals"].get("option_order")
        if isinstance(s, dict) and s.get("measured"):
            s.update({"n": items, "orders": orders})
            at = power_at_size("option_order", items=items, orders=orders, n_tests=s["n_tests"])
            s.pop("power_at_size", None)
            s.pop("power_reason", None)
            if at is not None:
                s["power_at_size"] = at
            else:
                s["power_reason"] = why_not("option_order", items=items, orders=orders, n_tests=s["n_tests"])
    (root / "results.json").write_text(json.dumps(res))
    return root, res


def _power_paragraph(page: str) -> str:
    m = re.search(r'<p class="note power-at-size">(.*?)</p>', page, re.S)
    assert m, "no power paragraph under 'no test fires'"
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", m.group(1))))


@pytest.mark.parametrize("items", [32, 44])
def test_the_card_states_the_power_behind_no_test_fires(tmp_path, items):
    """The share, the controls' range, and where the run's size or K falls between the table's rows, the row read."""
    root, res = _full_with_sizes(tmp_path, items, 8)
    text = _power_paragraph(render(root, formats=("html",))["html"].read_text())
    n_tests = next(r["signals"]["option_order"]["n_tests"] for r in res["analysis"]["contamination"]
                   if r["signals"]["option_order"].get("measured"))
    at = power_at_size("option_order", items=items, orders=8, n_tests=n_tests)
    quiet = sorted({r["task"] for r in res["analysis"]["contamination"] if r["severity"] == "none"
                    and not r["baseline"] and r["signals"]["option_order"].get("measured")})
    assert f"with the run's {n_tests} tests corrected together (a lower bound" in text
    lo, hi = at["power_range"]
    assert (f"option order at {items} items × 8 other orders ({', '.join(quiet)}): {fmt_pct(at['power'], 0)}% "
            f"({fmt_pct(lo, 0)}–{fmt_pct(hi, 0)}% across the controls), read at the table's {at['table_items']} items × 8 orders "
            f"and {at['table_tests']} tests.") in text  # 76 tests: read at the table's K = 100
    assert at["table_tests"] > n_tests and at["table_items"] == {32: 32, 44: 40}[items]
    assert ("no warning is not evidence of a clean model" in text) == (at["power"] < 0.9)
    rows = [r for r in res["analysis"]["contamination"]]
    assert [g["tasks"] for g in power_summary(rows)] == [quiet]  # the strong row's task counts only if quiet elsewhere


def test_below_the_table_the_card_says_why_instead_of_a_number(tmp_path):
    root, _ = _full_with_sizes(tmp_path, 6, 8)
    text = _power_paragraph(render(root, formats=("html",))["html"].read_text())
    assert "option order at 6 items × 8 other orders" in text
    assert "not stated, below the table's smallest size of 8 items" in text
    assert not re.search(r"\d%", text)


def test_an_analysis_written_before_the_table_gets_no_paragraph(tmp_path):
    """The fixture's stored analysis predates the table (no ``power_at_size``, no ``power_reason``), here with a
    measured other-split test of the default 32 pairs as well: nothing is made up, and nothing breaks."""
    root = tmp_path / "run"
    shutil.copytree(DATA / "full", root)
    res = json.loads((root / "results.json").read_text())
    row = next(r for r in res["analysis"]["contamination"] if r["severity"] == "none" and not r["baseline"]
               and r["signals"]["option_order"].get("measured"))
    row["signals"]["split_min_k"] = {"measured": True, "test": True, "fires": False, "n": 32, "n_tests": 76,
                                     "p_value": 0.4, "p_adjusted": 1.0, "effect": 0.0, "statistic": 200,
                                     "statistic_name": "Wilcoxon signed-rank W+"}
    (root / "results.json").write_text(json.dumps(res))
    page = render(root, formats=("html",))["html"].read_text()
    assert "power-at-size" not in page


@pytest.mark.parametrize("low_control", [0.92, 0.85])
def test_the_card_says_a_warning_was_likely_only_when_both_controls_say_so(tmp_path, low_control):
    """"Would very likely get a warning" needs the weaker control at 0.9 or more; otherwise the card says that no
    warning is not evidence of a clean model (a pooled 0.95 over a control at 0.85 is not enough)."""
    root, res = _full_with_sizes(tmp_path, 32, 8)
    for row in res["analysis"]["contamination"]:
        s = row["signals"].get("option_order")
        if isinstance(s, dict) and s.get("power_at_size"):
            s["power_at_size"].update({"power": 0.95, "power_range": [low_control, 0.98]})
    (root / "results.json").write_text(json.dumps(res))
    text = _power_paragraph(render(root, formats=("html",))["html"].read_text())
    assert "95% (" in text
    likely = "would very likely get a warning" in text
    assert likely == (low_control >= 0.9)
    assert ("no warning is not evidence of a clean model" in text) == (not likely)
