"""procs/condition.py: a `when:` command, bounded; at the deadline its whole group is killed."""

from __future__ import annotations

import os

from helpers.procs import alive
from helpers.waits import wait_for

from genesis.procs.condition import run_condition


def test_the_status_is_the_commands(tmp_path):
    assert run_condition("exit 3", tmp_path, os.environ, 10) == 3
    assert run_condition("true", tmp_path, os.environ, 10) == 0


def test_at_the_deadline_everything_it_started_is_killed(tmp_path):
    """A grep stuck on a FIFO was left behind when only bash was killed."""
    os.mkfifo(tmp_path / "fifo")
    pids = tmp_path / "pids"
    assert run_condition(f"grep -q x fifo & echo $! >{pids}; wait", tmp_path, os.environ, 0.5) is None
    grep = int(pids.read_text())
    wait_for(lambda: not alive(grep), 5, "the condition's grep to be gone")


def test_it_carries_the_environment_given(tmp_path):
    out = tmp_path / "out"
    assert run_condition(f"echo $GENESIS_RUN_ID >{out}", tmp_path, {**os.environ, "GENESIS_RUN_ID": "r-1"}, 10) == 0
    assert out.read_text() == "r-1\n"
