"""Extending reporter without editing it: a collector and a card section defined in this file alone.

The toy collector measures the mean L2 norm of each decoder layer's output over the real tokens of
the teacher-forced pass; it must show up in ``summary.json``, in ``results.json`` and as a table in
the card, and its numbers must match a float64 loop over ``output_hidden_states``. The toy section
must render its template when its key is there and its one "missing" line when it is not.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from reporter.card.render import render
from reporter.card.sections import SECTIONS, Section, register_section
from reporter.cli import main
from reporter.collect.collectors import COLLECTORS, CollectorPlugin, register_collector
from reporter.config import Profile
from reporter.errors import ConfigError, UserError
from reporter.instrument.hooked_pass import PassBatch, hooked_pass
from reporter.models.adapters import get_adapter
from reporter.run.manifest import config_hash
from reporter.store.atomic import read_json, write_json

from .conftest import small_random, tiny_model

DATA = Path(__file__).parent / "data"


class LayerNormCollector:
    """Sum and count of the L2 norms of each layer's output over the real (non-pad) tokens."""

    def __init__(self) -> None:
        self.sums: list[float] = []
        self.count = 0

    def attach(self, hooks, adapter, batch: PassBatch) -> None:
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

    def after_forward(self, batch, logits) -> None:
        pass


class LayerNormPlugin(CollectorPlugin):
    name = "toy_layer_norm"
    label = "toy layer norms"

    def for_batch(self, batch):
        return LayerNormCollector()

    def save_batch(self, collector, batch):
        write_json(batch.task.part_path(self.name, batch.index, ".json"), {"sums": collector.sums,
                                                                           "count": collector.count})

    def batch_done(self, task, batch):
        return task.part_path(self.name, batch, ".json").is_file()

    def finish_task(self, task, samples):
        parts = [read_json(p) for p in task.parts(self.name, ".json")]
        total = sum(p["count"] for p in parts)
        return {"layer_l2_norm": [sum(p["sums"][i] for p in parts) / total for i in range(len(parts[0]["sums"]))]}


@pytest.fixture
def toy_plugin():
    register_collector(LayerNormPlugin)
    yield COLLECTORS.get("toy_layer_norm")
    COLLECTORS.remove("toy_layer_norm")


def test_toy_collector_matches_a_float64_loop():
    model = tiny_model("llama", layers=3)
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    col = LayerNormCollector()
    hooked_pass(model, get_adapter(model), PassBatch(ids, mask, torch.zeros_like(mask).bool()), [col])
    with torch.no_grad():
        hidden = []
        for b in range(2):
            real = mask[b].bool()
            out = model(input_ids=ids[b:b + 1, real], output_hidden_states=True)
            hidden.append([h[0].double() for h in out.hidden_states[1:]])
    # HF's last hidden state is taken after the final norm, the layer hook before it: compare the others
    for layer in range(2):
        want = 0.0
        for b in range(2):
            for row in hidden[b][layer]:
                want += float(np.sqrt(sum(float(x) ** 2 for x in row)))
        assert col.sums[layer] == pytest.approx(want, rel=1e-5)
    assert len(col.sums) == 3 and col.count == 10


def test_a_collector_defined_here_reaches_summary_results_and_card(toy_plugin, tmp_path):
    (tmp_path / "profile.yaml").write_text("lpp: {enabled: false}\ncontamination: {verbatim_items: 2, reference_texts: 2}\n"
                                           "smoke_texts: 1\ntasks:\n  - {name: arc_easy, limit: 3, max_new_tokens: 3}\n")
    (tmp_path / "models.yaml").write_text(small_random(
        f"profile: {tmp_path / 'profile.yaml'}\nmodels:\n  - name: tiny\n    source: random:llama\n"
        "    random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}\n"))
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["run", str(tmp_path / "models.yaml"), "-o", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "models" / "tiny" / "tasks" / "arc_easy" / "summary.json").read_text())
    norms = summary["layer_l2_norm"]
    assert len(norms) == 2 and all(v > 0 for v in norms)
    results = json.loads((out / "results.json").read_text())
    assert results["models"]["tiny"]["tasks"]["arc_easy"]["layer_l2_norm"] == norms
    assert not (out / "models" / "tiny" / "tasks" / "arc_easy" / "parts").exists()  # parts merged and removed
    html = (out / "card.html").read_text()
    assert '<section id="measurements">' in html and "Other measurements" in html and "layer l2 norm" in html
    mean = sum(norms) / 2
    assert f"mean {mean:.3f} over 2 values ({min(norms):.3f} to {max(norms):.3f})" in html


