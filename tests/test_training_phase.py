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
    # |dP| <= 0.5 is flat: where P's flat and up (or down) steps are told apart, on both sides
    assert phase_label(0.5, 0, mui_scale=10) == "stable" and phase_label(0.51, 0, mui_scale=10) == "evolving"
    assert phase_label(-0.5, 0, mui_scale=10) == "stable" and phase_label(-0.51, 0, mui_scale=10) == "coarsening"
    assert phase_label(-0.5, -1, mui_scale=10) == "evolving" and phase_label(-0.51, -1, mui_scale=10) == "coarsening"
    assert phase_label(0.5, -1, mui_scale=10) == "evolving"
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



def _outcomes(rng, n, p):
    return {f"q{i}": float(rng.random() < p) for i in range(n)}


def test_step_interval_matches_a_plain_loop_stratified_paired_bootstrap():
    """The same draws (one seeded (R, n_t) integer draw per task, in task order), differences summed one resample
    at a time in float64 Python, then the 2.5th and 97.5th percentiles of the task-averaged change."""
    import numpy as np

    from reporter.analyse.training import step_interval

    rng = np.random.default_rng(5)
    a = {"t1": _outcomes(rng, 13, 0.3), "t2": _outcomes(rng, 7, 0.5)}
    b = {"t1": _outcomes(rng, 13, 0.6), "t2": {**_outcomes(rng, 7, 0.5), "extra": 1.0}}  # "extra": not shared
    got = step_interval(a, b, ["t1", "t2"], seed=11, n_resamples=300)
    draw = np.random.default_rng(11)
    totals = [0.0] * 300
    for t in ("t1", "t2"):
        ids = sorted(set(a[t]) & set(b[t]))
        d = [100.0 * (b[t][i] - a[t][i]) for i in ids]
        idx = draw.integers(0, len(d), size=(300, len(d)))
        for r in range(300):
            totals[r] += sum(d[j] for j in idx[r]) / len(d)
    totals = [v / 2 for v in totals]
    assert got == pytest.approx(tuple(np.percentile(totals, [2.5, 97.5])), abs=1e-9)
    assert step_interval(a, b, ["t1", "missing"], seed=0) is None


def test_a_score_change_within_the_items_noise_counts_as_flat():
    """The same point estimates give different phases: with 10 items a 10-point drop is noise (the step reads as
    P flat & MUI down = evolving), with 400 items a 10-point drop is real (P down & MUI down = coarsening)."""
    def series(n, drop):
        items = {"a": {"t": {f"q{i}": 1.0 if i < n // 2 else 0.0 for i in range(n)}},
                 "b": {"t": {f"q{i}": 1.0 if i < n // 2 - drop else 0.0 for i in range(n)}}}
        pts = [{"label": "a", "checkpoint": 1, "P": 50.0, "MUI": 8.0},
               {"label": "b", "checkpoint": 2, "P": 100.0 * (n // 2 - drop) / n, "MUI": 6.0}]
        return training_phases(pts, items=items, tasks=["t"], seed=0)

    small, large = series(10, 1), series(400, 40)
    assert small["steps"][0]["dP"] == pytest.approx(-10) == large["steps"][0]["dP"]
    assert small["steps"][0]["dP_within_noise"] and small["steps"][0]["phase"] == "evolving"
    assert not large["steps"][0]["dP_within_noise"] and large["steps"][0]["phase"] == "coarsening"
    assert large["steps"][0]["dP_ci"][1] < 0 and "1 of 1 score changes within the items' noise" in small["summary"]
    assert small["model_series"][1]["dP_ci"] == [v / 100 for v in small["steps"][0]["dP_ci"]]
    assert "counts as flat too" in PHASE_RULE
    # without item outcomes (results from before, or hand-built points) the rule is the tolerance alone
    bare = training_phases([{"label": "a", "checkpoint": 1, "P": 50.0, "MUI": 8.0},
                            {"label": "b", "checkpoint": 2, "P": 40.0, "MUI": 6.0}])
    assert bare["steps"][0]["phase"] == "coarsening" and "dP_ci" not in bare["steps"][0]
