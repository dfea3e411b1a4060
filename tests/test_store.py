"""The run directory on disk: safe names, atomic writes, the ragged-array codec, samples."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from reporter.errors import UserError
from reporter.store.atomic import atomic_directory, atomic_writer, read_json, write_json
from reporter.store.layout import RunDir, slugify
from reporter.store.ragged import load_ragged, merge_ragged, save_ragged
from reporter.store.samples import append_samples, read_samples


@pytest.mark.parametrize("name, slug", [("../../../../tmp/x", "tmp-x"), ("..", "model"), ("/etc/passwd", "etc-passwd"),
                                        ("Qwen/Qwen2.5 0.5B", "Qwen-Qwen2.5-0.5B"), ("ok_name-1.5", "ok_name-1.5"),
                                        ("模型一", "model-1eadccb2"), ("模型二", "model-15a58ccb")])
def test_every_name_becomes_a_safe_path_component(name, slug, tmp_path):
    assert slugify(name) == slug and slugify(slugify(name)) == slug
    rd = RunDir(tmp_path / "run")
    for path in (rd.model_dir(name), rd.task_dir(name, name)):
        assert path.resolve().is_relative_to((tmp_path / "run").resolve())


def test_model_documents_are_every_json_but_the_error(tmp_path):
    rd = RunDir(tmp_path)
    mdir = rd.model_dir("m")
    for name in ("model.json", "smoke.json", "lpp.json", "error.json", "mine.json"):
        write_json(mdir / name, {"f": name})
    (mdir / "reference_logprobs.npz").write_bytes(b"")
    docs = rd.model_documents("m")
    assert list(docs) == ["meta", "lpp", "mine", "smoke"] and docs["meta"].name == "model.json"


def test_atomic_writer_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "a.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic_writer(target, "w") as fh:
            fh.write('{"v": 2, "half')
            raise RuntimeError("killed mid-write")
    assert read_json(target) == {"v": 1} and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    with pytest.raises(RuntimeError):
        atomic_directory(tmp_path / "cache", lambda tmp: (_ for _ in ()).throw(RuntimeError("no")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_ragged_round_trip_dense_fields_and_single_write_merge(tmp_path):
    a, b, out = tmp_path / "a.npz", tmp_path / "b.npz", tmp_path / "out.npz"
    save_ragged(a, ["x", "y"], {"p": [np.array([1.0, 2.0]), np.array([])]}, dense={"span": np.array([[0, 1], [2, 3]])},
                meta={"format": "t/1", "model": "m"})
    save_ragged(b, ["z"], {"p": [np.array([5.0])]}, dense={"span": np.array([[4, 5]])}, meta={"format": "t/1"})
    assert merge_ragged(out, [a, b, a]) == 3  # a again: identical items are kept once
    f = load_ragged(out)
    assert f.item_ids == ["x", "y", "z"] and [r.tolist() for r in f.ragged["p"]] == [[1.0, 2.0], [], [5.0]]
    assert f.dense["span"].tolist() == [[0, 1], [2, 3], [4, 5]] and f.meta == {"format": "t/1", "model": "m"}
    save_ragged(b, [], {"p": []}, dense={"span": np.zeros((0, 2), dtype=np.int64)}, meta={"format": "t/1"})
    assert merge_ragged(out, [b]) == 0 and load_ragged(out).dense["span"].shape == (0, 2)
    save_ragged(b, ["z"], {"p": [np.array([5.0])]}, dense={"span": np.array([[4, 5]])}, meta={"format": "t/2"})
    with pytest.raises(RuntimeError, match="different format"):
        merge_ragged(out, [a, b])
    with pytest.raises(ValueError, match="2 arrays for 1 items"):
        save_ragged(a, ["x"], {"p": [np.array([1.0]), np.array([2.0])]})


def test_samples_skip_a_torn_line(tmp_path):
    p = tmp_path / "samples.jsonl"
    append_samples(p, [{"id": "a", "score": 1.0}, {"id": "b", "score": 0.0}])
    with open(p, "a") as fh:
        fh.write('{"id": "c", "sco')  # killed mid-line
    assert sorted(read_samples(p)) == ["a", "b"]
    assert json.loads(p.read_text().splitlines()[0]) == {"id": "a", "score": 1.0}


def test_a_line_torn_inside_a_utf8_character_is_skipped_and_a_damaged_line_is_refused(tmp_path):
    """A kill can cut the last line inside a multi-byte character (generations are written as UTF-8): that line is
    redone on resume. The same bytes in the middle of the file are damage, refused in one line naming it."""
    p = tmp_path / "samples.jsonl"
    append_samples(p, [{"id": "a", "response": "café"}])
    whole = json.dumps({"id": "b", "response": "naïve"}, ensure_ascii=False).encode()
    cut = whole[:whole.index("ï".encode()) + 1]  # the first byte of 'ï' only
    p.write_bytes(p.read_bytes() + cut)
    assert sorted(read_samples(p)) == ["a"]
    append_samples(p, [{"id": "c"}])  # the torn tail is cut before the next append
    assert sorted(read_samples(p)) == ["a", "c"]
    p.write_bytes(cut + b"\n" + p.read_bytes())
    with pytest.raises(UserError, match=r"samples.jsonl: line 1: not UTF-8 text; the file is damaged"):
        read_samples(p)


@pytest.mark.parametrize("text, reason", [("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                                          ('{"n": ' + "9" * 5000 + "}", "Exceeds the limit (4300 digits)")])
def test_json_nested_past_the_recursion_limit_or_an_endless_integer_is_damaged_not_a_traceback(tmp_path, text, reason):
    """json.loads raises RecursionError and a plain ValueError besides JSONDecodeError; every reader of a user's or a
    run's JSON names the file (and the line) instead of a traceback."""
    from reporter.store.atomic import read_json
    from reporter.tasks.jsonl import jsonl_rows

    (tmp_path / "results.json").write_text(text)
    with pytest.raises(UserError, match=re.escape(f"results.json: damaged, not valid JSON ({reason}")):
        read_json(tmp_path / "results.json")
    (tmp_path / "t.jsonl").write_text('{"q": "a", "a": "b"}\n' + text + "\n")
    with pytest.raises(UserError, match=re.escape(f"t.jsonl: line 2: not valid JSON ({reason}")):
        list(jsonl_rows(tmp_path / "t.jsonl", "task t"))
    p = tmp_path / "samples.jsonl"
    p.write_text('{"id": "a"}\n' + text + "\n")
    with pytest.raises(UserError, match=re.escape(f"samples.jsonl: line 2: {reason}")):
        read_samples(p)


def test_samples_are_never_appended_through_a_link(tmp_path):
    """A handed-on run with ``samples.jsonl -> ~/notes``: the notes were cut to their last newline and appended to."""
    victim = tmp_path / "notes"
    victim.write_text("precious, no newline")
    (tmp_path / "samples.jsonl").symlink_to(victim)
    with pytest.raises(OSError):
        append_samples(tmp_path / "samples.jsonl", [{"id": "x"}])
    assert victim.read_text() == "precious, no newline"
