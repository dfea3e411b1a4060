"""A plugin's failure is its own: one line naming the task, collector or section, and the rest of the run goes on.

An adversarial user's findings, each for real through ``reporter --plugin FILE run``: a task whose scorer raises or
whose data fails to load stopped the model's later tasks; a collector could overwrite the score, ``n`` and MUI (the
card then showed 99 % outside its own interval, n = 1000 for 2 items); a scorer's 2.0 or a collector's NaN was
written, then called "damaged" on every rerun; a section's broken Jinja was a traceback.
"""
import json
import textwrap

import pytest
from click.testing import CliRunner

from reporter.cli import main

from .conftest import small_tokenizer_dir

PLUGIN = textwrap.dedent('''
    import os
    from reporter.card.sections import Section, register_section
    from reporter.collect.collectors import CollectorPlugin, register_collector
    from reporter.scoring import register_scorer
    from reporter.store.atomic import write_json
    from reporter.tasks import Item, Task, register_task

    @register_scorer("pf_boom")
    def boom(response, item):
        raise RuntimeError("scorer exploded")

    @register_scorer("pf_big")
    def big(response, item):
        return response, 2.0

    def _last_word(response, item):  # reads the answer from the reply's end
        words = response.split()
        return (words[-1] if words else None), float(bool(words) and words[-1] == item["answer"])

    register_scorer("pf_last", answer_last=True)(lambda response, item: _last_word(response, item))
    register_scorer("pf_last_unsaid")(lambda response, item: _last_word(response, item))

    def _items():
        return [Item(f"q{i}", f"Question {i}?", "Paris") for i in range(3)]

    for name, scorer in (("pf_t_boom", "pf_boom"), ("pf_t_big", "pf_big"), ("pf_t_last", "pf_last"),
                         ("pf_t_last_unsaid", "pf_last_unsaid")):
        register_task(name)(lambda name=name, scorer=scorer: Task(name=name, scorer=scorer, instruction="Answer.",
                                                                 answer_prefix="Answer:", load=_items))

    @register_task("pf_t_loadfail")
    def loadfail():
        def load():
            raise RuntimeError("cannot load data")
        return Task(name="pf_t_loadfail", scorer="exact", instruction="A.", answer_prefix="Answer:", load=load)

    @register_task("pf_t_factory")
    def factory():  # a Task without instruction and answer_prefix: the factory itself raises TypeError
        return Task(name="pf_t_factory", scorer="exact", load=_items)

    @register_task("pf_t_one")
    def one():  # the plugin guide's example: one item
        return Task(name="pf_t_one", scorer="exact", instruction="A.", answer_prefix="Answer:",
                    load=lambda: [Item("q1", "Capital of France?", "Paris")])

    @register_task("pf_t_notatask")
    def notatask():
        return {"name": "pf_t_notatask"}

    @register_task("pf_t_missing")
    def missing():  # its data file is gone: that task's failure alone, like any other load that fails
        return Task(name="pf_t_missing", scorer="exact", instruction="A.", answer_prefix="Answer:",
                    load=lambda: open("/nonexistent/pf-data.jsonl").readlines())

    @register_task("pf_t_typo")
    def typo():  # a scorer name misspelt: every model failed after loading
        return Task(name="pf_t_typo", scorer="exacct", instruction="A.", answer_prefix="Answer:", load=_items)

    @register_task("pf_t_renamed")
    def renamed():  # registered under one name, built under another: its results went under the other
        return Task(name="trivia2", scorer="exact", instruction="A.", answer_prefix="Answer:", load=_items)

    @register_task("pf_t_twice")
    def twice():  # two items under one id: the run failed after generation, naming no id
        return Task(name="pf_t_twice", scorer="exact", instruction="A.", answer_prefix="Answer:",
                    load=lambda: _items() + _items()[:1])

    MODE = os.environ.get("PF_MODE", "")

    class _Noop:
        def attach(self, hooks, adapter, batch): pass
        def after_forward(self, batch, logits): pass

    if MODE:
        @register_collector
        class Clobber(CollectorPlugin):
            name = "pf_metric"
            def for_batch(self, batch):
                return _Noop()
            def save_batch(self, collector, batch):
                write_json(batch.task.part_path(self.name, batch.index, ".json"), {"x": 1})
            def batch_done(self, task, batch):
                return task.part_path(self.name, batch, ".json").is_file()
            def finish_task(self, task, samples):
                if MODE == "raise":
                    return {"pf_metric": 1 / 0}
                return {"score": 0.99, "n": 1000} if MODE == "clobber" else {"pf_metric": float("nan")}

    if os.environ.get("PF_EVIDENCE"):
        import json, torch
        from reporter.collect.evidence import EvidencePass, register_evidence

        @register_evidence
        class Probe(EvidencePass):
            name, label, artifact, contamination = "pf_probe", "probe pass", "pf_probe.json", False
            scope = os.environ.get("PF_SCOPE", "task")
            def run(self, ctx):
                if os.environ["PF_EVIDENCE"] == "raise":
                    raise KeyError("oops")
                (ctx.directory / self.artifact).write_text(json.dumps({"grad": torch.is_grad_enabled()}))
                if os.environ["PF_EVIDENCE"] == "half":  # its artifact written, then a failure
                    raise KeyError("after writing")

    if os.environ.get("PF_SECTION"):
        register_section(Section("pf_bad", "Bad section", source="<p>{{ card.models[0].name | }}</p>", order=99))
''')


