"""Landlock applied for real in a child: writes only beneath the allowed folders, signals to
the outside refused (ABI 6+); from ABI 9 the ruleset handles socket files too."""

from __future__ import annotations

import os
import socket
import struct
import subprocess

import pytest

from genesis.sandbox import landlock

ABI = landlock.abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="no Landlock in this kernel")


def test_the_attr_grows_with_the_abi():
    assert len(landlock.prepare((), 1).attr) == 8
    six = landlock.prepare((), 6)
    assert len(six.attr) == 24 and six.scoped
    assert landlock.prepare((), 3).rights & (1 << 14)   # truncate from ABI 3
    assert not landlock.prepare((), 2).rights & (1 << 14)


def test_from_abi_9_the_outsides_socket_files_are_handled_and_granted_only_where_named(tmp_path):
    # The ruleset's bits by ABI. A kernel before Linux 7.1 has no ABI 9 and would refuse this
    # ruleset, so only the bits are checked here; the box's real refusal of an outside socket is
    # tests/sandbox/test_unixsockets.py's, by whichever means this kernel has.
    folder, missing = tmp_path / "services", tmp_path / "gone"
    folder.mkdir()
    given = tmp_path / "db.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(given))
    try:
        nine = landlock.prepare((str(tmp_path),), 9, (str(folder), str(missing), str(given)))
    finally:
        server.close()
    handled_fs, handled_net, scoped = struct.unpack("=QQQ", nine.attr)
    assert handled_fs == nine.rights | landlock.RESOLVE_UNIX and (handled_net, scoped) == (0, 3)
    assert not nine.rights & landlock.RESOLVE_UNIX  # the write rules never open a socket: /tmp's, HOME's
    assert nine.sockets_scoped and nine.reachable == (str(folder), str(given))  # what exists, the socket itself
    for version in (6, 7, 8):
        below = landlock.prepare((str(tmp_path),), version, (str(folder),))
        assert not struct.unpack("=QQQ", below.attr)[0] & landlock.RESOLVE_UNIX  # the kernel would refuse it
        assert not below.sockets_scoped and below.reachable == ()


@needs_landlock
def test_writes_only_beneath_the_allowed_folders(tmp_path):
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    rules = landlock.prepare((str(allowed),), ABI)
    act = f"echo a > {allowed}/f; echo $?; echo b > {other}/f; echo $?; cat {allowed}/f"
    done = subprocess.run(["sh", "-c", act], capture_output=True, text=True, timeout=30,
                          preexec_fn=lambda: landlock.restrict(rules))
    assert done.stdout.split() == ["0", "2", "a"], done.stderr
    assert not (other / "f").exists()


@pytest.mark.skipif(ABI < landlock.SIGNAL_SCOPING_ABI, reason="no signal scoping before Landlock ABI 6")
def test_signals_leave_the_box_no_more(tmp_path):
    rules = landlock.prepare((str(tmp_path),), ABI)
    done = subprocess.run(["sh", "-c", f"kill -0 {os.getpid()}; echo $?; sh -c 'kill -0 $PPID'; echo $?"],
                          capture_output=True, text=True, timeout=30, preexec_fn=lambda: landlock.restrict(rules))
    assert done.stdout.split() == ["1", "0"], done.stderr  # not the watcher; its own tree yes