def test_a_section_defined_here_renders_or_says_why_not(tmp_path):
    shutil.copytree(DATA / "run2", tmp_path / "run")
    register_section(Section("toy", "Toy section", source="<p>Toy value {{ card.analysis.toy_value }}.</p>",
                             order=85, needs=("analysis.toy_value",), missing="Toy section: no toy value in this run."))
    register_section(Section("quiet", "Quiet section", source="<p>never shown</p>", order=86,
                             needs=("analysis.nothing",), missing=None))
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_section(Section("toy", "Another", source="x"))
        html = render(tmp_path / "run", formats=("html",))["html"].read_text()
        assert '<a href="#toy">Toy section</a>' in html and "Toy section: no toy value in this run." in html
        assert "Quiet section" not in html and 'href="#quiet"' not in html  # nothing to say: left out
        res = json.loads((tmp_path / "run" / "results.json").read_text())
        res["analysis"] = {"toy_value": 42}
        (tmp_path / "run" / "results.json").write_text(json.dumps(res))
        html = render(tmp_path / "run", formats=("html",))["html"].read_text()
        assert "<p>Toy value 42.</p>" in html and "no toy value" not in html
        assert html.index('id="toy"') < html.index('id="methods"')  # order 85: before Methods (100)
    finally:
        SECTIONS.remove("toy")
        SECTIONS.remove("quiet")


def test_the_shared_environment_compiles_a_section_again_when_its_source_changes(tmp_path):
    """The card's Jinja environment is one per process and keeps compiled templates; a section registered again
    with other source (a notebook re-running its cell) must render the new source, never the compiled old one."""
    from reporter.card.assets import html_environment

    shutil.copytree(DATA / "run2", tmp_path / "run")
    try:
        for text in ("first version", "second version"):
            register_section(Section("toy", "Toy section", source=f"<p>{text}</p>", order=85))
            html = render(tmp_path / "run", formats=("html",))["html"].read_text()
            assert f"<p>{text}</p>" in html and html.count("version</p>") == 1
            SECTIONS.remove("toy")
        assert html_environment() is html_environment()
    finally:
        if "toy" in SECTIONS.names():
            SECTIONS.remove("toy")


@dataclass(frozen=True)
class ScaleSettings:
    scale: float = 1.0
    layers: Literal["all", "last"] = "all"
    skip: tuple[int, ...] = ()


class ScaledPlugin(CollectorPlugin):
    name = "toy_scaled"
    settings = ScaleSettings


@pytest.fixture
def scaled_plugin():
    register_collector(ScaledPlugin)
    yield
    COLLECTORS.remove("toy_scaled")


def test_a_plugins_settings_are_parsed_recorded_and_hashed(scaled_plugin):
    tasks = ["arc_easy"]
    prof = Profile.from_dict({"tasks": tasks, "plugins": {"toy_scaled": {"scale": 2, "skip": [0, 1]}}})
    assert prof.plugin_settings("toy_scaled") == ScaleSettings(scale=2.0, skip=(0, 1))  # typed, with defaults
    assert prof.to_dict()["plugins"] == {"toy_scaled": {"scale": 2.0, "layers": "all", "skip": (0, 1)}}
    recorded = Profile.from_dict(json.loads(json.dumps(prof.to_dict())), recorded=True)  # as a manifest reads it
    assert recorded.plugin_settings("toy_scaled") == prof.plugin_settings("toy_scaled")
    assert Profile.from_dict({"tasks": tasks}).plugin_settings("toy_scaled") == ScaleSettings()  # not given: defaults
    assert "plugins" not in Profile.from_dict({"tasks": tasks}).to_dict()  # nothing new in an old profile's hash

    def hashed(p):
        return config_hash({"config": {"seed": 1}, "profile": p.to_dict()})

    other = Profile.from_dict({"tasks": tasks, "plugins": {"toy_scaled": {"scale": 3}}})
    assert len({hashed(prof), hashed(other), hashed(Profile.from_dict({"tasks": tasks}))}) == 3
    with pytest.raises(ConfigError, match="plugin 'toy_layer_norm' declares no settings"):
        prof.plugin_settings("toy_layer_norm")