@pytest.fixture
def files(tmp_path):
    """The plugin's files; what it registers is forgotten after the test (the registries live for the process)."""
    yield from _files(tmp_path)
    from reporter.card.sections import SECTIONS
    from reporter.collect.collectors import COLLECTORS
    from reporter.collect.evidence import EVIDENCE
    from reporter.scoring.scorers import SCORERS
    from reporter.tasks.base import TASKS

    for registry, names in ((SCORERS, ("pf_boom", "pf_big", "pf_last", "pf_last_unsaid")),
                            (TASKS, ("pf_t_boom", "pf_t_big", "pf_t_loadfail", "pf_t_last", "pf_t_last_unsaid",
                                                                            "pf_t_factory", "pf_t_notatask", "pf_t_one", "pf_t_typo", "pf_t_missing",
                                                                            "pf_t_renamed", "pf_t_twice")),
                            (COLLECTORS, ("pf_metric",)), (SECTIONS, ("pf_bad",)), (EVIDENCE, ("pf_probe",))):
        for name in names:
            registry.remove(name)


def _files(tmp_path):
    (tmp_path / "pf_plugin.py").write_text(PLUGIN)
    (tmp_path / "models.yaml").write_text(
        f"models:\n  - {{name: A, source: random:llama, random: {{layers: 1, hidden: 32, intermediate: 48, heads: 2, "
        f"tokenizer: {small_tokenizer_dir()}}}}}\n")

    def profile(*tasks):
        (tmp_path / "profile.yaml").write_text(
            "lpp: {enabled: false}\nsmoke_texts: 1\n"
            "contamination: {verbatim_items: 0, reference_texts: 0, order_items: 0, split_items: 0}\ntasks:\n"
            + "".join(f"  - {{name: {t}, limit: 2, max_new_tokens: 2}}\n" for t in tasks))
        return tmp_path
    yield profile


def _run(root, *extra, env=None):
    return CliRunner(env=env).invoke(main, ["--plugin", str(root / "pf_plugin.py"), "run", str(root / "models.yaml"),
                                            "--profile", str(root / "profile.yaml"), "-o", str(root / "run"),
                                            "--no-progress", *extra])


def _errors(r):
    assert "Traceback" not in r.output, r.output
    return [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]


def test_a_task_that_fails_stops_only_itself(files):
    root = files("arc_easy", "pf_t_boom", "boolq", "pf_t_loadfail", "pf_t_missing", "mmlu")
    r = _run(root, "--no-render")
    errors = _errors(r)
    assert r.exit_code == 2
    assert any("model 'A', task 'pf_t_boom': failed with RuntimeError: scorer exploded (the traceback is in" in e
               for e in errors), errors
    assert any("task 'pf_t_loadfail'" in e and "cannot load data" in e for e in errors), errors
    assert any("task 'pf_t_missing'" in e and "FileNotFoundError" in e for e in errors), errors  # not the model's
    res = json.loads((root / "run" / "results.json").read_text())
    assert set(res["models"]["A"]["tasks"]) == {"arc_easy", "boolq", "mmlu"}  # the later tasks ran
    assert res["models"]["A"]["status"] == "partial"
    tb = json.loads((root / "run" / "models" / "A" / "tasks" / "pf_t_boom" / "error.json").read_text())["traceback"]
    assert "scorer exploded" in tb


