"""Run model-generated Python programs (HumanEval/MBPP scoring) in a throw-away, contained process.

Two modes; ``run_python`` picks the strongest this machine allows (:func:`isolation`):

**Isolated** (as root on Linux with namespaces, as on our CI): the kernel is the boundary.
The program runs in new mount, PID, network, IPC and UTS namespaces, under a fresh random
unprivileged uid/gid with no capabilities, no supplementary groups and no_new_privs. Its root
directory is an empty, read-only tmpfs that holds only the Python installation and the system
libraries (read-only binds of the interpreter's prefix and ``/usr/lib``-style directories; no
``/bin``, ``/usr/bin``, ``/etc``, ``/home``, ``/root`` or ``/proc``), ``/dev/null``, ``/dev/zero``,
``/dev/urandom``, and its own working directory, a 64 MiB tmpfs. It therefore cannot read or
write any file of the host, reach any socket (TCP, UDP, or a Unix-domain socket on disk or in
the abstract namespace), run ``/bin/sh`` or any other host program. Nothing of it is stored on
the host's disk: the program arrives on a pipe, its output goes to unlinked temporary files, its
directory lives and dies with the namespace. Every process carries PR_SET_PDEATHSIG: when
reporter dies (even by SIGKILL) the sandbox's first process dies, and with it, by the kernel's
PID-namespace rule, every process the program started.

**Guarded** (any other machine; a one-line warning says so): a private directory on the host
(deleted afterwards), and when root, a new network namespace and a fresh uid as above. The
in-process guard below and the rlimits are what remains; it stops accidents and naive hostile
code, not a determined attacker (the guard is monkeypatching, bypassed with ``posix``,
``_io.FileIO``, ``_socket``, ``ctypes``; reads obey only file permissions).

Always enforced: a separate interpreter (``python -I -B -u``) in a new session/process group,
SIGKILLed as a group at the wall-clock ``timeout`` and at the end of the run; rlimits RLIMIT_CPU
(``cpu_seconds``, default ceil(timeout)+1), RLIMIT_AS (``memory_mb``), RLIMIT_FSIZE (16 MiB or
``max_output_bytes`` if larger), RLIMIT_NPROC (32), RLIMIT_CORE 0; HOME and TMPDIR set to the
working directory; an environment of only PATH, HOME, TMPDIR, LANG and PYTHONDONTWRITEBYTECODE;
stdout/stderr in unlinked temporary files bounded by RLIMIT_FSIZE (a flood ends in "File too
large"), of which at most ``max_output_bytes`` each are read back; an in-process guard installed
before the program runs: open/io.open/os.open for writing, os.remove/unlink/rmdir/mkdir/rename/
replace/link/symlink/chmod/chown/truncate/utime/mkfifo/mknod and shutil.rmtree raise
PermissionError outside the working directory, and so do os.fork/forkpty/system/popen/exec*/
posix_spawn*/kill/killpg, subprocess.Popen, _posixsubprocess.fork_exec (hence multiprocessing),
socket.socket (unless wrapping an fd, as socketpair does) and getaddrinfo/gethostbyname/...

Not enforced in either mode: CPU and memory bandwidth, and the kernel's own attack surface.
Linux only.

Statuses: "passed" (exit 0); "failed" (other exit or a signal: exceptions, asserts, MemoryError,
output flood, *syntax errors* (SyntaxError in stderr)); "timeout" (wall clock or CPU limit); "error"
(the sandbox could not run it: launch or setup failure).
"""
from __future__ import annotations