def test_a_plugins_settings_are_checked_with_one_line_each(scaled_plugin):
    bad = {"scale": "x", "layers": "first", "skip": [0, "a"], "scael": 1}
    with pytest.raises(ConfigError) as e:
        Profile.from_dict({"tasks": ["arc_easy"], "plugins": {"toy_scaled": bad, "toy_scalde": {}}}, "p.yaml")
    assert e.value.lines == [
        "p.yaml: plugins.toy_scaled.scael: unknown key 'scael' (did you mean 'scale'?); valid keys: scale, layers, skip",
        "p.yaml: plugins.toy_scaled.scale: must be a number, got 'x'",
        "p.yaml: plugins.toy_scaled.layers: 'first' is not valid; use one of all, last",
        "p.yaml: plugins.toy_scaled.skip: item 1 must be an integer, got 'a'",
        "p.yaml: plugins.toy_scalde: unknown plugin 'toy_scalde' (did you mean 'toy_scaled'?); plugins with settings: "
        "toy_scaled (a plugin of your own is loaded before the command: reporter --plugin FILE run …)",
    ]
    with pytest.raises(ConfigError, match=r"p.yaml: plugins: must be a mapping of plugin name to its settings"):
        Profile.from_dict({"tasks": ["arc_easy"], "plugins": ["toy_scaled"]}, "p.yaml")
    # a profile naming a plugin the command did not load (no --plugin): where the --plugin goes
    with pytest.raises(ConfigError) as e:
        Profile.from_dict({"tasks": ["arc_easy"], "plugins": {"resid_norm": {}}}, "p.yaml")
    assert e.value.lines[0].startswith("p.yaml: plugins.resid_norm: unknown plugin 'resid_norm'")
    assert e.value.lines[0].endswith("(a plugin of your own is loaded before the command: reporter --plugin FILE run …)")


def test_a_plugin_module_given_on_the_command_line_registers_its_plugins(tmp_path):
    (tmp_path / "my_plugins.py").write_text(
        "from dataclasses import dataclass\n"
        "from reporter.collect.collectors import CollectorPlugin, register_collector\n\n"
        "@dataclass(frozen=True)\nclass Settings:\n    window: int = 4\n\n"
        "@register_collector\nclass FilePlugin(CollectorPlugin):\n    name, settings = 'toy_file', Settings\n")
    (tmp_path / "models.yaml").write_text(f"profile: {tmp_path / 'profile.yaml'}\nmodels:\n"
                                          "  - {name: tiny, source: 'random:llama'}\n")
    try:
        for window, code, said in (("8", 0, "models.yaml: OK (1 model"),
                                   ("wide", 2, "plugins.toy_file.window: must be an integer, got 'wide'")):
            (tmp_path / "profile.yaml").write_text(f"plugins: {{toy_file: {{window: {window}}}}}\ntasks: [arc_easy]\n")
            r = CliRunner().invoke(main, ["--plugin", str(tmp_path / "my_plugins.py"), "validate",
                                          str(tmp_path / "models.yaml")])
            assert r.exit_code == code and said in r.output, r.output
    finally:
        COLLECTORS.remove("toy_file")
    r = CliRunner().invoke(main, ["--plugin", "no_such_plugin_module", "validate", str(tmp_path / "models.yaml")])
    assert r.exit_code == 2 and r.output.strip() == ("error: --plugin no_such_plugin_module: cannot import it "
                                                     "(ModuleNotFoundError: No module named 'no_such_plugin_module')")
    r = CliRunner().invoke(main, ["--plugin", str(tmp_path), "validate", str(tmp_path / "models.yaml")])
    assert r.exit_code == 2 and r.output.strip() == (f"error: --plugin {tmp_path}: is a directory; give a .py file or "
                                                     f"a module name ({tmp_path})")  # it said "no such file"


def test_settings_whose_annotations_cannot_be_read_are_one_line_not_a_traceback():
    from reporter.config.files import Problems
    from reporter.config.plugin_settings import parse_settings as _plugin_settings

    ns: dict = {}
    exec("from dataclasses import dataclass\n@dataclass\nclass Broken:\n    window: 'NotDefinedAnywhere' = 4\n", ns)
    p = Problems("p.yaml")
    assert _plugin_settings(p, "plugins.toy", {"window": 8}, ns["Broken"]) is None
    assert p.lines == ["p.yaml: plugins.toy: the plugin's settings class Broken has annotations that cannot be read "
                       "(NameError: name 'NotDefinedAnywhere' is not defined); its author must fix it"]