@pytest.mark.parametrize("task, want", [
    ("pf_t_factory", "task 'pf_t_factory' could not be built: its factory raised TypeError: "),
    ("pf_t_notatask", "task 'pf_t_notatask' could not be built: its factory returned dict, not a reporter.tasks.Task"),
    ("pf_t_typo", "task 'pf_t_typo' has an unknown scorer 'exacct' (did you mean 'exact'?); available: "),
    ("pf_t_renamed", "task 'pf_t_renamed' is registered under that name but its factory returned a Task named "
                     "'trivia2'; give the Task the name it is registered under"),
])
def test_a_task_factory_that_fails_is_refused_before_a_model_loads(files, task, want):
    """It passed validate; at run time the model failed whole (the held-out reference pass asks every task whether
    it is a probe, outside the guard that lets a task fail alone), and arc_easy never ran."""
    root = files("arc_easy", task)
    for command in ("validate", "run"):
        args = [str(root / "models.yaml"), "--profile", str(root / "profile.yaml")]
        args += ["-o", str(root / "run"), "--no-progress"] if command == "run" else []
        r = CliRunner().invoke(main, ["--plugin", str(root / "pf_plugin.py"), command, *args])
        errors = _errors(r)
        assert r.exit_code == 2 and len(errors) == 1, r.output
        assert f"profile.yaml: tasks['{task}']: {want}" in errors[0], errors
    assert not (root / "run").exists()
    r = CliRunner().invoke(main, ["--plugin", str(root / "pf_plugin.py"), "validate", str(files("arc_easy", "pf_t_boom")
                                                                                           / "models.yaml"),
                                  "--profile", str(root / "profile.yaml")])
    assert r.exit_code == 0, r.output  # negative control: a factory that builds (its scorer fails only at run time)
    # a loader that raises is the task's own failure at run time, even where shots: asks validate to count its data
    (root / "profile.yaml").write_text("lpp: {enabled: false}\ntasks:\n  - {name: pf_t_loadfail, limit: 2, shots: 2}\n")
    r = CliRunner().invoke(main, ["--plugin", str(root / "pf_plugin.py"), "validate", str(root / "models.yaml"),
                                  "--profile", str(root / "profile.yaml")])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output


def test_a_value_reporter_would_call_damaged_is_refused_when_made_not_on_every_rerun(files):
    root = files("pf_t_big", "arc_easy")
    for _ in range(2):  # the same line each time: no "damaged, rerun to recompute" that a rerun cannot fix
        r = _run(root, "--no-render")
        errors = _errors(r)
        assert r.exit_code == 2 and len([e for e in errors if "pf_t_big" in e]) == 1, errors
        line = next(e for e in errors if "pf_t_big" in e)
        assert "its summary would not be what reporter writes (score: 2.0 is greater than the maximum" in line
        assert "damaged" not in line
    assert "arc_easy" in json.loads((root / "run" / "results.json").read_text())["models"]["A"]["tasks"]


@pytest.mark.parametrize("mode, want", [
    ("clobber", "collector 'pf_metric': would overwrite the summary's 'score'; a plugin adds fields of its own"),
    ("nan", "its summary would not be what reporter writes (pf_metric: nan is not a number reporter writes"),
])
def test_a_collector_cannot_rewrite_the_score_or_write_nan(files, mode, want):
    root = files("arc_easy")
    r = _run(root, "--no-render", env={"PF_MODE": mode})
    errors = _errors(r)
    assert r.exit_code == 2 and any(want in e for e in errors), errors
    assert not (root / "run" / "models" / "A" / "tasks" / "arc_easy" / "summary.json").exists()


@pytest.mark.parametrize("env, want", [
    ({"PF_MODE": "raise"}, "error: model 'A', task 'arc_easy', collector 'pf_metric': failed with ZeroDivisionError: "
                           "division by zero"),
    ({"PF_EVIDENCE": "raise"}, "error: model 'A', task 'arc_easy', evidence pass 'pf_probe': failed with KeyError: "
                               "'oops'"),
    ({"PF_EVIDENCE": "raise", "PF_SCOPE": "model"}, "error: model 'A', evidence pass 'pf_probe': failed with "
                                                    "KeyError: 'oops'"),
])
def test_an_unexpected_exception_in_a_plugin_names_the_plugin(files, env, want):
    """A collector's ``finish_task`` or an evidence pass that raised something other than a UserError gave "model 'A',
    task 'arc_easy': failed with ZeroDivisionError…", naming no plugin; the line now names the one that raised."""
    errors = _errors(_run(files("arc_easy"), "--no-render", env=env))
    assert any(e.startswith(want) for e in errors), errors


