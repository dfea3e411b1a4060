"""reporter.scoring.sandbox with real subprocesses: hostile programs fail, fast, and leave nothing behind.

Every hostile program starts with HEADER, which prints the sandbox's working directory and uid;
``run_hostile`` then checks that the directory is gone, that no process of the sandbox survives
(by command line, by uid when we are root, and among our own children), that the sandbox uid
left no file in /tmp, and that a correct program run right after still passes.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import time
import uuid

import pytest

from reporter.scoring.sandbox import isolation, run_python

ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not ROOT, reason="kernel-level isolation is only set up as root")

HEADER = "import os\nprint('SANDBOX', os.getcwd(), os.getuid(), flush=True)\n"
GOOD = "def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('ok')\n"


def _processes():
    """(pid, ppid, uids, cmdline) of every live (not zombie) process."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if fields["State"].split()[0] not in ("Z", "X"):
            yield int(name), int(fields["PPid"]), fields["Uid"].split(), cmdline


def _children():
    return {pid for pid, ppid, _, _ in _processes() if ppid == os.getpid()}


def _owned_by(uid: int, tops) -> list[str]:
    found = []
    for top in tops:
        for entry in os.scandir(top):
            try:  # other programs create and delete files here all the time
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    found.append(entry.path)
            except FileNotFoundError:
                pass
    return found


def run_hostile(program: str, *, max_seconds: float, **kwargs):
    """Run HEADER + program; assert it finished in time and that nothing is left behind."""
    children_before = _children()
    start = time.monotonic()
    result = run_python(HEADER + program, **kwargs)
    elapsed = time.monotonic() - start
    assert elapsed < max_seconds, (elapsed, result)
    assert result.duration <= elapsed
    tag, workdir, uid = result.stdout.splitlines()[0].split()
    assert tag == "SANDBOX" and os.path.basename(workdir).startswith("reporter-sandbox-")
    assert not os.path.exists(workdir), "working directory left behind"
    own_uid = uid == str(os.getuid())
    survivors = [p for p in _processes()
                 if workdir in p[3] or (not own_uid and uid in p[2])]
    assert not survivors, survivors
    assert _children() <= children_before, "a child process of the test survived"
    if not own_uid:
        assert not _owned_by(int(uid), ("/tmp", "/var/tmp", "/dev/shm")), "stray files left behind"
    assert run_python(GOOD).passed, "a correct program must still pass after the hostile one"
    return result


def test_correct_program_passes_and_captures_stdout():
    result = run_python(GOOD)
    assert (result.status, result.returncode, result.stdout, result.passed) == ("passed", 0, "ok\n", True)
    assert result.duration < 3.0


def test_failing_assert_is_failed():
    result = run_python("assert 1 + 1 == 3, 'arithmetic'\n")
    assert (result.status, result.passed) == ("failed", False)
    assert result.returncode == 1 and "AssertionError: arithmetic" in result.stderr


def test_syntax_error_is_failed():
    result = run_python("def f(:\n    pass\n")
    assert (result.status, result.returncode) == ("failed", 1)
    assert "SyntaxError" in result.stderr


def test_program_gets_a_private_directory_and_scrubbed_environment():
    program = ("import json, os, tempfile\n"
               "open('out.txt', 'w').write('hi')\n"
               "with tempfile.NamedTemporaryFile() as f: tmp = f.name\n"
               "print(json.dumps([os.getcwd(), os.getuid(), dict(os.environ), tmp, open('out.txt').read()]))\n")
    result = run_python(program)
    assert result.passed, result.stderr
    cwd, uid, env, tmp, text = json.loads(result.stdout)
    assert text == "hi" and tmp.startswith(cwd + os.sep) and not os.path.exists(cwd)
    assert env["HOME"] == env["TMPDIR"] == cwd and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "LC_CTYPE"}
    if ROOT:
        assert uid != 0


def test_infinite_loop_times_out_quickly():
    result = run_hostile("while True:\n    pass\n", timeout=1.0, max_seconds=2.0)
    assert result.status == "timeout" and result.returncode is not None
    assert 1.0 <= result.duration < 2.0


