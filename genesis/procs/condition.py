"""A condition the user wrote as a command (a `when:` trigger or done rule): run by bash in the
project, bounded in time, and carrying the loop's markers.

It runs in a session of its own; at the deadline the whole session's process group is
killed, not bash alone, so a `grep` stuck on a FIFO is never left behind for ever. The
markers (in env, the caller's) let the reaper find anything it started that left the group.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Mapping

__all__ = ["run_condition", "KILL_WAIT"]

KILL_WAIT = 5.0   # seconds for the killed group to go


def run_condition(command: str, cwd: Path, env: Mapping[str, str], timeout: float) -> int | None:
    """The command's exit status; None when it ran over timeout (it and its group were killed)."""
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None
    except BaseException:
        _kill_group(proc)
        raise


def _kill_group(proc: subprocess.Popen) -> None:
    """Its process group, killed whole. Only while bash, the group's leader, is not yet reaped:
    its pid, and so the group's id, cannot have been reused by anyone else."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        pass
