"""Issue #32, item 5: a chart or table with nothing to show collapses to one line saying why, in card.html,
card.pdf and card.md alike; with data, the same element is drawn.

Collapsed: tests/data/run2-analysed (one trained model after `reporter analyse`: no law fit anywhere, no
law-adjusted ranking, no advice, no contamination test could run, no checkpoint series). Shown:
tests/data/full (law fits, a checkpoint series, a contamination warning), with one advice added.
"""
from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reporter.card.data import build_card, empty_elements
from reporter.card.format import md_escape
from reporter.card.render import render

DATA = Path(__file__).parent / "data"


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _outputs(root: Path, pdf: bool = True) -> dict[str, str]:
    paths = render(root, formats=("html", "pdf", "md") if pdf else ("html", "md"))
    html = paths["html"].read_text()
    visible = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.S)
    visible = html_lib.unescape(re.sub(r"<[^>]+>", " ", visible))
    pdf = subprocess.run(["pdftotext", str(paths["pdf"]), "-"], check=True, capture_output=True,
                         text=True).stdout if pdf else ""
    return {"html": html, "visible": _flat(visible), "pdf": _flat(pdf), "md": paths["md"].read_text(),
            "empty": build_card(json.loads((root / "results.json").read_text()),
                                json.loads((root / "manifest.json").read_text()))["empty"]}


@pytest.fixture(scope="module")
def collapsed(tmp_path_factory):
    root = tmp_path_factory.mktemp("collapsed") / "run"
    shutil.copytree(DATA / "run2-analysed", root)
    return _outputs(root)


@pytest.fixture(scope="module")
def shown(tmp_path_factory):
    root = tmp_path_factory.mktemp("shown") / "run"
    shutil.copytree(DATA / "full", root)
    res = json.loads((root / "results.json").read_text())
    model = next(iter(res["analysis"]["diversity"]))
    res["analysis"]["diversity"][model]["advice"] = [{
        "action": "drop", "task": "arc_easy", "text": "drop arc_easy: its key neurons are covered by mmlu",
        "evidence": "overlap 0.93", "uncertainty": "one seed"}]
    (root / "results.json").write_text(json.dumps(res))
    return _outputs(root, pdf=False)  # the same templates as the PDF; its 23 pages would double the time


def _line_everywhere(out: dict[str, str], key: str, in_md: bool = True) -> str:
    line = out["empty"][key]
    assert line in out["visible"], (key, "html")
    assert _flat(line) in out["pdf"], (key, "pdf")
    if in_md:
        assert md_escape(line) in out["md"], (key, "md")
    return line


@pytest.mark.browser
def test_per_task_law_grid_collapses_to_its_reasons(collapsed):
    line = _line_everywhere(collapsed, "law_per_task")
    assert "arc_easy, boolq: 1 usable point (P > 0); the law needs at least 3" in line
    assert "gsm8k, humaneval: 0 usable points (P > 0)" in line
    assert 'data-chart="law_per_task"' not in collapsed["html"] and '"law_per_task"' not in collapsed["html"]
    assert "Utility Law per task" not in collapsed["pdf"] and "each panel: that task's fit" not in collapsed["pdf"]


@pytest.mark.browser
def test_law_fit_table_collapses_when_nothing_fits(collapsed):
    line = _line_everywhere(collapsed, "law_fits")
    assert "pooled: the points come from 1 model with P > 0; the law compares models and needs at least 3" in line
    for out in (collapsed["visible"], collapsed["pdf"]):
        assert "per-model average (the paper's fit)" not in out and "slope b, 95% CI" not in out
    # the scatter has points, so it stays, without a fit line it cannot have
    assert 'data-chart="law_pooled"' in collapsed["html"] and "black line: the pooled fit" not in collapsed["pdf"]


