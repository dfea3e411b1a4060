"""The hostile-input probe of the surfaces added after the first one (issue #34): ``compare``, ``render --format
md/hf``, ``other_split`` and ``jsonl`` data files, SAE files, names, the executor address and the environment
(a full disk, read-only or file-blocked caches and outputs).

Every refusal must be exit code 2 and exactly one ``error:`` line, with no traceback, and must leave what it was
pointed at as it was (nothing half-written, no run directory made). Every case that should work (an emoji or a
text-direction character in a hand-edited name) must give every output. The README's security section lists
these classes; the first probe's cases are in tests/test_robustness.py.
"""
from __future__ import annotations

import errno
import functools
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from reporter.cli import main
from reporter.store.lock import run_lock

from .conftest import copy_run, rename_model, small_random

TINY = "{layers: 2, hidden: 64, intermediate: 96, heads: 4}"
PROFILE = ("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 2, reference_texts: 2}\n"
           "tasks:\n  - {name: arc_easy, limit: 3, max_new_tokens: 3}\n")


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _refused(r) -> str:
    """The one error line of a refusal (exit 2, nothing else on stderr that looks like an error, no traceback)."""
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert len(errors) == 1, r.output
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    return errors[0]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime (``.lock`` aside): what must not change."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


# --- compare and render: the shared gate ---------------------------------------------------------------------

def _results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def _edit(run: Path, fn) -> None:
    res = _results(run)
    fn(res)
    (run / "results.json").write_text(json.dumps(res))


def _samples(run: Path) -> Path:
    return run / "models" / "Llama-chat" / "tasks" / "arc_easy" / "samples.jsonl"


def _slug_out(res):
    res["models"]["Llama chat"]["slug"] = "../../escaped"


GATE = {  # case: (command, damage of the second run, what the one line must say)
    "compare: unknown schema_version": ("compare", lambda r: _edit(r, lambda d: d.update(schema_version=99)),
                                        "schema_version: '99' is not supported"),
    "compare: a score that is not a number": (
        "compare", lambda r: _edit(r, lambda d: d["models"]["Llama chat"]["tasks"]["arc_easy"].update(score="high")),
        "models.Llama chat.tasks.arc_easy.score: expected a fraction in [0, 1], got str"),
    "compare: a task entry that is a list": (
        "compare", lambda r: _edit(r, lambda d: d["models"]["Llama chat"]["tasks"].update(arc_easy=[1, 2])),
        "models.Llama chat.tasks.arc_easy: expected an object"),
    "compare: samples.jsonl missing": ("compare", lambda r: _samples(r).unlink(), "samples.jsonl: missing, so"),
    "compare: an item score that is not a number": (
        "compare", lambda r: _samples(r).write_text(_samples(r).read_text().replace('"score": 0.0', '"score": "x"')
                                                    .replace('"score": 1.0', '"score": "x"')), "not a number"),
    "compare: results.json truncated": ("compare", lambda r: (r / "results.json").write_text('{"schema_vers'),
                                        "damaged, not valid JSON at line 1"),
    "render md: results.json nested past the recursion limit": (  # a traceback, then no remedy
        "render-md", lambda r: (r / "results.json").write_text("[" * 100_000 + "]" * 100_000),
        "results.json: damaged, not valid JSON (nested too deeply); `reporter analyse "),
    "compare: results.json is a directory": (
        "compare", lambda r: ((r / "results.json").unlink(), (r / "results.json").mkdir()),
        "is a directory, not a JSON file"),
    "compare: no analysis section": ("compare", lambda r: _edit(r, lambda d: d.pop("analysis")),
                                     "has no analysis section; run `reporter analyse"),
    "compare: a slug that walks out of the run": ("compare", lambda r: _edit(r, _slug_out),
                                                  "slug: '../../escaped' is not a safe file name"),
    "compare: manifest.json is a JSON list": ("compare", lambda r: (r / "manifest.json").write_text("[1]"),
                                              "manifest.json: damaged, not a JSON object (a list)"),
    # another JSON object in its place: compare read every setting as a default and named changes that were not
    "compare: manifest.json is another JSON object": (
        "compare", lambda r: (r / "manifest.json").write_text('{"x": 1}'),
        "manifest.json: is not a run's manifest (no config_hash and resolved configuration)"),
    # a folder of no run: render pointed to `reporter analyse DIR`, which then refused it as no run directory
    "render md: a folder that holds no run": (
        "render-md", lambda r: ((r / "manifest.json").unlink(), (r / "results.json").unlink()),
        "not a run directory (no manifest.json nor results.json); render reads the output directory"),
    "render md: manifest.json is another JSON object": (
        "render-md", lambda r: (r / "manifest.json").write_text('{"x": 1}'),
        "manifest.json: is not a run's manifest (no config_hash and resolved configuration)"),
    "render md: unknown schema_version": ("render-md", lambda r: _edit(r, lambda d: d.update(schema_version="x")),
                                          "schema_version: 'x' is not supported"),
    "render md: a slug that walks out of the run": ("render-md", lambda r: _edit(r, _slug_out),
                                                    "is not a safe file name"),
    "render md: card.md is a directory": ("render-md", lambda r: (r / "card.md").mkdir(),
                                          "card.md: Is a directory; a directory stands where reporter writes a file"),
    "render md: card_files is a file": ("render-md", lambda r: (r / "card_files").write_text("x"),
                                        "card_files: a file, not a directory; a file stands where reporter makes"),
    "render hf: a score that is not a number": (
        "render-hf", lambda r: _edit(r, lambda d: d["models"]["Llama chat"]["tasks"]["arc_easy"].update(n="many")),
        "tasks.arc_easy.n: expected a count (an integer >= 0)"),
}


@pytest.mark.parametrize("case", sorted(GATE))
def test_a_damaged_run_is_refused_by_the_shared_gate(case, finished_run, tmp_path):
    command, damage, want = GATE[case]
    base = copy_run(finished_run, tmp_path / "base")
    new = copy_run(finished_run, tmp_path / "new")
    for leftover in ("card.md", "card_files"):  # a fresh output place (the shared run has no Markdown card)
        shutil.rmtree(new / leftover, ignore_errors=True)
    damage(new)
    before, outside = _tree(new), sorted(p.name for p in tmp_path.iterdir())
    if command == "compare":
        r = _invoke("compare", str(base), str(new), "-o", str(tmp_path / "notes"))
    elif command == "render-md":
        r = _invoke("render", str(new), "--format", "md")
    else:
        r = _invoke("render", str(new), "--format", "hf", "--model", "Llama chat")
    line = _refused(r)
    assert want in line, line
    assert _tree(new) == before and sorted(p.name for p in tmp_path.iterdir()) == outside  # nothing written


def test_a_run_still_being_written_is_not_read(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    with run_lock(run):  # as `reporter run` holds it while it writes
        for args in (["render", str(run), "--format", "md"], ["compare", str(run), str(finished_run)],
                     ["analyse", str(run)]):
            line = _refused(_invoke(*args))
            assert f"pid {os.getpid()}" in line, line
    assert not (run / "card.md").exists()


def test_a_file_size_limit_is_one_line_and_the_rerun_finishes(finished_run, tmp_path):
    """``ulimit -f`` below the card's size: EFBIG was not among the environment's errors, so a traceback."""
    import resource
    import subprocess
    import sys

    run = copy_run(finished_run, tmp_path / "run")
    (run / "card.html").unlink()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))  # the card's inlined Vega bundle is larger

    r = subprocess.run([sys.executable, "-m", "reporter.cli", "render", str(run), "--format", "html"],
                       capture_output=True, text=True, preexec_fn=limit)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == f"error: {run / 'card.html'}: File too large; a file would pass this process's " \
                               "file-size limit (`ulimit -f`) or the file system's: raise it and rerun the same " \
                               "command (finished work is kept)", r.stderr
    assert not (run / "card.html").exists()  # whole or not at all
    assert _invoke("render", str(run), "--format", "html").exit_code == 0 and (run / "card.html").stat().st_size


