"""Crash-safe writing: every file and cache directory appears whole or not at all.

Each writer builds its output next to the target and renames it into place
(``os.replace``), after an ``fsync``; a crash or a kill never leaves half a file behind.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "a" / "x.json"
>>> write_json(p, {"n": 1}); read_json(p)
{'n': 1}
>>> read_json(p.with_name("missing.json"), default={})
{}
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from ..errors import UserError


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: the permissions of a file reporter writes: what ``open()`` would give (``mkstemp`` alone gives 0600, which
#: hides a card from the team that shares the run directory)
_FILE_MODE = 0o666 & ~_umask()


@contextmanager
def named_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Give an ``OSError`` raised inside the block (a full disk on ``write``/``fsync`` names no file) ``path``.

    >>> import errno
    >>> with named_errors("/runs/a/x.json"):
    ...     raise OSError(errno.ENOSPC, "No space left on device")
    Traceback (most recent call last):
    OSError: [Errno 28] No space left on device: '/runs/a/x.json'
    """
    try:
        yield
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


@contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on a clean exit it is synced and renamed to ``path``.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
    >>> with atomic_writer(p, "w") as fh:
    ...     _ = fh.write("whole")
    >>> p.read_text()
    'whole'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:  # named as the file the user knows, not its temporary twin
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        with named_errors(path):
            os.fchmod(fd, _FILE_MODE)
            with os.fdopen(fd, mode) as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: the name :func:`atomic_writer`'s temporary twin of a file has (``tempfile.mkstemp``'s 8 random characters)
_TWIN = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def remove_stale_temporaries(folder: Path, recursive: bool = True) -> int:
    """Delete the temporary twins :func:`atomic_writer` left under ``folder`` (``.<name>.<random>.tmp``, plain files
    only; ``recursive``: in its subfolders too) when a process was killed between writing and renaming (SIGKILL, a
    power cut); return how many. Call it only while no one else writes there (under the run directory's lock).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a").mkdir()
    >>> _ = (d / "a" / ".x.json.k3j9z1ab.tmp").write_text("{"); _ = (d / "a" / "x.json").write_text("{}")
    >>> _ = (d / "a" / ".notes.tmp").write_text("a user's")
    >>> remove_stale_temporaries(d), sorted(p.name for p in (d / "a").iterdir())
    (1, ['.notes.tmp', 'x.json'])
    """
    gone = 0
    for p in (folder.rglob if recursive else folder.glob)(".*.tmp"):  # "." + name + "." + mkstemp's 8 + ".tmp"
        if _TWIN.fullmatch(p.name) and p.is_file() and not p.is_symlink():
            p.unlink(missing_ok=True)
            gone += 1
    return gone


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` atomically; returns the path.

    >>> import tempfile, pathlib
    >>> write_bytes(pathlib.Path(tempfile.mkdtemp()) / "b.bin", b"ok").read_bytes()
    b'ok'
    """
    with atomic_writer(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON atomically (indented; numpy scalars and arrays and paths become plain JSON)."""
    with atomic_writer(path, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=_default)
        fh.write("\n")


#: the largest JSON document reporter reads from a run directory (results.json of thousands of items is a few MiB)
MAX_JSON_BYTES = 512 << 20


#: what json.loads raises on a damaged text: a syntax error (JSONDecodeError, a ValueError), an integer past the
#: conversion limit (ValueError), or nesting past Python's recursion limit (RecursionError)
JSON_ERRORS = (ValueError, RecursionError)


def why_not_json(e: BaseException) -> str:
    """The reason of a :data:`JSON_ERRORS` error, in a few words, with the line where JSON gives one.

    >>> try:
    ...     json.loads("[" * 100_000)
    ... except JSON_ERRORS as e:
    ...     why_not_json(e)
    'nested too deeply'
    """
    if isinstance(e, json.JSONDecodeError):
        return ("it starts with a UTF-8 byte-order mark: save it without one" if e.msg.startswith("Unexpected UTF-8 BOM")
                else f"{e.msg} at column {e.colno}" if e.lineno == 1 else f"{e.msg} at line {e.lineno}, column {e.colno}")
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return str(e).split(":")[0].split(";")[0]


def read_json(path: str | os.PathLike[str], default: Any = None) -> Any:
    """The parsed JSON object at ``path``, or ``default`` when the file does not exist.

    A damaged file (not JSON, not UTF-8, nested past Python's recursion limit, an integer too long to convert, or
    JSON that is not an object: every document reporter writes is one) is
    a one-line :class:`~reporter.errors.UserError` naming it, so resume recomputes it (:func:`json_ok`).
    """
    try:
        if Path(path).stat().st_size > MAX_JSON_BYTES:
            raise UserError(f"{path}: is larger than {MAX_JSON_BYTES >> 20} MiB; not a document reporter wrote")
        text = Path(path).read_bytes().decode("utf-8")
        data = json.loads(text)
        if not isinstance(data, dict):
            kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(data), "a number")
            raise UserError(f"{path}: damaged, not a JSON object ({kind})")
        return data
    except (FileNotFoundError, NotADirectoryError):  # not there, or a file where one of its directories goes
        return default
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a JSON file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f" at line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise UserError(f"{path}: damaged, not valid JSON{where} ({reason})") from None
    except JSON_ERRORS as e:  # nested past Python's limit, or an integer of over 4,300 digits
        raise UserError(f"{path}: damaged, not valid JSON ({why_not_json(e)})") from None


def json_ok(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists and holds valid JSON (resume checks a file before trusting it)."""
    try:
        return read_json(path) is not None
    except UserError:
        return False


def read_record(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A JSON object that explains rather than measures (a failure's ``error.json``): None where it is missing,
    damaged or not an object, which costs the card a sentence, not the analysis.

    >>> read_record("/nonexistent/error.json") is None
    True
    """
    try:
        doc = read_json(path)
    except UserError:
        return None
    return doc if isinstance(doc, dict) else None


def atomic_directory(final: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmpdir)`` and rename the result to ``final``; an existing ``final`` is kept as is.

    >>> import tempfile, pathlib
    >>> d = atomic_directory(pathlib.Path(tempfile.mkdtemp()) / "cache", lambda t: (t / "f").write_text("x"))
    >>> (d / "f").read_text()
    'x'
    """
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.replace(tmp, final)
        except OSError:
            if not final.is_dir():  # lost a race with another process: theirs is as good
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
