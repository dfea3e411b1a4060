"""``samples.jsonl``: one JSON line per answered item, appended batch by batch.

A kill can tear the last line; reading skips a line that is not valid JSON, so a rerun
recomputes that item, and appending first cuts a torn tail back to the last whole line, so a
new record can never be glued onto half an old one.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "samples.jsonl"
>>> append_samples(p, [{"id": "a", "score": 1.0}]); p.open("a").write('{"id": "b", "sc')
15
>>> sorted(read_samples(p))
['a']
"""
from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from ..errors import UserError
from .atomic import JSON_ERRORS, named_errors, why_not_json

#: the largest samples.jsonl reporter reads (a million items with their generations fit well under it)
MAX_SAMPLES_BYTES = 2 << 30


def read_samples(path: Path) -> dict[str, dict[str, Any]]:
    """Finished samples by id (the first record of an id wins); a torn line is ignored.

    A line that is JSON but not a sample record, text that is not UTF-8, or a file past
    :data:`MAX_SAMPLES_BYTES` is a one-line :class:`~reporter.errors.UserError` naming the file and the line.
    """
    out: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return out
    if path.stat().st_size > MAX_SAMPLES_BYTES:
        raise UserError(f"{path}: is larger than {MAX_SAMPLES_BYTES >> 30} GiB; not a samples file reporter wrote")
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            torn = not raw.endswith(b"\n")  # a kill mid-append: cut anywhere, inside a UTF-8 character too
            try:
                rec = json.loads(raw.decode("utf-8"))
            except json.JSONDecodeError:
                continue  # a torn line: the item is redone on resume
            except UnicodeDecodeError:
                if torn:
                    continue
                raise UserError(f"{path}: line {n}: not UTF-8 text; the file is damaged (rerun `reporter run` on its "
                                "run directory to redo it)") from None
            except JSON_ERRORS as e:
                raise UserError(f"{path}: line {n}: {why_not_json(e)}; the file is damaged (rerun `reporter run` on its "
                                "run directory to redo it)") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
                raise UserError(f"{path}: line {n}: not a sample record (no string id); the file is damaged (rerun "
                                "`reporter run` on its run directory to redo it)")
            out.setdefault(rec["id"], rec)
    return out


def append_samples(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append records as JSON lines in one write, flushed and synced (a torn last line is cut first).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "samples.jsonl"
    >>> _ = p.write_text('{"id": "a"}\\n{"id": "b", "sc')
    >>> append_samples(p, [{"id": "c"}]); p.read_text()
    '{"id": "a"}\\n{"id": "c"}\\n'
    """
    blob = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    with named_errors(path), open(path, "a+b", opener=_own_file) as fh:
        _cut_torn_tail(fh)
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())


def _own_file(path: str, flags: int) -> int:
    """Open ``path`` never through a link, and only as a regular file: a handed-on run with ``samples.jsonl ->
    ~/notes`` had that file cut to its last newline and appended to.
    """
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd


def _cut_torn_tail(fh: Any) -> None:
    """Truncate an open file to just after its last newline (nothing to do when it ends with one)."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return
    fh.seek(size - 1)
    if fh.read(1) == b"\n":
        return
    pos, chunk = size, 1 << 16
    while pos > 0:
        start = max(0, pos - chunk)
        fh.seek(start)
        data = fh.read(pos - start)
        nl = data.rfind(b"\n")
        if nl >= 0:
            fh.truncate(start + nl + 1)
            return
        pos = start
    fh.truncate(0)



def holds_task(n_records: int, n: Any) -> bool:
    """Whether a finished task's ``samples.jsonl`` with ``n_records`` items holds the task's items: as many as its
    summary's ``n`` (a file cut after the task finished does not; a summary without ``n`` takes the file as it is).

    >>> holds_task(30, 30), holds_task(2, 30), holds_task(2, None)
    (True, False, True)
    """
    return not (isinstance(n, int) and not isinstance(n, bool)) or n_records == n


def item_scores(path: Path, n: Any) -> dict[str, float] | None:
    """Item id → score from a finished task's ``samples.jsonl``, or None where it holds another number of items than
    its summary's ``n`` (cut after the task finished): its items are not the task's, and a paired comparison on
    them would be on other items. A summary without ``n`` takes the file as it is.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "samples.jsonl"
    >>> append_samples(p, [{"id": "a", "score": 1}, {"id": "b", "score": 0}])
    >>> item_scores(p, 2), item_scores(p, 30)
    ({'a': 1.0, 'b': 0.0}, None)
    """
    scores = {r["id"]: float(r["score"]) for r in read_samples(path).values()}
    return scores if holds_task(len(scores), n) else None


def check_score(where: str, summary: dict[str, Any], scores: dict[str, float], remedy: str) -> None:
    """A task's score is the mean of its items' scores: one whose score is not (a summary.json or results.json edited
    by hand) is refused in one line, or the card, the board and ``compare`` (which reads the items) would say
    different things. ``where`` names the file (and the entry) at fault.

    >>> check_score("s.json", {"score": 0.5}, {"a": 1.0, "b": 0.0}, "Rerun it.")
    >>> check_score("s.json", {"score": 0.875}, {"a": 0.0, "b": 0.0}, "Rerun it.")
    Traceback (most recent call last):
    reporter.errors.UserError: s.json: score 0.875 is not the mean of the 2 item scores of its samples.jsonl (0); was it edited? Rerun it.
    """
    score = summary.get("score")
    if not scores or not isinstance(score, (int, float)) or isinstance(score, bool):
        return
    mean = sum(scores.values()) / len(scores)
    if abs(float(score) - mean) > 1e-9 * max(1.0, abs(mean)):
        raise UserError(f"{where}: score {score:g} is not the mean of the {len(scores)} item scores of its "
                        f"samples.jsonl ({mean:.4g}); was it edited? {remedy}")