def test_a_card_section_whose_template_would_fail_is_refused_before_any_model_loads(tmp_path):
    """A plugin's section with an unclosed ``{% for %}``, a filter the card has not, or a template file reporter does
    not ship passed ``validate`` and failed the card after every model had run. ``run --no-render``, or a run that
    writes card.md only (fixed blocks, no sections), is not refused for it."""
    from reporter.card import assets
    from reporter.card.sections import CARD_FILTERS

    assert set(CARD_FILTERS) == set(assets._FILTERS)  # what validate compiles against is what the card has
    (tmp_path / "models.yaml").write_text("models:\n  - {name: tiny, source: 'random:llama'}\n")
    register_section(Section("toy_broken", "Broken", source="<ul>{% for m in card.models %}<li>{{ m.name }}</ul>"))
    register_section(Section("toy_filter", "Filter", source="<p>{{ card.models|nosuchfilter }} {{ 0.5|pct }}</p>"))
    register_section(Section("toy_file", "File", template="toy_nosuch.j2"))
    origin = f"fix or remove what registers it (registered in-process by module {__name__})"
    try:
        for args in (["validate"], ["run", "-o", str(tmp_path / "run")]):
            r = CliRunner().invoke(main, [*args, str(tmp_path / "models.yaml")])
            errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
            assert r.exit_code == 2 and len(errors) == 3, r.output
            assert errors[0].startswith("error: card section 'toy_broken': its template does not compile (line 1: "
                                        "Unexpected end of template.") and errors[0].endswith(origin), errors
            assert errors[1] == ("error: card section 'toy_filter': its template does not compile (line 1: No filter "
                                 f"named 'nosuchfilter'.); {origin}")  # pct is the card's own: not named
            assert errors[2] == ("error: card section 'toy_file': its template 'toy_nosuch.j2' is not a file reporter "
                                 f"ships; give the template inline (source=), {origin}")
        assert not (tmp_path / "run").exists()  # before the run directory, before any model
        for formats, said in (("md", "--address auto: is a Ray cluster's address"), ("html", "card section")):
            # --address without Ray is refused just after the sections are checked: which line comes shows whether
            # the sections were checked
            r = CliRunner().invoke(main, ["run", str(tmp_path / "models.yaml"), "-o", str(tmp_path / "run"),
                                          "--format", formats, "--address", "auto"])
            assert r.exit_code == 2 and said in r.output.splitlines()[0], r.output
    finally:
        for name in ("toy_broken", "toy_filter", "toy_file"):
            SECTIONS.remove(name)
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "models.yaml")])
    assert r.exit_code == 0, r.output  # negative control: without them


BESIDE = """\
import json
import beside_top_{n}
from reporter.collect.collectors import CollectorPlugin, register_collector

@register_collector
class Beside(CollectorPlugin):
    name, label = "toy_beside_{n}", "beside"

    def run_model(self, lm, profile, model_dir):
        import beside_late_{n}  # a helper imported when the measurement runs, as the guides do
        (model_dir / "beside.json").write_text(json.dumps({{"v": beside_top_{n}.A + beside_late_{n}.B}}))

    def model_done(self, profile, model_dir):
        return (model_dir / "beside.json").is_file()
"""


@pytest.mark.parametrize("form", ["file", "module"])
def test_a_plugin_imports_the_helper_modules_beside_it(tmp_path, monkeypatch, form):
    """``--plugin plug.py`` could not import ``helper.py`` next to it (the file was loaded without its folder on the
    path), and ``--plugin plug`` found it while importing but not inside ``run_model`` (the current directory left
    the path once the import was done): the model failed. Both find it now, as ``python plug.py`` would, and the
    folder then sits last on the path, so an installed package of the same name is not shadowed."""
    import sys

    n = form
    folder = tmp_path / "plugs"
    folder.mkdir()
    (folder / f"beside_top_{n}.py").write_text("A = 1\n")
    (folder / f"beside_late_{n}.py").write_text("B = 2\n")
    (folder / f"beside_plug_{n}.py").write_text(BESIDE.format(n=n))
    (tmp_path / "m.yaml").write_text("models:\n  - {name: a, source: random:llama, random: {layers: 1, hidden: 32, "
                                     "intermediate: 48, heads: 2}}\n")
    (tmp_path / "p.yaml").write_text("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 0, "
                                     "reference_texts: 0, order_items: 0, split_items: 0}\n"
                                     "tasks:\n  - {name: arc_easy, limit: 1, max_new_tokens: 2}\n")
    if form == "module":
        monkeypatch.chdir(folder)
    plugin = str(folder / f"beside_plug_{n}.py") if form == "file" else f"beside_plug_{n}"
    before = list(sys.path)
    try:
        r = CliRunner().invoke(main, ["--plugin", plugin, "run", str(tmp_path / "m.yaml"), "--profile",
                                      str(tmp_path / "p.yaml"), "-o", str(tmp_path / "run"), "--no-progress",
                                      "--no-render"])
        assert r.exit_code == 0, r.output
        assert json.loads((tmp_path / "run" / "models" / "a" / "beside.json").read_text()) == {"v": 3}
        assert sys.path[-1] == str(folder) and sys.path[:len(before)] == before
    finally:
        COLLECTORS.remove(f"toy_beside_{n}")
        sys.path[:] = before
        for name in list(sys.modules):
            if name.endswith(f"_{n}") and name.split(".")[-1].startswith(("beside_", "reporter_plugin_beside")):
                del sys.modules[name]


