"""The published JSON Schema (reporter/data/*.schema.json, ``reporter schema``): generated from the document
types, shipped equal to what they generate, met by every results.json, compare.json and artifact the suite
makes, and checked by the analyse stage before it writes a results.json.
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from reporter.analyse import write_analysis, write_results
from reporter.analyse.compare import compare_runs
from reporter.analyse.numbers import json_ready
from reporter.cli import main
from reporter.errors import SchemaError
from reporter.schema import CompareDocument, Results, check_document, documents, json_schema, validate
from reporter.schema.published import DOCUMENTS, schema_text, shipped
from reporter.store.layout import LPP, SUMMARY, VALIDATION, RunDir

DATA = Path(__file__).parent / "data"
FIXTURES = sorted(DATA.glob("**/results.json"))
REGENERATE = ("regenerate the shipped schemas with "
              "`.venv/bin/python -c 'from reporter.schema.published import write_shipped; write_shipped()'`")


def schema_errors(doc, name="results"):
    """Every problem jsonschema finds, as (JSON path, message), from the schema the package ships."""
    v = jsonschema.Draft202012Validator(shipped(name))
    return [(list(e.absolute_path), e.message) for e in v.iter_errors(doc)]


@pytest.fixture(scope="module")
def run_dir(finished_run):
    """The suite's shared finished tiny run (three models, arc_easy and spc; made once per session): read only."""
    return Path(finished_run)


@pytest.fixture
def golden():
    return json.loads((DATA / "golden" / "results.json").read_text())


# --- the schema and the shipped files --------------------------------------------------------------------

@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_shipped_file_equals_the_generated_schema(name):
    path = Path(__file__).parents[1] / "reporter" / "data" / f"{name}.schema.json"
    assert path.read_text(encoding="utf-8") == schema_text(name), f"{path} is stale: {REGENERATE}"


@pytest.mark.parametrize("name", [*DOCUMENTS, "all"])
def test_every_schema_is_valid_draft_2020_12(name):
    jsonschema.Draft202012Validator.check_schema(json_schema(name))


def test_the_results_schema_defines_every_documented_type():
    defs = json_schema("results")["$defs"]
    assert {td.__name__ for td in documents.DOCUMENTS} <= set(defs)
    assert defs["TaskSummary"]["description"].startswith("``models/<slug>/tasks/<task>/summary.json``")
    assert defs["TaskSummary"]["additionalProperties"] is True  # plugin collectors add their own keys
    assert defs["ContaminationRow"]["properties"]["severity"] == {"enum": ["strong", "weak", "none"]}
    assert defs["RankRow"]["properties"]["score"]["type"] == "number"  # a required fraction: never null
    assert defs["FairRow"]["required"] == ["model", "score", "mui", "rank_raw", "rank_adjusted", "shift"]


def test_the_bundle_holds_each_document_under_its_own_id():
    bundle = json_schema("all")
    for name in DOCUMENTS:
        assert bundle["$defs"][name] == json_schema(name)
    registry_ref = {"$ref": "urn:reporter:schema:summary:v1", "$defs": bundle["$defs"]}
    with pytest.raises(jsonschema.ValidationError, match="'high' is not of type 'number'"):
        jsonschema.validate({"score": "high", "ci_low": 0, "ci_high": 1, "n": 1}, registry_ref)


# --- every document the suite makes validates -------------------------------------------------------------

@pytest.mark.parametrize("path", FIXTURES, ids=[str(p.relative_to(DATA)) for p in FIXTURES])
def test_committed_results_validate(path):
    doc = json.loads(path.read_text())
    assert schema_errors(doc) == []
    check_document(doc)  # the analyse stage's faster validator agrees
    validate(doc, Results)  # and so does the checker the card uses


def test_a_real_run_and_its_artifacts_validate(run_dir):
    assert schema_errors(json.loads(RunDir(run_dir).results.read_text())) == []
    seen = {name: 0 for name in ("summary", "lpp", "model", "smoke", "validation")}
    for mdir in sorted((run_dir / "models").iterdir()):
        for name, path in (("model", mdir / "model.json"), ("smoke", mdir / "smoke.json"), ("lpp", mdir / LPP)):
            if path.is_file():
                assert schema_errors(json.loads(path.read_text()), name) == [], path
                seen[name] += 1
        for tdir in sorted((mdir / "tasks").iterdir()):
            for name, path in (("summary", tdir / SUMMARY), ("validation", tdir / VALIDATION)):
                if path.is_file():
                    assert schema_errors(json.loads(path.read_text()), name) == [], path
                    seen[name] += 1
    assert seen["summary"] == 6 and seen["model"] == seen["smoke"] == 3 and seen["lpp"] >= 1, seen


def test_compare_json_validates(run_dir):
    doc = json.loads(json.dumps(json_ready(compare_runs(run_dir, run_dir))))  # as card.compare writes it
    assert doc["rows"] and doc["lpp"]
    assert schema_errors(doc, "compare") == []
    validate(doc, CompareDocument, document="compare.json")
    bad = copy.deepcopy(doc)
    bad["rows"][0]["status"] = "worse"
    assert schema_errors(bad, "compare") == [(["rows", 0, "status"],
                                              "'worse' is not one of ['regression', 'improvement', "
                                              "'no significant change']")]


