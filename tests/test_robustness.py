"""Hostile and careless input, damaged artifacts, interrupted and concurrent runs: every case is a
clear one-line error with exit code 2, or a run that recovers by itself; nothing escapes the run
directory. (The sandbox's own cases are in tests/test_sandbox.py.)"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from reporter.cli import main
from reporter.store.lock import run_lock

from .conftest import rename_model, small_random, tiny_lm, without_timings

DATA = Path(__file__).parent / "data"
TINY = "{layers: 2, hidden: 64, intermediate: 96, heads: 4}"
PROFILE = ("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 2, reference_texts: 2, untrained: true}\n"
           "tasks:\n  - {name: arc_easy, limit: 4, max_new_tokens: 3}\n")


def _write(root: Path, profile: str = PROFILE, models: str | None = None, extra: str = "") -> Path:
    (root / "profile.yaml").write_text(profile)
    models = models or f"models:\n  - {{name: tiny, source: random:llama, random: {TINY}}}\n"
    (root / "models.yaml").write_text(small_random(f"profile: profile.yaml\n{extra}{models}"))
    return root / "models.yaml"


def _run(*args: str):
    return CliRunner().invoke(main, [*args, "--no-progress"] if args[0] == "run" else list(args))


def _one_error(r) -> str:
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    return lines[0]


def _models_section(path: Path) -> dict:
    return without_timings(json.loads(path.read_text())["models"])


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run (no card) of a local model directory (so every analysis reads its artifacts)."""
    root = tmp_path_factory.mktemp("finished")
    lm = tiny_lm("llama")
    lm.model.save_pretrained(root / "local")
    lm.tokenizer.save_pretrained(root / "local")
    _write(root, models=f"models:\n  - {{name: tiny, source: {root / 'local'}, kind: base}}\n")  # copies share it
    r = _run("run", str(root / "models.yaml"), "-o", str(root / "run"), "--no-render")
    assert r.exit_code == 0, r.output
    assert "Loading weights" not in r.output, r.output  # --no-progress hides transformers' own bars too
    return root


def _copy(finished: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished, tmp_path / "w")
    return tmp_path / "w"


# --- 1. nothing escapes the run directory ---------------------------------------------------------

def test_a_task_name_cannot_write_outside_the_run_directory(tmp_path):
    escape = f"../../../../tmp/escape-{uuid.uuid4().hex}"
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}+1?", "a": str(i + 1)}) + "\n" for i in range(3)))
    profile = (f"lpp: {{enabled: false}}\nsmoke_texts: 1\ncontamination: {{verbatim_items: 1, reference_texts: 2}}\n"
               f"tasks:\n  - {{name: '{escape}', type: jsonl, path: d.jsonl, prompt_field: q, answer_field: a, "
               "scorer: numeric, max_new_tokens: 2, shots: 0}\n")
    _write(tmp_path, profile)
    r = _run("run", str(tmp_path / "models.yaml"), "-o", str(tmp_path / "run"), "--no-render")
    assert r.exit_code == 0, r.output
    assert not Path("/tmp", escape.rsplit("/", 1)[1]).exists()
    task_dirs = list((tmp_path / "run" / "models" / "tiny" / "tasks").iterdir())
    assert [d.name for d in task_dirs] == [f"tmp-{escape.rsplit('/', 1)[1]}"]
    assert (task_dirs[0] / "summary.json").is_file()
    assert json.loads((tmp_path / "run" / "results.json").read_text())["models"]["tiny"]["tasks"][escape]["n"] == 3


def test_the_readme_random_example_loads(tmp_path):
    p = _write(tmp_path, models="models:\n  - name: untrained\n    source: random:llama\n    random: {layers: 2, "
                                "hidden: 64, intermediate: 128, heads: 4, kv_heads: 2, vocab: 49152, seed: 0}\n")
    from reporter.config import load_config
    from reporter.models.loading import load_model

    lm = load_model(load_config(p).models[0])
    assert lm.meta["vocab_size"] == 49152 and lm.meta["random_seed"] == 0


# --- 4. silent corruption ---------------------------------------------------------------------