def test_without_pidfd_open_the_sandbox_still_waits_and_times_out(monkeypatch):
    """Kernels before 5.3 and some container seccomp profiles refuse pidfd_open: the wait falls back to
    polling the child without reaping it, with the same statuses."""
    def refuse(pid, flags=0):
        raise OSError(errno.ENOSYS, "Function not implemented")
    monkeypatch.setattr(os, "pidfd_open", refuse)
    assert run_python(GOOD).passed
    assert run_python("assert 1 + 1 == 3\n").status == "failed"
    result = run_python("while True:\n    pass\n", timeout=1.0)
    assert result.status == "timeout" and 1.0 <= result.duration < 2.5


def test_cpu_limit_counts_as_timeout():
    result = run_hostile("while True:\n    pass\n", timeout=10.0, cpu_seconds=1, max_seconds=4.0)
    assert result.status == "timeout"


@pytest.mark.parametrize("program", [
    "while True:\n    os.fork()\n",
    "import subprocess, sys\nwhile True:\n    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n",
    "import multiprocessing, time\nif __name__ == '__main__':\n"
    "    while True:\n        multiprocessing.Process(target=time.sleep, args=(60,)).start()\n",
    "import multiprocessing\nmultiprocessing.set_start_method('spawn')\nif __name__ == '__main__':\n"
    "    while True:\n        multiprocessing.Process(target=print).start()\n",
    "os.system('sleep 60 &')\n",
], ids=["os.fork", "subprocess", "multiprocessing-fork", "multiprocessing-spawn", "os.system"])
def test_fork_bomb_fails(program):
    result = run_hostile(program, timeout=3.0, max_seconds=5.0)
    assert result.status == "failed" and "sandbox:" in result.stderr


@root_only
def test_fork_bomb_bypassing_the_guard_is_contained():
    program = "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n"
    result = run_hostile(program, timeout=1.0, max_seconds=3.0)
    assert result.status == "timeout"


@root_only
def test_process_that_leaves_the_group_is_killed():
    program = ("import ctypes, sys, time\nlibc = ctypes.CDLL(None)\n"
               "if libc.fork() == 0:\n    libc.setsid()\n    time.sleep(60)\nsys.exit('parent gives up')\n")
    result = run_hostile(program, timeout=3.0, max_seconds=5.0)
    assert result.status == "failed"


@pytest.mark.parametrize("program", [
    "open(TARGET, 'w').write('pwned')",
    "import pathlib\npathlib.Path(TARGET).write_text('pwned')",
    "fd = os.open(TARGET, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'pwned')",
    "import shutil\nopen('mine.txt', 'w').write('pwned')\nshutil.copy('mine.txt', TARGET)",
    "open('mine.txt', 'w').write('pwned')\nos.rename('mine.txt', TARGET)",
    "os.symlink(TARGET, 'link')\nopen('link', 'w').write('pwned')",
    "os.chdir(os.path.dirname(TARGET))\nopen(os.path.basename(TARGET), 'w').write('pwned')",
    "os.remove(KEEP)",
    "import shutil\nshutil.rmtree(os.path.dirname(KEEP))",
    "open(KEEP, 'a').write('pwned')",
], ids=["open", "pathlib", "os.open", "shutil.copy", "rename", "symlink", "chdir", "remove", "rmtree",
        "append"])
def test_writing_outside_the_working_directory_fails(tmp_path, program):
    target, keep = tmp_path / "pwned.txt", tmp_path / "keep" / "keep.txt"
    keep.parent.mkdir()
    keep.write_text("original")
    prelude = f"TARGET, KEEP = {str(target)!r}, {str(keep)!r}\n"
    result = run_hostile(prelude + program, max_seconds=5.0)
    # the guard refuses (PermissionError); isolated, the host's directories are not even there
    assert result.status == "failed" and ("PermissionError" in result.stderr or "FileNotFoundError" in result.stderr)
    assert not target.exists() and keep.read_text() == "original"


@root_only
def test_writing_outside_bypassing_the_guard_fails(tmp_path):
    target = tmp_path / "pwned.txt"
    stray = f"/tmp/reporter-sandbox-escape-{uuid.uuid4().hex}"
    program = (f"import _io, posix\ntry:\n    _io.FileIO({stray!r}, 'w').write(b'stray')\n    posix.mkdir({stray + '.d'!r})\n"
               f"    print('STRAY WRITTEN', flush=True)\nexcept OSError as e:\n    print('STRAY REFUSED', e, flush=True)\n"
               f"_io.FileIO({str(target)!r}, 'w')\n")
    result = run_hostile(program, max_seconds=5.0)
    assert result.status == "failed" and not target.exists()
    assert not os.path.exists(stray) and not os.path.exists(stray + ".d")  # refused, or written and cleaned up
    if isolation() == "isolated":  # the sandbox's /tmp is its own, read-only; the host's paths do not exist there
        assert "STRAY REFUSED" in result.stdout and "No such file or directory" in result.stderr
    else:  # /tmp is world-writable: allowed, but removed afterwards
        assert "STRAY WRITTEN" in result.stdout and "Permission denied" in result.stderr


