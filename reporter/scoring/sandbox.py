"""Run model-generated Python programs (HumanEval/MBPP scoring) in a throw-away process.

NOT A SECURITY BOUNDARY against a determined attacker: it stops accidents and naive hostile code
(infinite loops, fork bombs, output floods, memory bombs, stray writes, network use).

Always enforced: a separate interpreter (``python -I -B -u``) in a new session/process group,
SIGKILLed as a group at the wall-clock ``timeout`` and at the end of the run; rlimits RLIMIT_CPU
(``cpu_seconds``, default ceil(timeout)+1), RLIMIT_AS (``memory_mb``), RLIMIT_FSIZE (16 MiB or
``max_output_bytes`` if larger), RLIMIT_NPROC (32), RLIMIT_CORE 0; a fresh private working directory
(also HOME and TMPDIR), deleted afterwards; an environment of only PATH, HOME, TMPDIR, LANG and
PYTHONDONTWRITEBYTECODE; stdout/stderr in unlinked temporary files bounded by RLIMIT_FSIZE (a flood
ends in "File too large"), of which at most ``max_output_bytes`` each are read back; an in-process
guard installed before the program runs: open/io.open/os.open for writing, os.remove/unlink/rmdir/
mkdir/rename/replace/link/symlink/chmod/chown/truncate/utime/mkfifo/mknod and shutil.rmtree raise
PermissionError outside the working directory, and so do os.fork/forkpty/system/popen/exec*/
posix_spawn*/kill/killpg, subprocess.Popen, _posixsubprocess.fork_exec (hence multiprocessing),
socket.socket (unless wrapping an fd, as socketpair does) and getaddrinfo/gethostbyname/...

Also enforced by the kernel when the caller is root (as on our CI): a new, empty network namespace
(no connection at all, not even to 127.0.0.1); a fresh random unprivileged uid/gid, no supplementary
groups, no_new_privs: the program can write only to its directory and world-writable places (/tmp,
/dev/shm...), RLIMIT_NPROC really caps its processes and threads (if others cannot read the stdlib,
e.g. a pyenv under /root, it keeps CAP_DAC_READ_SEARCH and can *read* any file); afterwards every
process of that uid is killed, even those that left the process group, and what it left at the top
of /tmp, /var/tmp, /dev/shm and $TMPDIR is deleted.

Not enforced: the guard is monkeypatching, bypassed with ``posix``, ``_io.FileIO``, ``_socket``,
``ctypes``, ``importlib.reload``...; without root only it and the rlimits remain (RLIMIT_NPROC then
counts all the user's processes: usually no process or thread can start). Reads obey only file
permissions; CPU/disk bandwidth and files deeper in world-writable directories are not limited or
cleaned; with no free uid, root falls back to ``nobody`` without the per-uid cleanup. Linux only.

Statuses: "passed" (exit 0); "failed" (other exit or a signal: exceptions, asserts, MemoryError,
output flood, *syntax errors* (SyntaxError in stderr)); "timeout" (wall clock or CPU limit); "error"
(the sandbox could not run it: launch or setup failure).
"""
from __future__ import annotations

import _posixsubprocess
import builtins
import contextlib
import errno
import io
import math
import os
import random
import resource
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

_SETUP_FAILED = 125  # exit code of the child when it could not set itself up
_FILE_LIMIT = 16 << 20
_MAX_PROCS = 32
_UID_RANGE = (2_100_000_000, 2_147_000_000)  # above the usual LDAP/SSSD ranges
_NOBODY = 65534


@dataclass
class SandboxResult:
    """How a program ran in the sandbox, with its (capped) output."""

    status: str  # "passed" | "failed" | "timeout" | "error"
    returncode: int | None
    stdout: str  # capped
    stderr: str  # capped
    duration: float  # seconds

    @property
    def passed(self) -> bool:
        """Whether the program exited 0."""
        return self.status == "passed"


