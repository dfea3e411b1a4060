"""The one gate every command that reads a finished run passes first (``analyse``, ``render``, ``compare``,
and ``board`` when it exists): the directory, its manifest, its lock, and its results.json's schema version
and shape, each refused in one line that names the file.

>>> import tempfile, pathlib
>>> open_run(pathlib.Path(tempfile.mkdtemp()) / "nope", "render")
Traceback (most recent call last):
reporter.errors.UserError: .../nope: no such run directory; render reads the output directory of `reporter run`
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SchemaError, UserError
from ..schema import SCHEMA_VERSION, Results, not_finite, validate
from .atomic import read_json
from .layout import SAMPLES, RunDir, slugify
from .lock import LOCK
from .samples import check_score, item_scores

#: the results.json versions this reporter reads
SUPPORTED_VERSIONS = (SCHEMA_VERSION,)


@dataclass
class RunView:
    """A run directory that passed the gate: its layout, manifest (``{}`` when absent and not required) and
    its results.json, checked against :class:`reporter.schema.Results` (None when not asked for).
    """

    rd: RunDir
    manifest: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] | None = None


def writer_pid(root: Path) -> str | None:
    """The pid of the ``reporter run`` (or ``analyse``) that holds ``root``'s lock now, or None when none does.

    >>> import tempfile, pathlib
    >>> writer_pid(pathlib.Path(tempfile.mkdtemp())) is None
    True
    """
    try:  # a fifo blocked this open forever (render, compare, board); a link is nobody's lock
        fd = os.open(root / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # no lock file (never run here) or one that is not a file: nobody can hold it
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return "?"
            return None
        return None
    finally:
        os.close(fd)  # releases the shared lock taken to look


def check_version(res: Any, where: str = "results.json") -> None:
    """Refuse a results.json whose ``schema_version`` this reporter does not read."""
    if isinstance(res, dict) and "schema_version" not in res:
        raise SchemaError(f"{where}: schema_version: missing; not a results.json reporter wrote (rebuild it with "
                          "`reporter analyse`)")
    if not isinstance(res, dict) or res.get("schema_version") not in SUPPORTED_VERSIONS:
        got = res.get("schema_version") if isinstance(res, dict) else type(res).__name__
        raise SchemaError(f"{where}: schema_version: {str(got)[:40]!r} is not supported; this reporter reads "
                          f"version {', '.join(map(str, SUPPORTED_VERSIONS))} (rebuild it with `reporter analyse`)")


def check_scores(results: dict[str, Any], rd: RunDir) -> None:
    """Refuse a results.json whose task score is not the mean of that task's item scores in its ``samples.jsonl``
    (edited by hand): the card, ``compare`` and the board would otherwise show a number nothing measured. A task
    whose samples are gone, cut or damaged is not checked here (nothing to check against; the command that reads
    the items names what is wrong with them).
    """
    for name, m in (results.get("models") or {}).items():
        for task, s in (m.get("tasks") or {}).items():
            if not isinstance(s, dict):
                continue
            try:
                scores = item_scores(rd.task_dir(str(m.get("slug") or name), task) / SAMPLES, s.get("n"))
            except (UserError, KeyError, TypeError, ValueError, OverflowError):  # a damaged file or score: render
                continue  # does not read items, and compare's own reader names what is wrong with them
            check_score(f"{rd.results}: models.{name}.tasks.{task}", s, scores or {},
                        f"`reporter analyse {rd.root}` rebuilds results.json from the task files")


def open_run(run_dir: str | Path, command: str, *, manifest: bool = True, results: bool = True,
             analysed: bool = False, locked_ok: bool = False, scores: bool = True) -> RunView:
    """Check the run directory ``run_dir`` for ``command`` (the name used in messages) and read it.

    ``manifest``: manifest.json must exist and be a run's manifest. ``results``: results.json must exist,
    carry a supported ``schema_version`` and match the schema (a hand-edited score that is not a number is
    refused with its key path), and, with ``scores``, each task's score must be its items' mean
    (:func:`check_scores`; the board checks them where it reads the items, once per run it has not cached).
    ``analysed``: its analysis section must be there. ``locked_ok``: the caller holds or takes the lock itself
    (``analyse``); otherwise a run that is still writing is refused.
    """
    root = Path(run_dir)
    rd = RunDir(root)
    if not root.exists():
        raise UserError(f"{root}: no such run directory; {command} reads the output directory of `reporter run`")
    if not root.is_dir():
        raise UserError(f"{root}: is a file, not a run directory; {command} reads the output directory of "
                        "`reporter run`")
    if not locked_ok and (pid := writer_pid(root)) is not None:
        raise UserError(f"{root}: a run is still writing it (pid {pid}); wait for it to finish, then {command} it")
    try:
        man: Any = read_json(rd.manifest)
    except UserError as e:  # how the run was made: nothing rebuilds it but the run
        raise UserError(f"{e}; it records how the run was made and only `reporter run … --force` into {root} "
                        "writes it again") from None
    if man is None and manifest:
        raise UserError(f"{root}: not a run directory (no manifest.json); {command} reads the output directory of "
                        "`reporter run`")
    if man is not None and not (isinstance(man, dict) and "config_hash" in man and "resolved" in man):
        # other JSON in its place: a compare read its settings as all defaults and named differences that are not
        raise UserError(f"{rd.manifest}: is not a run's manifest (no config_hash and resolved configuration); it "
                        f"records how the run was made and only `reporter run … --force` into {root} writes it "
                        "again")
    view = RunView(rd=rd, manifest=man or {})
    if results:
        try:
            res = read_json(rd.results)
        except UserError as e:  # damaged: the file and why, and what rewrites it
            raise UserError(f"{e}; `reporter analyse {root}` writes it again from the run's artifacts") from None
        if res is None and man is None:  # neither file: the analyse suggested next would refuse it too
            raise UserError(f"{root}: not a run directory (no manifest.json nor results.json); {command} reads the "
                            "output directory of `reporter run`")
        if res is None:
            raise UserError(f"{rd.results}: no results.json; run `reporter run` (or `reporter analyse {root}`) first")
        check_version(res, str(rd.results))
        view.results = validate(res, Results, document=str(rd.results))
        try:  # a NaN score passes every bound: the card showed "—" beside its interval, a board wrote NaN
            not_finite(view.results)
        except SchemaError as e:
            raise SchemaError(str(e).replace("results.json: ", f"{rd.results}: ", 1)) from None
        for name, m in (view.results.get("models") or {}).items():
            slug = m.get("slug")
            if slug is not None and slug != slugify(slug):  # a slug names files: a hand-edited one could escape
                raise UserError(f"{rd.results}: models[{str(name)[:60]!r}].slug: {str(slug)[:60]!r} is not a safe "
                                f"file name (use letters, digits, '.', '_' and '-'); rebuild it with "
                                f"`reporter analyse {root}`")
        if scores:
            check_scores(view.results, rd)
        if analysed and not isinstance(view.results.get("analysis"), dict):
            raise UserError(f"{rd.results}: has no analysis section; run `reporter analyse {root}` first")
    return view
