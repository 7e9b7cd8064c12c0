"""procs/bounded.py: a command to its end within bounds of time and output, with real processes."""

from __future__ import annotations

import os
import signal
import sys

from helpers.procs import alive
from helpers.waits import wait_for

from genesis.procs.bounded import run_bounded


def bash(command: str) -> list[str]:
    return ["bash", "-c", command]


def test_its_exit_status_and_both_its_streams(tmp_path):
    ran = run_bounded(bash("echo out; echo err >&2; exit 3"), tmp_path, os.environ, 30, 1024)
    assert (ran.exit_code, ran.timed_out, ran.error) == (3, False, "")
    assert ran.output.splitlines() == [b"out", b"err"]


def test_only_the_last_bytes_of_a_flood_of_output_are_kept(tmp_path):
    flood = f"{sys.executable} -c \"import sys; sys.stdout.write('x' * (8 << 20)); print('the end')\""
    ran = run_bounded(bash(flood), tmp_path, os.environ, 60, 4096)
    assert ran.exit_code == 0
    assert len(ran.output) == 4096 and ran.output.endswith(b"xxthe end\n")


def test_at_its_deadline_it_is_killed_with_everything_it_started(tmp_path):
    pids = tmp_path / "pids"
    ran = run_bounded(bash(f"echo started; sleep 300 & echo $! >{pids}; wait"), tmp_path, os.environ, 0.5, 1024)
    assert (ran.exit_code, ran.timed_out) == (None, True)
    assert ran.output == b"started\n"
    sleeper = int(pids.read_text())
    wait_for(lambda: not alive(sleeper), 5, "the check's sleep to be gone")


def test_a_command_that_ended_is_not_held_by_what_it_left_running_on_its_output(tmp_path):
    """A server a check started keeps the output pipe open: the check's end is its own."""
    pids = tmp_path / "pids"
    ran = run_bounded(bash(f"sleep 300 & echo $! >{pids}; echo checked"), tmp_path, os.environ, 120, 1024)
    try:
        assert (ran.exit_code, ran.timed_out, ran.output) == (0, False, b"checked\n")
        assert ran.seconds < 60  # not its deadline: it ended long before
    finally:
        os.kill(int(pids.read_text()), signal.SIGKILL)


def test_a_command_that_cannot_start_says_why(tmp_path):
    ran = run_bounded([str(tmp_path / "missing")], tmp_path, os.environ, 10, 1024)
    assert ran.exit_code is None and not ran.timed_out and "No such file" in ran.error
