"""Plugins from installed packages: a real package, built and pip-installed here, extends a real run.

The package ``reporter-toy`` declares, through entry points only, a collector (the mean L2 norm of
each layer's output, with a ``scale`` setting read from the profile's ``plugins:``), a card section
that prints those norms, a task (``toy_sums``, six sums) and a model source (``toy:llama``, a tiny
random Llama). One ``reporter run`` in a subprocess, with the package on ``PYTHONPATH`` and nothing
imported by hand, must show all of them in ``summary.json``, ``results.json`` and the card. A second
package, ``reporter-broken``, has three broken entry points (an import error, an object of the wrong
type, a name taken by a built-in task): each is one warning line naming the package, and the same
run succeeds without them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOY_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "reporter-toy"
version = "0.1.0"

[project.entry-points."reporter.collectors"]
toy_layer_norm = "reporter_toy.collector:LayerNormPlugin"

[project.entry-points."reporter.sections"]
toy_norms = "reporter_toy.section:SECTION"

[project.entry-points."reporter.tasks"]
toy_sums = "reporter_toy.task:toy_sums"

[project.entry-points."reporter.sources"]
toy = "reporter_toy.source:SOURCE"

[project.entry-points."reporter.evidence"]
toy_question_tokens = "reporter_toy.evidence:QuestionTokens"

[tool.setuptools]
packages = ["reporter_toy"]
"""

TOY_COLLECTOR = '''\
"""The mean L2 norm of each decoder layer's output over the real tokens, times the profile's scale."""
from dataclasses import dataclass

from reporter.collect.collectors import CollectorPlugin
from reporter.store.atomic import read_json, write_json


@dataclass(frozen=True)
class NormSettings:
    scale: float = 1.0

    def __post_init__(self):
        if self.scale <= 0:
            raise ValueError(f"scale must be positive, got {self.scale}")


class LayerNormCollector:
    def __init__(self):
        self.sums, self.count = [], 0

    def attach(self, hooks, adapter, batch):
        mask = batch.attention_mask.bool()
        self.count = int(mask.sum())
        self.sums = [0.0] * adapter.n_layers

        def keep(layer):
            def hook(out):
                h = out[0] if isinstance(out, (tuple, list)) else out
                self.sums[layer] = float(h[mask.to(h.device)].double().norm(dim=-1).sum())
            return hook

        for i, layer in enumerate(adapter.layers):
            hooks.on_output(layer, keep(i))

    def after_forward(self, batch, logits):
        pass


class LayerNormPlugin(CollectorPlugin):
    name = "toy_layer_norm"
    label = "toy layer norms"
    settings = NormSettings

    def for_batch(self, batch):
        return LayerNormCollector()

    def save_batch(self, collector, batch):
        write_json(batch.task.part_path(self.name, batch.index, ".json"), {"sums": collector.sums,
                                                                           "count": collector.count})

    def batch_done(self, task, batch):
        return task.part_path(self.name, batch, ".json").is_file()

    def finish_task(self, task, samples):
        scale = task.profile.plugin_settings(self.name).scale
        parts = [read_json(p) for p in task.parts(self.name, ".json")]
        total = sum(p["count"] for p in parts)
        n = len(parts[0]["sums"])
        return {"toy_norm": [scale * sum(p["sums"][i] for p in parts) / total for i in range(n)],
                "toy_scale": scale}
'''

TOY_EVIDENCE = '''\
"""An evidence pass: the token count of each evaluated question, once per task, resumable."""
from reporter.collect.evidence import EvidencePass, measured

FILE = "toy_question_tokens.json"


class QuestionTokens(EvidencePass):
    name = "toy_question_tokens"
    label = "toy question tokens"
    contamination = False  # every model, every task
    order = 60  # after the built-in passes

    def done(self, directory):
        return (directory / FILE).is_file()

    def run(self, ctx):
        tok = ctx.lm.tokenizer
        measured(ctx.directory / FILE, lambda bs: {"tokens": {it.id: len(tok(it.question)["input_ids"])
                                                              for it in ctx.items}, "batch_size": bs}, ctx.lm)
'''