def test_the_collector_guides_example_runs_as_printed(tmp_path):
    """The guide showed a sketch (``MyCollector`` undefined, ``...`` bodies) and pointed at this file, which a user
    who installed reporter does not have; its example is now a whole plugin, run here as a user would."""
    import re

    guide = (Path(__file__).parent.parent / "docs" / "plugins" / "collector.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if "register_collector" in b
                and "class LayerNormsPlugin" in b)
    (tmp_path / "layer_norms.py").write_text(code)
    (tmp_path / "m.yaml").write_text("models:\n  - {name: a, source: random:llama, random: {layers: 2, hidden: 32, "
                                     "intermediate: 48, heads: 2}}\n")
    (tmp_path / "p.yaml").write_text("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 0, "
                                     "reference_texts: 0, order_items: 0, split_items: 0}\n"
                                     "tasks:\n  - {name: arc_easy, limit: 3, max_new_tokens: 2}\n")
    try:
        r = CliRunner().invoke(main, ["--plugin", str(tmp_path / "layer_norms.py"), "run", str(tmp_path / "m.yaml"),
                                      "--profile", str(tmp_path / "p.yaml"), "-o", str(tmp_path / "run"),
                                      "--no-progress", "--no-render"])
        assert r.exit_code == 0, r.output
        task = json.loads((tmp_path / "run" / "results.json").read_text())["models"]["a"]["tasks"]["arc_easy"]
        assert len(task["layer_norms"]) == 2 and all(v > 0 for v in task["layer_norms"])
        assert task["collection_fallback"]  # the guide says it: a teacher-forced pass, and why
    finally:
        COLLECTORS.remove("layer_norms")


def _guide_block(marker):
    import re

    guide = (Path(__file__).parent.parent / "docs" / "plugins" / "collector.md").read_text()
    return next(b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if marker in b)


def test_the_step_collector_example_equals_its_teacher_forced_pass():
    """The guide named the step-collector protocol (``attach``, ``after_step``, ``finish``) without an example that
    runs, and what a step's hook sees (the prefill's last position predicts the first token, finished rows leave the
    batch, steps past the kept length are dropped) is where a plugin goes wrong. Its example, run on a tiny float64
    model whose rows finish at different steps and whose replies are cut, gives per row what the teacher-forced
    collector gives on prompt + kept reply."""
    from reporter.instrument.batch import teacher_forced_batch
    from reporter.instrument.decode import greedy_decode
    from reporter.instrument.hooked_pass import hooked_pass
    from reporter.models.adapters import get_adapter

    from .conftest import tiny_model

    ns = {"__name__": "reply_norms_guide"}
    try:
        exec(compile(_guide_block("class ReplyNorms("), "reply_norms.py", "exec"), ns)
        model = tiny_model("llama", vocab=97, seed=2).to(torch.float64)
        adapter = get_adapter(model)
        prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [18, 19, 20, 21, 22, 23, 24, 25, 26], [27]]
        free = greedy_decode(model, None, prompts, pad_id=0, eos_ids=set(), max_new_tokens=6)
        eos = {free[0][3], free[2][1]}  # tokens the model does produce early: rows finish at different steps
        step, seen = ns["ReplyNormsStep"](), []
        after = step.after_step
        step.after_step = lambda i, logits, tokens, rows: (seen.append(len(rows)), after(i, logits, tokens, rows))
        raw = greedy_decode(model, adapter, prompts, pad_id=0, eos_ids=eos, max_new_tokens=6, collectors=[step])
        kept = [r[:-1] if r and r[-1] in eos else r for r in raw]  # the end-of-text token is no reply token
        kept = [r[:max(0, len(r) - c)] for r, c in zip(kept, [0, 2, 6, 1, 0])]  # cut as a stop string would
        assert len({len(r) for r in raw}) > 1 and any(len(k) == 0 for k in kept)
        assert seen[0] == 5 and min(seen) < 5  # finished rows left the batch
        step.finish([len(k) for k in kept])
        forced = ns["ReplyNormsForced"]()
        hooked_pass(model, adapter, teacher_forced_batch(prompts, kept, 0, "cpu"), [forced])
        assert step.counts == forced.counts == [len(k) for k in kept]
        np.testing.assert_allclose(step.sums, forced.sums, rtol=1e-12, atol=0)
        assert sum(step.sums) > 0
    finally:
        COLLECTORS.remove("reply_norms")