def test_a_synthetic_run_with_every_analysis_validates(tmp_path):
    from tests.test_analyse import make_run, standard_models

    make_run(tmp_path, standard_models())
    write_results(tmp_path)
    analysis = write_analysis(tmp_path, n_resamples=200)
    assert analysis["contamination"] and analysis["fairness"]["available"] and analysis["diversity"]
    assert schema_errors(json.loads((tmp_path / "results.json").read_text())) == []


# --- what the schema rejects, and with which path ---------------------------------------------------------

def _first_task(doc):
    model = next(m for m, e in doc["models"].items() if e.get("tasks"))
    return model, next(iter(doc["models"][model]["tasks"]))


@pytest.mark.parametrize("mutate, where, message", [
    (lambda t: t.update(score="high"), "score", "'high' is not of type 'number'"),
    (lambda t: t.pop("n"), "n", "missing"),
    (lambda t: t.update(n=None), "n", "None is not of type 'integer'"),
    (lambda t: t.update(ci_high=1.5), "ci_high", "1.5 is greater than the maximum of 1.000000001"),
    (lambda t: t.update(mui_per_layer=[0.1, "x"]), "mui_per_layer[1]", "'x' is not of type 'number'"),
    (lambda t: t.update(calibration={"n": 4, "ece": 0.1}), "calibration.brier", "missing"),
    (lambda t: t.update(description=5), "description", "5 is not of type 'string', 'null'"),
    (lambda t: t.update(mui_settings={"rho": "high"}), "mui_settings.rho", "'high' is not of type 'number', 'null'"),
])
def test_a_bad_task_summary_is_rejected_with_its_path(golden, mutate, where, message):
    model, task = _first_task(golden)
    mutate(golden["models"][model]["tasks"][task])
    with pytest.raises(SchemaError) as e:
        check_document(golden)
    assert str(e.value) == f"results.json: models.{model}.tasks.{task}.{where}: {message}"
    assert schema_errors(golden)  # jsonschema alone, on the shipped file as another tool reads it
    with pytest.raises(SchemaError, match=rf"models\.{model}\.tasks\.{task}\.{where.split('[')[0]}"):
        validate(golden, Results)  # the checker the card uses rejects it too


def test_analysis_sections_are_checked_too(golden):
    golden["analysis"]["contamination"][0]["severity"] = "high"
    with pytest.raises(SchemaError, match=r"^results.json: analysis.contamination\[0\].severity: 'high' is not one"):
        check_document(golden)
    del golden["models"]
    with pytest.raises(SchemaError, match=r"^results.json: models: missing$"):
        check_document(golden)


def test_a_null_optional_key_is_missing_and_a_plugin_key_passes(golden):
    model, task = _first_task(golden)
    golden["models"][model]["tasks"][task].update(mui=None, calibration=None, my_plugin_metric={"any": [1, "x"]})
    check_document(golden)
    validate(golden, Results)


# --- the analyse stage checks before it writes -----------------------------------------------------------

def test_analyse_refuses_to_write_a_results_json_that_breaks_the_schema(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    results = RunDir(run).results
    before = results.read_bytes()
    slug = sorted(p.name for p in (run / "models").iterdir())[0]
    summary = run / "models" / slug / "tasks" / "arc_easy" / SUMMARY
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "score": "high"}))  # a plugin's mistake
    r = CliRunner().invoke(main, ["analyse", str(run)])
    assert r.exit_code == 2, r.output
    # the damaged file is named, not the results.json it would have broken (a review: nothing said which file)
    assert r.stderr.strip() == (f"error: {summary}: damaged (score: 'high' is not of type 'number'); rerun "
                                "`reporter run` on its run directory to recompute it")
    assert results.read_bytes() == before  # nothing written


# --- the command ---------------------------------------------------------------------------------------

def test_cli_prints_the_results_schema_by_default():
    r = CliRunner().invoke(main, ["schema"])
    assert r.exit_code == 0 and r.stdout == schema_text("results")
    assert json.loads(r.stdout)["$ref"] == "#/$defs/Results"


def test_cli_writes_a_schema_to_a_file(tmp_path):
    out = tmp_path / "compare.schema.json"
    r = CliRunner().invoke(main, ["schema", "compare", "-o", str(out)])
    assert r.exit_code == 0 and r.stdout == ""
    assert json.loads(out.read_text()) == json_schema("compare")


def test_cli_refuses_an_unknown_document_in_one_line():
    r = CliRunner().invoke(main, ["schema", "card"])
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: reporter schema: no document 'card'; choose one of results, compare, "
                                "summary, lpp, model, smoke, validation, all")


def test_cli_help_has_a_worked_example():
    r = CliRunner().invoke(main, ["schema", "--help"])
    assert r.exit_code == 0 and "  reporter schema compare -o compare.schema.json" in r.stdout