TOY_SECTION = '''\
from reporter.card.sections import Section

SECTION = Section(
    "toy_norms", "Toy layer norms", order=85, needs=("models.*.tasks.*.toy_norm",),
    missing="Toy layer norms: not measured in this run.",
    source="""<ul class="toy-norms">{% for m in card.models %}{% for t, s in m.tasks.items() %}{% if s.toy_norm %}
<li>{{ m.name }} / {{ t }}: first layer {{ "%.6f"|format(s.toy_norm[0]) }} (scale {{ s.toy_scale }})</li>
{% endif %}{% endfor %}{% endfor %}</ul>""")
'''

TOY_TASK = '''\
from reporter.tasks import Item, Task


def _items():
    return [Item(f"sum-{a}-{b}", f"What is {a} + {b}?", str(a + b)) for a in range(1, 4) for b in range(2, 4)]


def toy_sums():
    return Task(name="toy_sums", scorer="numeric", instruction="Reply with the number only.",
                answer_prefix="Answer:", load=_items, max_new_tokens=3, description="Toy sums: six additions",
                source="generated by reporter-toy")
'''

TOY_SOURCE = '''\
from reporter.config.sources import ModelSource, SourceModel

ARCHS = ("llama",)


def _check(rest):
    return None if rest in ARCHS else f"unknown toy model '{rest}'; use toy:llama"


def _load(spec, device, dtype, seed):
    import torch
    from transformers import AutoModelForCausalLM

    from reporter.models.loading import load_tokenizer
    from reporter.models.packaged import PACKAGED, tokenizer_dir
    from reporter.models.random_archs import random_config

    tok = load_tokenizer(str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    cfg = random_config("llama", vocab=len(tok), layers=2, hidden=64, intermediate=96, heads=4)
    cfg.pad_token_id, cfg.eos_token_id, cfg.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return SourceModel(model.to(dtype), tok, kind="base", meta={"toy_source": spec.source.split(":", 1)[1]})


SOURCE = ModelSource("toy", load=_load, check=_check)
'''

BROKEN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "reporter-broken"
version = "0.2.0"

[project.entry-points."reporter.collectors"]
broken_import = "reporter_broken.needs_missing:Plugin"

[project.entry-points."reporter.sections"]
broken_type = "reporter_broken:NOT_A_SECTION"

[project.entry-points."reporter.tasks"]
arc_easy = "reporter_broken:arc_easy"

[tool.setuptools]
packages = ["reporter_broken"]
"""

BROKEN_INIT = '''\
from reporter.tasks import Item, Task

NOT_A_SECTION = "a string, not a Section"


def arc_easy():
    return Task(name="arc_easy", scorer="exact", instruction="", answer_prefix="", load=lambda: [Item("1", "q", "a")])
'''

PROFILE = """\
lpp: {enabled: false}
mui: {enabled: false}
contamination: {verbatim_items: 2, reference_texts: 2, order_items: 0, split_items: 0}
smoke_texts: 1
plugins:
  toy_layer_norm: {scale: 2.5}
tasks:
  - {name: toy_sums, limit: 3, max_new_tokens: 3}
