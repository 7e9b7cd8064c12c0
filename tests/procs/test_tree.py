"""A process's descendants (proctree.descendant_pids): on Linux walked through the kernel's own
lists of each task's children, and the same answer as psutil's map of every process's parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import psutil
import pytest

from genesis.procs import proctree
from genesis.procs.proctree import descendant_pids, descendants, identify

# A shell with a child, a grandchild in a subshell, and a child forked by a thread that then ends.
TREE = [sys.executable, "-c", """
import subprocess, sys, threading, time
kids = []
subprocess.Popen(["bash", "-c", "sleep 60 & (sleep 61 & wait) & wait"])
thread = threading.Thread(target=lambda: kids.append(subprocess.Popen(["sleep", "62"])))
thread.start(); thread.join()
print("ready", flush=True)
time.sleep(60)
"""]


@pytest.fixture
def tree():
    proc = subprocess.Popen(TREE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)   # the whole tree is in its group
    proc.wait()


def _settled(proc: subprocess.Popen) -> list[int]:
    """psutil's answer once the shells have forked all they will (5: bash, sleep, subshell, sleep, sleep)."""
    for _ in range(100):
        kids = sorted(k.pid for k in psutil.Process(proc.pid).children(recursive=True))
        if len(kids) == 5:
            return kids
        threading.Event().wait(0.05)
    raise AssertionError(f"the tree never grew to 5 descendants: {kids}")


def test_the_walk_finds_what_psutil_finds_children_of_threads_and_grandchildren_included(tree):
    expected = _settled(tree)
    assert sorted(descendant_pids(psutil.Process(tree.pid))) == expected
    assert sorted(i.pid for i in descendants(identify(tree.pid))) == sorted([tree.pid, *expected])


def test_without_the_kernels_lists_the_walk_is_psutils(tree, monkeypatch):
    expected = _settled(tree)
    monkeypatch.setattr(proctree, "_CHILD_LISTS", False)
    assert sorted(descendant_pids(psutil.Process(tree.pid))) == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's lists of children are Linux's")
def test_the_walk_reads_the_trees_own_files_not_every_process(tree, monkeypatch):
    _settled(tree)
    read: list[int] = []
    real = proctree._children_of
    monkeypatch.setattr(proctree, "_children_of", lambda pid: read.append(pid) or real(pid))
    monkeypatch.setattr(psutil.Process, "children", lambda *a, **k: pytest.fail("the walk read every process's parent"))
    found = descendant_pids(psutil.Process(tree.pid))
    assert sorted(read) == sorted([tree.pid, *found])


def test_a_process_gone_has_no_descendants():
    proc = subprocess.Popen(["true"])
    ident = identify(proc.pid)
    proc.wait()
    assert descendants(ident) == [] and proctree._children_of(proc.pid) == []