def test_a_run_directory_whose_path_is_not_utf8_renders(finished_run, tmp_path):
    """A run made under a path with a byte that is not UTF-8 recorded it (Python's surrogateescape: '\\udcff') in
    the manifest's command line, and every card format failed to encode it: a traceback, and no card ever."""
    run = copy_run(finished_run, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["command"] = [*manifest["command"], "-o", "/tmp/bad\udcffdir/run"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    r = _invoke("render", str(run), "--format", "html,md")
    assert r.exit_code == 0, r.output
    assert "bad[U+DCFF]dir" in (run / "card.html").read_text() and (run / "card.md").stat().st_size


@pytest.mark.parametrize("link, target", [(".lock", "file"), ("card_files", "folder"), ("models", "folder")])
def test_a_run_directory_with_links_is_not_written_through(finished_run, tmp_path, link, target):
    """A run directory handed on with ``.lock -> /etc/passwd`` had that file overwritten with a pid by `analyse` and
    `run`; a linked card_files had the card's charts written wherever it pointed."""
    run = copy_run(finished_run, tmp_path / "run")
    victim = tmp_path / "victim"
    if target == "file":
        victim.write_text("precious\n")
    else:
        shutil.move(run / link, victim) if (run / link).exists() else victim.mkdir()
    (run / link).unlink(missing_ok=True)
    (run / link).symlink_to(victim)
    before = _tree(victim) if target == "folder" else victim.read_text()
    for args in (["analyse", str(run)], ["render", str(run), "--format", "md"]):
        if args[0] == "render" and target == "file":
            continue  # render takes no lock
        line = _refused(_invoke(*args))
        assert ("(a symbolic link)" if target == "file" else f"{run / link}: is a symbolic link to a folder") in line
    assert (_tree(victim) if target == "folder" else victim.read_text()) == before


def test_a_fifo_lock_neither_hangs_a_reader_nor_is_taken_by_a_writer(finished_run, tmp_path):
    """A handed-on run whose .lock was a fifo hung render, compare and board forever (opening it blocked)."""
    run = copy_run(finished_run, tmp_path / "run")
    (run / ".lock").unlink(missing_ok=True)
    os.mkfifo(run / ".lock")
    assert _invoke("render", str(run), "--format", "md").exit_code == 0  # no one holds a fifo: the run is readable
    line = _refused(_invoke("analyse", str(run)))
    assert "(not a regular file)" in line, line


def test_ordinary_links_outside_the_folders_reporter_writes_are_left_alone(finished_run, tmp_path):
    """Only the folders reporter writes into are checked: ``compare -o .`` in a project whose .venv holds
    ``lib64 -> lib`` was refused, and so was a run directory with a linked folder of the user's own."""
    run = copy_run(finished_run, tmp_path / "run")
    (tmp_path / "elsewhere").mkdir()
    (run / "notes").symlink_to(tmp_path / "elsewhere")
    assert _invoke("render", str(run), "--format", "md").exit_code == 0
    (tmp_path / "out" / "venv").mkdir(parents=True)
    (tmp_path / "out" / "venv" / "lib64").symlink_to(tmp_path / "elsewhere")
    r = _invoke("compare", str(run), str(finished_run), "-o", str(tmp_path / "out"))
    assert r.exit_code == 0 and (tmp_path / "out" / "compare.md").is_file(), r.output


@pytest.mark.parametrize("args, want", [
    (["render", "{run}", "--format", "hf"], "--format hf writes one model's Hugging Face README: name it with --model"),
    (["render", "{run}", "--format", "docx"], "unknown card format(s) docx"),
    (["render", "{run}", "--format", "hf", "--model", "Nobody"], "--model 'Nobody' is not a model of this run"),
    (["render", "{run}", "--format", "md", "--section", "nonsense"], "unknown card section 'nonsense'"),
    (["render", "{tmp}/nowhere"], "no such run directory"),
    (["render", "{tmp}/a-file"], "is a file"),
    (["compare", "{tmp}/empty", "{run}"], "not a run directory (no manifest.json)"),
    (["compare", "{run}", "{run}", "--pair", "no-equals-sign"], "expected OLD=NEW"),
    (["compare", "{run}", "{run}", "--pair", "Nobody=Llama chat"], "'Nobody' is not a model of the base run"),
    (["compare", "{run}", "{run}", "-o", "{tmp}/a-file/notes"], "a part of that path is a file, not a directory"),
    (["compare", "{run}", "{run}", "-o", "{tmp}/a-file"], "is a file"),
    (["render", "{run}", "--no-such-option"], "render: No such option '--no-such-option'"),
    (["render", "{run}", "--plugin", "x.py"], "render: No such option '--plugin'; --plugin is reporter's own option and "
                                             "comes before the command: reporter --plugin MODULE render …"),
    (["lm-eval", "--tasks", "arc_easy", "--plugin=x.py"], "reporter lm-eval: --plugin is reporter's own option and comes "
                                                         "before the command: reporter --plugin MODULE lm-eval …"),
    (["compare", "{run}"], "Missing argument 'NEW_RUN'"),
])
def test_bad_arguments_to_render_and_compare(args, want, finished_run, tmp_path):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "empty").mkdir()
    before = _tree(finished_run)
    line = _refused(_invoke(*[a.format(run=finished_run, tmp=tmp_path) for a in args]))
    assert want in line, line
    assert _tree(finished_run) == before


def test_compare_markdown_keeps_one_bullet_per_line_and_a_blank_line_before_each_heading(finished_run, tmp_path):
    r = _invoke("compare", str(finished_run), str(finished_run), "-o", str(tmp_path / "notes"))
    assert r.exit_code == 0, r.output
    md = (tmp_path / "notes" / "compare.md").read_text()
    lpp = md.split("## Latent signature (LPP)\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(lpp) == 3 and all(ln.startswith("- ") and ln.count("- ") == 1 for ln in lpp), lpp
    lines = md.splitlines()
    assert all(lines[i - 1] == "" for i, ln in enumerate(lines) if ln.startswith("#") and i > 0), md


# --- names that must survive every output --------------------------------------------------------------------

#: hand-edited names, one per model of the shared run: an emoji sentence, 45 emoji (over the 36 graphemes of a
#: chart label: every label must be cut), and a text-direction override with a NUL (both must be shown, never obeyed)
NAMES = {"Llama chat": "Llama-3.1-8B-Instruct 🦙 fine-tuned on 🇫🇷 French data, version 2 🚀",
         "GPT-2 base": "🦙🇫🇷🚀" * 15, "Untrained": "safe\u202egnp.exe nul\x00byte"}


@pytest.mark.browser
def test_hand_edited_names_give_every_output_and_hide_nothing(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    for old, new in NAMES.items():
        rename_model(run, old, new)
    r = _invoke("render", str(run), "--format", "html,pdf,md")
    assert r.exit_code == 0, r.output
    for out in ("card.html", "card.md"):
        text = (run / out).read_text()
        assert "\u202e" not in text and "\x00" not in text
        assert "safe[U+202E]gnp.exe nul[U+0000]byte" in text
    assert NAMES["Llama chat"] in (run / "card.md").read_text()  # emoji are kept whole where there is room
    assert (run / "card.pdf").stat().st_size > 10_000 and list((run / "card_files").glob("*.png"))
    pdf_text = subprocess.run(["pdftotext", str(run / "card.pdf"), "-"], check=True, capture_output=True,
                              text=True).stdout
    assert "safe[U+202E]gnp.exe" in pdf_text and "\u202e" not in pdf_text


# --- data files: validate reads every one that run would ----------------------------------------------------

def _models(root: Path, profile: str, models: str | None = None) -> Path:
    (root / "profile.yaml").write_text(profile)
    (root / "models.yaml").write_text(small_random(
        "profile: profile.yaml\n" + (models or f"models:\n  - {{name: tiny, source: random:llama, random: {TINY}}}\n")))
    return root / "models.yaml"


def _jsonl(path: str) -> str:
    return ("lpp: {enabled: false}\ntasks:\n  - {name: mine, type: jsonl, path: " + path
            + ", prompt_field: q, answer_field: a, scorer: exact}\n")


def _jsonl_choice(path: str, options: bool = True) -> str:
    return _jsonl(path).replace("scorer: exact", "scorer: choice" + (", choices_field: o" if options else ""))


def _rows(name: str, *rows: dict):
    return lambda t: (t / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def _split(path: str) -> str:
    return "lpp: {enabled: false}\ntasks:\n  - {name: gsm8k, limit: 2, other_split: " + path + "}\n"


@functools.lru_cache(maxsize=1)
def _bomb_bytes() -> bytes:
    """About 2.6 MiB of gzip that expands to 600 MiB (past the 512 MiB bound), made once (at level 1: 1 s, where
    level 9 took 3.4 s for 0.6 MiB)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = b" " * (1 << 24)
    return b"".join(z.compress(block) for _ in range(600 >> 4)) + z.flush()


def _bomb(p: Path) -> None:
    p.write_bytes(_bomb_bytes())


DATA = {  # case: (profile, setup(tmp), what the one line must say)
    "jsonl: missing": (_jsonl("gone.jsonl"), None, "tasks['mine'].path: data file"),
    "jsonl: not UTF-8": (_jsonl("latin1.jsonl"), lambda t: (t / "latin1.jsonl").write_bytes(b'{"q": "caf\xe9"}\n'),
                         "line 1: not UTF-8 text (byte 0xe9)"),
    "jsonl: empty": (_jsonl("empty.jsonl"), lambda t: (t / "empty.jsonl").write_text("\n\n"), "has no items"),
    "jsonl: fewer items than shots": (_jsonl("one.jsonl").replace("scorer: exact", "scorer: exact, shots: 1"),
                                      lambda t: (t / "one.jsonl").write_text(json.dumps({"q": "1+1?", "a": "2"}) + "\n"),
                                      "would all be taken as few-shot examples (shots: 1)"),
    # a one-item file and the base model's default shot: validate said OK, run found no item left after loading
    "jsonl: one item, a base model's default shot": (
        _jsonl("one.jsonl"), _rows("one.jsonl", {"q": "1+1?", "a": "2"}),
        "would all be taken as few-shot examples (shots: 1; not set: base model 'tiny' takes 1 by default), leaving "
        "none to evaluate; set shots: 0 or add items"),
    # rows that parse and then failed after the model loaded, naming no file: a text no tokenizer encodes, and a
    # code row's entry point that is not program text
    "jsonl: a lone surrogate": (_jsonl("s.jsonl"), lambda t: (t / "s.jsonl").write_text(
        '{"q": "1+1?", "a": "2"}\n{"q": "bad \\ud800 text", "a": "3"}\n'),
        "line 2: field 'q' holds an invalid character (U+D800"),
    "jsonl: code, an entry point that is not text": (
        _jsonl("c.jsonl").replace("scorer: exact", "scorer: code, shots: 0"),
        _rows("c.jsonl", {"q": "Write f.", "a": "", "test": "assert f() is None", "entry_point": 5}),
        "line 1: field 'entry_point' must be a string, got int"),
    "jsonl: a key written twice": (_jsonl("k.jsonl"), lambda t: (t / "k.jsonl").write_text(
        '{"q": "1+1?", "a": "2"}\n{"q": "2+2?", "a": "4", "a": "5"}\n'), "line 2: the key 'a' is written twice"),
    "jsonl: a device": (_jsonl("/dev/zero"), None, "is not a regular file (a device or a pipe)"),
    "jsonl: a pipe": (_jsonl("fifo.jsonl"), lambda t: os.mkfifo(t / "fifo.jsonl"), "is not a regular file"),
    "jsonl: a gzip bomb": (_jsonl("bomb.jsonl.gz"), lambda t: _bomb(t / "bomb.jsonl.gz"), "expands to more than 512 MiB"),
    "jsonl: wrong field type": (_jsonl("wrong.jsonl"),
                                lambda t: (t / "wrong.jsonl").write_text(json.dumps({"q": ["a"], "a": "x"}) + "\n"),
                                "field 'q' must be text (or a number), got list"),
    "other_split: a directory": (_split("adir"), lambda t: (t / "adir").mkdir(), "adir is not a file"),
    "other_split: not UTF-8": (_split("latin1.jsonl"), lambda t: (t / "latin1.jsonl").write_bytes(b"\xff\n"),
                               "not UTF-8 text (byte 0xff)"),
    "other_split: a gzip bomb": (_split("bomb.jsonl.gz"), lambda t: _bomb(t / "bomb.jsonl.gz"),
                                 "expands to more than 512 MiB"),
    "other_split: truncated gzip": (_split("cut.jsonl.gz"), lambda t: (t / "cut.jsonl.gz").write_bytes(
        gzip.compress(b'{"question": "1+1?", "answer": "#### 2"}\n' * 50)[:40]), "not a readable gzip file"),
    "other_split: a device": (_split("/dev/zero"), None, "/dev/zero is not a file"),
    # rows that read but cannot be scored as meant
    "jsonl: an empty prompt": (_jsonl("e.jsonl"), _rows("e.jsonl", {"q": "1+1?", "a": "2"}, {"q": "  ", "a": "3"}),
                               "line 2: field 'q' is empty"),
    "jsonl: choice, no options, answer not a letter": (
        _jsonl_choice("c.jsonl", options=False), _rows("c.jsonl", {"q": "Capital of France? A) Rome B) Paris",
                                                                   "a": "Paris"}),
        "line 1: answer 'Paris' is not an option letter (A–J); scorer: choice without choices_field"),
    "jsonl: duplicate options": (_jsonl_choice("d.jsonl"), _rows("d.jsonl", {"q": "x?", "o": ["yes", "no", " yes"],
                                                                            "a": "A"}),
                                 "line 1: options 1 and 3 of field 'o' are the same text 'yes'"),
    "jsonl: an option that is not text": (_jsonl_choice("n.jsonl"), _rows("n.jsonl", {"q": "x?", "o": ["a", {"b": 1}],
                                                                                     "a": "A"}),
                                          "line 1: option 2 of field 'o' must be text (or a number), got dict"),
    "jsonl: an empty option": (_jsonl_choice("m.jsonl"), _rows("m.jsonl", {"q": "x?", "o": ["a", ""], "a": "A"}),
                               "line 1: option 2 of field 'o' is empty"),
    "jsonl: code without tests": (_jsonl("t.jsonl").replace("scorer: exact", "scorer: code"),
                                  _rows("t.jsonl", {"q": "Write f.", "a": "def f(): pass", "test": "assert f() is None"},
                                        {"q": "Write g.", "a": "def g(): pass"}),
                                  "line 2: a code task's row needs a 'test' field"),
    # a built-in task ran every example it had while the card said the count asked for
    "shots: more than the few-shot split": ("lpp: {enabled: false}\ntasks:\n  - {name: gsm8k, limit: 2, shots: 9}\n",
                                            None, "tasks['gsm8k'].shots: 9 is more few-shot examples than task 'gsm8k' "
                                                  "has (8, its few-shot split); use at most 8"),
    "shots: every item": ("lpp: {enabled: false}\ntasks:\n  - {name: humaneval, limit: 2, shots: 164}\n", None,
                          "tasks['humaneval'].shots: its 164 item(s) would all be taken as few-shot examples "
                          "(shots: 164), leaving none to evaluate; use at most 163"),
}


@pytest.mark.parametrize("case", sorted(DATA))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_bad_data_file_is_refused_by_validate_and_by_run_before_anything_is_made(case, command, tmp_path):
    profile, setup, want = DATA[case]
    if setup is not None:
        setup(tmp_path)
    p = _models(tmp_path, profile)
    before = sorted(x.name for x in tmp_path.iterdir())
    args = [command, str(p)] + (["-o", str(tmp_path / "out"), "--no-progress", "--no-render"] if command == "run"
                                else [])
    line = _refused(_invoke(*args))
    assert want in line, line
    assert line.startswith(f"error: {tmp_path / 'profile.yaml'}: tasks["), line  # the profile file, the key path
    assert sorted(x.name for x in tmp_path.iterdir()) == before  # no run directory


def test_every_data_problem_and_a_duplicate_after_a_bad_entry_are_listed_at_once(tmp_path):
    """Validation stopped at the first data file, and a model entry with a problem hid a later duplicate of its
    name: a user fixed one line to be shown the next."""
    p = _models(tmp_path, "lpp: {corpus: short.txt}\ntasks:\n"
                          "  - {name: one, type: jsonl, path: gone1.jsonl, prompt_field: q, answer_field: a, scorer: exact}\n"
                          "  - {name: two, type: jsonl, path: gone2.jsonl, prompt_field: q, answer_field: a, scorer: exact}\n",
                models=f"models:\n  - {{name: a, source: random:llama, max_batch_size: -3, random: {TINY}}}\n"
                       f"  - {{name: a, source: random:llama, random: {TINY}}}\n")
    (tmp_path / "short.txt").write_text("too short\n")
    r = _invoke("validate", str(p))
    assert r.exit_code == 2 and "Traceback" not in r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 2 and "models[0].max_batch_size" in errors[0] and "models[1].name: duplicate name 'a'" in \
        errors[1], errors
    # names as a valid entry reads them (stripped); blank names are blank, not duplicates
    (tmp_path / "models.yaml").write_text(small_random(
        "profile: profile.yaml\nmodels:\n  - {name: 'a ', source: random:llama, max_batch_size: -3}\n"
        "  - {name: a, source: random:llama, max_batch_size: -3}\n  - {name: ' ', source: random:llama}\n"
        "  - {name: ' ', source: random:llama}\n"))
    errors = [ln for ln in _invoke("validate", str(p)).stderr.splitlines() if ln.startswith("error: ")]
    assert sum("duplicate name 'a'" in e for e in errors) == 1 and not any("duplicate name ' '" in e for e in errors)
    assert sum("is blank" in e for e in errors) == 2, errors
    (tmp_path / "models.yaml").write_text(small_random(f"profile: profile.yaml\nmodels:\n  - {{name: a, source: "
                                                       f"random:llama, random: {TINY}}}\n"))
    errors = [ln for ln in _invoke("validate", str(p)).stderr.splitlines() if ln.startswith("error: ")]
    assert [e.split(": ")[2] for e in errors] == ["lpp.min_tokens", "tasks['one'].path", "tasks['two'].path"], errors


def test_validate_names_a_task_it_cannot_read_offline(tmp_path):
    """`validate --profile standard` said OK offline, and BBH (hub only) then failed in the run."""
    p = _models(tmp_path, PROFILE)
    r = _invoke("validate", str(p), "--profile", "standard")
    assert r.exit_code == 0, r.output
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("note: ")] == [
        "note: task 'bbh' has no offline copy: it reads lukaemon/bbh from the Hugging Face hub when it runs, and "
        "fails alone where the hub cannot be reached"]
    r = _invoke("validate", str(p), "--profile", "quick")  # negative control: every task ships offline
    assert r.exit_code == 0 and "note:" not in r.stderr, r.output
    # BBH 3-shot (as it is usually run): its data cannot be counted offline, so the run is not refused for it
    p = _models(tmp_path, "lpp: {enabled: false}\ntasks:\n  - {name: bbh, limit: 5, shots: 3}\n")
    r = _invoke("validate", str(p))
    assert r.exit_code == 0 and "note: task 'bbh' has no offline copy" in r.stderr, r.output


def test_choice_rows_that_can_be_scored_pass_validate(tmp_path):
    """Negative controls of the row refusals above: a letter answer without options (in any of its spellings),
    options of numbers, an answer given as an option's text."""
    _rows("c.jsonl", {"q": "A) Rome B) Paris", "a": "B"}, {"q": "A) 1 B) 2", "a": "(a)"})(tmp_path)
    _rows("d.jsonl", {"q": "x?", "o": [1, 2.5, "three"], "a": "2.5"},  # two rows: one is the base model's shot
          {"q": "y?", "o": ["yes", "no"], "a": "no"})(tmp_path)
    for profile in (_jsonl_choice("c.jsonl", options=False), _jsonl_choice("d.jsonl")):
        r = _invoke("validate", str(_models(tmp_path, profile)))
        assert r.exit_code == 0, r.output


def test_a_jsonl_file_saved_with_a_byte_order_mark_reads(tmp_path):
    """A UTF-8 byte-order mark (Windows editors) failed as "Unexpected UTF-8 BOM (decode using utf-8-sig)"."""
    (tmp_path / "b.jsonl").write_bytes('\ufeff{"q": "1+1?", "a": "2"}\n{"q": "2+2?", "a": "4"}\n'.encode())
    r = _invoke("validate", str(_models(tmp_path, _jsonl("b.jsonl"))))
    assert r.exit_code == 0, r.output


def test_fields_reporter_does_not_read_are_the_users_own(tmp_path):
    """Negative control of the surrogate and written-twice refusals: they hold for the fields a task reads, not for
    a row's metadata (a tweet cut at a UTF-16 boundary, a scraped record with a repeated key)."""
    (tmp_path / "m.jsonl").write_text('{"q": "1+1?", "a": "2", "meta": "tweet cut \\ud83d", "src": {"k": 1, "k": 2}}\n'
                                      '{"q": "2+2?", "a": "4", "note": "x", "note": "y"}\n')
    r = _invoke("validate", str(_models(tmp_path, _jsonl("m.jsonl"))))
    assert r.exit_code == 0, r.output


def test_validate_names_an_lpp_corpus_read_from_the_hub(tmp_path):
    """A hub LPP corpus passed validate without a word, then every model's LPP pass failed offline."""
    r = _invoke("validate", str(_models(tmp_path, "lpp: {corpus: some/hub-ds}\ntasks: [{name: arc_easy, limit: 2}]\n")))
    assert r.exit_code == 0 and "note: the LPP corpus 'some/hub-ds' is a hub dataset" in r.stderr, r.output
    r = _invoke("validate", str(_models(tmp_path, "tasks: [{name: arc_easy, limit: 2}]\n")))  # coqa: offline
    assert r.exit_code == 0 and "LPP corpus" not in r.stderr, r.output


def test_a_section_without_format_prints_it(finished_run):
    """``render RUN --section title`` said "use it with --format md (not html,pdf,md)": the default it never chose."""
    r = _invoke("render", str(finished_run), "--section", "title")
    assert r.exit_code == 0 and r.output.startswith("# Model card: "), r.output


def test_shots_a_built_in_task_can_draw_pass_validate(tmp_path):
    """Negative control of the two 'shots' refusals above: the few-shot split's size, and all but one item."""
    p = _models(tmp_path, "lpp: {enabled: false}\ntasks:\n  - {name: gsm8k, limit: 2, shots: 8}\n"
                          "  - {name: humaneval, limit: 2, shots: 163}\n")
    r = _invoke("validate", str(p))
    assert r.exit_code == 0, r.output


# --- SAE files ------------------------------------------------------------------------------------------------

def _sae_arrays(d_in: int = 64, d_sae: int = 32) -> dict:
    rng = np.random.default_rng(0)
    return {"W_enc": rng.normal(size=(d_in, d_sae)).astype(np.float32), "b_enc": np.zeros(d_sae, np.float32),
            "b_dec": np.zeros(d_in, np.float32), "threshold": np.full(d_sae, 0.1, np.float32)}


def _npz(t: Path, **arrays) -> None:
    np.savez(t / "sae.npz", **{**_sae_arrays(), **arrays})


def _saelens(t: Path, cfg) -> None:
    from safetensors.numpy import save_file

    (t / "sae").mkdir()
    (t / "sae" / "cfg.json").write_text(json.dumps(cfg))
    save_file({k: v for k, v in _sae_arrays().items() if k != "threshold"}, str(t / "sae" / "sae_weights.safetensors"))


SAE = {  # case: (path, setup(tmp), what the one line must say)
    "npz: truncated": ("sae.npz", lambda t: (_npz(t), (t / "sae.npz").write_bytes((t / "sae.npz").read_bytes()[:300])),
                       "damaged or not an npz file"),
    "npz: a pickled object array": ("sae.npz", lambda t: _npz(t, W_enc=np.array([{"run": "code"}], dtype=object)),
                                    "holds a pickled object array, which reporter never loads"),
    "npz: string arrays": ("sae.npz", lambda t: _npz(t, b_enc=np.array(["a"] * 32)), "'b_enc' is an array of <U1"),
    "npz: NaN weights": ("sae.npz", lambda t: _npz(t, W_enc=np.full((64, 32), np.nan, np.float32)),
                         "'W_enc' holds 2048 NaN or infinite value(s)"),
    "npz: not a zip at all": ("sae.npz", lambda t: (t / "sae.npz").write_text("hello"), "damaged or not an npz"),
    "saelens: cfg.json is a list": ("sae", lambda t: _saelens(t, [1, 2]), "holds a JSON list, not a SAELens cfg"),
    "saelens: d_in is not an integer": ("sae", lambda t: _saelens(t, {"hook_name": "blocks.1.hook_resid_post",
                                                                       "d_in": "64"}), "d_in must be an integer"),
    "saelens: damaged safetensors": ("sae", lambda t: (_saelens(t, {"hook_name": "blocks.1.hook_resid_post"}),
                                                       (t / "sae" / "sae_weights.safetensors").write_bytes(b"\x08" * 9)),
                                     "cannot be read as safetensors"),
}


@pytest.mark.parametrize("case", sorted(SAE))
def test_a_bad_sae_file_is_one_line_at_validate(case, tmp_path):
    path, setup, want = SAE[case]
    setup(tmp_path)
    p = _models(tmp_path, "lpp: {enabled: false}\ntasks: [{name: arc_easy, limit: 2}]\n"
                          f"mui: {{unit: sae, sae: {{path: {path}, layers: [1]}}}}\n")
    line = _refused(_invoke("validate", str(p)))
    assert line.startswith("error: models[0].sae: ") or line.startswith("error: mui.sae: "), line
    assert want in line, line


# --- the executor address -------------------------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


@pytest.mark.parametrize("address, want", [
    ("127.0.0.1:{port}", "nothing answers at 127.0.0.1:{port} (Connection refused)"),
    ("ray://127.0.0.1:{port}", "nothing answers at 127.0.0.1:{port}"),
    ("ray://head", "'ray://head' is not HOST:PORT"),
    ("auto", "cannot connect to the Ray cluster at auto"),
])
def test_an_unreachable_cluster_is_refused_before_the_run_directory_exists(address, want, tmp_path):
    port = _closed_port()
    p = _models(tmp_path, PROFILE)
    line = _refused(_invoke("run", str(p), "-o", str(tmp_path / "out"), "--no-progress", "--executor", "ray",
                            "--address", address.format(port=port)))
    assert want.format(port=port) in line, line
    assert not (tmp_path / "out").exists()


# --- messages -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, models, want", [
    (["--seed", "-1"], None, "error: --seed: must be an integer from 0"),
    (["--device", "tpu"], None, "error: --device: 'tpu' is not a valid device"),
    (["--tasks", "arc_easy,arc"], None, "error: --tasks: 'arc' is not a task of profile profile (did you mean 'arc_easy'?); "
                                             "its tasks: arc_easy"),
    (["--limit", "0"], None, "error: main {command}: Invalid value for '--limit': 0 is not in the range x>=1"),
    (["--tasks", " , "], None, "error: --tasks: no task named"),
    (["--profile", "nonesuch"], None, "error: --profile: 'nonesuch' is not a built-in profile nor a file"),
    ([], "models:\n  - {name: '  ', source: random:llama}\n", "error: {tmp}/models.yaml: models[0].name: is blank"),
])
@pytest.mark.parametrize("command", ["run", "validate"])
def test_messages_blame_what_the_user_wrote(command, args, models, want, tmp_path):
    """``validate`` takes what ``run`` takes that decides what is read, and refuses it with the same line."""
    p = _models(tmp_path, PROFILE, models)
    extra = ["-o", str(tmp_path / "out"), "--no-progress"] if command == "run" else []
    line = _refused(_invoke(command, str(p), *extra, *args))
    assert line.startswith(want.format(tmp=tmp_path, command=command)), line
    assert not (tmp_path / "out").exists()


def test_schema_output_makes_its_directory_and_under_a_file_is_one_line(tmp_path):
    r = _invoke("schema", "all", "-o", str(tmp_path / "new" / "dir" / "s.json"))
    assert r.exit_code == 0 and json.loads((tmp_path / "new" / "dir" / "s.json").read_text())  # was a traceback
    (tmp_path / "afile").write_text("x")
    line = _refused(_invoke("schema", "-o", str(tmp_path / "afile" / "s.json")))
    assert "a file stands where reporter makes a directory" in line, line


def test_options_that_would_be_ignored_are_refused(finished_run, tmp_path):
    """--address without the Ray executor, --model without --format hf, and a board written into one of its own
    runs were ignored without a word (or, for the board, 'no run directory could be read')."""
    p = _models(tmp_path, PROFILE)
    line = _refused(_invoke("run", str(p), "-o", str(tmp_path / "out"), "--no-progress", "--address", "auto"))
    assert "--address auto: is a Ray cluster's address, for --executor ray" in line, line
    run = copy_run(finished_run, tmp_path / "run")
    line = _refused(_invoke("render", str(run), "--format", "md", "--model", "Llama chat"))
    assert "--model 'Llama chat' names the model of --format hf" in line, line
    for args in ([str(run)], [str(tmp_path / "r*")]):  # named, or matched by a glob (which left it out silently)
        line = _refused(_invoke("board", *args, "-o", str(run)))
        assert "is a run directory; give the board a directory of its own" in line, line
    assert not (tmp_path / "out").exists() and not (run / "index.html").exists()


def test_a_blank_output_is_refused_not_the_working_directory(tmp_path):
    """``-o ''`` was the working directory: the run's files among the user's own."""
    p = _models(tmp_path, PROFILE)
    line = _refused(_invoke("run", str(p), "-o", "", "--no-progress"))
    assert "Invalid value for '-o' / '--output': is blank" in line, line
    assert not (Path.cwd() / "manifest.json").exists()


@pytest.mark.parametrize("command, args, want", [
    *((c, ("--profile", ""), "--profile: is blank") for c in ("validate", "run")),  # fell back to the file's profile
    *((c, ("--device", " "), "--device: is blank") for c in ("validate", "run")),  # fell back to each model's device
    ("run", ("--no-render", "--format", "pdf"), "--format 'pdf': nothing is rendered with --no-render"),  # ignored
])
def test_a_blank_option_or_a_format_with_no_render_is_refused(tmp_path, command, args, want):
    p = _models(tmp_path, PROFILE)
    line = _refused(_invoke(command, str(p), *args, *(["-o", str(tmp_path / "out")] if command == "run" else [])))
    assert line.startswith(f"error: {want}"), line
    assert not (tmp_path / "out").exists()


def test_board_refuses_a_negative_seed_as_run_does(tmp_path):
    line = _refused(_invoke("board", str(tmp_path), "--seed", "-1"))
    assert "Invalid value for '--seed': -1 is not in the range 0<=x<=4294967295" in line, line


def test_a_quoted_home_in_the_output_option_is_the_home_directory(tmp_path, monkeypatch):
    """``-o '~/runs/x'`` (quoted, so the shell left it) made a folder named '~' in the working directory, while
    ``output: ~/runs/x`` in the models file went home."""
    from reporter.cli import _nonblank_path

    monkeypatch.setenv("HOME", str(tmp_path))
    assert _nonblank_path(None, None, "~/runs/x") == tmp_path / "runs" / "x"  # type: ignore[arg-type]


def test_validate_checks_the_profile_cut_that_run_would_use(tmp_path):
    """``validate --tasks/--limit/--profile`` reports the run that ``run`` with the same arguments would make."""
    p = _models(tmp_path, PROFILE.replace("tasks:\n", "tasks:\n  - {name: boolq, limit: 3}\n"))
    r = _invoke("validate", str(p))
    assert r.exit_code == 0 and "OK (1 model, profile profile.yaml, 2 tasks)" in r.output, r.output
    r = _invoke("validate", str(p), "--tasks", "boolq", "--limit", "2", "--seed", "4", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "OK (1 model, profile profile.yaml (1 of its 2 tasks, 2 items each), 1 task)" in r.output, r.output
    r = _invoke("validate", str(p), "--profile", "quick")
    assert r.exit_code == 0 and "profile quick, 11 tasks" in r.output, r.output


def test_a_failing_model_is_named_once_and_the_one_model_run_says_its_work_is_kept(tmp_path):
    arrays = _sae_arrays(d_in=32)  # the model's hidden size is 64: this SAE does not fit it
    np.savez(tmp_path / "sae.npz", **arrays)
    p = _models(tmp_path, "lpp: {enabled: false}\nsmoke_texts: 1\ntasks: [{name: arc_easy, limit: 2, "
                          "max_new_tokens: 2}]\nmui: {unit: both, sae: {path: sae.npz, layers: [1]}}\n")
    r = _invoke("run", str(p), "-o", str(tmp_path / "run"), "--no-progress", "--no-render")
    assert r.exit_code == 2 and "Traceback" not in r.output
    fit = [ln for ln in r.stderr.splitlines() if "does not match the model's hidden size" in ln]
    assert len(fit) == 1, r.stderr  # once, at the end; the progress line only says FAILED
    assert "the finished work is saved" in r.stderr and "other models" not in r.stderr


def test_one_models_directory_that_cannot_be_written_is_that_models_failure_alone(tmp_path):
    """Model b's directory is blocked (a file where it goes, as a read-only one would be for a user without root):
    b fails with its reason, a and c still run, results.json and the card are written, exit 2."""
    p = _models(tmp_path, "lpp: {enabled: false}\nsmoke_texts: 1\ntasks: [{name: arc_easy, limit: 2, "
                          "max_new_tokens: 2}]\n",
                "models:\n" + "".join(f"  - {{name: {n}, source: random:llama, random: {TINY}}}\n" for n in "abc"))
    (tmp_path / "run" / "models").mkdir(parents=True)
    (tmp_path / "run" / "models" / "b").write_text("in the way")
    r = _invoke("run", str(p), "-o", str(tmp_path / "run"), "--no-progress", "--format", "md")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")] and "model 'b'" in r.stderr
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    # b is "failed" with its reason (it was "pending", as if not yet run), and the card says so
    assert {n: m["status"] for n, m in res["models"].items()} == {"a": "complete", "b": "failed", "c": "complete"}
    said = f"model 'b': {tmp_path / 'run' / 'models' / 'b' / 'error.json'}: Not a directory; a part of that path is a file"
    assert res["models"]["b"]["error"].startswith(said)  # the path and what is wrong, not "failed with NotADirectoryError"
    card = (tmp_path / "run" / "card.md").read_text()  # Markdown escapes the path's underscores
    assert "b failed to evaluate: model 'b': " in card and "error.json: Not a directory; a part of that path" in card
    (tmp_path / "run" / "models" / "b").unlink()  # unblocked: the rerun measures b, and its old failure goes
    r = _invoke("run", str(p), "-o", str(tmp_path / "run"), "--no-progress", "--format", "md")
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert {n: m["status"] for n, m in res["models"].items()} == {"a": "complete", "b": "complete", "c": "complete"}


_BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
from reporter.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("module, command, want", [
    ("weasyprint", ["render", "{run}", "--format", "pdf"], "the Python package 'weasyprint' is not installed"),
    ("weasyprint", ["run", "{models}", "-o", "{out}"], "the PDF needs weasyprint, which is not installed; run: pip "
                                                       "install weasyprint, or leave the PDF out: --format html,md"),
    ("scipy", ["analyse", "{run}"], "the Python package 'scipy' is not installed"),
    ("vl_convert", ["render", "{run}", "--format", "md"], "pip install vl-convert-python"),
])
def test_a_missing_dependency_is_one_line(finished_run, module, command, want, tmp_path):
    """A partial environment (a dependency uninstalled): one line naming the package and the pip command, exit 2; a
    run that would write a PDF is refused before it starts, not after its models ran."""
    run = copy_run(finished_run, tmp_path / "run")
    models = _models(tmp_path, PROFILE)
    args = [a.format(run=run, models=models, out=tmp_path / "out") for a in command]
    r = subprocess.run([sys.executable, "-c", _BLOCK.format(module=module), *args], capture_output=True, text=True,
                       timeout=300)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert want in errors[0], errors[0]
    assert not (tmp_path / "out").exists()


def test_a_run_without_a_card_needs_no_pdf_renderer(tmp_path, monkeypatch):
    """--no-render writes no PDF: a machine without weasyprint runs it (a review found it refused). In this process,
    with weasyprint unimportable as :data:`_BLOCK` makes it (reporter imports it only where it renders a PDF, so
    nothing imported before holds it; the test above checks the refusal in a fresh process)."""
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "weasyprint":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    for name in [m for m in sys.modules if m.split(".")[0] == "weasyprint"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Block(), *sys.meta_path])
    with pytest.raises(ModuleNotFoundError):
        import weasyprint  # noqa: F401
    models = _models(tmp_path, PROFILE)
    r = _invoke("run", str(models), "-o", str(tmp_path / "out"), "--no-progress", "--no-render")
    assert r.exit_code == 0 and (tmp_path / "out" / "results.json").is_file(), r.output[-2000:]
    assert not list((tmp_path / "out").glob("card*"))
    r = _invoke("run", str(models), "-o", str(tmp_path / "out"), "--no-progress")  # with the PDF: refused
    assert r.exit_code == 2 and "the PDF needs weasyprint, which is not installed" in r.output, r.output


# --- the environment: caches and outputs that cannot be written, a full disk ---------------------------------

def test_a_cache_that_is_a_file_is_one_line_before_anything_is_made(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    p = _models(tmp_path, PROFILE, "models:\n  - {name: smol, source: packaged:smollm2-135m-instruct}\n")
    for command in (["validate", str(p)], ["run", str(p), "-o", str(tmp_path / "out"), "--no-progress"]):
        line = _refused(_invoke(*command))
        assert "the cache cannot be written" in line and "set XDG_CACHE_HOME to a writable directory" in line, line
    assert not (tmp_path / "out").exists()


def test_a_lock_that_is_a_directory_is_one_line(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path / "run")
    (run / ".lock").unlink(missing_ok=True)
    (run / ".lock").mkdir()
    line = _refused(_invoke("analyse", str(run)))
    assert "cannot take the run directory's lock" in line and ".lock a plain file" in line, line


def _mount_prefix() -> list[str]:
    if not shutil.which("unshare"):
        pytest.fail("unshare (util-linux) is needed to mount a small or read-only file system for these cases")
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]


#: runs inside a private mount namespace: each case mounts its own tmpfs, runs reporter's CLI in-process and
#: reports what it saw as one JSON line
DRIVER = textwrap.dedent("""
    import json, os, shutil, subprocess, sys
    from pathlib import Path
    from click.testing import CliRunner
    from reporter.cli import main

    root, finished = Path(sys.argv[1]), Path(sys.argv[2])
    out = {}

    def mount(path, opts):
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "none", str(path)], check=True)

    def invoke(*args, env=None):
        r = CliRunner().invoke(main, list(args), env=env)
        return {"code": r.exit_code, "stderr": r.stderr, "traceback": r.exception is not None
                and not isinstance(r.exception, SystemExit)}

    def files(d):
        return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) if d.exists() else []

    # a full disk during a run, then room again: one line, and the rerun finishes the same run
    mount(root / "small", "size=1m")
    (root / "small" / "filler").write_bytes(b"x" * (shutil.disk_usage(root / "small").free - (32 << 10)))
    out["run-full"] = invoke("run", str(root / "models.yaml"), "-o", str(root / "small" / "run"), "--no-progress",
                             "--no-render")
    out["run-full"]["tmp"] = [f for f in files(root / "small") if f.endswith(".tmp")]
    subprocess.run(["mount", "-o", "remount,size=64m", str(root / "small")], check=True)
    out["run-resumed"] = invoke("run", str(root / "models.yaml"), "-o", str(root / "small" / "run"), "--no-progress",
                                "--no-render")
    out["run-resumed"]["results"] = json.loads((root / "small" / "run" / "results.json").read_text())["models"]

    # a full disk while the card is written: one line, no card and no temporary file left
    size = sum(p.stat().st_size for p in finished.rglob("*") if p.is_file())
    mount(root / "tight", f"size={size + (8 << 20)}")
    shutil.copytree(finished, root / "tight" / "run")
    for leftover in ("card.html", "card.pdf", "card.md"):
        (root / "tight" / "run" / leftover).unlink(missing_ok=True)
    free = shutil.disk_usage(root / "tight").free
    (root / "tight" / "filler").write_bytes(b"x" * (free - (256 << 10)))  # room for results, not for a card
    out["render-full"] = invoke("render", str(root / "tight" / "run"), "--format", "html")
    out["render-full"]["files"] = [f for f in files(root / "tight" / "run") if f.startswith("card") or ".tmp" in f]

    # a read-only cache (XDG_CACHE_HOME, or HOME with no XDG_CACHE_HOME) that must hold a conversion
    mount(root / "rocache", "ro")
    mount(root / "rohome", "ro")
    for case, env in (("cache-read-only", {"XDG_CACHE_HOME": str(root / "rocache")}),
                      ("home-read-only", {"XDG_CACHE_HOME": None, "HOME": str(root / "rohome")})):
        out[case] = invoke("run", str(root / "packaged.yaml"), "-o", str(root / case), "--no-progress", env=env)
        out[case]["made"] = (root / case).exists()

    # compare -o on a read-only file system
    mount(root / "ro", "ro")
    out["compare-read-only"] = invoke("compare", str(finished), str(finished), "-o", str(root / "ro" / "notes"))

    # render into a run directory on a read-only file system (a bind mount of a copy, remounted read-only)
    shutil.copytree(finished, root / "rorun-src")
    (root / "rorun").mkdir()
    subprocess.run(["mount", "--bind", str(root / "rorun-src"), str(root / "rorun")], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(root / "rorun")], check=True)
    out["render-read-only"] = invoke("render", str(root / "rorun"), "--format", "html")
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def environment(finished_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("environment")
    _models(root, PROFILE)
    (root / "packaged.yaml").write_text(f"profile: {root / 'profile.yaml'}\n"
                                        "models:\n  - {name: smol, source: packaged:smollm2-135m-instruct}\n")
    (root / "reference").mkdir()
    r = subprocess.run([*_mount_prefix(), sys.executable, "-c", DRIVER, str(root), str(finished_run)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    clean = _invoke("run", str(root / "models.yaml"), "-o", str(root / "reference" / "run"), "--no-progress",
                    "--no-render")
    assert clean.exit_code == 0, clean.output
    return json.loads(r.stdout.strip().splitlines()[-1]), root


def _one_line(seen: dict) -> str:
    errors = [ln for ln in seen["stderr"].splitlines() if ln.startswith("error: ")]
    assert seen["code"] == 2 and not seen["traceback"] and len(errors) == 1, seen
    return errors[0]


def test_a_full_disk_during_a_run_is_one_line_and_the_rerun_finishes_it(environment):
    seen, root = environment
    line = _one_line(seen["run-full"])
    assert f"{root}/small/run/" in line and "No space left on device; the disk is full" in line, line
    assert seen["run-full"]["tmp"] == []  # no temporary file left behind
    assert seen["run-resumed"]["code"] == 0, seen["run-resumed"]
    clean = json.loads((root / "reference" / "run" / "results.json").read_text())["models"]
    got = seen["run-resumed"]["results"]
    for name, m in clean.items():
        assert got[name]["status"] == "complete"
        assert {t: (s["score"], s["n"]) for t, s in got[name]["tasks"].items()} == \
            {t: (s["score"], s["n"]) for t, s in m["tasks"].items()}


def test_a_full_disk_while_the_card_is_written_leaves_no_card_and_no_temporary_file(environment):
    seen, root = environment
    line = _one_line(seen["render-full"])
    assert "card.html: No space left on device" in line, line
    assert seen["render-full"]["files"] == [], seen["render-full"]


@pytest.mark.parametrize("case", ["cache-read-only", "home-read-only"])
def test_a_read_only_cache_is_one_line_and_no_run_directory(case, environment):
    seen, _ = environment
    line = _one_line(seen[case])
    assert "the cache cannot be written" in line and "Read-only file system" in line, line
    assert not seen[case]["made"]


def test_compare_to_a_read_only_place_is_one_line(environment):
    seen, root = environment
    line = _one_line(seen["compare-read-only"])
    assert f"{root}/ro/notes" in line and "Read-only file system" in line, line


def test_environment_errors_name_the_file_and_what_to_do():
    from reporter.errors import environment_error

    for code in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EDQUOT):
        e = environment_error(OSError(code, os.strerror(code), "/runs/a/x.json"))
        assert e is not None and str(e).startswith(f"/runs/a/x.json: {os.strerror(code)}; ") and "\n" not in str(e)
    assert environment_error(OSError(errno.ECONNRESET, "reset")) is None  # not the environment's: a traceback
    assert environment_error(ValueError("a bug")) is None


def test_neutral_shows_exactly_the_control_and_bidi_characters_of_every_code_point():
    """The card's ``neutral`` (every output goes through it) and the models file's name check share one regular
    expression; a plain per-character loop over Unicode's own categories is the reference, over every code point
    (surrogates aside)."""
    import unicodedata

    from reporter.card.text import neutral
    from reporter.config.models import BIDI_CONTROLS, CONTROL_CHARACTER

    def reference(ch: str) -> str:
        if ch in BIDI_CONTROLS or (unicodedata.category(ch) == "Cc" and ch not in "\n\t\r"):
            return f"[U+{ord(ch):04X}]"
        return ch

    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert neutral.__wrapped__(every) == "".join(reference(ch) for ch in every)
    assert neutral("line\nand\ttab\r") == "line\nand\ttab\r" and neutral("x\x85y\u2066z") == "x[U+0085]y[U+2066]z"
    refused = {m.group() for m in CONTROL_CHARACTER.finditer(every)}  # a name may hold none, newline included
    assert refused == {ch for ch in every if ch in BIDI_CONTROLS or unicodedata.category(ch) == "Cc"}


def test_render_in_a_read_only_run_directory_says_what_to_do_not_an_option_it_lacks(environment):
    seen, root = environment
    line = _one_line(seen["render-read-only"])
    assert f"{root}/rorun/" in line and "Read-only file system" in line, line
    assert "-o/--output" not in line and "copy it somewhere writable" in line and ".tmp" not in line, line


@pytest.mark.parametrize("command", ["compare", "board"])
def test_an_output_where_no_directory_can_be_made_is_one_line(command, finished_run):
    """``compare -o /proc/x`` and ``board -o /proc/x`` were a FileNotFoundError traceback (``run -o`` was one line):
    /proc makes no directory, and ENOENT was not among the environment's errors."""
    runs = [str(finished_run)] * (2 if command == "compare" else 1)
    r = _invoke(command, *runs, "-o", "/proc/reporter-test/out")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [
        "error: /proc/reporter-test: No such file or directory; no directory can be made there (a directory on its "
        "path is missing, or that file system makes none, as /proc): choose another -o/--output"]


def test_a_users_common_task_mistakes_say_what_would_be_valid(tmp_path):
    """A file task without ``type: jsonl`` was "unknown task 'mine'; available: …", a plugin's task without its module
    the same, a misspelt field "missing field 'quest'", and bad JSON "Expecting ',' delimiter" with no place."""
    rows = tmp_path / "mine.jsonl"
    rows.write_text('{"question": "2+2?", "answer": "4"}\n')
    head = "lpp: {enabled: false}\ntasks:\n  - "
    line = _refused(_invoke("validate", str(_models(tmp_path, head + "{name: mine, path: mine.jsonl, prompt_field: "
                                                    "question, answer_field: answer, scorer: exact}\n"))))
    assert line.endswith("(path, prompt_field, answer_field given: a task read from your own file needs type: jsonl)")
    line = _refused(_invoke("validate", str(_models(tmp_path, head + "{name: trivia}\n"))))
    assert "unknown task 'trivia'" in line and line.endswith(
        "(a plugin's task? load its module first: reporter --plugin MODULE COMMAND …)")
    line = _refused(_invoke("validate", str(_models(tmp_path, head + "{name: arc_chalenge}\n"))))
    assert "did you mean 'arc_challenge'?" in line  # a near miss of a built-in name keeps its suggestion
    jsonl = head + "{name: mine, type: jsonl, path: mine.jsonl, prompt_field: quest, answer_field: answer, scorer: exact}\n"
    line = _refused(_invoke("validate", str(_models(tmp_path, jsonl))))
    assert line.endswith("line 1: missing field 'quest' (did you mean 'question'?); the row's fields: question, answer")
    rows.write_text('{"question": "2+2?" "answer": "4"}\n')
    line = _refused(_invoke("validate", str(_models(tmp_path, jsonl.replace("quest,", "question,")))))
    assert line.endswith("line 1: not valid JSON (Expecting ',' delimiter at column 21)")


def test_a_summary_score_edited_by_hand_is_refused_by_analyse(finished_run, tmp_path):
    """A summary.json score set to 0.875 by hand went onto the card (outside its own interval, marked ≈chance) while
    ``compare``, which reads the items, said 0: the score must be the mean of the task's item scores."""
    run = copy_run(finished_run, tmp_path / "run")
    summary = run / "models" / "Llama-chat" / "tasks" / "arc_easy" / "summary.json"
    doc = json.loads(summary.read_text())
    items = [json.loads(ln)["score"] for ln in (summary.parent / "samples.jsonl").read_text().splitlines() if ln]
    mean = sum(items) / len(items)
    assert _invoke("analyse", str(run)).exit_code == 0  # negative control: as the run wrote it
    doc["score"] = 0.875 if mean != 0.875 else 0.125
    summary.write_text(json.dumps(doc))
    line = _refused(_invoke("analyse", str(run)))
    assert line == (f"error: {summary}: score {doc['score']:g} is not the mean of the {len(items)} item scores of its "
                    f"samples.jsonl ({mean:.4g}); was it edited? Remove it and rerun `reporter run` on the run directory "
                    "to recompute that task")


def test_render_reads_no_items_so_a_damaged_samples_file_does_not_stop_it(finished_run, tmp_path):
    """The score check of the run gate read every samples.jsonl: a damaged one (a line that is no sample record, a
    score past float's range) refused ``render``, which never reads items, or was a traceback."""
    for damage in ('[1, 2]\n', '{"id": "x", "score": 1e400}\n'):
        run = copy_run(finished_run, tmp_path / f"run{len(damage)}")
        with _samples(run).open("a") as f:
            f.write(damage)
        r = _invoke("render", str(run), "--format", "md")
        assert r.exit_code == 0 and (run / "card.md").is_file(), r.output


def test_a_manifest_seed_edited_by_hand_is_blamed_on_the_manifest(finished_run, tmp_path):
    """``seed: "abc"`` in manifest.json was reported as a results.json problem, the file analyse was about to write."""
    run = copy_run(finished_run, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    before = (run / "results.json").read_bytes()
    for key, value, what in (("seed", "abc", "an integer from 0"), ("seed", -1, "an integer from 0"), ("created", 7, "text")):
        (run / "manifest.json").write_text(json.dumps({**manifest, key: value}))
        assert _refused(_invoke("analyse", str(run))) == (
            f"error: {run / 'manifest.json'}: {key}: {str(value)!r} is not {what}; the manifest records how the run "
            f"was made and only `reporter run … --force` into {run} writes it again")
        assert (run / "results.json").read_bytes() == before
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert _invoke("analyse", str(run)).exit_code == 0  # negative control: the manifest as the run wrote it


def test_the_profile_a_bad_models_file_names_is_checked_in_the_same_pass(tmp_path):
    """A models file with a misspelt key and a missing profile said one, then (fixed) the other: the README promises
    every problem of the file at once."""
    (tmp_path / "bad.yaml").write_text("lpp: {enabled: nope}\ntasks: [{name: arc_easy}]\n")
    models = tmp_path / "models.yaml"
    for profile, want in (("small.yaml", f"profile: '{tmp_path / 'small.yaml'}': file not found; give a profile YAML "
                                         "file that exists"),
                          ("quik", "profile: 'quik' is not a built-in profile (did you mean 'quick'?)"),
                          ("bad.yaml", f"error: {tmp_path / 'bad.yaml'}: lpp.enabled: must be true or false, got 'nope'")):
        models.write_text(f"profile: {profile}\nmodels:\n  - {{name: a, source: random:llama, random: {{hiden: 64}}}}\n")
        r = _invoke("validate", str(models))
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert r.exit_code == 2 and len(errors) == 2, r.output
        assert "models[0].random.hiden: unknown key 'hiden'" in errors[0] and want in errors[1], errors
        # --profile replaces the file's: its profile is not read, so not blamed
        r = _invoke("validate", str(models), "--profile", "quick")
        assert [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")] == errors[:1], r.output


def test_a_results_score_edited_by_hand_leaves_the_run_off_the_board_and_is_refused_by_render(finished_run, tmp_path):
    """results.json edited by hand: the board ranked the edited score (and merged the copy with its original as
    "identical results") while compare, reading the items, said otherwise; render put it on the card."""
    from reporter.analyse.board import build_board

    run = copy_run(finished_run, tmp_path / "edited")
    res = json.loads((run / "results.json").read_text())
    task = res["models"]["Llama chat"]["tasks"]["arc_easy"]
    items = [json.loads(ln)["score"] for ln in (run / "models" / "Llama-chat" / "tasks" / "arc_easy" / "samples.jsonl")
             .read_text().splitlines() if ln]
    assert task["score"] == pytest.approx(sum(items) / len(items))  # as the run wrote it
    assert not build_board([run], n_resamples=20)["warnings"]  # negative control: the copy as it was
    task["score"] = 0.875 if task["score"] != 0.875 else 0.125
    (run / "results.json").write_text(json.dumps(res))
    doc = build_board([finished_run, run], n_resamples=20)
    assert doc["warnings"] == [f"{run}: left out: {run / 'results.json'}: models.Llama chat.tasks.arc_easy: score "
                               f"{task['score']:g} is not the mean of the {len(items)} item scores of its samples.jsonl "
                               f"({sum(items) / len(items):.4g}); was it edited? `reporter analyse {run}` rebuilds "
                               "results.json from the task files"]
    said = doc["warnings"][0].split(": left out: ", 1)[1]
    line = _refused(_invoke("render", str(run), "--format", "md"))  # the card showed the edited score
    assert line == f"error: {said}" and not (run / "card.md").exists()
    assert _refused(_invoke("compare", str(finished_run), str(run), "-o", str(tmp_path / "notes"))) == f"error: {said}"
    assert _invoke("analyse", str(run)).exit_code == 0  # the remedy it names
    assert not build_board([run], n_resamples=20)["warnings"]
    assert _invoke("render", str(run), "--format", "md").exit_code == 0 and (run / "card.md").is_file()
