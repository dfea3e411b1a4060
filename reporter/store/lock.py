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

import errno
import fcntl
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import UserError

LOCK = ".lock"


@contextmanager
def run_lock(root: Path) -> Iterator[None]:
    """Hold the run directory's lock for the ``with`` block (the directory must exist)."""
    try:  # never through a link: a run directory from elsewhere with .lock -> /etc/passwd had it overwritten
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo or a device: opened, never truncated or written
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
    except OSError as e:  # a read-only directory, a .lock that is a directory, a link or a device
        why = "a symbolic link" if e.errno == errno.ELOOP else e.strerror or str(e)
        raise UserError(f"{root}: cannot take the run directory's lock {root / LOCK} ({why}); the run "
                        "directory must be writable and its .lock a plain file (delete it: it holds only a pid)") \
            from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise UserError(f"{root}: run directory is in use by pid {holder}; wait for it to finish or choose "
                            "another -o/--output") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        refuse_linked_folders(root)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def refuse_linked_folders(root: Path) -> None:
    """Refuse a run directory holding a folder that is a symbolic link: reporter would write through it, into
    wherever it points (a run directory handed on with ``card_files -> /somewhere``). ``root`` itself may be a link.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "card_files").symlink_to(tempfile.mkdtemp())
    >>> refuse_linked_folders(root)
    Traceback (most recent call last):
    reporter.errors.UserError: .../card_files: is a symbolic link to a folder; reporter writes only into a run directory's own folders: replace it with a copy of what it points to
    """
    for here, dirs, _ in os.walk(root, followlinks=False):
        for d in dirs:
            if os.path.islink(os.path.join(here, d)):
                raise UserError(f"{os.path.join(here, d)}: is a symbolic link to a folder; reporter writes only into a "
                                "run directory's own folders: replace it with a copy of what it points to")