def test_a_damaged_cache_entry_is_detected_and_rebuilt(tmp_path, capsys):
    from reporter.models.packaged import PACKAGED, _cached, cache_problem

    calls = []

    def build(tmp: Path) -> None:
        calls.append(1)
        (tmp / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(3 << 20))
        (tmp / "tokenizer.json").write_text("{}")

    entry = tmp_path / "model"
    pm = PACKAGED["smollm2-135m-instruct"]
    assert _cached(entry, pm, build) == entry and cache_problem(entry) is None and len(calls) == 1
    _cached(entry, pm, build)
    assert len(calls) == 1  # intact: used as it is
    with open(entry / "model.safetensors", "r+b") as fh:  # 1 MiB overwritten in the middle, same size
        fh.seek(1 << 20)
        fh.write(b"\0" * (1 << 20))
    assert cache_problem(entry) == "model.safetensors does not match its checksum"
    assert cache_problem(entry, ("tokenizer.json",)) is None  # the tokenizer alone is still fine
    _cached(entry, pm, build)
    assert len(calls) == 2 and cache_problem(entry) is None and "is damaged" in capsys.readouterr().err
    (entry / "tokenizer.json").write_text('{"trunc')  # a truncated tokenizer
    assert "tokenizer.json" in cache_problem(entry)


@pytest.mark.slow
def test_nan_weights_fail_the_model_with_a_clear_message(tmp_path):
    lm = tiny_lm("llama", vocab="small")
    with torch.no_grad():
        lm.model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    lm.model.save_pretrained(tmp_path / "broken")
    lm.tokenizer.save_pretrained(tmp_path / "broken")
    _write(tmp_path, models="models:\n  - {name: broken, source: ./broken, kind: base}\n"
                            f"  - {{name: fine, source: random:llama, random: {TINY}}}\n")
    r = _run("run", str(tmp_path / "models.yaml"), "-o", str(tmp_path / "run"), "--format", "html")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "error: model 'broken': the model gives NaN or infinite log-probabilities" in r.stderr
    res = json.loads((tmp_path / "run" / "results.json").read_text(),
                     parse_constant=lambda c: pytest.fail(f"results.json holds {c}"))  # no NaN reaches the card
    assert res["models"]["broken"]["status"] == "failed" and res["models"]["fine"]["status"] == "complete"
    assert "broken failed to evaluate: model &#39;broken&#39;: the model gives NaN" in (tmp_path / "run" / "card.html"
                                                                                         ).read_text()
    # failed by a short pass before the model's longer ones: no held-out reference pass was spent on it
    broken = tmp_path / "run" / "models" / "broken"
    assert (broken / "error.json").is_file() and not (broken / "reference_logprobs.npz").exists()


