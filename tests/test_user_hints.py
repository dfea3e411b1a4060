"""What a user who gets something wrong is told: found by an adversarial review of the command line (2026-12-07).

Each test is one of its findings: the run directory named by the date, random shapes validate passed and the model
could not build, local models of a family reporter has no adapter for, model load failures that named no model, a
profile and a models file given in each other's place, ``--pair`` with model names holding '=', ``output:`` under a
file, ``--plugin`` naming a folder, a refused resume that named only two hashes, and YAML's own words for booleans.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest
import torch
from click.testing import CliRunner

from reporter.cli import main

from .conftest import small_tokenizer_dir

TINY = "{layers: 1, hidden: 32, intermediate: 48, heads: 2, tokenizer: %s}"


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line(r) -> str:
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_a_run_in_the_date_named_directory_says_where_to_resume_on_another_day(tmp_path, monkeypatch, capsys):
    """Without -o the run directory is reports/<stem>-<date>: the same command tomorrow started a new run, while the
    lines said "rerun the same command to resume". A failed model's lines and an interrupt's now name the directory
    and the -o that resumes it."""
    from reporter.cli_boundary import interrupted

    monkeypatch.chdir(tmp_path)
    from tests.conftest import tiny_lm

    lm = tiny_lm("llama", vocab="small")
    with torch.no_grad():
        lm.model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")  # fails at its first pass
    lm.model.save_pretrained(tmp_path / "broken")
    lm.tokenizer.save_pretrained(tmp_path / "broken")
    (tmp_path / "profile.yaml").write_text("lpp: {enabled: false}\nsmoke_texts: 2\ntasks:\n"
                                           "  - {name: arc_easy, limit: 2, max_new_tokens: 4}\n")
    (tmp_path / "nightly.yaml").write_text("profile: profile.yaml\nmodels:\n  - {name: b, source: ./broken, "
                                           "kind: base}\n")
    r = _cli("run", "nightly.yaml", "--no-progress", "--no-render")
    where = f"reports/nightly-{dt.date.today().isoformat()}"
    assert r.exit_code == 2 and (tmp_path / where / "manifest.json").is_file()
    assert f"error: {where} is named by today's date: to resume it on another day, rerun with -o {where}" in r.stderr
    r = _cli("run", "nightly.yaml", "-o", "mine", "--no-progress", "--no-render")  # named by the user: no such line
    assert r.exit_code == 2 and "named by today's date" not in r.stderr
    # the next day the same command starts a new directory: it says at once which one it would have resumed
    import shutil

    before = f"reports/nightly-{(dt.date.today() - dt.timedelta(days=1)).isoformat()}"
    (tmp_path / where).rename(tmp_path / before)
    r = _cli("run", "nightly.yaml", "--no-progress", "--no-render")
    assert r.stderr.startswith(f"note: {before}: holds an unfinished run of this file (0 of 1 models complete); this "
                               f"run starts a new directory, {where}: to finish that one instead, stop this one "
                               f"(Ctrl-C) and rerun with -o {before}\n"), r.stderr
    for args, why in ((["--seed", "9"], "another seed: it would not resume there"), ([], "that run finished")):
        shutil.rmtree(tmp_path / where)
        if why == "that run finished":
            res = json.loads((tmp_path / before / "results.json").read_text())
            res["models"]["b"]["status"] = "complete"
            (tmp_path / before / "results.json").write_text(json.dumps(res))
        r = _cli("run", "nightly.yaml", "--no-progress", "--no-render", *args)
        assert "note: " not in r.stderr, (why, r.stderr)
    capsys.readouterr()  # what saving the model printed
    with pytest.raises(SystemExit) as stop:
        interrupted(KeyboardInterrupt(), "run", None, began=True, where=where)
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == (f"interrupted: finished work is saved in {where}; rerun the same command "
                                               f"to resume (on another day, with -o {where})")


ARCHS = ["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gpt2", "gpt_neox", "opt"]
SHAPES = [(60, 4), (64, 4), (64, 5), (128, 128), (36, 6), (48, 6)]


@pytest.mark.parametrize("arch", ARCHS)
def test_validate_accepts_a_random_shape_exactly_when_the_model_builds_and_runs(arch):
    """``hidden: 60, heads: 4`` (a head size of 15) passed validate and failed as the model was built, and the
    suggested fix of ``hidden: 64, heads: 5`` ("e.g. hidden 65") failed the same way. The rule is checked against
    transformers itself: a shape passes exactly when its model builds and runs a forward pass, and the size the
    refusal suggests does."""
    from transformers import AutoModelForCausalLM

    from reporter.models.preflight import check_random_shape
    from reporter.models.random_archs import random_config

    def runs(hidden: int, heads: int) -> bool:
        try:
            cfg = random_config(arch, 64, layers=1, hidden=hidden, intermediate=16, heads=heads, kv_heads=heads)
            model = AutoModelForCausalLM.from_config(cfg)
            with torch.no_grad():
                model(torch.tensor([[1, 2, 3]]))
            return True
        except Exception:  # noqa: BLE001 - any failure to build or run is a shape the check must refuse
            return False

    for hidden, heads in SHAPES:
        problem = check_random_shape(arch, {"hidden": hidden, "heads": heads, "kv_heads": heads})
        assert (problem is None) == runs(hidden, heads), (arch, hidden, heads, problem)
        if problem is not None:
            suggested = int(problem.rsplit("e.g. hidden ", 1)[1])
            assert runs(suggested, heads), (arch, heads, problem)


def test_a_local_model_of_a_family_without_an_adapter_is_refused_by_validate(tmp_path):
    """``model_type: bert`` (or none) in a local model's config.json passed validate; the run then loaded the
    weights and failed with a line naming neither the model nor the file."""
    from tests.conftest import tiny_lm

    lm = tiny_lm("llama", vocab="small")
    for name, edit in (("bert", {"model_type": "bert"}), ("none", None)):
        d = tmp_path / "my models" / name
        lm.model.save_pretrained(d)
        lm.tokenizer.save_pretrained(d)
        cfg = json.loads((d / "config.json").read_text())
        if edit is None:
            cfg.pop("model_type")
        else:
            cfg.update(edit)
        (d / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "sub dir").mkdir()
    (tmp_path / "sub dir" / "m.yaml").write_text("models:\n  - {name: ok, source: random:llama, random: "
                                                 + TINY % small_tokenizer_dir() + "}\n"
                                                 "  - {name: a, source: '../my models/bert'}\n"
                                                 "  - {name: c, source: '../my models/none'}\n")
    r = _cli("validate", tmp_path / "sub dir" / "m.yaml")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert ("models[1].source: '../my models/bert': its config.json's model_type 'bert' is not supported; supported: "
            "gemma, gemma2, gemma3") in r.stderr
    assert "models[2].source: '../my models/none': its config.json names no model_type" in r.stderr
    assert "models[0]" not in r.stderr  # the negative control: a supported family
    from reporter.models.adapters import supported_families
    from reporter.models.preflight import BUILTIN_FAMILIES

    assert list(BUILTIN_FAMILIES) == supported_families()  # validate's list, read without importing torch


def test_a_model_that_fails_to_load_is_named_in_its_line(tmp_path, monkeypatch):
    """A load failure reporter raises itself (an unsupported architecture found once loaded, a plugin collector's
    check of the model) gave its line without the model's name, unlike every other model failure."""
    from reporter.collect import job
    from reporter.errors import UserError

    def refuse(spec, **kw):
        raise UserError("architecture 'bert' is not supported; supported: gemma, …")

    monkeypatch.setattr(job, "load_model", refuse)
    (tmp_path / "m.yaml").write_text("models:\n  - {name: first, source: random:llama, random: "
                                     + TINY % small_tokenizer_dir() + "}\n")
    r = _cli("run", tmp_path / "m.yaml", "-o", tmp_path / "run", "--no-progress", "--no-render")
    assert r.exit_code == 2
    assert "error: model 'first': architecture 'bert' is not supported; supported: gemma, …" in r.stderr
    assert json.loads((tmp_path / "run" / "models" / "first" / "error.json").read_text())["error"].startswith(
        "model 'first': architecture 'bert'")


