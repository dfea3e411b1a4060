"""A resumed run takes only artifacts that are still this run's: not those of other weights under the same name,
not those an interrupted ``--force`` left under the new configuration; and a resume keeps the run's creation time.
"""
import json

from click.testing import CliRunner

from reporter.cli import main
from reporter.collect.job import collect_model
from reporter.config import load_config, load_profile
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
    """Interrupted once its manifest is written: resume without --force (with it, it would start over). Interrupted
    before (waiting for a lock, connecting to a cluster): the directory is as it was, and only --force replaces it."""
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
    not_begun = _invoke("run", _files(tmp_path, limit=4), "-o", out, "--force")  # another configuration
    assert forced.exit_code == plain.exit_code == not_begun.exit_code == 130
    assert "rerun it without --force to resume" in forced.output
    assert "rerun the same command to resume" in plain.output and "--force" not in plain.output
    assert "interrupted before the forced run began: the run directory is as it was" in not_begun.output


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
