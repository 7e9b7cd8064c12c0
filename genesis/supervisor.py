"""Supervising one agent run: start it in its own session, watch its heartbeat, end it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from . import exitcodes
from .clock import Clock, SystemClock
from .heartbeat import read_heartbeat
from .proctree import (KillReport, ProcId, become_subreaper, descendants, identify, kill_all,
                       marked, reap_zombie_children)
from .watchdog import Watchdog

__all__ = ["AgentRun", "Limits", "Outcome", "Interrupted", "supervise", "tail"]


@dataclass(frozen=True)
class AgentRun:
    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]         # the full environment, markers included
    log: Path
    heartbeat: Path
    run_id: str


@dataclass(frozen=True)
class Limits:
    check_interval: float
    stale_after: float
    max_runtime: float
    kill_grace: float
    count_output: bool = True      # agent output counts as a sign of life


@dataclass(frozen=True)
class Outcome:
    status: str                    # exited | stale | overtime | interrupted | not_started
    returncode: int | None
    duration: float
    idle: float = 0.0
    kill: KillReport | None = None
    signum: int | None = None
    detail: str = ""
    pid: int | None = None         # the agent's pid

    @property
    def exit_code(self) -> int:
        if self.status == "exited":
            return exitcodes.OK if self.returncode == 0 else exitcodes.AGENT_FAILED
        if self.status == "stale":
            return exitcodes.AGENT_STALE
        if self.status == "overtime":
            return exitcodes.AGENT_OVERTIME
        if self.status == "interrupted":
            return exitcodes.INTERRUPTED_INT if self.signum == signal.SIGINT else exitcodes.INTERRUPTED_TERM
        return exitcodes.AGENT_FAILED


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_once(signum: int, _frame: object) -> None:
    # The first signal interrupts the wait; later ones must not abort the cleanup it starts.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Interrupted(signum)


def supervise(run: AgentRun, limits: Limits, clock: Clock | None = None,
              note: Callable[[str], None] = lambda _msg: None) -> Outcome:
    """Run the agent to its end, or kill its whole tree when stale, over time or interrupted."""
    clock = clock or SystemClock()
    become_subreaper()
    run.log.parent.mkdir(parents=True, exist_ok=True)
    start_mono, start_wall = clock.mono(), clock.wall()
    old = {s: signal.signal(s, _raise_once) for s in (signal.SIGTERM, signal.SIGINT)}
    proc: subprocess.Popen[bytes] | None = None
    root: ProcId | None = None
    exited: ExitWatch | None = None

    def tree() -> list[ProcId]:
        found = descendants(root) if root is not None else []
        return found + marked({"GENESIS_RUN_ID": run.run_id})

    def end(status: str, idle: float = 0.0, signum: int | None = None, detail: str = "") -> Outcome:
        report = kill_all(tree, limits.kill_grace, keep=(proc.pid,) if proc else ())
        rc = proc.wait() if proc else None
        return Outcome(status, rc, clock.mono() - start_mono, idle, report, signum, detail,
                       proc.pid if proc else None)

    try:
        with open(run.log, "ab") as log:
            log.write(f"=== genesis: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} "
                      f"starting: {' '.join(run.argv[:-1])} <prompt>\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(run.argv, cwd=run.cwd, env=dict(run.env), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                return Outcome("not_started", None, 0.0, detail=f"cannot start {run.argv[0]!r}: {exc.strerror}")
        root = identify(proc.pid)
        exited = ExitWatch(proc)
        dog = Watchdog(limits.stale_after, limits.check_interval, start_mono, start_wall)
        deadline = start_mono + limits.max_runtime
        log_size = _size(run.log)
        while True:
            rc = exited.wait(max(0.0, min(limits.check_interval, deadline - clock.mono())))
            if rc is not None:
                return Outcome("exited", rc, clock.mono() - start_mono, pid=proc.pid)
            reap_zombie_children(keep=proc.pid)
            beat, _why = read_heartbeat(run.heartbeat)
            ours = beat is not None and beat.run_id in ("", run.run_id)
            size = _size(run.log)
            grew, log_size = limits.count_output and size > log_size, size
            verdict = dog.observe(beat.epoch if ours else None, clock.mono(), clock.wall(), grew)
            for msg in verdict.notes:
                note(msg)
            if verdict.stale:
                return end("stale", verdict.idle,
                           detail=f"no heartbeat for {verdict.idle:.1f}s (stale after {limits.stale_after:g}s)")
            if clock.mono() >= deadline:
                return end("overtime", verdict.idle,
                           detail=f"ran for {clock.mono() - start_mono:.0f}s (cap {limits.max_runtime:g}s)")
    except Interrupted as exc:
        return end("interrupted", signum=exc.signum, detail=f"interrupted by {exc}")
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if exited is not None:
            exited.close()


class ExitWatch:
    """Sleep until the agent exits or the timeout passes, without polling in between.

    Linux: a pidfd becomes readable at exit; macOS: kqueue reports NOTE_EXIT. Elsewhere
    Popen.wait's own polling is used. Saves the watcher's CPU over a long, quiet run.
    """

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.fd: int | None = None
        self.kq = None
        try:
            if hasattr(os, "pidfd_open"):
                self.fd = os.pidfd_open(proc.pid)
            elif hasattr(select, "kqueue"):
                self.kq = select.kqueue()
                self.kq.control([select.kevent(proc.pid, select.KQ_FILTER_PROC, select.KQ_EV_ADD,
                                               select.KQ_NOTE_EXIT)], 0, 0)
        except OSError:
            self.fd, self.kq = None, None  # already gone, or not supported: poll instead

    def wait(self, timeout: float) -> int | None:
        """The exit status, or None if it still runs after `timeout` seconds."""
        if self.fd is not None:
            select.select([self.fd], [], [], timeout)
        elif self.kq is not None:
            self.kq.control(None, 1, timeout)
        else:
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
        return self.proc.poll()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if self.kq is not None:
            self.kq.close()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def tail(path: Path, lines: int = 12, max_bytes: int = 16384) -> list[str]:
    """The last lines of a log, for the console when an agent is killed."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]