def test_a_profile_and_a_models_file_given_in_each_others_place_are_told_so(tmp_path):
    """Each was refused with a list of unknown keys (eight lines for a profile given as the models file)."""
    (tmp_path / "tiny.yaml").write_text("name: tiny\nlpp: {enabled: false}\ntasks:\n  - {name: arc_easy, limit: 2}\n")
    (tmp_path / "m.yaml").write_text("seed: 3\noutput: runs/x\nmodels:\n  - {name: a, source: random:llama}\n")
    line = _one_line(_cli("validate", tmp_path / "tiny.yaml"))
    assert line == (f"error: {tmp_path / 'tiny.yaml'}: looks like a profile, not a models file (it has lpp:, tasks: "
                    f"and no models:); give it with --profile {tmp_path / 'tiny.yaml'}, and the models file (a list "
                    "of models, or models:) as FILE")
    (tmp_path / "other.yaml").write_text("- {name: b, source: random:llama}\n")
    line = _one_line(_cli("validate", tmp_path / "other.yaml", "--profile", tmp_path / "m.yaml"))
    assert "m.yaml: looks like a models file, not a profile (it has seed:, output:, models:, and no tasks:)" in line
    assert _cli("validate", tmp_path / "m.yaml", "--profile", tmp_path / "tiny.yaml").exit_code == 0  # the right way
    from reporter.config.models import PROFILE_ONLY
    from reporter.config.profile import PROFILE_KEYS

    assert set(PROFILE_ONLY) == set(PROFILE_KEYS) - {"name", "description", "models", "notes", "plugins"}


