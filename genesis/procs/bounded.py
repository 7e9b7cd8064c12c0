"""A command run to its end within bounds: its time (its whole process group killed at the
deadline) and its output (only the last bytes are kept, however much it writes).

For a task's check (loop/taskcheck.py): the output is read as it comes, so a command that
writes gigabytes never fills a pipe, a disk or the memory.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from genesis.procs.group import kill_group

__all__ = ["Ran", "run_bounded"]

CHUNK = 1 << 16
POLL = 0.5     # seconds between looks at whether the command ended


@dataclass(frozen=True)
class Ran:
    exit_code: int | None    # None: it did not end by itself (timed out) or could not start
    seconds: float
    output: bytes            # the last bytes of its stdout and stderr, interleaved as written
    timed_out: bool = False
    error: str = ""          # why it could not start


def run_bounded(argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float, keep: int,
                preexec: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic) -> Ran:
    """argv's end, its time and its output's last `keep` bytes; killed with its group after `timeout`."""
    started = clock()
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=write_fd,
                                stderr=write_fd, start_new_session=True, preexec_fn=preexec)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        os.close(read_fd)
        return Ran(None, 0.0, b"", error=str(exc) or type(exc).__name__)
    finally:
        os.close(write_fd)
    kept = bytearray()

    def take(data: bytes) -> None:
        kept.extend(data)
        if len(kept) > keep:
            del kept[:len(kept) - keep]
    try:
        while True:
            left = timeout - (clock() - started)
            if left <= 0:
                if proc.poll() is not None:  # it ended; what it forked wrote on (the reaper's)
                    return Ran(proc.returncode, clock() - started, bytes(kept))
                kill_group(proc)
                return Ran(None, clock() - started, bytes(kept), timed_out=True)
            ended = proc.poll() is not None
            ready, _, _ = select.select([read_fd], [], [], 0.05 if ended else min(left, POLL))
            data = os.read(read_fd, CHUNK) if ready else b""
            take(data)
            # The end: every writer closed the pipe, or the command ended and what it left
            # running (a server it forked, for the reaper) has nothing more to say now.
            if (ready and not data) or (ended and not data):
                return Ran(proc.wait(), clock() - started, bytes(kept))
    except BaseException:
        if proc.returncode is None:  # never a group whose leader is reaped: its id may be anyone's now
            kill_group(proc)
        raise
    finally:
        os.close(read_fd)