def run_python(program: str, *, timeout: float = 3.0, memory_mb: int = 1024,
               max_output_bytes: int = 65536, cpu_seconds: int | None = None) -> SandboxResult:
    """Run ``program`` (Python source) in a fresh sandboxed process; see the module docstring.

    >>> r = run_python("print(1 + 1)")
    >>> r.status, r.stdout
    ('passed', '2\\n')
    >>> run_python("assert 1 + 1 == 3").status
    'failed'
    """
    start = time.monotonic()
    uid = _pick_uid()
    unique_uid = uid not in (None, _NOBODY)
    workdir = tempfile.mkdtemp(prefix="reporter-sandbox-")
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(program)
        if uid is not None:
            os.chown(workdir, uid, uid)  # the program's own directory
        cpu = cpu_seconds if cpu_seconds is not None else math.ceil(timeout) + 1
        limits = (-1 if uid is None else uid, memory_mb << 20, cpu, max(_FILE_LIMIT, max_output_bytes), _MAX_PROCS)
        argv = [sys.executable, "-I", "-B", "-u", os.path.abspath(__file__), workdir, *map(str, limits)]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True)
            except OSError as exc:
                return SandboxResult("error", None, "", f"sandbox: cannot start: {exc}", time.monotonic() - start)
            try:
                timed_out = _wait_then_kill_group(proc, timeout)
            finally:
                if unique_uid:
                    _kill_uid(uid)
            out.seek(0), err.seek(0)
            stdout, stderr = (f.read(max_output_bytes).decode("utf-8", "replace") for f in (out, err))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if unique_uid:
            _remove_files_of(uid)
    rc = proc.returncode
    status = "timeout" if timed_out or rc == -signal.SIGXCPU else {0: "passed", _SETUP_FAILED: "error"}.get(rc, "failed")
    return SandboxResult(status, rc, stdout, stderr, time.monotonic() - start)


def _pick_uid() -> int | None:
    """A fresh unknown uid (and gid), mapped in our user namespace; None unless we are root."""
    if os.geteuid() != 0:
        return None
    import grp
    import pwd
    known = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    maps = [[tuple(map(int, line.split())) for line in Path(f"/proc/self/{m}_map").read_text().splitlines()]
            for m in ("uid", "gid")]
    for _ in range(16):
        uid = random.SystemRandom().randrange(*_UID_RANGE)
        if uid not in known and all(any(a <= uid < a + n for a, _, n in m) for m in maps):
            return uid
    return _NOBODY