"""

MODELS = """\
models:
  - {name: toy-model, source: "toy:llama"}
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def pip_install(*packages: Path, site: Path) -> None:
    """``pip install`` package directories into ``site`` in one pip run (offline: no dependencies, no build
    isolation)."""
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), *map(str, packages)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A site directory with ``reporter-toy`` and ``reporter-broken`` installed by pip from source trees."""
    pytest.importorskip("setuptools")
    root = tmp_path_factory.mktemp("plugins")
    toy = _write(root / "toy", {"pyproject.toml": TOY_PYPROJECT, "reporter_toy/__init__.py": "",
                                "reporter_toy/collector.py": TOY_COLLECTOR, "reporter_toy/section.py": TOY_SECTION,
                                "reporter_toy/task.py": TOY_TASK, "reporter_toy/source.py": TOY_SOURCE,
                                "reporter_toy/evidence.py": TOY_EVIDENCE})
    broken = _write(root / "broken", {"pyproject.toml": BROKEN_PYPROJECT, "reporter_broken/__init__.py": BROKEN_INIT,
                                      "reporter_broken/needs_missing.py": "import reporter_missing_dependency\n"})
    site = root / "site"
    pip_install(toy, broken, site=site)
    return site


def _env(site: Path) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _reporter(site: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reporter.cli", *args], capture_output=True, text=True,
                          env=_env(site), timeout=timeout)


@pytest.fixture(scope="module")
def toy_run(site, tmp_path_factory):
    """One ``reporter run`` of the toy model on the toy task, rendered (card.html only matters here)."""
    root = tmp_path_factory.mktemp("toy-run")
    (root / "profile.yaml").write_text(PROFILE)
    (root / "models.yaml").write_text(f"profile: {root / 'profile.yaml'}\n{MODELS}")
    out = root / "run"
    r = _reporter(site, "run", str(root / "models.yaml"), "-o", str(out), "--no-progress", "--format", "html")
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r


def test_an_installed_collector_task_and_source_reach_summary_and_results(toy_run):
    out, _ = toy_run
    summary = json.loads((out / "models" / "toy-model" / "tasks" / "toy_sums" / "summary.json").read_text())
    norms = summary["toy_norm"]
    assert len(norms) == 2 and all(v > 0 for v in norms) and summary["toy_scale"] == 2.5  # the profile's setting
    results = json.loads((out / "results.json").read_text())
    model = results["models"]["toy-model"]
    assert model["meta"]["source_type"] == "toy" and model["meta"]["toy_source"] == "llama"  # loaded by the source
    task = model["tasks"]["toy_sums"]
    assert task["toy_norm"] == norms and task["n"] == 3 and 0 <= task["score"] <= 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resolved"]["profile"]["plugins"] == {"toy_layer_norm": {"scale": 2.5}}  # recorded and hashed


def test_an_installed_evidence_pass_runs_once_per_task_and_resumes(toy_run, site):
    from reporter.models.loading import load_tokenizer
    from reporter.models.packaged import PACKAGED, tokenizer_dir

    out, _ = toy_run
    task_dir = out / "models" / "toy-model" / "tasks" / "toy_sums"
    rec = json.loads((task_dir / "toy_question_tokens.json").read_text())
    samples = [json.loads(line) for line in (task_dir / "samples.jsonl").read_text().splitlines()]
    tok = load_tokenizer(str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    questions = {f"sum-{a}-{b}": f"What is {a} + {b}?" for a in range(1, 4) for b in range(2, 4)}
    assert rec["tokens"] == {s["id"]: len(tok(questions[s["id"]])["input_ids"]) for s in samples}  # each item
    assert rec["batch_size"] == 8 and rec["seconds"] >= 0  # through the skeleton: its batch size, its time
    kept = {p.name: p.stat().st_mtime_ns for p in task_dir.iterdir() if p.is_file()}
    (task_dir / "toy_question_tokens.json").unlink()  # lost: a rerun measures it again, and nothing else
    del kept["toy_question_tokens.json"]
    again = _reporter(site, "run", str(out.parent / "models.yaml"), "-o", str(out), "--no-progress", "--no-render")
    assert again.returncode == 0, again.stderr
    assert json.loads((task_dir / "toy_question_tokens.json").read_text())["tokens"] == rec["tokens"]
    assert {name: (task_dir / name).stat().st_mtime_ns for name in kept} == kept  # the task itself was not rerun


def test_the_card_shows_the_installed_section_the_task_and_the_collector(toy_run):
    out, _ = toy_run
    norms = json.loads((out / "results.json").read_text())["models"]["toy-model"]["tasks"]["toy_sums"]["toy_norm"]
    html = (out / "card.html").read_text()
    assert '<a href="#toy_norms">Toy layer norms</a>' in html and '<section id="toy_norms">' in html
    assert f"toy-model / toy_sums: first layer {norms[0]:.6f} (scale 2.5)" in html  # the section, the collector
    assert html.index('id="toy_norms"') < html.index('id="methods"')  # its order (85) before Methods (100)
    assert "toy_sums" in html[html.index('id="tasks"'):html.index('id="toy_norms"')]  # the task's scores table


def test_each_broken_plugin_is_one_warning_line_naming_its_package(toy_run):
    out, r = toy_run
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: skipped")]
    broken = [line for line in warnings if "package 'reporter-broken' 0.2.0" in line]
    assert broken == warnings and len(broken) == 3, r.stderr  # nothing else warned, each line once
    by_name = {name: next(line for line in broken if f"plugin '{name}'" in line)
               for name in ("broken_import", "broken_type", "arc_easy")}
    assert "collector plugin" in by_name["broken_import"] and "reporter_missing_dependency" in by_name["broken_import"]
    assert "entry point 'broken_import = reporter_broken.needs_missing:Plugin'" in by_name["broken_import"]
    assert "card section plugin" in by_name["broken_type"] and "is not a reporter.card.sections.Section" in \
        by_name["broken_type"]
    assert "task plugin" in by_name["arc_easy"] and "taken by a built-in task" in by_name["arc_easy"]
    assert (out / "results.json").is_file()  # and the run went on without them


def test_plugins_load_lazily_per_group(site):
    code = textwrap.dedent("""\
        import sys
        import reporter.cli, reporter.config, reporter.tasks, reporter.card.sections
        import reporter.collect.collectors, reporter.models.loading
        toy = lambda: sorted(m for m in sys.modules if m.startswith(("reporter_toy", "reporter_broken")))
        print(toy())
        from reporter.tasks import TASKS
        assert "toy_sums" in TASKS
        print(toy())
        from reporter.collect.collectors import COLLECTORS
        print(COLLECTORS.names()[-1], toy())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(site), timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "[]"  # importing reporter imports no plugin
    assert lines[1] == "['reporter_broken', 'reporter_toy', 'reporter_toy.task']"  # the task group only
    assert lines[2].startswith("toy_layer_norm ") and "'reporter_toy.collector'" in lines[2]
    assert "reporter_toy.section" not in lines[2]  # no section looked up: not imported


