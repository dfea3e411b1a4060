"""``make showcase`` (benchmarks/showcase.py) as a user meets it when its work directory holds an earlier run: reporter's
one-line refusal and exit status, no traceback; ``--force`` reaches ``reporter run``. The models the script would
build are replaced by a tiny ``random:`` one (building them fine-tunes SmolLM2: test_showcase.py covers the claims)."""
from __future__ import annotations

import json

from .conftest import benchmark_script


def _script(tmp_path, monkeypatch):
    sc = benchmark_script("showcase")
    monkeypatch.setattr(sc, "build_release_candidate", lambda: {1: tmp_path / "rc"})
    monkeypatch.setattr(sc, "build_contaminated", lambda limit: (tmp_path / "contaminated", set()))
    monkeypatch.setattr(sc, "prepare_packaged", lambda: None)
    monkeypatch.setattr(sc, "models_yaml", lambda rc, contaminated: {
        "seed": 0, "models": [{"name": "tiny", "source": "random:llama", "kind": "base"}]})
    return sc


def test_a_run_directory_of_another_run_is_refused_in_one_line(tmp_path, monkeypatch, capfd):
    sc = _script(tmp_path, monkeypatch)
    (tmp_path / "out" / "run").mkdir(parents=True)
    (tmp_path / "out" / "run" / "manifest.json").write_text(json.dumps({"config_hash": "0" * 16, "code_version": "0"}))
    assert sc.main(["-o", str(tmp_path / "out")]) == 2
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "holds a run with a different configuration" in err and "--force" in err
    assert not (tmp_path / "out" / "compare").exists()  # nothing compared after a run that did not happen


def test_force_reaches_reporter_run(tmp_path, monkeypatch):
    sc = _script(tmp_path, monkeypatch)
    calls = []
    monkeypatch.setattr(sc, "_reporter", lambda *args: calls.append(args) or 0)
    assert sc.main(["-o", str(tmp_path / "out"), "--force"]) == 0
    assert [c[0] for c in calls] == ["run", "compare"] and "--force" in calls[0]
    assert sc.main(["-o", str(tmp_path / "out")]) == 0 and "--force" not in calls[2]
