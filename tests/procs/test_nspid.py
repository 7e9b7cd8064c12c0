"""A pid inside a bubblewrap box's PID namespace, told as the host sees it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers.waits import wait_for

from genesis.procs.nspid import boxed, ns_pids, outer_pid
from genesis.procs.proctree import identify


def test_a_process_outside_any_box_has_one_pid():
    assert ns_pids(os.getpid()) == (os.getpid(),)
    assert ns_pids(2 ** 22 + 1) == ()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap here")
def test_the_boxed_pid_is_found_among_the_roots_descendants(tmp_path):
    said = tmp_path / "inner"
    box = subprocess.Popen(["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                            "--die-with-parent", "--", "sh", "-c", f"sh -c 'echo $$ > {said}; exec sleep 60'"])
    try:
        wait_for(lambda: said.exists() and said.read_text().strip(), what="the boxed pid")
        inner = int(said.read_text())
        root = identify(box.pid)
        outer = outer_pid(inner, root)
        assert outer is not None and outer != inner
        assert ns_pids(outer) == (outer, inner)
        assert open(f"/proc/{outer}/cmdline").read().split("\0")[:2] == ["sleep", "60"]
        assert outer_pid(inner + 1000, root) is None
    finally:
        box.kill()
        box.wait()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap here")
def test_the_boxs_command_is_the_eldest_child_of_its_pid_1(tmp_path):
    said = tmp_path / "inner"
    box = subprocess.Popen(["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                            "--die-with-parent", "--", "sh", "-c", f"echo $$ > {said}; (sleep 60 &); exec sleep 61"])
    try:
        wait_for(lambda: said.exists() and said.read_text().strip(), what="the boxed pid")
        root = identify(box.pid)
        wait_for(lambda: "61" in open(f"/proc/{boxed(root).pid}/cmdline").read(), what="the command's exec")
        agent = boxed(root)
        assert agent == identify(agent.pid) and ns_pids(agent.pid) == (agent.pid, int(said.read_text()))
    finally:
        box.kill()
        box.wait()
    assert boxed(root) is None