import _posixsubprocess
import builtins
import contextlib
import errno
import functools
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
from typing import Any

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
    isolated = isolation() == "isolated"
    uid = _pick_uid()
    unique_uid = uid not in (None, _NOBODY)
    cpu = cpu_seconds if cpu_seconds is not None else math.ceil(timeout) + 1
    limits = (-1 if uid is None else uid, memory_mb << 20, cpu, max(_FILE_LIMIT, max_output_bytes), _MAX_PROCS)
    if isolated:  # the directory exists only inside the sandbox's own mount namespace
        workdir, host_dir = f"/tmp/reporter-sandbox-{os.urandom(6).hex()}", None
    else:
        workdir = host_dir = tempfile.mkdtemp(prefix="reporter-sandbox-")
    try:
        if host_dir is not None:
            with open(os.path.join(host_dir, "main.py"), "w", encoding="utf-8") as f:
                f.write(program)
            if uid is not None:
                os.chown(host_dir, uid, uid)  # the program's own directory
        argv = [sys.executable, "-I", "-B", "-u", os.path.abspath(__file__), "isolated" if isolated else "guarded",
                workdir, *map(str, limits)]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(argv, cwd="/" if isolated else workdir, env=env,
                                        stdin=subprocess.PIPE if isolated else subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True)
            except OSError as exc:
                return SandboxResult("error", None, "", f"sandbox: cannot start: {exc}", time.monotonic() - start)
            if isolated:  # the source arrives on a pipe: nothing of it is written to the host's disk
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.write(program.encode("utf-8"))  # type: ignore[union-attr]
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.close()  # type: ignore[union-attr]
            try:
                timed_out = _wait_then_kill_group(proc, timeout)
            finally:
                if unique_uid:
                    _kill_uid(uid)  # type: ignore[arg-type]
            out.seek(0), err.seek(0)
            stdout, stderr = (f.read(max_output_bytes).decode("utf-8", "replace") for f in (out, err))
    finally:
        if host_dir is not None:
            shutil.rmtree(host_dir, ignore_errors=True)
        if unique_uid and not isolated:
            _remove_files_of(uid)  # type: ignore[arg-type]
    rc = proc.returncode
    status = "timeout" if timed_out or rc == -signal.SIGXCPU else {0: "passed", _SETUP_FAILED: "error"}.get(rc, "failed")
    return SandboxResult(status, rc, stdout, stderr, time.monotonic() - start)


_PROBE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000):
    sys.exit(1)
pid = os.fork()
if pid == 0:
    ok = libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None) == 0 and \\
        libc.mount(b"none", b"/tmp", b"tmpfs", 0, b"size=1m") == 0
    os._exit(0 if ok else 1)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@functools.lru_cache(maxsize=1)
def isolation() -> str:
    """``"isolated"`` when this machine can give programs the kernel boundary, else ``"guarded"``.

    Isolation needs Linux and root (to create mount, PID and network namespaces and switch to a
    fresh uid). When it is not available, a one-line warning on stderr says so, once per process.
    """
    reason = None
    if not sys.platform.startswith("linux"):
        reason = "it is not Linux"
    elif os.geteuid() != 0:
        reason = "reporter does not run as root"
    else:
        try:
            probe = subprocess.run([sys.executable, "-I", "-c", _PROBE], capture_output=True, timeout=30)
            if probe.returncode != 0:
                reason = "this kernel or container refuses new mount, PID and network namespaces"
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"the namespace probe failed ({exc})"
    if reason is None:
        return "isolated"
    print(f"reporter: generated code runs without a filesystem boundary here ({reason}): it can read what "
          "this user can read; see the README's security model", file=sys.stderr)
    return "guarded"


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
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:  # kernel < 5.3 or a seccomp profile without it: poll without reaping
            timed_out = not _exited_within(proc.pid, timeout)
        else:
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


def _exited_within(pid: int, timeout: float) -> bool:
    """Whether child ``pid`` exits within ``timeout`` s, polled every 10 ms; it is left unreaped (WNOWAIT)."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


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


def _child_main(mode: str, workdir: str, uid: int, memory: int, cpu: int, fsize: int, nproc: int) -> int:
    """The child: this file run as a script. Isolate, limit, guard, then run the program."""
    try:
        _die_with_parent()
        if mode == "isolated":
            source = sys.stdin.buffer.read().decode("utf-8")
            _enter_namespaces(workdir, uid)  # returns in the program's own process only
            path = os.path.join(workdir, "main.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            os.chown(path, uid, uid)
        else:
            path = os.path.join(workdir, "main.py")
            with open(path, encoding="utf-8") as f:
                source = f.read()
        if uid >= 0 and os.geteuid() == 0:
            _drop_privileges(uid, new_network=mode != "isolated")
            _die_with_parent()  # a change of uid clears the parent-death signal: set it again
        for res, soft, hard in ((resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_CPU, cpu, cpu + 1),
                                (resource.RLIMIT_FSIZE, fsize, fsize), (resource.RLIMIT_NPROC, nproc, nproc),
                                (resource.RLIMIT_AS, memory, memory)):  # RLIMIT_AS last
            cap = resource.getrlimit(res)[1]
            cap = hard if cap == resource.RLIM_INFINITY else cap
            resource.setrlimit(res, (min(soft, cap), min(hard, cap)))
        _install_guards(os.path.realpath(workdir))
    except Exception as exc:  # noqa: BLE001 - any setup problem is the sandbox's "error"
        print(f"sandbox: setup failed: {exc!r}", file=sys.stderr)
        return _SETUP_FAILED
    module = types.ModuleType("__main__")
    module.__file__, module.__builtins__ = path, builtins
    sys.modules["__main__"], sys.argv = module, [path]
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - that is the point
    return 0


# --- the kernel boundary (isolated mode) --------------------------------------------------------

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC, _CLONE_NEWPID, _CLONE_NEWNET = (
    0x00020000, 0x04000000, 0x08000000, 0x20000000, 0x40000000)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}
#: what the program's root holds besides its own directory (read-only binds; symlinks are copied)
_SYSTEM_DIRS = ("/lib", "/lib32", "/lib64", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/local/lib")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
_WORKDIR_SIZE = "64m"


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (prctl PR_SET_PDEATHSIG); exit now if it already has."""
    parent = os.getppid()
    _check(_libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(_SETUP_FAILED)


def _mount(libc: Any, source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                      data.encode() if data else None), f"mount {source} on {target}")


