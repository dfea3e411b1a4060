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
from typing import Iterator, Sequence

from ..errors import UserError
from .layout import CARD_FILES, COMPARE_DIR, HF_DIR, MODEL_INDEX_DIR

LOCK = ".lock"

#: the folders of a run directory reporter writes into (the files at its top are replaced, never written through)
WRITTEN_FOLDERS = ("models", CARD_FILES, MODEL_INDEX_DIR, HF_DIR, COMPARE_DIR)


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


def refuse_linked_folders(root: Path, names: Sequence[str] = WRITTEN_FOLDERS) -> None:
    """Refuse a folder reporter writes into (``names`` under ``root``, and every folder below them) that is a
    symbolic link: reporter would write through it, wherever it points (a run directory handed on with
    ``card_files -> /somewhere``). ``root`` itself may be a link, and so may folders reporter never writes.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "card_files").symlink_to(tempfile.mkdtemp())
    >>> (root / "notes").symlink_to(tempfile.mkdtemp()); refuse_linked_folders(root, ("notes-not-ours",))
    >>> refuse_linked_folders(root)
    Traceback (most recent call last):
    reporter.errors.UserError: .../card_files: is a symbolic link to a folder; reporter writes only into a run directory's own folders: replace it with a copy of what it points to
    """
    for name in names:
        top = root / name
        linked = [str(top)] if top.is_symlink() else []
        if not linked and top.is_dir():
            linked = [os.path.join(here, d) for here, dirs, _ in os.walk(top, followlinks=False) for d in dirs
                      if os.path.islink(os.path.join(here, d))][:1]
        if linked:
            raise UserError(f"{linked[0]}: is a symbolic link to a folder; reporter writes only into a run directory's "
                            "own folders: replace it with a copy of what it points to")
