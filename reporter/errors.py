"""User-facing errors: anything the CLI prints as one line and exits 2 on.

Internal invariants (a bug in reporter, not in the user's input) raise ``RuntimeError`` or
``AssertionError`` instead, so that they keep their traceback.
"""
from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """An error caused by the user's input or environment, printed without a traceback.

    Each element of ``lines`` is one complete, self-explanatory problem line.

    >>> str(UserError(["models.yaml: models[0].dtype: 'fp8' is not valid; use one of auto, float32"]))
    "models.yaml: models[0].dtype: 'fp8' is not valid; use one of auto, float32"
    """

    exit_code = 2

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


def user_path(path: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; as written where it cannot be (no such user, no home
    directory), so that the check that follows names it as a path that does not exist instead of a traceback.

    >>> str(user_path("~no-such-user-here/model"))
    '~no-such-user-here/model'
    """
    try:
        return Path(path).expanduser()
    except RuntimeError:  # "Could not determine home directory"
        return Path(path)


def inside(path: object, folder: object) -> bool:
    """Whether ``path`` is ``folder`` or lies in it (by their text: no link is resolved).

    >>> inside("/c/reporter/models/x", "/c/reporter"), inside("/c/reporter2", "/c/reporter"), inside(None, "/c")
    (True, False, False)
    """
    return path is not None and (str(path).rstrip("/") + "/").startswith(str(folder).rstrip("/") + "/")


def unknown_home(path: str) -> str | None:
    """Why ``path``'s leading ``~user`` could not be expanded (no such user, or no home directory), or None.

    >>> unknown_home("~no-such-user-here/model"), unknown_home("./model")
    ("'~no-such-user-here' is no home directory on this machine (no such user)", None)
    """
    if not path.startswith("~") or user_path(path) != Path(path):
        return None
    head = path.split("/", 1)[0]
    return f"{head!r} is no home directory on this machine ({'no such user' if head != '~' else 'HOME is not set'})"


class ConfigError(UserError):
    """Problems found while validating a models YAML file."""


class SchemaError(UserError):
    """A results.json (or other artifact) that does not match :mod:`reporter.schema`."""


#: the errno values that mean "this machine's environment cannot do what was asked", with what to do about it
_ENVIRONMENT = {
    "ENOSPC": "the disk is full: free some space and rerun the same command (finished work is kept)",
    "EDQUOT": "the disk quota is used up: free some space and rerun the same command (finished work is kept)",
    "EROFS": "it cannot be written here: choose a writable location (another -o/--output)",
    "EACCES": "check its permissions or choose another location (another -o/--output)",
    "EPERM": "check its permissions or choose another location (another -o/--output)",
    "ENOTDIR": "a part of that path is a file, not a directory: choose another location",
    "EISDIR": "a directory stands where reporter writes a file: remove it or choose another location",
    "EEXIST": "a file stands where reporter makes a directory: remove it or choose another location",
    "ENAMETOOLONG": "choose a shorter path",
    "EMFILE": "too many open files in this process: raise `ulimit -n`",
    "ENFILE": "too many open files on this machine",
    "EIO": "an input/output error: the disk or network file system failed",
    "ELOOP": "a symbolic link stands where reporter writes, and it never writes through one: replace it with a copy "
             "of what it points to",
    "EFBIG": "a file would pass this process's file-size limit (`ulimit -f`) or the file system's: raise it and "
             "rerun the same command (finished work is kept)",
}


def environment_error(e: BaseException, *, cache: str | None = None) -> UserError | None:
    """The one-line :class:`UserError` for an environment failure (a full disk, a read-only or missing
    directory, no memory), or None when ``e`` is not one (a bug keeps its traceback).

    ``cache``: reporter's cache directory; a path under it gets the hint to point ``XDG_CACHE_HOME`` elsewhere.

    >>> import errno, os
    >>> str(environment_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/a/results.json")))
    '/runs/a/results.json: No space left on device; the disk is full: free some space and rerun the same command (finished work is kept)'
    >>> str(environment_error(OSError(errno.EROFS, "Read-only file system", "/c/reporter/models"), cache="/c/reporter"))
    '/c/reporter/models: Read-only file system; reporter keeps converted models and task indexes in its cache /c/reporter: set XDG_CACHE_HOME to a writable directory'
    >>> environment_error(ValueError("a bug")) is None
    True
    >>> str(environment_error(FileNotFoundError(errno.ENOENT, "No usable temporary directory found in ['/tmp']")))
    'no writable temporary directory (tried TMPDIR, /tmp, /var/tmp, /usr/tmp and the working directory); set TMPDIR to a writable directory'
    """
    import errno

    if isinstance(e, MemoryError):
        return UserError(f"not enough memory ({str(e).strip() or 'MemoryError'}); use smaller models, a smaller "
                         "dtype or another device, or free memory and rerun the same command")
    if isinstance(e, FileNotFoundError) and str(e.strerror).startswith("No usable temporary directory found"):
        return UserError("no writable temporary directory (tried TMPDIR, /tmp, /var/tmp, /usr/tmp and the working "
                         "directory); set TMPDIR to a writable directory")  # tempfile's own error names no errno
    if not isinstance(e, OSError) or e.errno is None:
        return None
    name = errno.errorcode.get(e.errno, "")
    if name not in _ENVIRONMENT:
        return None
    where = str(e.filename) if e.filename is not None else "reporter"
    if e.filename2 is not None:
        where += f" → {e.filename2}"
    why = e.strerror or name
    if cache is not None and inside(e.filename, cache):
        hint = (f"reporter keeps converted models and task indexes in its cache {cache}: "
                + ("free some space there, or set XDG_CACHE_HOME to a directory with room" if name in ("ENOSPC", "EDQUOT")
                   else "set XDG_CACHE_HOME to a writable directory"))
    elif cache is not None and e.filename is not None and inside(cache, e.filename):
        hint = (f"it is on the path of reporter's cache {cache}: set XDG_CACHE_HOME to a writable directory")
    else:
        hint = _ENVIRONMENT[name]
    return UserError(f"{where}: {why}; {hint}")