def test_plugin_settings_and_sources_are_validated_with_the_files(site, tmp_path):
    """Every mistake in the plugins' settings and sources is named with its file and key path, several in one
    ``reporter validate`` (a fresh process each: the installed plugins are found the way a user's are)."""
    profile, models = tmp_path / "profile.yaml", tmp_path / "models.yaml"

    def validate(profile_text: str, models_text: str) -> subprocess.CompletedProcess:
        profile.write_text(profile_text)
        models.write_text(f"profile: {profile}\n{models_text}")
        r = _reporter(site, "validate", str(models), timeout=300)
        assert r.returncode == 2, r.stdout + r.stderr
        return r

    r = validate(PROFILE.replace("toy_layer_norm: {scale: 2.5}",
                                 "toy_layer_norm: {scale: fast, wnidow: 3}\n  toy_layer_nrom: {}"), MODELS)
    assert f"error: {profile}: plugins.toy_layer_norm.wnidow: unknown key 'wnidow'; valid keys: scale" in r.stderr
    assert f"error: {profile}: plugins.toy_layer_norm.scale: must be a number, got 'fast'" in r.stderr
    assert (f"error: {profile}: plugins.toy_layer_nrom: unknown plugin 'toy_layer_nrom' (did you mean "
            "'toy_layer_norm'?); plugins with settings: toy_layer_norm") in r.stderr
    r = validate(PROFILE, "models:\n  - {name: m, source: 'toy:gpt2'}\n  - {name: n, source: 'toyy:llama'}\n")
    assert f"error: {models}: models[0].source: unknown toy model 'gpt2'; use toy:llama" in r.stderr
    assert (f"error: {models}: models[1].source: unknown model source 'toyy:' (did you mean 'toy:'?); use a hub id "
            "(owner/name), an existing directory or one of: packaged:, random:, toy:") in r.stderr
    r = validate(PROFILE.replace("{scale: 2.5}", "{scale: -1}"), MODELS)  # the plugin's own check (__post_init__)
    assert f"error: {profile}: plugins.toy_layer_norm: scale must be positive, got -1" in r.stderr


# -- the registry's entry-point loading, on entry points made here (no package installed)

def _fake_group(monkeypatch, tmp_path, group: str, module: str, source: str, names: dict[str, str]):
    """Entry points ``name = module:attr`` of ``group``, their module written to ``tmp_path`` (on sys.path)."""
    from importlib import metadata

    from reporter import registry

    monkeypatch.delitem(registry._GROUPS, group, raising=False)  # what an earlier lookup read of this group
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [metadata.EntryPoint(n, f"{module}:{attr}", group) for n, attr in names.items()]
    real = metadata.entry_points
    monkeypatch.setattr(metadata, "entry_points",
                        lambda **kw: metadata.EntryPoints(eps) if kw.get("group") == group else real(**kw))


