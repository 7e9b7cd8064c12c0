"""A user's command run within bounds: its own process group, a deadline, a cap on what it
prints. The triage and notification commands are the user's code; a hung or chatty one
must cost a bounded time and memory, and is ended with everything in its group."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["Finished", "run_bounded", "MAX_OUTPUT"]

MAX_OUTPUT = 64 << 10
KILL_GRACE = 1.0   # seconds between SIGTERM and SIGKILL for the group
POLL = 0.02


@dataclass(frozen=True)
class Finished:
    returncode: int | None    # None: it did not finish in time (its group was killed)
    output: bytes             # at most `limit` bytes of its stdout
    too_much: bool            # it printed more than `limit` (its group was killed)
    error: str = ""           # it could not start: why

    @property
    def timed_out(self) -> bool:
        return self.returncode is None and not self.too_much and not self.error


def run_bounded(argv: Sequence[str], stdin: bytes, env: Mapping[str, str], timeout: float,
                limit: int = MAX_OUTPUT) -> Finished:
    """Run argv with stdin fed to it; at most `timeout` seconds and `limit` bytes of stdout,
    then its whole process group is ended (TERM, then KILL)."""
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=dict(env), start_new_session=True, close_fds=True)
    except (OSError, ValueError) as exc:
        return Finished(None, b"", False, f"could not start {argv[0]!r}: {getattr(exc, 'strerror', None) or exc}")
    out = bytearray()
    over = threading.Event()

    def feed() -> None:
        try:
            proc.stdin.write(stdin)
        except OSError:  # it exited or closed its stdin without reading: its business
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def read() -> None:
        while True:
            chunk = proc.stdout.read1(limit + 1 - len(out)) if len(out) <= limit else b""
            if not chunk:
                return
            out.extend(chunk)
            if len(out) > limit:
                over.set()
                return

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=read, daemon=True)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    returncode = proc.poll()
    while returncode is None and not over.is_set() and time.monotonic() < deadline:
        over.wait(min(POLL, max(0.0, deadline - time.monotonic())))
        returncode = proc.poll()
    if returncode is None or over.is_set():
        _end_group(proc)
    # Something it started in the background may hold the pipe open: read on only briefly,
    # and leave the reader (a daemon thread) rather than closing the pipe under it.
    threads[1].join(KILL_GRACE)
    if over.is_set():
        return Finished(None, bytes(out[:limit]), True)
    return Finished(returncode, bytes(out[:limit]), False)


def _end_group(proc: subprocess.Popen) -> None:
    """TERM its group, KILL whatever is left after the grace; the leader is collected."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(KILL_GRACE)
            if sig == signal.SIGTERM and not _group_alive(proc.pid):
                return
        except subprocess.TimeoutExpired:
            continue
    try:
        proc.wait(KILL_GRACE)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
