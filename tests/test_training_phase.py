"""Training-phase labels along checkpoints."""
from __future__ import annotations

import pytest

from reporter.analyse.training import PHASE_RULE, phase_label, training_phases


@pytest.mark.parametrize("dp,dm,label", [
    (5, -1, "evolving"), (5, 1, "accumulating"), (-5, -1, "coarsening"), (-5, 1, "collapsing"),
    (0.2, 0.01, "stable"), (5, 0.05, "evolving"), (0.3, -1, "evolving"), (0.3, 1, "accumulating"),
    (-5, 0.05, "coarsening"),
])
def test_phase_table(dp, dm, label):
    assert phase_label(dp, dm, mui_scale=10.0) == label  # MUI tolerance = 1% of 10 = 0.1


def test_tolerances():
    assert phase_label(0.5, -1, mui_scale=10) == "evolving"  # |dP| <= 0.5 is flat
    assert phase_label(0.51, 1, mui_scale=10) == "accumulating"
    assert phase_label(-3, 0.1, mui_scale=10) == "coarsening"  # |dMUI| <= 0.1 is flat
    assert phase_label(-3, 0.11, mui_scale=10) == "collapsing"
    assert phase_label(-3, 0.11, mui_scale=10, tol_mui_rel=0.05) == "coarsening"


def test_series_order_steps_and_collapse():
    pts = [{"label": "c3", "checkpoint": 3e3, "P": 25, "MUI": 7},
           {"label": "c1", "checkpoint": 1e3, "P": 20, "MUI": 8},
           {"label": "c2", "checkpoint": 2e3, "P": 30, "MUI": 6},
           {"label": "c4", "checkpoint": 4e3, "P": 40, "MUI": 9}]
    per_task = {"t": [{"label": p["label"], "checkpoint": p["checkpoint"], "P": p["P"], "MUI": p["MUI"]} for p in pts]}
    r = training_phases(pts, per_task)
    assert [s["label"] for s in r["series"]] == ["c1", "c2", "c3", "c4"]
    assert [s["phase"] for s in r["steps"]] == ["evolving", "collapsing", "accumulating"]
    assert r["steps"][0]["dP"] == 10 and r["steps"][0]["dMUI"] == -2
    assert r["collapse"] and r["collapse_steps"] == ["c2 -> c3"]
    assert r["per_task"]["t"]["collapse"]
    assert "Collapse" in r["summary"] and r["rule"] == PHASE_RULE


def test_no_series():
    assert training_phases([]) is None
    assert training_phases([{"label": "a", "checkpoint": 1, "P": 1, "MUI": 1}]) is None
    r = training_phases([{"label": "b", "checkpoint": 1, "P": 25, "MUI": 3},
                         {"label": "a", "checkpoint": 1, "P": 20, "MUI": 4}])
    assert r["notes"] and [s["label"] for s in r["series"]] == ["a", "b"] and not r["collapse"]
    assert "No collapse" in r["summary"]