def test_the_step_collector_example_runs_both_ways_as_printed(tmp_path):
    """Run as a user would, fused (the default: no extra pass, no fallback) and teacher-forced, the example gives
    the task the same number."""
    (tmp_path / "reply_norms.py").write_text(_guide_block("class ReplyNorms("))
    (tmp_path / "m.yaml").write_text("models:\n  - {name: a, source: random:llama, random: {layers: 2, hidden: 32, "
                                     "intermediate: 48, heads: 2}}\n")
    got = {}
    try:
        for collection in ("fused", "teacher-forced"):
            (tmp_path / "p.yaml").write_text(
                f"lpp: {{enabled: false}}\nsmoke_texts: 1\ncollection: {collection}\ncontamination: "
                "{verbatim_items: 0, reference_texts: 0, order_items: 0, split_items: 0}\n"
                "tasks:\n  - {name: arc_easy, limit: 3, max_new_tokens: 3}\n")
            r = CliRunner().invoke(main, ["--plugin", str(tmp_path / "reply_norms.py"), "run", str(tmp_path / "m.yaml"),
                                          "--profile", str(tmp_path / "p.yaml"), "-o", str(tmp_path / collection),
                                          "--no-progress", "--no-render"])
            assert r.exit_code == 0, r.output
            got[collection] = json.loads((tmp_path / collection / "results.json").read_text())["models"]["a"]["tasks"][
                "arc_easy"]
        assert got["fused"]["collection"] == "fused" and not got["fused"].get("collection_fallback")
        assert got["fused"]["reply_norm"] == pytest.approx(got["teacher-forced"]["reply_norm"], rel=1e-6)
    finally:
        COLLECTORS.remove("reply_norms")


@pytest.mark.parametrize("order", [("main_plug.py", "more_plug.py"), ("more_plug.py", "main_plug.py")])
def test_a_plugin_file_another_plugin_imports_is_loaded_once(tmp_path, order):
    """``--plugin main_plug.py --plugin more_plug.py``, where more_plug does ``import main_plug``: the file was
    imported twice, as two modules, and the second copy's registrations clashed with the first ("cannot import it
    (ValueError: task 'tc_main' is already registered)"). One module now serves both, in either order."""
    import sys

    from reporter.tasks import TASKS

    task = ("from reporter.tasks import Item, Task, register_task\n\n\n@register_task('NAME')\ndef _t():\n"
            "    return Task(name='NAME', scorer='exact', instruction='A.', answer_prefix='Answer:',\n"
            "                load=lambda: [Item('q', 'Q?', 'A')])\n")
    (tmp_path / "main_plug.py").write_text(task.replace("NAME", "tc_main"))
    (tmp_path / "more_plug.py").write_text("import main_plug  # noqa: F401\n" + task.replace("NAME", "tc_more"))
    args = [a for f in order for a in ("--plugin", str(tmp_path / f))]
    try:
        r = CliRunner().invoke(main, [*args, "list", "tasks"])
        assert r.exit_code == 0 and "already registered" not in r.output, r.output
        assert "tc_main" in r.output and "tc_more" in r.output
    finally:
        for name in ("main_plug", "more_plug", "reporter_plugin_main_plug", "reporter_plugin_more_plug"):
            sys.modules.pop(name, None)
        for name in ("tc_main", "tc_more"):
            if name in TASKS.names():
                TASKS.remove(name)
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def _plugin_folder(root: Path, name: str, plugin: str, helper_value: int, lazy: bool = False) -> Path:
    """A folder holding ``plugin`` (a scorer that returns its helper's value) and its helper ``clash_util_q.py``."""
    d = root / name
    d.mkdir()
    (d / "clash_util_q.py").write_text(f"VALUE = {helper_value}\n")
    body = ("    import clash_util_q\n" if lazy else "") + "    return float(clash_util_q.VALUE)\n"
    (d / f"{plugin}.py").write_text(("" if lazy else "import clash_util_q\n") + "from reporter.scoring import register_scorer\n\n"
                                    f"@register_scorer('{plugin}_score')\ndef score(response, answer, item=None):\n"
                                    + body)
    return d


@pytest.mark.parametrize("lazy", [False, True], ids=["at-import", "inside-a-function"])
def test_two_plugins_whose_helpers_share_a_name_are_one_line_not_the_wrong_code(tmp_path, lazy):
    """``--plugin a/pa.py --plugin b/pb.py``, each folder with its own ``clash_util_q.py``: Python keeps one module
    per name, so pb ran a's helper, silently (and its code key left b's helper out). Now exit 2 with one line naming
    both files, whether a imports its helper at its top (it is loaded) or inside a function (not yet loaded)."""
    import sys

    from reporter.scoring import SCORERS

    a = _plugin_folder(tmp_path, "a", "clash_pa", 1, lazy=lazy)
    b = _plugin_folder(tmp_path, "b", "clash_pb", 2)
    try:
        r = CliRunner().invoke(main, ["--plugin", str(a / "clash_pa.py"), "--plugin", str(b / "clash_pb.py"),
                                      "list", "scorers"])
        errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
        assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
        assert f"--plugin {b / 'clash_pb.py'}: it imports 'clash_util_q', which lies beside it ({b / 'clash_util_q.py'})" \
            in errors[0]
        assert str(a / "clash_util_q.py") in errors[0] and "give one of them another name" in errors[0]
        assert "clash_pb_score" not in SCORERS  # refused before it ran: nothing of it registered
    finally:
        for name in ("clash_pa_score", "clash_pb_score"):
            SCORERS.remove(name)
        sys.modules.pop("clash_util_q", None)


