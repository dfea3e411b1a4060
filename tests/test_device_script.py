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


def test_a_child_past_its_time_is_stopped_with_its_children_and_says_so(tmp_path):
    t0 = time.perf_counter()
    # the child starts a grandchild that would outlive it (a memory worker, say): the whole process group must go
    pid_file = tmp_path / "grandchild"
    rec = device.child([sys.executable, "-c", "import subprocess, sys, time; "
                        "p = subprocess.Popen(['sleep', '30']); open(sys.argv[1], 'w').write(str(p.pid)); "
                        "time.sleep(30)", str(pid_file)], timeout=1.0)
    assert time.perf_counter() - t0 < 10
    assert "stopped after" in rec["error"] and "--budget" in rec["error"]
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # killed; gone once init reaps it
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{grandchild}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the grandchild outlived the budget")


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