@pytest.mark.parametrize("scope", ["task", "model"])
def test_an_evidence_pass_that_raises_fails_alone_and_runs_again_on_the_rerun(files, scope):
    """An evidence pass that raised something other than a UserError failed the whole model: its tasks' scores, already
    measured, were off the card as a failed model's, and a model-scope pass (before the tasks) kept every task from
    running. It is now that pass's failure alone: its line names it and where the traceback is, the model's tasks
    are measured and on the card, and the rerun, the bug fixed, measures the pass and drops the traceback."""
    root = files("arc_easy")
    r = _run(root, "--no-render", env={"PF_EVIDENCE": "raise", "PF_SCOPE": scope})
    mdir = root / "run" / "models" / "A"
    where = mdir / "tasks" / "arc_easy" if scope == "task" else mdir
    trace = where / "errors" / "pf_probe.json"
    errors = [e for e in _errors(r) if "pf_probe" in e]
    tail = f"{trace.relative_to(root / 'run').as_posix()})"  # the run directory's path is shortened in the line
    assert r.exit_code == 2 and len(errors) == 1 and "(the traceback is in " in errors[0], errors
    assert errors[0].endswith(tail), errors
    assert "KeyError: 'oops'" in json.loads(trace.read_text())["traceback"]
    assert not (mdir / "error.json").exists()
    results = json.loads((root / "run" / "results.json").read_text())["models"]["A"]
    assert results["status"] != "failed" and results["tasks"]["arc_easy"]["n"] == 2
    assert "errors" not in results  # the traceback is no document of the model's results
    assert results["step_errors"] == {("arc_easy/" if scope == "task" else "") + "pf_probe": "failed with KeyError: 'oops'"}
    r = _run(root, "--no-render", env={"PF_EVIDENCE": "grad", "PF_SCOPE": scope})
    assert r.exit_code == 0, r.output
    assert (where / "pf_probe.json").is_file() and not trace.exists() and not trace.parent.exists()
    assert "already complete" not in r.stderr


def test_an_evidence_pass_runs_without_autograd(files):
    """A pass's forward passes built autograd graphs (and transformers warned of requires_grad) unless its author
    wrapped them in torch.no_grad(); every pass now runs under no_grad."""
    root = files("arc_easy")
    r = _run(root, "--no-render", env={"PF_EVIDENCE": "grad"})
    assert r.exit_code == 0, r.output
    assert json.loads((root / "run" / "models" / "A" / "tasks" / "arc_easy" / "pf_probe.json").read_text()) == \
        {"grad": False}


def test_a_sections_broken_template_is_one_line_naming_it(files):
    root = files("arc_easy")
    assert _run(root, "--no-render", env={"PF_SECTION": "1"}).exit_code == 0  # the plugin is imported once
    r = CliRunner(env={"PF_SECTION": "1"}).invoke(main, ["--plugin", str(root / "pf_plugin.py"), "render",
                                                        str(root / "run"), "--format", "html"])
    errors = _errors(r)
    assert r.exit_code == 2 and len(errors) == 1, r.output
    assert errors[0].startswith("error: card section 'pf_bad': its template fails (TemplateSyntaxError:"), errors
    assert errors[0].endswith(f"fix or remove what registers it (--plugin {root / 'pf_plugin.py'})"), errors


SOURCE_PLUGIN = textwrap.dedent('''
    import dataclasses
    import os

    from reporter.config.sources import SOURCES, ModelSource, SourceModel

    def _load(spec, device, dtype, seed):
        small = dataclasses.replace(spec, source="random:llama", random={
            "layers": 1, "hidden": 32, "intermediate": 48, "heads": 2, "tokenizer": os.environ["PF_TOKENIZER"]})
        loaded = SOURCES.get("random").load(small, device, dtype, seed)
        mode = os.environ["PF_SOURCE"]
        if mode == "tuple":
            return loaded.model, loaded.tokenizer
        if mode == "kind":
            return SourceModel(loaded.model, loaded.tokenizer, kind="chat")
        if mode == "meta":
            return SourceModel(loaded.model, loaded.tokenizer, meta={"source": "somewhere/else"})
        return SourceModel(loaded.model, loaded.tokenizer, kind="base", meta={"mirror": spec.source})

    SOURCES.add("pf_src", ModelSource("pf_src", load=_load))
''')