def test_output_under_a_file_is_refused_by_validate_with_its_key(tmp_path):
    """``output: afile`` (a file) passed validate; the run's line named neither the models file nor the key."""
    (tmp_path / "afile").write_text("x")
    for output, why in (("afile", "is a file"), ("afile/run", "is under a file (afile)")):
        (tmp_path / "m.yaml").write_text(f"output: {tmp_path / output}\nmodels:\n  - {{name: a, source: random:llama}}\n")
        line = _one_line(_cli("validate", tmp_path / "m.yaml"))
        assert line.startswith(f"error: {tmp_path / 'm.yaml'}: output: ") and why in line, line


def test_a_plugin_option_naming_a_folder_is_one_line(tmp_path, monkeypatch):
    """``--plugin "sub dir"`` imported a namespace package, registered nothing and said nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub dir").mkdir()
    (tmp_path / "plugs").mkdir()
    line = _one_line(_cli("--plugin", "sub dir", "list"))
    assert line == "error: --plugin sub dir: is a directory; give a .py file or a module name (a.b.c)"
    line = _one_line(_cli("--plugin", "plugs", "list"))
    assert line.startswith("error: --plugin plugs: is a directory with no code (a namespace package)")


def test_a_refused_resume_names_what_changed(finished_run, tmp_path):
    """An explicit device, another seed: each refused with two config hashes and nothing else; the same models in
    another order (refused too, once) resume, and the card lists them in the file's order."""
    from tests.conftest import copy_run

    run = copy_run(finished_run, tmp_path / "run")
    text = (finished_run.parent / "models.yaml").read_text()
    for name, body, want in (
            ("device", text.replace("seed: 3", "seed: 3\ndevice: cpu"), "changed: config.device: 'auto' → 'cpu'"),
            ("seed", text.replace("seed: 3", "seed: 4"), "changed: config.seed: 3 → 4")):
        (tmp_path / f"{name}.yaml").write_text(body)
        line = _one_line(_cli("run", tmp_path / f"{name}.yaml", "-o", run, "--no-progress", "--no-render"))
        assert "holds a run with a different configuration (config hash" in line and want in line, (name, line)
    lines = text.splitlines()
    models = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("- {name:")]
    swapped = list(lines)
    swapped[models[0]], swapped[models[1]] = lines[models[1]], lines[models[0]]
    (tmp_path / "order.yaml").write_text("\n".join(swapped) + "\n")
    r = _cli("run", tmp_path / "order.yaml", "-o", run, "--no-progress", "--no-render")
    assert r.exit_code == 0 and r.stderr.count("already complete") == 3, r.output
    names = list(json.loads((run / "results.json").read_text())["models"])
    assert names[:2] == ["GPT-2 base", "Llama chat"], names


def test_yaml_booleans_and_nulls_are_written_as_yaml_writes_them(tmp_path):
    (tmp_path / "m.yaml").write_text("models:\n  - {name: a, source: random:llama, random: {seed: -1, layers: true}}\n")
    r = _cli("validate", tmp_path / "m.yaml")
    assert "models[0].random.layers: must be a positive integer, got true" in r.stderr
    assert "models[0].random.seed: must be an integer from 0 to 2**64 - 1, got -1" in r.stderr
