"""The Landlock box against the user's tmux server, for real: a tmux server on a socket of its
own outside the box, and an agent launched by the watcher in the Landlock box Genesis chooses
here (ABI 9: Landlock's own right; below: the seccomp filter) that tries to have it run a
command, while its ordinary work (socketpair, a datagram socket, TCP, git) goes on."""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.agent import supervised
from helpers.git import git

import genesis
from genesis.sandbox import landlock, unixsockets
from genesis.sandbox.box import LANDLOCK, choose
from genesis.sandbox.detect import probe
from genesis.sandbox.home import Allowed
from genesis.sandbox.places import places_for

MACHINE = probe()
FILTER = unixsockets.build(MACHINE.arch)
SCOPED = MACHINE.landlock_abi >= landlock.RESOLVE_UNIX_ABI
needs_landlock = pytest.mark.skipif(MACHINE.landlock_abi < 1, reason="no Landlock in this kernel")
needs_a_way = pytest.mark.skipif(not SCOPED and FILTER is None, reason=(
    f"Landlock ABI {MACHINE.landlock_abi} < {landlock.RESOLVE_UNIX_ABI} and no socket filter for this "
    f"architecture ({MACHINE.arch})"))
needs_filter = pytest.mark.skipif(FILTER is None, reason=f"no socket filter for this architecture ({MACHINE.arch})")
PACKAGE = Path(genesis.__file__).resolve().parent

# Each probe prints NAME=ok or NAME=<errno name>.
PROBES = r"""
import ctypes, errno, os, socket, sys
def probe(name, act):
    try:
        act()
        print(f"{name}=ok")
    except OSError as exc:
        print(f"{name}={errno.errorcode.get(exc.errno, exc.errno)}")
def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
def own_server():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("own.sock")
    s.listen(1)
def dgram():
    a, b = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.bind("dgram.sock")
    b.sendto(b"hi", "dgram.sock")
    assert a.recv(2) == b"hi"
def pair():
    a, b = socket.socketpair()
    a.sendall(b"hi")
    assert b.recv(2) == b"hi"
def tcp():
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=5).close()
probe("theirs", lambda: connect(sys.argv[1]))
probe("given", lambda: connect(sys.argv[3]) if sys.argv[3] else None)
probe("own", own_server)
probe("dgram", dgram)
probe("pair", pair)
probe("tcp", tcp)
"""
AGENT = """
tmux -S "$THEIRS" run-shell "touch $MARK" >tmux.out 2>&1; echo "tmux=$?" >seen.txt
"$PY" probes.py "$THEIRS" "$PORT" "$GIVEN" >>seen.txt 2>&1
echo work >work.txt && echo "write=$?" >>seen.txt
git status --porcelain >status.txt; echo "git=$?" >>seen.txt
"""


def seen(project: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (project / "seen.txt").read_text().splitlines() if "=" in line)


@pytest.fixture
def their_tmux():
    """The user's tmux server, on a socket of its own outside the project (as /tmp/tmux-UID/default is)."""
    folder = Path(tempfile.mkdtemp(prefix="genesis-tmux-", dir="/tmp"))
    sock = folder / "default"
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    subprocess.run(["tmux", "-S", str(sock), "new-session", "-d", "sleep 600"], check=True, env=env, timeout=10)
    try:
        yield sock, folder
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, env=env, timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def listener():
    """A TCP service on the host's loopback: the Landlock box leaves the network open."""
    server = socket.create_server(("127.0.0.1", 0))
    yield server.getsockname()[1]
    server.close()