def test_a_model_too_large_to_allocate_fails_alone_in_one_line(tmp_path):
    """A model this machine cannot allocate (here a 9 GB random model under a 6 GiB address-space limit, as on a
    smaller machine): that model fails with one line, the other is evaluated (it was a 50-line traceback that
    stopped the run). A model larger than the machine's whole memory is refused by validation instead."""
    import resource

    _write(tmp_path, models=f"models:\n  - {{name: huge, source: random:llama, random: {{vocab: 35000000, layers: 1, "
                            "hidden: 64, intermediate: 96, heads: 4}}\n"
                            f"  - {{name: fine, source: random:llama, random: {TINY}}}\n")
    limit = 6 << 30
    r = subprocess.run([sys.executable, "-m", "reporter.cli", "run", str(tmp_path / "models.yaml"), "-o",
                        str(tmp_path / "run"), "--no-progress", "--no-render"], capture_output=True, text=True,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: model 'huge': not enough memory to load it (DefaultCPUAllocator: can't allocate memory" in r.stderr
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["models"]["huge"]["status"] == "failed" and res["models"]["fine"]["status"] == "complete"
    _write(tmp_path, models="models:\n  - {name: huge, source: random:llama, random: {vocab: 4000000000, layers: 1, "
                            "hidden: 64, intermediate: 96, heads: 4}}\n")
    line = _one_error(_run("validate", str(tmp_path / "models.yaml")))
    assert "models[0].random: makes a model of about 256 billion parameters" in line and "GiB of memory" in line


def test_truncated_samples_and_a_damaged_npz_are_recomputed(finished, tmp_path):
    w = _copy(finished, tmp_path)
    tdir = w / "run" / "models" / "tiny" / "tasks" / "arc_easy"
    lines = (tdir / "samples.jsonl").read_text().splitlines(keepends=True)
    (tdir / "samples.jsonl").write_text("".join(lines[:2]))  # truncated after the task finished
    data = (tdir / "neurons.npz").read_bytes()
    (tdir / "neurons.npz").write_bytes(data[: len(data) // 2])  # torn zip
    r = _run("analyse", str(w / "run"))  # the analysis survives the damaged file and says so
    assert r.exit_code == 0, r.output
    res = json.loads((w / "run" / "results.json").read_text())
    assert any("neurons.npz is damaged" in n for n in res["analysis"]["notes"])
    # the cut samples are no comparison on other items (compare blamed "different items" on them)
    assert any("tiny / arc_easy: samples.jsonl is missing or holds another number of items than the task's 4" in n
               for n in res["analysis"]["notes"])
    assert [(c["model"], c["task"]) for c in res["analysis"]["above_chance"]] == []  # its only task, cut: no test
    line = _one_error(_run("compare", str(finished / "run"), str(w / "run"), "-o", str(tmp_path / "cmp")))
    assert "samples.jsonl: holds 2 items where arc_easy of tiny has 4 (cut after the task finished)" in line, line
    r = _run("run", str(w / "models.yaml"), "-o", str(w / "run"), "--no-render")
    assert r.exit_code == 0 and "already complete" not in r.output, r.output
    assert len((tdir / "samples.jsonl").read_text().splitlines()) == 4
    assert _models_section(w / "run" / "results.json") == _models_section(finished / "run" / "results.json")


def test_nan_where_reporter_writes_it_is_kept_and_where_it_never_does_is_refused(finished, tmp_path):
    """LPP writes NaN on purpose (the entropy of a prefix a short text does not reach): such an lpp.json is whole,
    and results.json carries it (a review found every resume recomputing it, and analyse refusing the run). A NaN
    score in results.json is refused by render in one line (the card showed "—" beside its interval)."""
    from reporter.analyse.results import write_results
    from reporter.store.checked import document_ok

    w = _copy(finished, tmp_path)
    lpp = w / "run" / "models" / "tiny" / "lpp.json"
    lpp.write_text(json.dumps({"entropy_floor": 1.5, "participation_ratio": 2.0, "effective_rank": 3.0,
                               "per_prefix": [{"m": 8, "entropy": float("nan")}]}))
    assert document_ok(lpp, "lpp")
    entropy = write_results(w / "run")["models"]["tiny"]["lpp"]["per_prefix"][0]["entropy"]
    assert entropy != entropy  # NaN, kept
    res = json.loads((w / "run" / "results.json").read_text())
    res["models"]["tiny"]["tasks"]["arc_easy"]["score"] = float("nan")
    (w / "run" / "results.json").write_text(json.dumps(res))
    line = _one_error(_run("render", str(w / "run"), "--format", "md"))
    assert f"{w / 'run' / 'results.json'}: models.tiny.tasks.arc_easy.score: nan is not a number reporter writes" \
        in line, line


def test_a_removed_neurons_file_is_named_not_silently_dropped(finished, tmp_path):
    """MUI measured, its neurons.npz deleted: diversity and the core set left the model out without a word."""
    w = _copy(finished, tmp_path)
    (w / "run" / "models" / "tiny" / "tasks" / "arc_easy" / "neurons.npz").unlink()
    assert _run("analyse", str(w / "run")).exit_code == 0
    notes = json.loads((w / "run" / "results.json").read_text())["analysis"]["notes"]
    assert "tiny / arc_easy: neurons.npz is missing although MUI was measured; diversity and the core set leave the " \
           "task out (rerun `reporter run` to recompute it)" in notes


def test_a_summary_that_is_no_json_object_and_a_damaged_work_record_are_recomputed(finished, tmp_path):
    """A summary.json holding a JSON list, a model_work.json that is not JSON: analyse names the damaged summary in
    one line (it was a TypeError traceback), and a rerun recomputes it and rewrites the record (every rerun stopped
    on the record before), to the same results."""
    w = _copy(finished, tmp_path)
    mdir = w / "run" / "models" / "tiny"
    (mdir / "tasks" / "arc_easy" / "summary.json").write_text("[1, 2]")
    (mdir / "model_work.json").write_text("xx")
    line = _one_error(_run("analyse", str(w / "run")))
    assert "summary.json: damaged, not a JSON object (a list)" in line, line
    from reporter.run.manifest import collection_record, model_work_record
    from reporter.store.layout import RunDir

    assert "arc_easy" not in collection_record(RunDir(w / "run")).get("tiny", {})  # a record skips it, never raises
    assert model_work_record(RunDir(w / "run")) == {}
    r = _run("run", str(w / "models.yaml"), "-o", str(w / "run"), "--no-render")
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert isinstance(json.loads((mdir / "model_work.json").read_text()), dict)
    assert _models_section(w / "run" / "results.json") == _models_section(finished / "run" / "results.json")


@pytest.mark.parametrize("damage, want", [
    ("score", "summary.json: damaged (score: 'high' is not of type 'number'); rerun `reporter run`"),
    ("nan", "summary.json: damaged (ci_high: nan is not a number reporter writes (finite values only))"),
    ("model", "model.json: damaged (n_params: 'many' is not of type 'integer', 'null')"),
])
def test_an_artifact_that_parses_but_is_not_what_reporter_wrote_is_damaged(finished, tmp_path, damage, want):
    """A wrong-typed score, a NaN, a model.json of another shape: valid JSON, but not what its schema says. analyse
    named results.json (or raised a TypeError from the correlations); now one line names the file and the key, and
    a rerun recomputes it to the same results (resume had trusted it, since it parsed)."""
    w = _copy(finished, tmp_path)
    mdir = w / "run" / "models" / "tiny"
    summary = mdir / "tasks" / "arc_easy" / "summary.json"
    if damage == "model":
        doc = json.loads((mdir / "model.json").read_text())
        (mdir / "model.json").write_text(json.dumps({**doc, "n_params": "many"}))
    else:
        doc = json.loads(summary.read_text())
        doc.update({"score": "high"} if damage == "score" else {"ci_high": float("nan")})
        summary.write_text(json.dumps(doc))
    line = _one_error(_run("analyse", str(w / "run")))
    assert want in line and str(w / "run" / "models" / "tiny") in line, line
    r = _run("run", str(w / "models.yaml"), "-o", str(w / "run"), "--no-render")
    assert r.exit_code == 0 and "already complete" not in r.output, r.output
    assert _models_section(w / "run" / "results.json") == _models_section(finished / "run" / "results.json")


def test_analyse_does_not_replace_a_good_result_when_the_artifacts_are_gone(finished, tmp_path):
    """models/ deleted or moved: analyse rewrote results.json with every model "pending", exit 0."""
    w = _copy(finished, tmp_path)
    before = (w / "run" / "results.json").read_bytes()
    shutil.rmtree(w / "run" / "models")
    line = _one_error(_run("analyse", str(w / "run")))
    assert "none of the run's models has its artifacts there (deleted or moved?)" in line, line
    assert (w / "run" / "results.json").read_bytes() == before


def test_a_run_made_before_non_ascii_names_got_their_hash_is_still_read(finished, tmp_path):
    """A model named "tiny 日本" had its artifacts in models/tiny; its directory name now has a hash, and analyse
    of the old run must still find them (it marked the model pending)."""
    w = _copy(finished, tmp_path)
    man = json.loads((w / "run" / "manifest.json").read_text())
    man["resolved"]["config"]["models"][0]["name"] = "tiny 日本"
    (w / "run" / "manifest.json").write_text(json.dumps(man))
    meta = json.loads((w / "run" / "models" / "tiny" / "model.json").read_text())  # as that run wrote it
    (w / "run" / "models" / "tiny" / "model.json").write_text(json.dumps({**meta, "name": "tiny 日本"}))
    assert _run("analyse", str(w / "run")).exit_code == 0
    res = json.loads((w / "run" / "results.json").read_text())
    assert res["models"]["tiny 日本"]["status"] == "complete" and res["models"]["tiny 日本"]["slug"] == "tiny"


# --- 5. resume after a torn line ----------------------------------------------------------------

def test_a_torn_last_line_resumes_in_one_rerun_to_the_same_results(finished, tmp_path):
    w = _copy(finished, tmp_path)
    tdir = w / "run" / "models" / "tiny" / "tasks" / "arc_easy"
    for name in ("summary.json", "neurons.npz", "logprobs.npz", "verbatim.json"):
        (tdir / name).unlink()
    lines = (tdir / "samples.jsonl").read_text().splitlines(keepends=True)
    (tdir / "samples.jsonl").write_text(lines[0] + lines[1][:25])  # killed in the middle of a write
    r = _run("run", str(w / "models.yaml"), "-o", str(w / "run"), "--no-render")
    assert r.exit_code == 0, r.output
    assert all(json.loads(line) for line in (tdir / "samples.jsonl").read_text().splitlines())
    assert _models_section(w / "run" / "results.json") == _models_section(finished / "run" / "results.json")


# --- 6. one run per directory ---------------------------------------------------------------------

def test_a_second_run_on_a_directory_in_use_is_refused(finished, tmp_path):
    w = _copy(finished, tmp_path)
    with run_lock(w / "run"):
        line = _one_error(_run("run", str(w / "models.yaml"), "-o", str(w / "run"), "--no-render"))
    assert f"run directory is in use by pid {os.getpid()}" in line
    with run_lock(w / "run"):  # analyse rewrites results.json: not under a run still writing its artifacts
        line = _one_error(_run("analyse", str(w / "run")))
    assert f"run directory is in use by pid {os.getpid()}" in line
    assert _run("run", str(w / "models.yaml"), "-o", str(w / "run"), "--no-render").exit_code == 0
    assert _run("analyse", str(w / "run")).exit_code == 0
    (w / "run" / ".lock").unlink()
    (w / "run" / ".lock").mkdir()  # a .lock that is a directory: one line, not IsADirectoryError
    line = _one_error(_run("analyse", str(w / "run")))
    assert "cannot take the run directory's lock" in line and "Is a directory" in line


# --- 7. no hangs on hostile YAML ---------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)) + \
    "models:\n  - {name: m, source: random:llama, dtype: *i}\n"


@pytest.mark.parametrize("case", ["bomb", "large", "dev-zero", "profile-bomb"])
def test_hostile_yaml_fails_fast_with_one_line(case, tmp_path):
    if case == "bomb":
        (tmp_path / "m.yaml").write_text(BOMB)
        target, want = tmp_path / "m.yaml", "YAML aliases (*a) are not supported"
    elif case == "large":
        (tmp_path / "m.yaml").write_text("models:\n" + "  - {name: m, source: random:llama}\n" * 1_500_000)
        target, want = tmp_path / "m.yaml", "too large for a YAML file"
    elif case == "dev-zero":
        target, want = Path("/dev/zero"), "is not a regular file"
    else:
        (tmp_path / "p.yaml").write_text(BOMB.replace("models:\n  - {name: m, source: random:llama, dtype: *i}\n",
                                                      "tasks: [{name: arc_easy, limit: *i}]\n"))
        (tmp_path / "m.yaml").write_text(f"profile: {tmp_path / 'p.yaml'}\nmodels: [{{name: m, source: random:llama}}]\n")
        target, want = tmp_path / "m.yaml", "YAML aliases"
    cmd = ["run", str(target), "-o", str(tmp_path / "out")] if case == "profile-bomb" else ["validate", str(target)]
    returncode, stderr, peak_rss_mb = _run_measured([sys.executable, "-m", "reporter.cli", *cmd], tmp_path)
    assert returncode == 2 and want in stderr and len(stderr.strip().splitlines()) == 1, stderr
    # Refused before anything is expanded or read whole: the bomb expands to 9**9 list entries (> 3 GB),
    # /dev/zero never ends, the large file is 60 MB of text (~10x that parsed); the command itself needs ~40 MB here.
    assert peak_rss_mb < 600, f"peak RSS {peak_rss_mb:.0f} MB: the input was read or expanded before the refusal"
    assert not (tmp_path / "out").exists()


def _run_measured(argv: list[str], tmp_path: Path) -> tuple[int, str, float]:
    """Run ``python -m MODULE ARGS``; its exit code, stderr and the process's own peak RSS in MB.

    The peak is the process's VmHWM, read at exit (rusage's maxrss would count the forking parent's
    pages). A hang guard kills it after 120 s: a hang fails the test, it is not a timing assertion.
    """
    hwm = tmp_path / "vmhwm.txt"
    wrapper = ("import atexit, runpy, sys\n"
               "def _hwm():\n"
               "    line = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
               f"    open({str(hwm)!r}, 'w').write(line.split()[1])\n"
               "atexit.register(_hwm)\n"
               "mod = sys.argv[1]; sys.argv = [mod] + sys.argv[2:]\n"
               "runpy.run_module(mod, run_name='__main__', alter_sys=True)\n")
    assert argv[1] == "-m"
    r = subprocess.run([argv[0], "-c", wrapper, *argv[2:]], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr, int(hwm.read_text()) / 1024


# --- 8. chart injection -------------------------------------------------------------------------

@pytest.mark.browser
def test_a_hostile_model_name_leaves_every_chart_rendering(tmp_path):
    from .test_card import _assert_charts_drawn, _open_in_chromium

    payload = 'x<!--<script>alert(1)</script>&"'
    run = tmp_path / "run"
    shutil.copytree(DATA / "run2", run)
    rename_model(run, "smol", payload)
    r = _run("render", str(run), "--format", "html")
    assert r.exit_code == 0, r.output
    html = (run / "card.html").read_text()
    assert "<!--<script>" not in html.split('id="chart-specs">', 1)[1].split("</script>", 1)[0]
    dom, console = _open_in_chromium(run / "card.html", tmp_path / "profile")
    _assert_charts_drawn(dom, console, {"task_scores", "law_pooled", "mui_layers"})
    assert "alert(1)" not in console


# --- 9. unchecked inputs to render and analyse ------------------------------------------------

@pytest.mark.parametrize("damage, command, want", [
    ({"schema_version": 99}, "render", "schema_version: '99' is not supported; this reporter reads version 1"),
    ({"schema_version": "banana"}, "render", "schema_version: 'banana' is not supported"),
    ("no-version", "render", "results.json: schema_version: missing; not a results.json reporter wrote"),
    ("negative-n", "render", ".tasks.arc_easy.n: expected a count (an integer >= 0), got -5"),  # "n=-5" on the card
    ("truncate-results", "render", "results.json: damaged, not valid JSON at line"),
    ("truncate-manifest", "analyse", "manifest.json: damaged, not valid JSON at line"),
    ("truncate-manifest", "render", "it records how the run was made and only `reporter run … --force` into"),
    ("empty-manifest", "analyse", "manifest.json: is not a run's manifest (no config_hash and resolved configuration)"),
])
def test_damaged_run_files_are_one_line_errors(damage, command, want, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "run2", run)
    if isinstance(damage, dict):
        res = json.loads((run / "results.json").read_text())
        (run / "results.json").write_text(json.dumps({**res, **damage}))
    elif damage == "negative-n":
        res = json.loads((run / "results.json").read_text())
        next(iter(res["models"].values()))["tasks"]["arc_easy"]["n"] = -5
        (run / "results.json").write_text(json.dumps(res))
    elif damage == "no-version":
        (run / "results.json").write_text(json.dumps({"models": 5}))
    elif damage == "truncate-results":
        (run / "results.json").write_text((run / "results.json").read_text()[:500])
    elif damage == "truncate-manifest":
        (run / "manifest.json").write_text((run / "manifest.json").read_text()[:300])
    else:
        (run / "manifest.json").write_text("{}")
    line = _one_error(_run(command, str(run)))
    assert want in line
    assert not (run / "card.html").exists()


# --- 10. bad input is caught before anything loads, and leaves no run directory ---------------------

def _jsonl_profile(path: str, extra: str = "") -> str:
    return ("lpp: {enabled: false}\ntasks:\n  - {name: mine, type: jsonl, path: " + path
            + ", prompt_field: q, answer_field: a, scorer: exact" + extra + "}\n")


BAD = {
    "non-utf8 models file": (None, None, "not UTF-8 text"),
    "output is a file": (PROFILE, "output: {tmp}/taken\n", "models.yaml: output: "),  # validate names the key now
    "output under a file": (PROFILE, "output: {tmp}/taken/sub\n", "is under a file (taken)"),
    "task name is a number": ("tasks:\n  - {name: 123}\n", None, "tasks[0].name: must be a non-empty string, got 123"),
    "task name is a list": ("tasks:\n  - {name: [a, b]}\n", None, "tasks[0].name: must be a non-empty string"),
    "corpus is a number": ("lpp: {corpus: 42}\ntasks: [arc_easy]\n", None, "lpp.corpus: must be coqa"),
    "negative seed": (PROFILE, "seed: -1\n", "seed: must be an integer from 0"),
    "300-character name": (PROFILE, None, "models[0].name: is 300 characters long; use at most 100"),
    "empty jsonl": (_jsonl_profile("empty.jsonl"), None, "has no items"),
    "jsonl line not an object": (_jsonl_profile("list.jsonl"), None, "line 1: expected a JSON object"),
    "options not a list": (_jsonl_profile("opts.jsonl", ", choices_field: options"), None,
                           "field 'options' must be a list of 2 to 10 options"),
    "jsonl missing field": (_jsonl_profile("missing.jsonl"), None, "line 1: missing field 'a'"),
    "jsonl bad JSON": (_jsonl_profile("bad.jsonl"), None, "line 2: not valid JSON"),
    "jsonl is a directory": (_jsonl_profile("adir"), None, "is a directory, not a JSON-lines file"),
    "non-utf8 jsonl": (_jsonl_profile("latin1.jsonl"), None, "line 1: not UTF-8 text (byte 0xe9)"),
    "other split for a task that takes none": ("tasks:\n  - {name: hellaswag, other_split: bad.jsonl}\n", None,
                                               "tasks[0].other_split: task 'hellaswag' takes no other split from a "
                                               "file; the tasks that do: arc_challenge, arc_easy, gsm8k, mmlu"),
    "other split file missing": ("tasks:\n  - {name: gsm8k, other_split: nope.jsonl}\n", None,
                                 "tasks[0].other_split: "),
    "other split not a path": ("tasks:\n  - {name: gsm8k, other_split: 3}\n", None,
                               "tasks[0].other_split: must be the path of a JSON-lines file"),
    "other split rows of another data": ("tasks:\n  - {name: gsm8k, other_split: missing.jsonl}\n", None,
                                         "tasks['gsm8k'].other_split: "),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_with_one_line_and_no_run_directory(case, tmp_path):
    profile, extra, want = BAD[case]
    (tmp_path / "taken").write_text("a file")
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    (tmp_path / "opts.jsonl").write_text(json.dumps({"q": "?", "a": "x", "options": 7}) + "\n")
    (tmp_path / "missing.jsonl").write_text(json.dumps({"q": "?"}) + "\n")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"q": "?", "a": "x"}) + "\n{oops\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "latin1.jsonl").write_bytes(b'{"q": "caf\xe9", "a": "x"}\n')
    name = "n" * 300 if case == "300-character name" else "tiny"
    p = _write(tmp_path, profile or PROFILE, f"models:\n  - {{name: {name}, source: random:llama, random: {TINY}}}\n",
               (extra or "").replace("{tmp}", str(tmp_path)))
    if case == "non-utf8 models file":
        p.write_bytes(p.read_bytes().replace(b"tiny", b"t\xffny"))
    out = tmp_path / "out"
    args = ["run", str(p), "--no-render"] + ([] if extra and "output" in extra else ["-o", str(out)])
    line = _one_error(_run(*args))
    assert want in line, line
    assert not out.exists() and not (tmp_path / "taken" / "sub").exists()
    assert sorted(x.name for x in tmp_path.iterdir() if x.is_dir()) == ["adir"]  # nothing else was created


def test_a_read_only_output_directory_is_one_line_and_left_untouched(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    p = _write(tmp_path)
    if os.geteuid() == 0:  # root ignores permission bits: a read-only mount in a private mount namespace
        if not shutil.which("unshare"):
            pytest.fail("unshare (util-linux) is needed to mount a read-only directory as root")
        cmd = ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro none {ro} && exec \"$0\" \"$@\"", sys.executable,
               "-m", "reporter.cli", "run", str(p), "-o", str(ro / "run"), "--no-progress"]
    else:
        ro.chmod(0o555)
        cmd = [sys.executable, "-m", "reporter.cli", "run", str(p), "-o", str(ro / "run"), "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "the run directory cannot be written" in lines[0] and "Read-only file system" in lines[0] or \
        "Permission denied" in lines[0]
    assert not (ro / "run").exists()


# --- 11. relative paths are relative to the models file ---------------------------------------

def test_a_relative_profile_path_is_relative_to_the_models_file(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    _write(tmp_path / "cfg")
    monkeypatch.chdir(tmp_path)  # somewhere else
    r = _run("validate", str(tmp_path / "cfg" / "models.yaml"))
    assert r.exit_code == 0, r.output
    from reporter.config import load_config

    assert load_config(tmp_path / "cfg" / "models.yaml").profile == str(tmp_path / "cfg" / "profile.yaml")


def test_a_bare_model_directory_name_is_relative_to_the_models_file_too(tmp_path, monkeypatch):
    """``source: tiny0`` beside the models file passed validate (which looked beside the file) and then ran as the
    hub id 'tiny0' from any other directory (the run looked in the current one): five hub retries and a failure."""
    from reporter.config import load_config

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "tiny0").mkdir()
    for f in ("config.json", "tokenizer.json", "model.safetensors"):  # what validation reads of a model directory
        (tmp_path / "cfg" / "tiny0" / f).write_text('{"model_type": "llama"}')
    (tmp_path / "cfg" / "models.yaml").write_text("models:\n  - {name: t0, source: tiny0}\n")
    monkeypatch.chdir(tmp_path)  # somewhere else
    assert load_config(tmp_path / "cfg" / "models.yaml").models[0].source == str(tmp_path / "cfg" / "tiny0")


def test_a_home_directory_in_any_path_is_expanded_and_an_unknown_user_is_a_clean_error(tmp_path, monkeypatch):
    """``output: ~/x`` made a directory named '~' in the current one, a JSONL task's ``path: ~/x.jsonl`` was looked
    for beside the profile, and ``~nosuchuser/...`` anywhere was a RuntimeError traceback."""
    from reporter.config import load_config, load_profile

    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "t.jsonl").write_text('{"q": "1+1?", "a": "2"}\n')
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "m.yaml").write_text("output: ~/runs/x\nmodels:\n  - {name: a, source: random:llama}\n")
    assert load_config(tmp_path / "m.yaml").output == str(home / "runs" / "x")
    (tmp_path / "p.yaml").write_text("tasks:\n  - {name: t, type: jsonl, path: ~/data/t.jsonl, prompt_field: q, "
                                     "answer_field: a, scorer: exact}\n")
    assert load_profile(str(tmp_path / "p.yaml")).tasks[0].path == str(home / "data" / "t.jsonl")
    (tmp_path / "n.yaml").write_text("models:\n  - {name: a, source: ~no-such-user-here/model}\n")
    r = _run("validate", str(tmp_path / "n.yaml"))
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert ("models[0].source: local model directory '~no-such-user-here/model' does not exist "
            "('~no-such-user-here' is no home directory on this machine (no such user))") in r.output


def test_a_full_cache_during_a_conversion_is_that_models_failure_saying_where_and_what_to_do(tmp_path, monkeypatch):
    """safetensors reports a full disk as its own SafetensorError ("No space left on device (os error 28)"): the
    model's line named neither the cache nor XDG_CACHE_HOME. Now it is the disk's error on the cache, that model's
    failure alone (a local model needs no conversion and still runs)."""
    import errno

    from reporter.collect import failures
    from reporter.config import parse_config
    from reporter.models import packaged

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    final = tmp_path / "cache" / "reporter" / "models" / "x" / "model"
    final.parent.mkdir(parents=True)

    def full(tmp):
        raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(OSError) as e:
        packaged._cached(final, packaged.PACKAGED["smollm2-135m-instruct"], full)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(final.parent)
    assert not failures.stops_every_model(e.value, str(tmp_path / "run"))  # the cache, not the run's disk
    assert failures.stops_every_model(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "x")),
                                  str(tmp_path / "run"))
    cfg = parse_config({"models": [{"name": "S", "source": "packaged:smollm2-135m-instruct"}]}, "m.yaml")
    (tmp_path / "run" / "models").mkdir(parents=True)
    [line] = failures.crashed(cfg, 0, str(tmp_path / "run"), e.value)
    assert line == (f"model 'S': {final.parent}: No space left on device; reporter keeps converted models and task "
                    f"indexes in its cache {tmp_path / 'cache' / 'reporter'}: free some space there, or set "
                    f"XDG_CACHE_HOME to a directory with room (the traceback is in "
                    f"{tmp_path / 'run' / 'models' / 'S' / 'error.json'})")


def test_a_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    from reporter.installed import cache_root

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache_root() == tmp_path / ".cache" / "reporter"


def test_a_model_whose_error_cannot_be_written_stops_the_run_only_when_every_model_would_meet_it(tmp_path, monkeypatch):
    """Writing a failed model's error.json: a full disk stops the run with the disk's own error (a review found it
    taken for that model's failure while an empty file could still be made); a file where the model's directory
    goes is that model's failure alone."""
    import errno

    from reporter.collect import failures
    from reporter.config import parse_config

    cfg = parse_config({"models": [{"name": "m", "source": "random:llama"}]}, "m.yaml")
    root = tmp_path / "run"
    (root / "models").mkdir(parents=True)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(failures, "write_json", full)
    with pytest.raises(OSError) as e:
        failures.crashed(cfg, 0, str(root), ValueError("the model's own bug"))
    assert e.value.errno == errno.ENOSPC  # the environment's error, not the model's ValueError
    monkeypatch.undo()
    (root / "models" / "m").write_text("in the way")
    (line,) = failures.crashed(cfg, 0, str(root), ValueError("the model's own bug"))
    assert line.startswith("model 'm': failed with ValueError: the model's own bug (") and "File exists" in line


def test_a_run_onto_a_damaged_manifest_says_what_to_do_and_force_makes_it_again(tmp_path):
    """A rerun into a run directory whose manifest.json was cut said only that the file was damaged."""
    _write(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"config_ha')
    r = _run("run", str(tmp_path / "models.yaml"), "-o", str(out), "--no-progress", "--no-render")
    line = _one_error(r)
    assert "manifest.json: damaged" in line and "rerun with --force to make the run again there, or choose another -o" \
        in line, line
    r = _run("run", str(tmp_path / "models.yaml"), "-o", str(out), "--no-progress", "--no-render", "--force")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "manifest.json").read_text())["config_hash"]
