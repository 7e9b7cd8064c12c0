"""Ending a command Genesis started in a session of its own: its whole process group at once,
so what it forked (a `grep` stuck on a FIFO, git's helpers) goes with it."""

from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["kill_group", "KILL_WAIT"]

KILL_WAIT = 5.0   # for the group to go after SIGKILL (a hung filesystem can hold it longer)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL proc's process group and reap proc. Only while proc, the group's leader, is not
    yet reaped: its pid, and so the group's id, cannot have been reused by anyone else."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        pass