@pytest.mark.parametrize("mode, want", [
    ("tuple", "error: model 'B': source 'pf_src:': its load returned tuple, not a reporter.config.sources.SourceModel"),
    ("kind", "error: model 'B': source 'pf_src:' returned kind 'chat'; a SourceModel's kind is 'base', 'instruct' or "
             "None"),
    ("meta", "error: model 'B': source 'pf_src:' returned meta key(s) source, which reporter writes itself"),
    ("good", None),
])
def test_a_source_plugins_wrong_return_is_that_models_one_line_failure(files, mode, want):
    """A plugin source's ``load`` that returns a tuple, a kind other than base/instruct, or a ``meta`` key reporter
    writes itself (``source``: the card would name another origin) is that model's one-line failure; the other
    model completes. A good one's ``meta`` reaches results.json beside reporter's own keys."""
    from reporter.config.sources import SOURCES

    root = files("arc_easy")
    (root / "pf_source.py").write_text(SOURCE_PLUGIN)
    size = f"random: {{layers: 1, hidden: 32, intermediate: 48, heads: 2, tokenizer: {small_tokenizer_dir()}}}"
    (root / "models.yaml").write_text(f"models:\n  - {{name: A, source: random:llama, {size}}}\n"
                                      "  - {name: B, source: 'pf_src:x'}\n")
    try:
        r = CliRunner(env={"PF_SOURCE": mode, "PF_TOKENIZER": str(small_tokenizer_dir())}).invoke(main, [
            "--plugin", str(root / "pf_source.py"), "run", str(root / "models.yaml"), "--profile",
            str(root / "profile.yaml"), "-o", str(root / "run"), "--no-progress", "--no-render"])
    finally:
        SOURCES.remove("pf_src")
    errors = _errors(r)
    models = json.loads((root / "run" / "results.json").read_text())["models"]
    assert models["A"]["status"] == "complete"
    if want is None:
        assert r.exit_code == 0 and errors == [], r.output
        assert models["B"]["meta"]["mirror"] == "pf_src:x" and models["B"]["meta"]["source"] == "pf_src:x"
        assert models["B"]["meta"]["kind"] == "base"
    else:
        assert r.exit_code == 2 and models["B"]["status"] == "failed"
        assert any(e.startswith(want) for e in errors), errors


def test_a_plugin_task_too_small_for_a_base_models_default_shot_is_refused_by_validate(files):
    """A plugin's one-item task (the plugin guide's example had one) left nothing to evaluate for a base model, which
    takes one example shot by default: validate said OK and the run failed after loading. Now validate refuses it,
    naming the base model and ``shots: 0``; with ``shots: 0``, or the three-item task, it is OK."""
    root = files("pf_t_one")

    def validate():
        return CliRunner().invoke(main, ["--plugin", str(root / "pf_plugin.py"), "validate", str(root / "models.yaml"),
                                         "--profile", str(root / "profile.yaml")])

    r = validate()
    assert r.exit_code == 2 and _errors(r) == [
        f"error: {root / 'profile.yaml'}: tasks['pf_t_one'].shots: its 1 item(s) would all be taken as few-shot "
        "examples (shots: 1; not set: base model 'A' takes 1 by default), leaving none to evaluate; set shots: 0 or "
        "add items"], r.output
    (root / "profile.yaml").write_text((root / "profile.yaml").read_text().replace("limit: 2,", "limit: 2, shots: 0,"))
    assert validate().exit_code == 0
    files("pf_t_big")
    assert validate().exit_code == 0