def test_an_entry_point_is_imported_on_the_first_lookup_only(monkeypatch, tmp_path, capsys):
    from reporter.registry import Registry

    _fake_group(monkeypatch, tmp_path, "reporter.test-lazy", "lazy_plugin_mod",
                "LOADS = []\nLOADS.append(1)\nONE, TWO = 1, 2\n", {"one": "ONE", "two": "TWO"})
    numbers = Registry[int]("number", entry_point_group="reporter.test-lazy")
    numbers.add("zero", 0)
    assert "lazy_plugin_mod" not in sys.modules  # made and added to: nothing imported
    assert numbers.get("one") == 1 and "lazy_plugin_mod" in sys.modules
    assert numbers.names() == ["zero", "one", "two"] and sys.modules["lazy_plugin_mod"].LOADS == [1]  # once
    assert numbers.origin("zero") == f"registered in-process by module {__name__}"
    assert "lazy_plugin_mod:ONE" in numbers.origin("one")
    assert capsys.readouterr().err == ""


def test_clashes_and_wrong_types_are_warned_once_and_in_process_wins(monkeypatch, tmp_path, capsys):
    from reporter.registry import Registry

    def positive(name, obj):
        if not isinstance(obj, int) or obj <= 0:
            raise TypeError(f"{obj!r} is not a positive integer")
        return obj

    _fake_group(monkeypatch, tmp_path, "reporter.test-clash", "clash_plugin_mod",
                "ONE, MINUS, OTHER_ONE = 1, -1, 11\n", {"one": "ONE", "minus": "MINUS", "zero": "ONE"})
    numbers = Registry[int]("number", entry_point_group="reporter.test-clash", load=positive)
    numbers.add("zero", 0)
    assert numbers.names() == ["zero", "one"] and numbers.get("zero") == 0
    numbers.add("one", 100)  # a later in-process registration takes the name, with one warning
    assert numbers.get("one") == 100 and len(numbers) == 2
    assert numbers.origin("one") == f"registered in-process by module {__name__}"  # not the entry point's any more
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("warning: skipped the number plugin ") for line in err)
    assert "'minus' (entry point 'minus = clash_plugin_mod:MINUS' (reporter.test-clash)" in err[0]
    assert err[0].endswith("TypeError: -1 is not a positive integer")
    assert "'zero'" in err[1] and err[1].endswith(  # it said "a built-in number" of any name registered before
        f"the name is taken by the number registered in-process by module {__name__}")
    assert "'one'" in err[2] and err[2].endswith("the name is taken by the number registered in-process")
    numbers.names()
    assert capsys.readouterr().err == ""  # loaded once, warned once
    with pytest.raises(ValueError, match="already registered"):
        numbers.add("zero", 5)  # in-process clashes stay errors


def test_a_collector_registered_by_its_module_and_its_entry_point_is_one_plugin(monkeypatch, tmp_path, capsys):
    from reporter.collect.collectors import COLLECTORS

    _fake_group(monkeypatch, tmp_path, "reporter.collectors", "twice_plugin_mod", """\
        from reporter.collect.collectors import CollectorPlugin, register_collector

        @register_collector
        class Twice(CollectorPlugin):
            name = "twice"
        """, {"twice": "Twice"})
    monkeypatch.setattr(COLLECTORS, "_loaded", False)
    try:
        assert "twice" in COLLECTORS and COLLECTORS.names().count("twice") == 1
        assert type(COLLECTORS.get("twice")).__name__ == "Twice" and capsys.readouterr().err == ""
    finally:
        COLLECTORS.remove("twice")


def test_a_plugin_that_looks_its_registry_up_while_imported_is_still_added(monkeypatch, tmp_path, capsys):
    """declared_settings() imports every group first (a profile with plugins:); a plugin module that
    looks its own registry up while it is imported must not leave that registry loaded without it."""
    from reporter.collect.collectors import COLLECTORS
    from reporter.registry import declared_settings

    _fake_group(monkeypatch, tmp_path, "reporter.collectors", "lookup_plugin_mod", """\
        from reporter.collect.collectors import COLLECTORS, CollectorPlugin

        BASE = COLLECTORS.get("mui")  # a lookup while the group is being imported

        class Looks(CollectorPlugin):
            name = "looks"
        """, {"looks": "Looks"})
    monkeypatch.setattr(COLLECTORS, "_loaded", False)
    try:
        declared_settings()
        assert "looks" in COLLECTORS.names() and capsys.readouterr().err == ""
    finally:
        COLLECTORS.remove("looks")