@pytest.mark.browser
def test_leaderboard_drops_its_empty_law_columns(collapsed):
    line = _line_everywhere(collapsed, "law_adjusted")
    assert "1 model was compared; the law needs at least 3" in line
    assert "Law rank" not in collapsed["visible"] and "Law rank" not in collapsed["pdf"]
    header = next(row for row in collapsed["md"].splitlines() if row.startswith("| Rank"))
    assert "Law-adj." not in header and header.count("|") == 7


@pytest.mark.browser
def test_advice_contamination_and_training_collapse(collapsed):
    assert _line_everywhere(collapsed, "advice") == ("No dataset-diversity advice for smol: the evidence in this run "
                                                     "cannot support any.")
    assert "<h3>Advice</h3>" not in collapsed["html"] and "No advice for smol" not in collapsed["visible"]
    line = _line_everywhere(collapsed, "contamination")
    assert "no verbatim-completion check was run" in line  # the analysis's own reasons
    assert "carry a contamination warning" not in collapsed["visible"]
    assert "Contamination evidence per item" not in collapsed["pdf"]
    line = _line_everywhere(collapsed, "training")
    assert 'No model entry sets "checkpoint:"' in line
    assert "Checkpoint (training step)" not in collapsed["pdf"] and 'data-chart="training"' not in collapsed["html"]
    assert "## Not shown in this run" in collapsed["md"]


def test_elements_with_data_are_drawn(shown):
    assert not {"law_fits", "law_per_task", "law_pooled", "law_adjusted", "advice", "training",
                "contamination"} & set(shown["empty"])
    for chart in ("law_per_task", "law_pooled", "training", "contamination_items"):
        assert f'data-chart="{chart}"' in shown["html"], chart
    for text in ("per-model average (the paper's fit)", "slope b, 95% CI", "Law rank", "Advice",
                 "drop arc_easy: its key neurons are covered by mmlu", "ΔMUI", "carry a contamination warning",
                 "black line: the pooled fit"):
        assert text in shown["visible"], text
    assert "Law-adj." in next(row for row in shown["md"].splitlines() if row.startswith("| Rank"))
    assert "Not shown in this run" not in shown["md"] and "No dataset-diversity advice" not in shown["visible"]


def _model(name: str, checkpoint=None, reference=False) -> dict:
    return {"name": name, "reference": reference, "status": "ok", "meta": {"checkpoint": checkpoint},
            "tasks": {"t": {"mui": 0.2}}, "fair": None}


def test_reasons_come_from_the_analysis():
    law = {"pooled": {"slope": -0.1, "intercept": 1, "r2": 0.5, "n": 4},
           "per_task": {"a": {"reason": "2 usable points"}, "b": {"reason": "1 usable point"},
                        "c": {"reason": "2 usable points"}}}
    card = {"models": [_model("x", 1000), _model("y"), _model("base", 5, reference=True)],
            "analysis": {"law": law, "fairness": {"reason": "the law's slope CI includes 0"},
                         "diversity": {"x": {"advice": [], "withheld": ["fewer than 20 items"]},
                                       "y": {"advice": [], "withheld": ["fewer than 20 items"]}},
                         "contamination": [{"model": "base", "task": "t", "baseline": True, "measured": False}]}}
    out = empty_elements(card)
    assert "law_fits" not in out and "law_pooled" not in out  # the pooled fit exists
    assert out["law_per_task"] == "No per-task fit: a, c: 2 usable points. b: 1 usable point."
    assert out["law_adjusted"] == "Law-adjusted score and law rank: not available: the law's slope CI includes 0."
    assert out["advice"] == "No dataset-diversity advice for any model (x and y): fewer than 20 items."
    assert out["contamination"].startswith("Contamination: only untrained baselines were checked")
    # a reference model's checkpoint is no series: only x counts
    assert "Only x sets \"checkpoint:\"; a series needs at least 2 checkpoints" in out["training"]
    card["models"][1]["meta"]["checkpoint"] = 2000
    assert "training" not in empty_elements(card)  # two checkpoints: the analysis, not the card, decides
