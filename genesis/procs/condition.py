"""A condition the user wrote as a command (a `when:` trigger or done rule): run by bash in the
project, bounded in time, and carrying the loop's markers.

It runs in a session of its own; at the deadline the whole session's process group is
killed, not bash alone, so a `grep` stuck on a FIFO is never left behind for ever. The
markers (in env, the caller's) let the reaper find anything it started that left the group.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Mapping

from genesis.procs.group import kill_group

__all__ = ["run_condition"]


def run_condition(command: str, cwd: Path, env: Mapping[str, str], timeout: float) -> int | None:
    """The command's exit status; None when it ran over timeout (it and its group were killed)."""
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return None
    except BaseException:
        kill_group(proc)
        raise

