"""The analyse stage's typed results: what it returns matches its TypedDicts, and a wrong type fails at analyse time.

mypy checks the analyse functions against their return types; these tests check the two places mypy cannot
see (what ``json_ready`` returns, and the rows a ``cast`` vouches for), and the boundary: the analysis is
checked against :class:`reporter.schema.Analysis` before :func:`reporter.analyse.analyse` returns it, so a
wrong key fails there, naming its path, not when the card renders.
"""
from __future__ import annotations

import numpy as np
import pytest

from reporter.analyse import analyse, evidence_rows, law_points, write_analysis
from reporter.analyse.advice import AdviceResult, advise
from reporter.analyse.analysis import AnalysisDoc, CoreSetSection, LawSection
from reporter.analyse.compare import CompareDocument, ComparisonRow, LPPDelta, compare_runs
from reporter.analyse.contamination import ContaminationVerdict, SignalResult
from reporter.analyse.coreset import Reproduction, ReproductionRow
from reporter.analyse.diversity import ModelDiversity, OverlapMatrices, SaturationCurve, TaskCoreSet
from reporter.analyse.fairness import AdjustedRow, FairBlock, FairnessResult
from reporter.analyse.law import FitDescription
from reporter.analyse.leaderboard import PowerAdvice, PowerRow, ReferenceRow
from reporter.analyse.results import PairRow, ResultsDocument, RunBlock, build_results
from reporter.errors import SchemaError
from reporter.schema import Advice
from reporter.store.layout import RunDir
from tests.test_analyse import make_run, standard_models


def keys(td) -> set[str]:
    return set(td.__required_keys__ | td.__optional_keys__)


def assert_keys(value: dict, td, where: str) -> None:
    """Every key of ``value`` is one the TypedDict ``td`` declares (and every required one is there)."""
    extra = set(value) - keys(td)
    assert not extra, f"{where}: keys {sorted(extra)} are not in {td.__name__}"
    missing = set(td.__required_keys__) - set(value)
    assert not missing, f"{where}: {td.__name__} requires {sorted(missing)}"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("typed-run")
    make_run(root, standard_models(), results=True)
    return root


def test_analyse_returns_what_its_types_declare(run):
    doc = analyse(run, n_resamples=200)
    assert_keys(doc, AnalysisDoc, "analysis")
    law = doc["law"]
    assert_keys(law, LawSection, "law")
    for where, fit in [("law.pooled", law["pooled"]), ("law.per_model_average", law["per_model_average"]),
                       *((f"law.per_task.{t}", f) for t, f in law["per_task"].items())]:
        assert_keys(fit, FitDescription, where)
    fair = doc["fairness"]
    assert_keys(fair, FairnessResult, "fairness")
    assert fair["available"] and fair["per_model"]  # the rows below are checked, not skipped
    for row in fair["per_model"]:
        assert_keys(row, AdjustedRow, "fairness.per_model[]")
    for t, blk in fair["per_task"].items():
        assert_keys(blk, FairBlock, f"fairness.per_task.{t}")
    assert doc["contamination"]
    for row in doc["contamination"]:
        assert_keys(row, ContaminationVerdict, "contamination[]")
        assert row["severity"] in ("strong", "weak", "none")
        for name, sig in row["signals"].items():
            assert_keys(sig, SignalResult, f"contamination[].signals.{name}")
    for ref in doc["references"]:
        assert_keys(ref, ReferenceRow, "references[]")
    assert doc["power"] is not None
    assert_keys(doc["power"], PowerAdvice, "power")
    for row in doc["power"]["per_task"]:
        assert_keys(row, PowerRow, "power.per_task[]")
    assert doc["diversity"]
    for name, d in doc["diversity"].items():
        assert_keys(d, ModelDiversity, f"diversity.{name}")
        assert_keys(d["overlap"], OverlapMatrices, f"diversity.{name}.overlap")
        for t, c in d["core_sets"].items():
            assert_keys(c, TaskCoreSet, f"diversity.{name}.core_sets.{t}")
            assert "items" in c and "item_indices" not in c  # positions were mapped to item ids
        for t, c in d["saturation"].items():
            assert_keys(c, SaturationCurve, f"diversity.{name}.saturation.{t}")
        for a in d["advice"]:
            assert_keys(a, Advice, f"diversity.{name}.advice[]")
    assert doc["coreset"] is not None
    assert_keys(doc["coreset"], CoreSetSection, "coreset")
    assert_keys(doc["coreset"]["reproduction"], Reproduction, "coreset.reproduction")
    for t, r in doc["coreset"]["reproduction"]["per_task"].items():
        for m, row in r["per_model"].items():
            assert_keys(row, ReproductionRow, f"coreset.reproduction.per_task.{t}.per_model.{m}")


def test_results_document_matches_its_type(run):
    res = build_results(run)
    assert_keys(res, ResultsDocument, "results")
    assert_keys(res["run"], RunBlock, "run")
    assert res["comparisons"]
    for c in res["comparisons"]:
        assert_keys(c, PairRow, "comparisons[]")
        assert c["family"] == len(res["comparisons"])


def test_advice_matches_its_type():
    rng = np.random.default_rng(0)
    a = [rng.choice(12, 5, replace=False) for _ in range(30)]
    out = advise("m", {"A": a, "A copy": [s.copy() for s in a]}, seed=0)
    assert_keys(out, AdviceResult, "advise")
    assert [x["action"] for x in out["advice"]] == ["drop"]
    for x in out["advice"]:
        assert_keys(x, Advice, "advice[]")


def test_compare_document_matches_its_type(run):
    write_analysis(run, n_resamples=200)
    doc = compare_runs(run, run)
    assert_keys(doc, CompareDocument, "compare")
    assert doc["rows"]
    for row in doc["rows"]:
        assert_keys(row, ComparisonRow, "rows[]")
        assert row["status"] == "no significant change"
    for row in doc["lpp"]:
        assert_keys(row, LPPDelta, "lpp[]")


def test_a_wrong_type_from_analyse_fails_at_analyse_time_with_its_key_path(run, monkeypatch):
    """A severity analyse does not know is refused by analyse itself, naming where it is; results.json is kept."""
    before = RunDir(run).results.read_bytes()
    assess = evidence_rows.assess

    def wrong(model, task, signals):
        row = assess(model, task, signals)
        row["severity"] = "high"  # what a typo in a rule would produce
        return row

    monkeypatch.setattr(evidence_rows, "assess", wrong)
    with pytest.raises(SchemaError, match=r"analysis\.contamination\[0\]\.severity: 'high' is not one of"):
        analyse(run, n_resamples=200)
    with pytest.raises(SchemaError, match=r"analysis\.contamination\[0\]\.severity"):
        write_analysis(run, n_resamples=200)
    assert RunDir(run).results.read_bytes() == before  # nothing half-checked was written


def test_a_wrong_number_type_is_caught_too(run, monkeypatch):
    """A string where the schema wants a number: the path names the fairness field."""
    fairness = law_points.fairness

    def wrong(*args, **kwargs):
        out = fairness(*args, **kwargs)
        out["available"] = "yes"
        return out

    monkeypatch.setattr(law_points, "fairness", wrong)
    with pytest.raises(SchemaError, match=r"analysis\.fairness\.available: expected true or false, got str"):
        analyse(run, n_resamples=200)