def test_plugins_that_share_one_folders_helper_or_sit_beside_a_data_folder_load(tmp_path):
    """The negatives: two ``--plugin`` files of one folder import the same helper (one file: no clash); a plugin
    beside a folder named like a loaded module but without ``__init__.py`` (data, not a package, never shadows it);
    and a plugin beside a regular package named like a module loaded from elsewhere is refused, naming where that
    module came from."""
    import sys

    from reporter.plugin_import import import_plugin
    from reporter.scoring import SCORERS

    a = _plugin_folder(tmp_path, "a", "clash_pc", 3)
    (a / "clash_pd.py").write_text("import clash_util_q, json\nfrom reporter.scoring import register_scorer\n\n"
                                   "@register_scorer('clash_pd_score')\ndef score(response, answer, item=None):\n"
                                   "    return float(clash_util_q.VALUE)\n")
    (a / "json").mkdir()  # a data folder named like the standard library's json, which is loaded
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "clash_pkg_r").mkdir(parents=True)
    (elsewhere / "clash_pkg_r" / "__init__.py").write_text("")
    (a / "clash_pkg_r").mkdir()
    (a / "clash_pkg_r" / "__init__.py").write_text("R = 1\n")
    (a / "clash_pe.py").write_text("import clash_pkg_r\n")
    try:
        import_plugin(str(a / "clash_pc.py"))
        import_plugin(str(a / "clash_pd.py"))
        assert SCORERS.get("clash_pc_score")("", "") == SCORERS.get("clash_pd_score")("", "") == 3.0
        sys.path.insert(0, str(elsewhere))
        import clash_pkg_r  # noqa: F401  (loaded from elsewhere before the plugin)
        sys.path.remove(str(elsewhere))
        with pytest.raises(UserError) as e:
            import_plugin(str(a / "clash_pe.py"))
        assert (f"it imports 'clash_pkg_r', which lies beside it ({a / 'clash_pkg_r'}), but this process already has "
                f"a module 'clash_pkg_r' from {(elsewhere / 'clash_pkg_r').resolve()}") in str(e.value)
    finally:
        for name in ("clash_pc_score", "clash_pd_score"):
            SCORERS.remove(name)
        for name in ("clash_util_q", "clash_pkg_r"):
            sys.modules.pop(name, None)


def test_helper_clashes_through_a_package_or_a_plugins_own_name_are_refused_and_a_stray_stdlib_name_is_said(
        tmp_path, capsys):
    """Found by a review of the clash check: a helper package's own imports were not followed (c/chelpers/__init__.py
    importing the name of a/helpers.py's helper passed); a plugin file named like another plugin's lazily imported
    helper passed; and a stray file beside a plugin named like a loaded standard-library module (random.py) refused a
    plugin that runs as before, with the standard library's module: now one warning line, and the plugin loads."""
    import sys

    from reporter.plugin_import import import_plugin
    from reporter.scoring import SCORERS

    a, c, b, s = (tmp_path / n for n in ("a", "c", "b", "s"))
    for d in (a, c, b, s, c / "chelpers_t"):
        d.mkdir()
    (a / "clash_pa_t.py").write_text("import clash_helpers_t\n")
    (a / "clash_helpers_t.py").write_text("import clash_deep_t\n")
    (a / "clash_deep_t.py").write_text("D = 1\n")
    (c / "clash_pc_t.py").write_text("import chelpers_t\n")
    (c / "chelpers_t" / "__init__.py").write_text("import clash_deep_t\n")
    (c / "clash_deep_t.py").write_text("D = 2\n")
    (a / "clash_more_t.py").write_text("def later():\n    import clash_base_t\n    return clash_base_t.B\n")
    (a / "clash_base_t.py").write_text("B = 1\n")
    (b / "clash_base_t.py").write_text("B = 2\n")
    (s / "clash_rand_t.py").write_text("import random\nfrom reporter.scoring import register_scorer\n\n"
                                       "@register_scorer('clash_rand_score')\ndef score(response, answer, item=None):\n"
                                       "    return float(random.Random(0).random() < 2)\n")
    (s / "random.py").write_text("raise RuntimeError('the stray file ran')\n")
    try:
        import_plugin(str(a / "clash_pa_t.py"))
        with pytest.raises(UserError) as e:
            import_plugin(str(c / "clash_pc_t.py"))
        assert f"it imports 'clash_deep_t', which lies beside it ({c / 'clash_deep_t.py'})" in str(e.value)
        import_plugin(str(a / "clash_more_t.py"))
        with pytest.raises(UserError) as e:
            import_plugin(str(b / "clash_base_t.py"))
        assert f"--plugin {a / 'clash_more_t.py'} imports 'clash_base_t' from beside it" in str(e.value)
        capsys.readouterr()
        import_plugin(str(s / "clash_rand_t.py"))
        assert SCORERS.get("clash_rand_score")("", "") == 1.0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"warning: --plugin {s / 'clash_rand_t.py'}: it imports 'random', "
                                                  f"and the file beside it ({s / 'random.py'}) is not what it gets")
    finally:
        SCORERS.remove("clash_rand_score")
        for name in ("clash_helpers_t", "clash_deep_t", "chelpers_t", "clash_base_t"):
            sys.modules.pop(name, None)


