"""Files inside installed distributions, found without importing them.

Offline models and data ship inside PyPI wheels whose ``__init__`` may pull in unrelated
runtimes; :func:`module_dir` locates a package's directory with
:func:`importlib.util.find_spec` and never imports it.

>>> module_dir("email") is not None, module_dir("surely_not_installed_here") is None
(True, True)
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from functools import lru_cache
from pathlib import Path


def cache_root() -> Path:
    """The reporter cache directory (``$XDG_CACHE_HOME/reporter`` or ``~/.cache/reporter``): converted models,
    reporter's offline copies of lm-eval tasks, lm-eval's task index. A relative ``XDG_CACHE_HOME`` is ignored, as
    the XDG specification says (it made a cache in whatever directory reporter ran from).
    """
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # a relative XDG_CACHE_HOME is invalid (the XDG spec): ignored
        base = str(Path.home() / ".cache")
    return Path(base) / "reporter"


def cache_unwritable(root: Path | None = None) -> str | None:
    """Why reporter's cache directory cannot be created or written, or None when it can (it is created).

    >>> import tempfile
    >>> cache_unwritable(Path(tempfile.mkdtemp()) / "c") is None
    True
    >>> f = Path(tempfile.mkstemp()[1]); cache_unwritable(f / "reporter")
    '... is a file, not a directory'
    """
    root = root or cache_root()
    parent = root
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a directory"
    try:
        make_writable_dir(root)
    except OSError as e:
        return f"{e.filename or root}: {e.strerror or type(e).__name__}"
    return None


def make_writable_dir(root: Path) -> None:
    """Create ``root`` (and its parents) and prove it writable by writing and removing a file; raises OSError."""
    root.mkdir(parents=True, exist_ok=True)
    probe = root / f".write-test-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()


def module_dir(module: str) -> Path | None:
    """Directory of an installed package, found without importing it; None when it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def source_digest(root: Path | None, extra: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> str:
    """sha256 over the ``*.py`` files under ``root`` (named relative to it, so two checkouts of the same code
    give the same digest; None: none) but those whose first path part is in ``exclude``, and the files ``extra``
    (named by their file name).

    >>> import tempfile
    >>> a, b = (Path(tempfile.mkdtemp()) for _ in range(2))
    >>> for d in (a, b): _ = (d / "m.py").write_text("x = 1")
    >>> source_digest(a) == source_digest(b), (b / "m.py").write_text("x = 2") and source_digest(a) == source_digest(b)
    (True, False)
    >>> source_digest(a, exclude=("m.py",)) == source_digest(b, exclude=("m.py",))
    True
    """
    h = hashlib.sha256()
    files = [] if root is None else [(p, name) for p in sorted(root.rglob("*.py"))
                                     if (name := p.relative_to(root).as_posix()).split("/")[0] not in exclude]
    for p, name in files + [(Path(e), Path(e).name) for e in extra]:
        try:
            h.update(name.encode() + b"\0" + p.read_bytes())
        except OSError:
            h.update(f"unreadable:{name}".encode())
    return h.hexdigest()


@lru_cache(maxsize=1)
def reporter_digest() -> str:
    """sha256 over all of reporter's own Python source (:func:`source_digest`): what keys the caches of code that
    reads and compares runs (``reporter board``'s), where any change of reporter may change what they hold.
    """
    return source_digest(Path(__file__).resolve().parent)
