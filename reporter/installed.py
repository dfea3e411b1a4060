"""Files inside installed distributions, found without importing them.

Offline models and data ship inside PyPI wheels whose ``__init__`` may pull in unrelated
runtimes; :func:`module_dir` locates a package's directory with
:func:`importlib.util.find_spec` and never imports it.

>>> module_dir("email") is not None, module_dir("surely_not_installed_here") is None
(True, True)
"""
from __future__ import annotations

import importlib.util
import os
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