# --- the kernel boundary (isolated mode, as root) ---------------------------------------------

def test_isolation_is_on_where_ci_runs():
    assert isolation() == ("isolated" if ROOT else "guarded")


@root_only
def test_a_unix_socket_on_disk_cannot_be_reached(tmp_path):
    path = tmp_path / "listener.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        os.chmod(path, 0o777)  # anyone may connect
        server.listen(8)
        server.setblocking(False)
        program = (f"import _socket\ns = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)\n"
                   f"s.connect({str(path)!r})\nprint('CONNECTED')\n")
        result = run_hostile(program, max_seconds=5.0)
        assert result.status == "failed" and "CONNECTED" not in result.stdout
        with pytest.raises(BlockingIOError):  # nothing ever connected
            server.accept()


@root_only
@pytest.mark.parametrize("which", ["/etc/shadow", "root-only file", "/root"])
def test_files_of_the_host_cannot_be_read(which, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    secret.chmod(0o600)
    path = {"/etc/shadow": "/etc/shadow", "root-only file": str(secret), "/root": "/root"}[which]
    program = (f"import os, _io\np = {path!r}\n"
               "print('LISTED', os.listdir(p)) if os.path.isdir(p) else print('READ', _io.FileIO(p).read())\n")
    result = run_hostile(program, max_seconds=5.0)
    if which == "/root":  # at most the path down to the Python installation, if it lives under /root
        import sys

        allowed = {p.split("/")[2] for p in {os.path.realpath(sys.base_prefix)} if p.startswith("/root/")}
        if result.passed:
            listed = eval(result.stdout.split("LISTED ", 1)[1])  # noqa: S307 - a list literal we printed
            assert set(listed) <= allowed, listed
        else:
            assert "No such file or directory" in result.stderr
    else:
        assert result.status == "failed" and "READ" not in result.stdout and "top secret" not in result.stdout


@root_only
def test_no_shell_even_after_reloading_os():
    program = ("import importlib, os\nimportlib.reload(os)\nimport ctypes\n"
               "rc = ctypes.CDLL(None).execv(b'/bin/sh', (ctypes.c_char_p * 3)(b'sh', b'-c', None))\n"
               "print('EXEC FAILED', rc, os.path.exists('/bin/sh'), os.path.exists('/usr/bin'))\n")
    result = run_hostile(program, max_seconds=5.0)
    assert "EXEC FAILED -1 False False" in result.stdout, result


@root_only
def test_a_raw_write_outside_via_ctypes_fails(tmp_path):
    target = tmp_path / "ctypes.txt"
    program = (f"import ctypes\nfd = ctypes.CDLL(None).open({str(target).encode()!r}, 0o101, 0o644)\n"
               "print('FD', fd)\n")
    result = run_hostile(program, max_seconds=5.0)
    assert "FD -1" in result.stdout and not target.exists(), result


ORPHAN = """
import sys, time
from reporter.scoring.sandbox import isolation, run_python
print("READY", flush=True)
run_python("import time\\ntime.sleep(30)\\nopen('late.txt', 'w').write('still here')", timeout=60)
"""


@root_only
def test_nothing_survives_when_reporter_is_killed():
    import signal
    import subprocess
    import sys

    before = set(os.listdir("/tmp"))
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True)
    assert parent.stdout.readline().strip() == "READY"
    deadline = time.monotonic() + 10
    sandbox = set()
    while not sandbox and time.monotonic() < deadline:  # the sandbox's processes, children of the parent
        time.sleep(0.05)
        sandbox = {pid for pid, ppid, _, cmd in _processes() if ppid == parent.pid and "sandbox.py" in cmd}
    assert sandbox, "the sandbox never started"
    time.sleep(0.5)  # let it build its namespace and start the program
    family = _descendants(sandbox)
    assert len(family) >= 3  # the relay, PID 1 of the namespace, the program
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and family & {p[0] for p in _processes()}:
        time.sleep(0.05)
    assert not family & {p[0] for p in _processes()}, "a sandbox process outlived reporter"
    assert not {n for n in set(os.listdir("/tmp")) - before if n.startswith("reporter-sandbox-")}