def serve(path: Path) -> threading.Event:
    """A unix socket service the user gives back (a local database's): answers each connection."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(5)
    server.settimeout(0.2)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()
        server.close()

    threading.Thread(target=loop, daemon=True).start()
    return stop


def launch(tmp_path: Path, theirs: Path, port: int, given: str = ""):
    """The agent in the Landlock box Genesis chooses on this machine, started by the watcher."""
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / "probes.py").write_text(PROBES)
    state = project / ".git" / "genesis"
    (state / "heartbeats").mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    allow = (Allowed(given, True),) if given else ()
    places = places_for(project, state, state / "heartbeats", state / "logs", project / "genesis.conf", PACKAGE,
                        ("bash",), env, allow=allow)
    box = choose(LANDLOCK, MACHINE, places)
    out, _, _ = supervised(project, AGENT, run_id="run-unixsockets", box=box, hb_dir=state / "heartbeats",
                           stale_after=60.0, max_runtime=120.0,
                           env={"THEIRS": str(theirs), "MARK": str(tmp_path / "pwned"), "PORT": str(port),
                                "GIVEN": given, "TMUX": ""})
    assert out.status == "exited", out
    return box, project


def tmux_works(sock: Path, tmp_path: Path) -> None:
    """The server runs what it is sent from outside the box: the refusal was the box's. Its
    commands run in order, so any sent before have run by now."""
    control = tmp_path / "control"
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    subprocess.run(["tmux", "-S", str(sock), "run-shell", f"touch {control}"], check=True, env=env, timeout=10)
    assert control.exists()


@needs_landlock
@needs_a_way
@pytest.mark.fault(206)
def test_in_the_landlock_box_the_users_tmux_server_runs_nothing_and_the_work_goes_on(tmp_path, their_tmux, listener):
    sock, _ = their_tmux
    box, project = launch(tmp_path, sock, listener)
    assert (box.unix_filter is None) == SCOPED  # ABI 9: Landlock's own right; below: the filter
    got = seen(project)
    tmux_works(sock, tmp_path)
    assert not (tmp_path / "pwned").exists(), (project / "tmux.out").read_text()
    assert got["tmux"] != "0" and got["theirs"] == "EACCES", got
    assert {k: got[k] for k in ("dgram", "pair", "tcp", "write", "git")} == {
        "dgram": "ok", "pair": "ok", "tcp": "ok", "write": "0", "git": "0"}, got
    assert "work.txt" in (project / "status.txt").read_text()
    # The box's own stream server: Landlock ABI 9 allows it (made inside), the filter does not (its cost, said).
    assert got["own"] == ("ok" if SCOPED else "EACCES"), got
    assert ("no socket file outside the box" if SCOPED else "no unix stream socket can be opened") in box.line()


@needs_landlock
@needs_a_way
def test_in_the_landlock_box_a_socket_given_back_is_reached(tmp_path, their_tmux, listener):
    sock, folder = their_tmux
    given = folder / "db.sock"   # beside the tmux server's, as a database's socket under /tmp would be
    stop = serve(given)
    try:
        box, project = launch(tmp_path, sock, listener, given=str(given))
    finally:
        stop.set()
    got = seen(project)
    assert got["given"] == "ok" and box.unix_filter is None, got
    tmux_works(sock, tmp_path)
    if SCOPED:  # Landlock grants that socket alone
        assert got["theirs"] == "EACCES" and not (tmp_path / "pwned").exists(), got
    else:  # the user's word wins over the filter, and the start says what that leaves open
        assert got["theirs"] == "ok" and f"GENESIS_BOX_ALLOW gives {given}" in box.line(), got


# The filter alone, on the calls a program could take around it.
FILTERED = r"""
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    got = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(f"{name}={'ok' if got >= 0 else errno.errorcode[ctypes.get_errno()]}")
call("stream", SOCKET, 1, 1, 0)
call("stream_flags", SOCKET, 1, 1 | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK, 0)
call("seqpacket", SOCKET, 1, 5, 0)
call("high_bits", SOCKET, (1 << 32) | 1, 1, 0)   # the kernel reads an int: still AF_UNIX
call("dgram", SOCKET, 1, 2, 0)
call("inet", SOCKET, 2, 1, 0)
call("io_uring", URING, 8, 0)
"""
X32 = 0x40000000


def under_filter(code: str) -> dict[str, str]:
    libc = ctypes.CDLL(None, use_errno=True)

    def in_child() -> None:
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # no_new_privs, as Landlock's restrict sets it first
            raise OSError(ctypes.get_errno(), "no_new_privs")
        unixsockets.install(FILTER)

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          preexec_fn=in_child)
    assert done.returncode == 0, done.stderr
    return dict(line.split("=") for line in done.stdout.split())


@needs_filter
def test_the_filter_refuses_unix_stream_sockets_and_io_uring_and_nothing_else():
    native = {"x86_64": 41, "amd64": 41, "aarch64": 198, "arm64": 198}[MACHINE.arch]
    got = under_filter(f"SOCKET, URING = {native}, 425\n" + FILTERED)
    assert got == {"stream": "EACCES", "stream_flags": "EACCES", "seqpacket": "EACCES", "high_bits": "EACCES",
                   "dgram": "ok", "inet": "ok", "io_uring": "EPERM"}, got


@pytest.mark.skipif(FILTER is None or MACHINE.arch not in ("x86_64", "amd64"), reason="x32 is x86_64's")
def test_the_filter_leaves_no_way_around_by_x32s_numbers():
    got = under_filter(f"SOCKET, URING = {X32 | 41}, {X32 | 425}\n" + FILTERED)
    # x32's socket is refused whatever it asks; a kernel without x32 would say ENOSYS, never ok.
    assert {got[k] for k in ("stream", "dgram", "inet")} <= {"EACCES"} and got["io_uring"] == "EPERM", got


# The same calls made the 32-bit way (int 0x80, x86_64's compat entry), as an i386 program would.
COMPAT = r"""
import ctypes, errno, mmap
def compat(nr, a, b, c):  # push rbx; mov eax, nr; mov ebx, a; mov ecx, b; mov edx, c; int 0x80; pop rbx; ret
    code = (b"\x53\xb8" + nr.to_bytes(4, "little") + b"\xbb" + a.to_bytes(4, "little") + b"\xb9"
            + b.to_bytes(4, "little") + b"\xba" + c.to_bytes(4, "little") + b"\xcd\x80\x5b\xc3")
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    got = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
    return "ok" if got >= 0 else errno.errorcode.get(-got, str(got))
