"""A run killed with SIGKILL mid-task and rerun ends with the same results as an uninterrupted run.

Only the killed run is a process of its own (a SIGKILL needs one; it is started as `nohup` starts it and hung up
on first); the uninterrupted run, the rerun and the third run are the same command in the test's process.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from reporter.cli import main

from .conftest import small_tokenizer_dir, tiny_lm, without_timings

N_ITEMS = 40


def _setup(tmp_path):
    lm = tiny_lm("llama", init_std=0.4, seed=3, vocab="small")
    model_dir = tmp_path / "tiny-model"
    lm.model.save_pretrained(model_dir)
    lm.tokenizer.save_pretrained(model_dir)
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus {i % 7}?", "answer": str(i + i % 7)})
                            + "\n" for i in range(N_ITEMS)))
    prof = tmp_path / "profile.yaml"
    prof.write_text(f"""
lpp: {{n_texts: 3, context: 40, min_tokens: 40}}
contamination: {{verbatim_items: 2, reference_texts: 4, untrained: true}}
smoke_texts: 2
tasks:
  - {{name: arith, type: jsonl, path: {data}, prompt_field: question, answer_field: answer, scorer: numeric,
     max_new_tokens: 16}}
  - {{name: arc_easy, limit: 4, max_new_tokens: 4}}
""")
    models = tmp_path / "models.yaml"
    models.write_text(f"""
profile: {prof}
models:
  - {{name: tiny-a, source: {model_dir}, kind: base, max_batch_size: 2}}
  - {{name: tiny-b, source: random:gpt2, random: {{layers: 2, hidden: 64, intermediate: 96, heads: 4, tokenizer: {small_tokenizer_dir()}}},
     max_batch_size: 3}}
""")
    return models


def _run(models, out, **kw):
    return subprocess.Popen([sys.executable, "-m", "reporter.cli", "run", str(models), "-o", str(out), "--no-progress",
                             "--no-render"],  # the results are compared, not the card
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _run_here(models, out):
    """The same command in this process (the imports are paid once): its exit code and output."""
    r = CliRunner().invoke(main, ["run", str(models), "-o", str(out), "--no-progress", "--no-render"])
    return r.exit_code, r.output


def _wait_for_lines(proc, path, n):
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not (path.is_file() and path.read_text().count("\n") >= n):
        time.sleep(0.02)


def _stable(res):
    res.pop("run")
    return without_timings(res)  # the model's load, each task and each evidence pass record their wall time


@pytest.mark.slow
def test_sigkill_mid_task_then_rerun_equals_uninterrupted(tmp_path):
    models = _setup(tmp_path)
    code, output = _run_here(models, tmp_path / "full")  # uninterrupted
    assert code == 0, output

    out = tmp_path / "killed"
    samples = out / "models" / "tiny-a" / "tasks" / "arith" / "samples.jsonl"
    # Started as `nohup` starts it (SIGHUP ignored), the run outlives a closed terminal: a review found that the
    # handler for a closed terminal replaced nohup's. It is hung up on after its first items, must go on to more,
    # and is then killed mid-task.
    proc = _run(models, out, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    _wait_for_lines(proc, samples, 2)
    proc.send_signal(signal.SIGHUP)
    _wait_for_lines(proc, samples, 6)
    assert proc.poll() is None, "a run started with SIGHUP ignored must not stop when hung up on"
    os.kill(proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate()
    assert "interrupted" not in stderr, stderr[-2000:]
    lines = samples.read_text().splitlines()
    assert 6 <= len(lines) < N_ITEMS - 1, "the kill must land in the middle of the task"
    assert not (samples.parent / "summary.json").exists()

    code, output = _run_here(models, out)  # the rerun resumes what the killed process left
    assert code == 0, output
    a = json.loads((tmp_path / "full" / "results.json").read_text())
    b = json.loads((out / "results.json").read_text())
    assert _stable(a) == _stable(b)
    # a base model gets one shot; a jsonl task has no separate split, so one item is held out for it
    assert a["models"]["tiny-a"]["tasks"]["arith"]["n"] == N_ITEMS - 1
    assert a["models"]["tiny-a"]["tasks"]["arith"]["shots"] == 1
    ids = [json.loads(l)["id"] for l in samples.read_text().splitlines()]
    assert len(set(ids)) == N_ITEMS - 1
    # neuron sets are complete for every item, and the per-batch scratch files are gone
    from reporter.store.neurons import load_neuron_sets

    nids, sets, meta = load_neuron_sets(samples.parent / "neurons.npz")
    assert sorted(nids) == sorted(set(ids)) and meta["n_layers"] == 2
    assert not (samples.parent / "neurons").exists()
    # a third run has nothing left to do
    code, output = _run_here(models, out)
    assert code == 0 and output.count("already complete") == 2, output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminated_run_says_its_work_is_kept_and_leaves_no_lock(tmp_path, sig):
    """SIGTERM (a scheduler's stop) and SIGHUP (a closed terminal) end a run like Ctrl-C: the "interrupted" line,
    the lock released (its file stays, as after any run), exit 128 + the signal; they ended it without a word."""
    models = _setup(tmp_path)
    out = tmp_path / "run"
    proc = _run(models, out)
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.glob("models/*/tasks/*/samples.jsonl")):
        time.sleep(0.02)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    # the directory named, as README says of an interrupted run's last line (it said "the run directory" with -o)
    assert f"interrupted: finished work is saved in {out}; rerun the same command" in stderr, stderr
    assert "Traceback" not in stderr
    from reporter.store.lock import run_lock

    with run_lock(out):  # free: a rerun can take it
        pass