def _bind_readonly(libc: Any, source: str, target: str, *, noexec: bool = False) -> None:
    _mount(libc, source, target, None, _MS_BIND | _MS_REC)
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | (_MS_NOEXEC if noexec else 0)
    _mount(libc, "none", target, None, flags)


def _build_root(libc: Any, workdir: str, uid: int) -> None:
    """Make ``/`` an empty read-only tmpfs holding Python, the system libraries, a few devices and ``workdir``."""
    _mount(libc, "none", "/", None, _MS_REC | _MS_PRIVATE)  # nothing propagates back to the host
    new = "/tmp"  # a tmpfs mounted here, in this mount namespace only, becomes the new root
    _mount(libc, "none", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=16m")
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    for src in sorted(prefixes | {d for d in _SYSTEM_DIRS if os.path.lexists(d)}):
        dst = new + src
        if os.path.islink(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src) and not os.path.exists(dst):
            os.makedirs(dst, exist_ok=True)
            _bind_readonly(libc, src, dst)
    os.makedirs(new + "/dev", exist_ok=True)
    for dev in _DEVICES:
        if os.path.exists(dev):
            open(new + dev, "w").close()
            _mount(libc, dev, new + dev, None, _MS_BIND)
    os.makedirs(new + workdir, mode=0o755)
    _mount(libc, "none", new + workdir, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0700,size={_WORKDIR_SIZE}")
    os.chown(new + workdir, uid, uid)
    os.mkdir(new + "/.old")
    import platform

    nr = _SYS_PIVOT_ROOT.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(libc.syscall(nr, new.encode(), (new + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old", _MNT_DETACH), "umount /.old")
    os.rmdir("/.old")
    _mount(libc, "none", "/", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir(workdir)


def _relay(pid: int) -> None:
    """Wait for ``pid`` (reaping any other child meanwhile) and end this process the same way it ended."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(_SETUP_FAILED)
        if got == pid:
            break
    code = os.waitstatus_to_exitcode(status)
    # a signal (or PID 1's 128 + signal, as PID 1 cannot die by its own signal) is passed on as that signal
    sig = -code if code < 0 else code - 128 if code > 128 else 0
    if sig:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(code)


def _enter_namespaces(workdir: str, uid: int) -> None:
    """Enter new namespaces; return only in the program's own process (PID 2 of the new PID namespace).

    This process stays outside and relays the exit; its child becomes PID 1 of the namespace, builds
    the root directory and relays the program's exit in turn. When PID 1 ends, the kernel kills every
    process left in the namespace.
    """
    if uid < 0:
        raise OSError(errno.EPERM, "isolation needs a uid to switch to")
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS), "unshare")
    sys.stdout.flush(), sys.stderr.flush()
    init = os.fork()
    if init:
        _relay(init)
    _die_with_parent()
    _build_root(libc, workdir, uid)
    program = os.fork()
    if program:
        _relay(program)
    _die_with_parent()


def _drop_privileges(uid: int, *, new_network: bool = True) -> None:
    """As root: (in guarded mode) enter a new network namespace, then become ``uid`` for good."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if new_network:
        libc.unshare(_CLONE_NEWNET)  # if refused, only the socket guard remains
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
    sys.exit(_child_main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])))
