"""benchmarks/device.py on a device lent for a fixed time: ``--budget`` stops a benchmark still running and skips
the sections after it, and ``--out`` keeps each finished section on disk, so that a lease that runs out still
returns what was measured. (The sections themselves run in ``make device-check``, part of ``make test``.)
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from .conftest import benchmark_script

device = benchmark_script("device")


def _gone(pid: int) -> bool:
    """The process has ended (a zombie left for init to reap counts as ended)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (ProcessLookupError, FileNotFoundError):
        return True


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return False


#: a child that starts a grandchild (a memory worker, say), writes the grandchild's pid, then sleeps
_PARENT = ("import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); "
           "open(sys.argv[1] + '.tmp', 'w').write(str(p.pid)); __import__('os').replace(sys.argv[1] + '.tmp', "
           "sys.argv[1]); time.sleep(60)")


def test_a_child_past_its_time_is_stopped_with_its_children_and_says_so(tmp_path):
    pid_file = tmp_path / "grandchild"
    t0 = time.perf_counter()
    rec = device.child([sys.executable, "-c", _PARENT, str(pid_file)], timeout=4.0)
    assert time.perf_counter() - t0 < 20
    assert "stopped after" in rec["error"] and "--budget" in rec["error"]
    assert pid_file.is_file(), "the child did not start within 4 s"
    assert _wait_gone(int(pid_file.read_text())), "the grandchild outlived the budget"


def test_a_sigterm_to_the_script_ends_the_benchmark_it_runs(tmp_path):
    """Each benchmark leads a process group of its own (so that the budget can kill it whole); a SIGTERM to the
    script, as when a lease ends, must then reach it too."""
    import signal
    import subprocess

    pid_file = tmp_path / "grandchild"
    here = Path(__file__).resolve().parents[1] / "benchmarks"
    script = (f"import sys; sys.path.insert(0, {str(here)!r}); import device; device._stop_on_sigterm(); "
              f"device.child([sys.executable, '-c', {_PARENT!r}, {str(pid_file)!r}])")
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not pid_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.is_file(), "the benchmark did not start"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert _wait_gone(int(pid_file.read_text())), "the benchmark's worker outlived the script"


def test_a_child_within_its_time_returns_its_document():
    rec = device.child([sys.executable, "-c", "print('progress'); print('{\"x\": 1}')"], timeout=30)
    assert rec["returncode"] == 0 and rec["result"] == {"x": 1} and rec["peak_rss_mb"] > 0


def test_no_budget_left_skips_every_section_and_out_keeps_each_record(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(device, "_DEADLINE", [None])
    rc = device.main(["--device", "cpu", "--small", "--budget", "0", "--out", str(tmp_path),
                      "--sections", "hook_overhead,reporter_run"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1  # nothing was measured: that is a problem the document names
    for name in ("hook_overhead", "reporter_run"):
        assert doc[name]["error"].startswith("skipped")
        assert json.loads((tmp_path / f"{name}.json").read_text()) == doc[name]
    assert json.loads((tmp_path / "device.json").read_text())["problems"] == doc["problems"]
    assert any("hook_overhead: skipped" in p for p in doc["problems"])


def test_check_asks_identity_of_the_float32_run_when_there_is_one():
    """bf16 on a GPU: differing responses are reported, not a problem; the float32 identity run decides."""
    def doc(ident):
        sec = {"peak_rss_mb": 1.0, "result": {"identical_responses": {"reporter": False}, "n_differences": 3,
                                              "ratios_to_lm_eval": {"reporter": 1.0}}}
        if ident is not None:
            sec["identity_float32"] = ident
        return {"sections_run": ["throughput_1b"], "throughput_1b": sec}

    assert device.check(doc({"identical_responses": {"reporter": True, "reporter-bare": True}})) == []
    assert device.check(doc({"identical_responses": {"reporter": False}, "n_differences": 2})) == [
        "throughput_1b: float32 responses differ from lm-eval's (2)"]
    assert device.check(doc({"error": "exit 1"})) == ["throughput_1b: the float32 identity run failed: exit 1"]
    assert device.check(doc(None)) == ["throughput_1b: responses differ from lm-eval's (3)"]