def test_a_local_base_model_without_kind_is_known_to_validate_as_loading_decides(files):
    """A local directory without ``kind:`` is a base model where its tokenizer has no chat template: validate now reads
    that from ``tokenizer_config.json`` (and the chat-template files beside it), as loading decides, and refuses the
    one-item plugin task for it; with a chat template the model is instruct (no shots by default) and it is OK."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from reporter.config import ModelSpec
    from reporter.models.loading import load_model

    root = files("pf_t_one")
    local = root / "local-base"
    tok = AutoTokenizer.from_pretrained(small_tokenizer_dir())
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(local)
    tok.chat_template = None
    tok.save_pretrained(local)
    assert not any((local / name).exists() for name in ("chat_template.jinja", "chat_template.json"))
    (root / "models.yaml").write_text(f"models:\n  - {{name: L, source: {local}}}\n")

    def validate():
        return CliRunner().invoke(main, ["--plugin", str(root / "pf_plugin.py"), "validate", str(root / "models.yaml"),
                                         "--profile", str(root / "profile.yaml")])

    assert load_model(ModelSpec(name="L", source=str(local)), run_device="cpu", run_dtype="float32").kind == "base"
    r = validate()
    assert r.exit_code == 2 and _errors(r) == [
        f"error: {root / 'profile.yaml'}: tasks['pf_t_one'].shots: its 1 item(s) would all be taken as few-shot "
        "examples (shots: 1; not set: base model 'L' takes 1 by default), leaving none to evaluate; set shots: 0 or "
        "add items"], r.output
    (local / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    assert load_model(ModelSpec(name="L", source=str(local)), run_device="cpu", run_dtype="float32").kind == "instruct"
    assert validate().exit_code == 0


def test_a_plugin_tasks_two_items_under_one_id_fail_that_task_alone_naming_the_id(files):
    """The run failed after generation with "save_neuron_sets: duplicate item ids", naming no id. The task's failure
    line said "task 'pf_t_twice': task 'pf_t_twice': …", and only the terminal said why: the card called the model
    partial with the task "missing". The reason is now kept in the task's error.json, results.json's
    ``task_errors`` and the card's sentence, and a rerun that measures the task drops it."""
    from reporter.card.data import load_card
    from reporter.card.warnings import card_warnings

    root = files("pf_t_twice", "arc_easy")
    r = _run(root, "--no-render")
    assert r.exit_code == 2
    why = ("item id 'q0' occurs twice among its 4 items; each item needs its own id (results, compare and coreset.json "
           "match items by it)")
    assert _errors(r)[0] == f"error: model 'A', task 'pf_t_twice': {why}"
    res = json.loads((root / "run" / "results.json").read_text())
    assert set(res["models"]["A"]["tasks"]) == {"arc_easy"}  # the other task ran
    assert res["models"]["A"]["task_errors"] == {"pf_t_twice": f"model 'A', task 'pf_t_twice': {why}"}
    said = [w for _, w in card_warnings(load_card(root / "run")) if w.startswith("A is partial")]
    assert said == [f"A is partial: pf_t_twice is missing, so it has no mean score (pf_t_twice failed: {why})."]
    files("arc_easy")  # the task taken off: its failure is no longer the run's
    assert _run(root, "--no-render").exit_code == 0
    assert "task_errors" not in json.loads((root / "run" / "results.json").read_text())["models"]["A"]


def _option_order_raising(files, monkeypatch, error):
    """A run of the untrained model whose option-order pass raises ``error``: its directory and the CLI's result."""
    from reporter.collect.option_order import OptionOrderPass

    def boom(self, ctx):
        raise error

    monkeypatch.setattr(OptionOrderPass, "run", boom)
    root = files("arc_easy")
    (root / "profile.yaml").write_text(
        "lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {untrained: true, verbatim_items: 0, "
        "reference_texts: 0, order_items: 3, order_permutations: 1, split_items: 0}\n"
        "tasks:\n  - {name: arc_easy, limit: 4, max_new_tokens: 2}\n")
    return root, _run(root, "--no-render")


def test_a_built_in_evidence_pass_that_raises_is_named_on_the_card_where_its_test_is_missing(files, monkeypatch):
    """A built-in pass that raised left its test "not measured" with the reason "no option_order.json for this task",
    which sends a reader looking for a file; the reason now says which pass failed, how, and where its traceback is,
    and the other tests of the task were still measured."""
    root, r = _option_order_raising(files, monkeypatch, ValueError("the option-order pass broke"))
    assert r.exit_code == 2 and any("evidence pass 'option_order': failed with ValueError" in e for e in _errors(r))
    results = json.loads((root / "run" / "results.json").read_text())
    assert results["models"]["A"]["tasks"]["arc_easy"]["n"] == 4
    [row] = [row for row in results["analysis"]["contamination"] if row["model"] == "A" and row["task"] == "arc_easy"]
    assert row["signals"]["option_order"]["reason"] == (
        "its pass 'option_order' failed with ValueError: the option-order pass broke (the traceback is in "
        "models/A/tasks/arc_easy/errors/option_order.json); rerun `reporter run` to measure it")


def _contamination_row(root, task="arc_easy"):
    results = json.loads((root / "run" / "results.json").read_text())
    return results, next(row for row in results["analysis"]["contamination"] if row["task"] == task)