for name, call in (("stream", (359, 1, 1, 0)), ("dgram", (359, 1, 2, 0)), ("io_uring", (425, 8, 0, 0))):
    print(f"{name}={compat(*call)}")
"""


@functools.cache
def compat_calls() -> str:
    """"" where this kernel runs 32-bit system calls from a 64-bit process, else why not."""
    if MACHINE.arch not in ("x86_64", "amd64"):
        return "int 0x80 is x86's"
    done = subprocess.run([sys.executable, "-c", COMPAT], capture_output=True, text=True, timeout=30)
    return "" if done.returncode == 0 and "stream=ok" in done.stdout else f"no 32-bit system calls here: {done}"


@pytest.mark.skipif(FILTER is None or bool(compat_calls()), reason=compat_calls() or "no filter")
def test_the_filter_leaves_no_way_around_by_32_bit_calls():
    got = under_filter(COMPAT)
    assert got == {"stream": "EACCES", "dgram": "ok", "io_uring": "EPERM"}, got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")
def test_a_filter_exists_only_where_it_is_known():
    assert unixsockets.build("riscv64") is None and unixsockets.build("armv7l") is None
    for arch in ("x86_64", "aarch64"):
        program = unixsockets.build(arch)
        assert program is not None and program.length == len(program.program) // 8 and program.length < 64


@needs_landlock
def test_a_filter_the_kernel_refuses_fails_the_launch_and_nothing_runs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    places = places_for(work, work / "state", work / "hb", work / "logs", work / "genesis.conf", PACKAGE, ("bash",),
                        {"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    box = replace(choose(LANDLOCK, MACHINE, places), unix_filter=unixsockets.Filter("x86_64", b"\xff" * 8))
    out, _, _ = supervised(work, "touch ran.txt\n", run_id="run-unixsockets", box=box)
    assert out.status != "exited" and "the landlock box could not be set up" in out.detail, out
    assert not (work / "ran.txt").exists()