def test_two_plugin_files_of_one_name_in_two_folders_each_keep_their_own_record(tmp_path):
    """``--plugin a/plug.py --plugin b/plug.py`` shared the module name ``reporter_plugin_plug``: the second replaced
    the first's record, so what the first registered was said to come from b/plug.py and its file left the plugins'
    code. Each keeps its own module and record now, and each entry names its own file."""
    import sys

    from reporter.plugin_import import _PLUGIN_MODULES, import_plugin
    from reporter.scoring import SCORERS

    files = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        f = tmp_path / folder / "same_name_plug_t.py"
        f.write_text(f"from reporter.scoring import register_scorer\n\n@register_scorer('same_name_{folder}')\n"
                     "def score(response, answer, item=None):\n    return 1.0\n")
        files.append(f)
    try:
        mods = [import_plugin(str(f)) for f in files]
        assert mods[0] is not mods[1] and mods[0].__name__ != mods[1].__name__
        assert {_PLUGIN_MODULES[m.__name__] for m in mods} == {str(f) for f in files}
        assert [SCORERS.origin(f"same_name_{d}") for d in ("a", "b")] == [f"--plugin {f}" for f in files]
        assert import_plugin(str(files[1])) is mods[1] and import_plugin(str(files[0])) is mods[0]  # once each
    finally:
        for d in ("a", "b"):
            SCORERS.remove(f"same_name_{d}")
        sys.modules.pop("same_name_plug_t", None)


def test_a_plugin_named_as_a_module_that_is_another_plugins_helper_is_refused(tmp_path, monkeypatch, capsys):
    """``--plugin b/p.py`` (which imports ``b/mod_clash_m.py``) then ``--plugin mod_clash_m`` from a folder with its own
    ``mod_clash_m.py``: Python gave the second the first's helper, so the plugin that ran was not the one named. Now
    one line naming both files; a module name that nothing has loaded yet imports as before, and one the process has
    from the Python environment (``textwrap``, with a textwrap.py in the folder) imports it with one warning."""
    import sys

    from reporter.plugin_import import import_plugin

    b, cwd = tmp_path / "b", tmp_path / "cwd"
    b.mkdir()
    cwd.mkdir()
    (b / "p_clash_m.py").write_text("import mod_clash_m\n")
    (b / "mod_clash_m.py").write_text("WHO = 'b'\n")
    (cwd / "mod_clash_m.py").write_text("WHO = 'cwd'\n")
    (cwd / "mod_clash_fresh.py").write_text("WHO = 'fresh'\n")
    monkeypatch.chdir(cwd)
    try:
        import_plugin(str(b / "p_clash_m.py"))
        with pytest.raises(UserError) as e:
            import_plugin("mod_clash_m")
        assert str(e.value) == (f"--plugin mod_clash_m: 'mod_clash_m' is found at {(cwd / 'mod_clash_m.py').resolve()}, "
                                "but this process already has a module 'mod_clash_m' from "
                                f"{(b / 'mod_clash_m.py').resolve()}; Python keeps one module per name, so the plugin "
                                "would run that one: give one of them another name")
        assert import_plugin("mod_clash_fresh").WHO == "fresh"
        (cwd / "textwrap.py").write_text("raise RuntimeError('the stray file ran')\n")  # the stdlib's is loaded
        capsys.readouterr()
        assert import_plugin("textwrap") is sys.modules["textwrap"]  # the environment's, as before: said, not refused
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"warning: --plugin textwrap: 'textwrap' is found at {cwd / 'textwrap.py'}"
                                                  ", but this process has 'textwrap' from the Python environment")
    finally:
        for name in ("mod_clash_m", "mod_clash_fresh"):
            sys.modules.pop(name, None)
