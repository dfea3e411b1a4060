"""One run at a time per run directory: an exclusive ``flock`` on ``<run dir>/.lock``.

A second ``reporter run`` on a directory in use stops at once with the first run's pid, instead
of interleaving writes with it. The lock is released when the process exits, however it exits.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> with run_lock(root):
...     with run_lock(root):
...         pass
Traceback (most recent call last):
reporter.errors.UserError: ... run directory is in use by pid ...; wait for it to finish or choose another -o/--output
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import UserError

LOCK = ".lock"


@contextmanager
def run_lock(root: Path) -> Iterator[None]:
    """Hold the run directory's lock for the ``with`` block (the directory must exist)."""
    try:
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:  # a read-only directory, or a .lock that is a directory
        raise UserError(f"{root}: cannot take the run directory's lock {root / LOCK} ({e.strerror}); the run "
                        "directory must be writable and its .lock a plain file") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise UserError(f"{root}: run directory is in use by pid {holder}; wait for it to finish or choose "
                            "another -o/--output") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