def test_a_plugin_whose_constructor_fails_is_one_warning_and_the_others_load(monkeypatch, tmp_path, capsys):
    from reporter.collect.evidence import EVIDENCE

    _fake_group(monkeypatch, tmp_path, "reporter.evidence", "ctor_plugin_mod", """\
        from reporter.collect.evidence import EvidencePass

        class Bad(EvidencePass):
            name = "bad"
            artifact = "bad.json"
            def __init__(self):
                raise RuntimeError("boom")
            def run(self, ctx):
                pass

        class NoArtifact(EvidencePass):
            name = "no_artifact"
            def run(self, ctx):
                pass

        class Good(EvidencePass):
            name = "good"
            artifact = "good.json"
            def run(self, ctx):
                pass
        """, {"bad": "Bad", "no_artifact": "NoArtifact", "good": "Good"})
    monkeypatch.setattr(EVIDENCE, "_loaded", False)
    try:
        names = EVIDENCE.names()
        assert "good" in names and "bad" not in names and "no_artifact" not in names
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2 and err[0].startswith("warning: skipped the evidence pass plugin 'bad'")
        assert err[0].endswith("RuntimeError: boom")
        assert "'no_artifact'" in err[1] and "names its artifact or says when it is done" in err[1]
    finally:
        EVIDENCE.remove("good")


def test_reporter_list_names_every_plugin_with_where_it_came_from(site, tmp_path):
    """``reporter --plugin FILE list``: the installed packages' plugins with their entry points, the file's with its
    path, reporter's own as built-in; the broken ones warned as by a run (one process, as a user runs it)."""
    from reporter.catalogue import KINDS, render_text

    plugin = tmp_path / "my_plugins.py"
    plugin.write_text(textwrap.dedent("""\
        from reporter.card.sections import Section, register_section
        from reporter.tasks import Item, Task, register_task

        @register_task("file_task")
        def file_task():
            '''A task from a --plugin file.'''
            return Task("file_task", "exact", "", "", load=lambda: [Item("1", "q", "a")], description="two items")

        register_section(Section("file_section", "File section", source="<p>x</p>", order=97))
    """))
    r = _reporter(site, "--plugin", str(plugin), "list", "--json", *KINDS, timeout=300)  # one process: every kind
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert list(listed) == ["tasks", "profiles", "sources", "architectures", "collectors", "evidence", "sections",
                            "scorers", "plugins"]
    origin = {kind: {row["name"]: row["origin"] for row in rows} for kind, rows in listed.items()}
    toy = "of package 'reporter-toy' 0.1.0"
    assert origin["tasks"]["toy_sums"] == f"entry point 'toy_sums = reporter_toy.task:toy_sums' (reporter.tasks) {toy}"
    assert origin["tasks"]["file_task"] == origin["sections"]["file_section"] == f"--plugin {plugin}"
    assert toy in origin["collectors"]["toy_layer_norm"] and toy in origin["evidence"]["toy_question_tokens"]
    assert toy in origin["sections"]["toy_norms"] and toy in origin["sources"]["toy:…"]
    builtin = {"arc_easy", "spc", "mmlu"} | {"quick", "standard"} | {"packaged:smollm2-135m-instruct", "random:gpt2"}
    everything = {name: o for kind, rows in origin.items() if kind != "plugins" for name, o in rows.items()}
    assert {everything[n] for n in builtin} == {"built-in"}
    assert {o for k in ("architectures", "scorers") for o in origin[k].values()} == {"built-in"}
    assert [row["name"] for row in listed["sections"]][-3:] == ["file_section", "methods", "appendix"]  # card order
    assert "broken_import" not in origin["collectors"] and r.stderr.count("warning: skipped") == 3, r.stderr
    # the plugins kind: only what is not reporter's own, each with its kind, as text in one column
    everything["toy"] = everything["toy:…"]  # a source is listed by how a models file writes it
    assert origin["plugins"] == {n: everything[n] for n in origin["plugins"]}
    lines = render_text({"plugins": listed["plugins"]}, width=1000).splitlines()
    assert lines[0].startswith("plugins (7): ")
    names = ("file_task", "file_section", "toy", "toy_sums", "toy_norms", "toy_layer_norm", "toy_question_tokens")
    rows = {n: line for line in lines[1:] for n in names if f"  {n}  " in line}
    assert len(rows) == len(lines) - 1 == 7, lines
    assert rows["file_task"].startswith("  task  ") and rows["file_task"].endswith(f"  --plugin {plugin}")
    assert rows["toy"].startswith("  model source  ") and rows["toy"].endswith(toy)
    assert {line.index("  --plugin") for line in lines[1:] if "--plugin" in line} == {  # one column
        line.index("  entry point") for line in lines[1:] if "entry point" in line}