def _descendants(pids):
    out, grew = set(pids), True
    while grew:
        new = {pid for pid, ppid, _, _ in _processes() if ppid in out} - out
        out |= new
        grew = bool(new)
    return out


@pytest.fixture
def listener():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield server
        with pytest.raises(BlockingIOError):  # nothing ever connected
            server.accept()


@pytest.mark.parametrize("program", [
    "import socket\ns = socket.create_connection(('127.0.0.1', PORT), timeout=2)\ns.sendall(b'hi')",
    "import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', PORT))",
    pytest.param("import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', PORT))",
                 marks=root_only),
    "import urllib.request\nurllib.request.urlopen(f'http://127.0.0.1:{PORT}/', timeout=2)",
], ids=["create_connection", "socket", "raw-_socket", "urllib"])
def test_connecting_to_a_local_listener_fails(listener, program):
    port = listener.getsockname()[1]
    result = run_hostile(f"PORT = {port}\n" + program + "\nprint('CONNECTED')\n", max_seconds=5.0)
    assert result.status == "failed" and "CONNECTED" not in result.stdout


@pytest.mark.parametrize("program", [
    "import socket\nprint('RESOLVED', socket.getaddrinfo('example.com', 80))",
    "import socket\nprint('RESOLVED', socket.gethostbyname('localhost'))",
    pytest.param("import _socket\nprint('RESOLVED', _socket.getaddrinfo('example.com', 80))", marks=root_only),
], ids=["getaddrinfo", "gethostbyname", "raw-_socket"])
def test_dns_lookup_fails(program):
    result = run_hostile(program, max_seconds=5.0)
    assert result.status == "failed" and "RESOLVED" not in result.stdout


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood_is_capped(stream):
    program = f"import sys\nwhile True:\n    sys.{stream}.write('x' * 1000 + '\\n')\n"
    result = run_hostile(program, timeout=3.0, max_output_bytes=10_000, max_seconds=5.0)
    assert result.status in ("failed", "timeout")
    assert len(result.stdout) <= 10_000 and len(result.stderr) <= 10_000
    assert getattr(result, stream).count("x" * 1000) >= 5


@pytest.mark.parametrize("program", [
    "x = bytearray(10 * 1024 ** 3)",
    "x = 'x' * (10 * 1024 ** 3)",
    "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))",
], ids=["bytearray", "str", "growing"])
def test_memory_bomb_fails(program):
    # 256 MiB: filling the default 1 GiB with zeroed pages can take seconds on a small VM
    result = run_hostile(program, timeout=3.0, memory_mb=256, max_seconds=5.0)
    assert result.status == "failed" and "MemoryError" in result.stderr


def test_eight_programs_back_to_back():
    programs = [GOOD, "print(sum(range(10)))", "assert False", "import json\nprint(json.dumps({}))",
                "raise ValueError('x')", "import math\nprint(math.factorial(20))", "def f(:", GOOD]
    expected = ["passed", "passed", "failed", "passed", "failed", "passed", "failed", "passed"]
    for program, status in zip(programs, expected):
        start = time.monotonic()
        result = run_python(program, timeout=3.0)
        assert time.monotonic() - start < 3.0 + 2.0
        assert result.status == status, (program, result)


def test_the_guarded_fallback_runs_and_says_it_is_weaker(monkeypatch, capsys, tmp_path):
    from reporter.scoring import sandbox

    sandbox.isolation.cache_clear()
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)  # as on a machine where reporter is not root
    try:
        assert sandbox.isolation() == "guarded"
        assert "generated code runs without a filesystem boundary here (reporter does not run as root)" in \
            capsys.readouterr().err
        assert run_python(GOOD).passed
        target = tmp_path / "pwned.txt"
        result = run_python(f"open({str(target)!r}, 'w').write('x')")
        assert result.status == "failed" and "PermissionError" in result.stderr and not target.exists()
    finally:
        sandbox.isolation.cache_clear()