def test_a_pass_out_of_memory_fails_alone_saying_what_to_change(files, monkeypatch):
    """Out of memory in an evidence pass (a large batch of option orders) failed the whole model: its measured
    scores left the card, and the line named no pass. It is the pass's failure now, with what to change; the
    scores stay, and the card's test says the pass ran out of memory."""
    root, r = _option_order_raising(files, monkeypatch, RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert r.exit_code == 2 and "error: model 'A', task 'arc_easy', evidence pass 'option_order': ran out of memory " \
        "(CUDA out of memory. Tried to allocate 2.00 GiB); set the model's max_batch_size lower, or use a smaller " \
        "dtype or another device" in _errors(r), _errors(r)
    results, row = _contamination_row(root)
    assert results["models"]["A"]["status"] == "complete" and results["models"]["A"]["tasks"]["arc_easy"]["n"] == 4
    assert row["signals"]["option_order"]["reason"] == (
        "its pass 'option_order' ran out of memory (CUDA out of memory. Tried to allocate 2.00 GiB) (see "
        "models/A/tasks/arc_easy/errors/option_order.json); rerun `reporter run` to measure it")


def test_a_model_only_step_that_failed_is_on_the_card_and_blames_only_what_it_feeds(files, monkeypatch):
    """The held-out reference pass raised: the model was "complete" with nothing on the card saying what was
    missing, and the verbatim test, turned off in the profile, was said to be unmeasured because the reference pass
    failed. The card now says the model-only step failed; Min-K%, which reads it, says so; verbatim keeps its own
    reason. Fixed, the rerun measures it and the failure is gone."""
    from reporter.card.data import load_card
    from reporter.card.warnings import card_warnings
    from reporter.collect.reference import ReferencePass

    def boom(self, ctx):
        raise ValueError("no reference today")

    monkeypatch.setattr(ReferencePass, "run", boom)
    root = files("arc_easy")
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "cache"))  # no model-only cache of the reference: it runs
    prof = ("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {untrained: true, verbatim_items: 0, "
            "reference_texts: REF, order_items: 0, split_items: 0}\ntasks:\n  - {name: arc_easy, limit: 4, "
            "max_new_tokens: 2}\n")
    (root / "profile.yaml").write_text(prof.replace("REF", "4"))
    r = _run(root, "--no-render")
    assert r.exit_code == 2 and any("evidence pass 'reference': failed with ValueError: no reference today" in e
                                    for e in _errors(r)), _errors(r)
    results, row = _contamination_row(root)
    assert results["models"]["A"]["step_errors"] == {"reference": "failed with ValueError: no reference today"}
    assert row["signals"]["min_k"]["reason"].startswith("its pass 'reference' failed with ValueError: no reference "
                                                        "today (the traceback is in models/A/errors/reference.json)")
    assert row["signals"]["verbatim"]["reason"] == "no item was long enough"  # its own reason: verbatim_items 0
    said = [w for _, w in card_warnings(load_card(root / "run")) if w.startswith("A: ")]
    assert said == ["A: its model-only step 'reference' failed with ValueError: no reference today, so what it "
                    "measures is missing from this card; rerun `reporter run` to measure it."]
    monkeypatch.undo()  # the bug fixed: the rerun measures the step, and its failure is gone
    r = _run(root, "--no-render")
    assert r.exit_code == 0 and "step_errors" not in json.loads((root / "run" / "results.json").read_text())[
        "models"]["A"], r.output
    assert not (root / "run" / "models" / "A" / "errors").exists()


def test_a_traceback_that_cannot_be_written_is_not_pointed_at(files):
    """The failure line named a traceback file that could not be written (its folder blocked by a file)."""
    root = files("arc_easy")
    assert _run(root, "--no-render", env={"PF_EVIDENCE": "raise"}).exit_code == 2
    errors = root / "run" / "models" / "A" / "tasks" / "arc_easy" / "errors"
    for f in errors.iterdir():
        f.unlink()
    errors.rmdir()
    errors.write_text("a file where the folder goes")
    r = _run(root, "--no-render", env={"PF_EVIDENCE": "raise"})
    [line] = [e for e in _errors(r) if "pf_probe" in e]
    assert "the traceback is in" not in line and "(its traceback could not be written: " in line, line


def test_a_failed_step_the_narrowed_run_does_not_run_is_not_said_to_have_failed(files, monkeypatch):
    """``--tasks`` narrowed to a generated probe: the held-out reference pass (for benchmarks) no longer runs, so
    the card must not say it failed and that a rerun measures it."""
    from reporter.collect.reference import ReferencePass

    def boom(self, ctx):
        raise ValueError("no reference today")

    monkeypatch.setattr(ReferencePass, "run", boom)
    root = files("arc_easy", "ar")
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "cache"))  # no model-only cache of the reference: it runs
    prof = (root / "profile.yaml").read_text().replace("reference_texts: 0", "reference_texts: 4, untrained: true")
    (root / "profile.yaml").write_text(prof)
    assert _run(root, "--no-render").exit_code == 2
    assert (root / "run" / "models" / "A" / "errors" / "reference.json").is_file()
    r = _run(root, "--no-render", "--tasks", "ar")
    assert r.exit_code == 0, r.output
    assert "step_errors" not in json.loads((root / "run" / "results.json").read_text())["models"]["A"]


