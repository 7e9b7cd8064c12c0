"""Landlock applied for real in a child: writes only beneath the allowed folders, signals to
the outside refused (ABI 6+)."""

from __future__ import annotations

import os
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
