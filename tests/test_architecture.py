"""The seams of the architecture: analyse and render without torch, the registry, the generated schema reference."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reporter import schema
from reporter.cli import main
from reporter.errors import UserError
from reporter.registry import Registry, did_you_mean, unknown_name

from .conftest import small_random

ROOT = Path(__file__).resolve().parents[1]

NO_TORCH = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Blocked())
from reporter.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
assert "torch" not in sys.modules and "transformers" not in sys.modules, "torch was imported"
sys.exit(code)
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    (root / "profile.yaml").write_text("lpp: {n_texts: 2, context: 40, min_tokens: 40}\nsmoke_texts: 1\n"
                                       "contamination: {verbatim_items: 2, reference_texts: 6}\n"
                                       "tasks:\n  - {name: arc_easy, limit: 3, max_new_tokens: 3}\n")
    (root / "models.yaml").write_text(small_random(
        f"profile: {root / 'profile.yaml'}\nmodels:\n"
        "  - {name: a, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}\n"
        "  - {name: b, source: random:gpt2, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}\n"))
    r = CliRunner().invoke(main, ["run", str(root / "models.yaml"), "-o", str(root / "out"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    return root / "out"


def test_analyse_and_render_run_where_importing_torch_fails(finished_run, tmp_path):
    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    before = json.loads((run / "results.json").read_text())
    (run / "results.json").unlink()
    for command in (["analyse", str(run)], ["render", str(run), "--format", "html,pdf"],
                    ["board", str(run), "-o", str(tmp_path / "site")]):
        r = subprocess.run([sys.executable, "-c", NO_TORCH, *command], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Traceback" not in r.stderr
    after = json.loads((run / "results.json").read_text())
    assert after["models"] == before["models"] and after["analysis"]["law"] == before["analysis"]["law"]
    assert (run / "card.html").stat().st_size > 100_000 and (run / "card.pdf").read_bytes()[:4] == b"%PDF"
    assert "<table id=\"leaderboard\">" in (tmp_path / "site" / "index.html").read_text()


def test_validate_and_a_bad_run_file_answer_without_torch_or_the_analyse_stage(tmp_path):
    """``reporter validate`` and ``reporter run`` on a file with a mistake answer in a moment: neither imports torch,
    transformers or SciPy (the analyse stage) before the file is checked (4.7 s and 6.1 s before they did not);
    nor do ``analyse`` and ``render`` before their run directory passes the gate."""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("profile: quick\nmodels:\n  - {name: a, source: 'random:llama'}\n")
    bad.write_text("models:\n  - {name: a, source: 'random:llama', dtype: f32}\n")
    no_scipy = NO_TORCH.replace('("torch", "transformers")', '("torch", "transformers", "scipy")')
    r = subprocess.run([sys.executable, "-c", no_scipy, "validate", str(good)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and f"{good}: OK (1 model, profile quick" in r.stdout, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-c", no_scipy, "run", str(bad), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{bad}: models[0].dtype: 'f32' is not valid" in r.stderr and not (tmp_path / "out").exists()
    for command in ("analyse", "render"):  # a directory that is not a run: the gate answers before SciPy loads
        r = subprocess.run([sys.executable, "-c", no_scipy, command, str(tmp_path / "nowhere")], capture_output=True,
                           text=True, cwd=ROOT)
        assert r.returncode == 2 and "no such run directory" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_blocker_really_blocks_torch():
    r = subprocess.run([sys.executable, "-c", NO_TORCH, "run", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0  # --help imports nothing heavy
    code = NO_TORCH.replace("from reporter.cli import main", "import torch")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and "torch is blocked in this test" in r.stderr


# --- the registry ------------------------------------------------------------------------------

def test_registry_registers_rejects_duplicates_and_suggests_names():
    reg = Registry[int]("widget")

    @reg.register("alpha")
    def _():
        return 1

    reg.add("beta", 2)
    reg.add("beta", 2)  # the very same entry again: fine (a module imported twice)
    with pytest.raises(ValueError, match="widget 'beta' is already registered"):
        reg.add("beta", 3)
    assert reg.names() == ["alpha", "beta"] and "beta" in reg and len(reg) == 2
    with pytest.raises(UserError, match=r"unknown widget 'alpah' \(did you mean 'alpha'\?\); available: alpha, beta"):
        reg.get("alpah")
    reg.remove("beta")
    assert reg.names() == ["alpha"]
    assert did_you_mean("zzz", ["alpha"]) == ""
    assert unknown_name("key", "nme", ("name", "source"), listing="valid keys") == \
        "unknown key 'nme' (did you mean 'name'?); valid keys: name, source"


def test_every_registry_name_lookup_uses_the_one_helper():
    from reporter.card.sections import SECTIONS
    from reporter.collect.collectors import COLLECTORS
    from reporter.models.adapters import ADAPTERS
    from reporter.scoring import SCORERS
    from reporter.tasks import TASKS

    for reg, wrong, right in ((TASKS, "gsm8", "gsm8k"), (SCORERS, "numerc", "numeric"), (ADAPTERS, "lama", "llama"),
                              (COLLECTORS, "lp", "lpp"), (SECTIONS, "sumary", "summary")):
        with pytest.raises(UserError, match=f"did you mean '{right}'"):
            reg.get(wrong)


# --- the schema ---------------------------------------------------------------------------------

def _docs_hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_docs_results_json_reference_is_generated_from_the_schema():
    import yaml

    hooks = _docs_hooks()
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "docs/hooks.py" in site["hooks"], "mkdocs.yml no longer runs docs/hooks.py: the reference would be empty"
    assert "reference/results-json.md" in str(site["nav"])
    page = (ROOT / "docs" / "reference" / "results-json.md").read_text()
    assert page.count(hooks.SCHEMA_MARK) == 1, "the results.json page lost its <!-- schema --> marker"
    assert "| key | type | required |" not in page, "the results.json page keeps a hand-made copy of the tables"
    built = hooks.on_page_markdown(page, page=None, config=None, files=None)
    block = re.search(r"<!-- schema:begin -->\n(.*?)<!-- schema:end -->", built, re.S)
    assert block, "docs/hooks.py did not put the schema tables into the results.json page"
    assert block.group(1) == schema.markdown(level=hooks.SCHEMA_LEVEL)
    assert [f"## `{td.__name__}`" for td in schema.DOCUMENTS] == re.findall(r"^## `\w+`", block.group(1), re.M)
    assert "#### `Results`" in schema.markdown()  # `python -m reporter.schema` keeps its own heading level
    # the architecture page's contracts are pyproject's, every one of them
    contracts = hooks.tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    arch = hooks.on_page_markdown((ROOT / "docs" / "architecture.md").read_text(), page=None, config=None, files=None)
    assert hooks.CONTRACTS_MARK not in arch
    assert all(f"**{c['name']}**" in arch for c in contracts) and len(contracts) >= 4


def test_schema_validates_real_results_and_names_the_bad_key(finished_run):
    res = json.loads((finished_run / "results.json").read_text())
    checked = schema.validate(res, schema.Results)
    assert checked["models"]["a"]["tasks"]["arc_easy"]["score"] == res["models"]["a"]["tasks"]["arc_easy"]["score"]
    summary = json.loads((finished_run / "models" / "a" / "tasks" / "arc_easy" / "summary.json").read_text())
    schema.validate(summary, schema.TaskSummary, document="summary.json")
    lpp = json.loads((finished_run / "models" / "a" / "lpp.json").read_text())
    schema.validate(lpp, schema.LPPProfile, document="lpp.json")
    res["models"]["a"]["tasks"]["arc_easy"]["calibration"]["ece"] = "low"
    with pytest.raises(UserError, match=r"results.json: models.a.tasks.arc_easy.calibration.ece: expected a number"):
        schema.validate(res, schema.Results)
    with pytest.raises(UserError, match=r"summary.json: n: missing"):
        schema.validate({k: v for k, v in summary.items() if k != "n"}, schema.TaskSummary, document="summary.json")