def _wait_then_kill_group(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to ``timeout`` s, SIGKILL the process group, reap; True if it timed out.

    Waiting on a pidfd does not reap, so the group id cannot be reused before the kill.
    """
    timed_out, pidfd = True, -1
    try:
        pidfd = os.pidfd_open(proc.pid)
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        timed_out = not poller.poll(max(timeout, 0.0) * 1000)
    finally:
        if pidfd >= 0:
            os.close(pidfd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return timed_out


def _kill_uid(uid: int, patience: float = 2.0) -> None:
    """SIGKILL every live process of ``uid`` until none is left (RLIMIT_NPROC bounds the race)."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        found = False
        for name in os.listdir("/proc"):
            with contextlib.suppress(OSError, ValueError, KeyError), open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
                if str(uid) in fields["Uid"].split() and fields["State"].split()[0] not in ("Z", "X"):
                    os.kill(int(name), signal.SIGKILL)
                    found = True
        if not found:
            return
        time.sleep(0.002)


def _remove_files_of(uid: int) -> None:
    """Delete what ``uid`` left at the top of the usual world-writable directories."""
    for top in {tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"}:
        with contextlib.suppress(OSError), os.scandir(top) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)


def _child_main(workdir: str, uid: int, memory: int, cpu: int, fsize: int, nproc: int) -> int:
    """The child: this file run as a script. Isolate, limit, guard, then run ``main.py``."""
    path = os.path.join(workdir, "main.py")
    try:
        if uid >= 0 and os.geteuid() == 0:
            _drop_privileges(uid)
        for res, soft, hard in ((resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_CPU, cpu, cpu + 1),
                                (resource.RLIMIT_FSIZE, fsize, fsize), (resource.RLIMIT_NPROC, nproc, nproc),
                                (resource.RLIMIT_AS, memory, memory)):  # RLIMIT_AS last
            cap = resource.getrlimit(res)[1]
            cap = hard if cap == resource.RLIM_INFINITY else cap
            resource.setrlimit(res, (min(soft, cap), min(hard, cap)))
        with open(path, encoding="utf-8") as f:
            source = f.read()
        _install_guards(os.path.realpath(workdir))
    except Exception as exc:  # noqa: BLE001 - any setup problem is the sandbox's "error"
        print(f"sandbox: setup failed: {exc!r}", file=sys.stderr)
        return _SETUP_FAILED
    module = types.ModuleType("__main__")
    module.__file__, module.__builtins__ = path, builtins
    sys.modules["__main__"], sys.argv = module, [path]
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - that is the point
    return 0


def _drop_privileges(uid: int) -> None:
    """As root: enter a new network namespace, then become ``uid`` for good."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare(0x40000000)  # CLONE_NEWNET; if refused, only the socket guard remains
    path, keep_read = os.path.realpath(os.path.dirname(os.__file__)), False  # can others read stdlib?
    while not keep_read and path != os.path.dirname(path):
        keep_read, path = not os.stat(path).st_mode & stat.S_IXOTH, os.path.dirname(path)
    if keep_read:
        libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS: keep the permitted set across setuid
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    bit = 1 << 2  # capset v3: effective = permitted = CAP_DAC_READ_SEARCH, nothing else
    if (keep_read and libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)(bit, bit, 0, 0, 0, 0))
            or libc.prctl(38, 1, 0, 0, 0)):  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "capset or prctl(PR_SET_NO_NEW_PRIVS) failed")


def _install_guards(root: str) -> None:
    """Monkeypatch away writes outside ``root``, starting processes and the network."""
    def check(name, pairs):  # pairs of (path, dir_fd)
        for p, dir_fd in pairs:
            if p is None or isinstance(p, int):  # file descriptors are fine
                continue
            p = os.fsdecode(os.fspath(p))
            if dir_fd is not None and not os.path.isabs(p):
                p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
            real = os.path.realpath(p)
            if real != root and not real.startswith(root + os.sep):
                raise PermissionError(errno.EACCES, f"sandbox: {name} outside the working directory", p)

    def guard(mod, name, spec=((0, "path", "dir_fd"),)):  # (position, keyword, dir_fd keyword)
        original = getattr(mod, name)
        def guarded(*args, **kw):
            check(name, [(args[i] if i < len(args) else kw.get(key), kw.get(fd)) for i, key, fd in spec])
            return original(*args, **kw)
        setattr(mod, name, guarded)

    def deny(what):
        def denied(*args, **kw):
            raise PermissionError(errno.EPERM, f"sandbox: {what} is not allowed")
        return denied

    real_open, real_os_open = builtins.open, os.open
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def open_(file, mode="r", *args, **kw):
        if any(c in mode for c in "wax+"):
            check("open", [(file, None)])
        return real_open(file, mode, *args, **kw)

    def os_open(path, flags, *args, dir_fd=None, **kw):
        if flags & write_flags:
            check("os.open", [(path, dir_fd)])
        return real_os_open(path, flags, *args, dir_fd=dir_fd, **kw)

    builtins.open = io.open = open_
    os.open = os_open
    for name in ("remove", "unlink", "rmdir", "mkdir", "chmod", "chown", "lchown", "truncate", "utime",
                 "mkfifo", "mknod"):
        guard(os, name)
    for name in ("rename", "replace", "link"):
        guard(os, name, ((0, "src", "src_dir_fd"), (1, "dst", "dst_dir_fd")))
    guard(os, "symlink", ((1, "dst", "dir_fd"),))
    guard(shutil, "rmtree")
    for name in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "kill", "killpg",
                 "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe"):
        setattr(os, name, deny(f"os.{name}"))
    subprocess.Popen = deny("subprocess")
    _posixsubprocess.fork_exec = deny("starting processes")

    class GuardedSocket(socket.socket):
        def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
            if fileno is None:
                raise PermissionError(errno.EACCES, "sandbox: network access is not allowed")
            super().__init__(family, type, proto, fileno)

    socket.socket = GuardedSocket
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
        setattr(socket, name, deny("name resolution"))


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], *map(int, sys.argv[2:])))