def test_an_lm_eval_group_that_fails_says_why_for_each_of_its_tasks(files, monkeypatch):
    """A group's scoring that raised kept its traceback and reason for the group's first task only: the card said
    why that one was missing, and nothing for the others. Each task of the group now keeps it, and the card's
    sentence says it once per task, without the line's own "model …, task …:" words."""
    import reporter.collect.lm_eval_score as score
    from reporter.card.data import load_card
    from reporter.card.warnings import card_warnings

    def boom(*args, **kwargs):
        raise RuntimeError("lm-eval scoring exploded")

    monkeypatch.setattr(score, "score_entry", boom)
    root = files()
    (root / "groups").mkdir()
    (root / "groups" / "mini.yaml").write_text("group: pf_mini\ntask: [mmlu_anatomy, mmlu_astronomy]\n"
                                               "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n"
                                               "metadata:\n  version: 1.0\n")
    (root / "profile.yaml").write_text(
        "lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 0, reference_texts: 0, "
        f"order_items: 0, split_items: 0}}\nlm_eval_include: [packaged, {root / 'groups'}]\n"
        "tasks:\n  - {lm_eval: pf_mini, limit: 2}\n")
    r = _run(root, "--no-render")
    assert r.exit_code == 2, r.output
    results = json.loads((root / "run" / "results.json").read_text())["models"]["A"]
    assert set(results["task_errors"]) == {"mmlu_anatomy", "mmlu_astronomy"}, results.get("task_errors")
    [said] = [w for _, w in card_warnings(load_card(root / "run")) if w.startswith("A is ")]
    assert said.count("failed with RuntimeError: lm-eval scoring exploded") == 2 and "model 'A'" not in said, said


@pytest.mark.parametrize("scope", ["task", "model"])
def test_a_pass_that_failed_after_writing_its_artifact_is_not_said_to_fail_on_every_rerun(files, scope):
    """A pass that wrote its artifact and then raised is done: the rerun skipped it, and a model-scope pass's
    failure stayed on the card ("rerun to measure it") however often the user reran."""
    root = files("arc_easy")
    assert _run(root, "--no-render", env={"PF_EVIDENCE": "half", "PF_SCOPE": scope}).exit_code == 2
    assert "step_errors" in json.loads((root / "run" / "results.json").read_text())["models"]["A"]
    r = _run(root, "--no-render", env={"PF_EVIDENCE": "half", "PF_SCOPE": scope})
    assert r.exit_code == 0, r.output
    assert "step_errors" not in json.loads((root / "run" / "results.json").read_text())["models"]["A"]


def test_a_plugin_scorer_that_reads_the_answer_last_gets_the_cut_warning(files):
    """Replies cut at the token limit and scored 0 were stated on the card for reporter's own answer-last scorers
    only; a plugin's scorer can now say it reads the answer last, its task's summary records it (the analysis needs
    no --plugin), and the card warns. A scorer that does not say so is not checked, as before."""
    from reporter.card.data import load_card
    from reporter.card.warnings import card_warnings

    from .test_golden import _save_local_model

    root = files("pf_t_last", "pf_t_last_unsaid")
    _save_local_model(root / "trained", "llama", 3, small_tokenizer_dir())  # not an untrained reference
    (root / "models.yaml").write_text(f"models:\n  - {{name: T, source: {root / 'trained'}, kind: instruct}}\n")
    r = _run(root, "--no-render")
    assert r.exit_code == 0, r.output
    tasks = json.loads((root / "run" / "results.json").read_text())["models"]["T"]["tasks"]
    assert tasks["pf_t_last"]["answer_last"] is True and "answer_last" not in tasks["pf_t_last_unsaid"]
    said = [w for _, w in card_warnings(load_card(root / "run")) if w.startswith("Replies cut at")]
    assert len(said) == 1 and "T on pf_t_last" in said[0] and "pf_t_last_unsaid" not in said[0], said


def test_the_card_names_the_collector_that_failed_a_task(files):
    """The card's partial-model sentence dropped what named the failing part ("task 'arc_easy', collector
    'pf_metric': failed …" became "arc_easy failed with …"): the plugin's author could not tell whose bug it was."""
    from reporter.card.data import load_card
    from reporter.card.warnings import card_warnings

    root = files("arc_easy")
    assert _run(root, "--no-render", env={"PF_MODE": "raise"}).exit_code == 2
    [said] = [w for _, w in card_warnings(load_card(root / "run")) if w.startswith("A is partial")]
    assert "arc_easy failed: collector 'pf_metric': failed with ZeroDivisionError: division by zero" in said, said
