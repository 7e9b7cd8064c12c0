"""Supervising one agent run: start it in its own session, watch its heartbeat, end it."""

from __future__ import annotations

import errno
import os
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
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

__all__ = ["AgentRun", "Limits", "Outcome", "Interrupted", "prompt_problem", "supervise", "tail", "sanitize"]


@dataclass(frozen=True)
class AgentRun:
    argv: tuple[str, ...]          # the agent command, without the prompt
    cwd: Path
    env: Mapping[str, str]         # the full environment, markers included
    log: Path
    heartbeat: Path
    run_id: str
    prompt: str = ""               # appended as the last argument when it fits ("" appends nothing)
    prompt_stdin: bool = False     # the agent reads its prompt from stdin when given none (`claude -p`)


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
            return {signal.SIGINT: exitcodes.INTERRUPTED_INT, signal.SIGHUP: exitcodes.INTERRUPTED_HUP}.get(
                self.signum, exitcodes.INTERRUPTED_TERM)
        return exitcodes.AGENT_FAILED


# The user's stop: Ctrl-C, SIGTERM, or the terminal or SSH session closing (SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_once(signum: int, _frame: object) -> None:
    # The first signal interrupts the wait; later ones must not abort the cleanup it starts.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


# --- how large a command line may be -------------------------------------------------
# Linux: one string (argument or environment entry) takes at most MAX_ARG_STRLEN = 32 pages
# with its NUL, and all of them with their pointers at most a quarter of the stack limit
# (capped at 6 MiB, at least 128 KiB). macOS: only the total, ARG_MAX. HEADROOM covers what
# the kernel adds (the program's path, a script's interpreter line).
HEADROOM = 8 << 10
POINTER = struct.calcsize("P")


def _limits() -> tuple[int, int | None]:
    """(bytes for every argument and environment string with its pointer, most bytes for one string)."""
    try:
        total = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        total = -1
    total = total if total > 0 else 128 << 10
    if sys.platform.startswith("linux"):
        return min(total, 6 << 20) - HEADROOM, 32 * os.sysconf("SC_PAGE_SIZE")
    return total - HEADROOM, None


def _cost(strings: list[bytes]) -> int:
    return sum(len(b) + 1 + POINTER for b in strings) + 2 * POINTER  # the two NULL terminators


def _strings(argv: tuple[str, ...], env: Mapping[str, str]) -> list[bytes]:
    return [os.fsencode(a) for a in argv] + [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]


def _misfit(argv: tuple[str, ...], prompt: str, env: Mapping[str, str]) -> str | None:
    """Why prompt cannot be the last argument of argv, or None when it can."""
    if "\0" in prompt:
        return "the prompt contains a NUL byte, which no command-line argument can carry (remove it)"
    total, per_string = _limits()
    size = len(os.fsencode(prompt))
    if per_string is not None and size + 1 > per_string:
        return (f"the prompt is {size} bytes, more than the {per_string - 1} bytes the OS allows in one "
                f"command-line argument")
    room = total - _cost(_strings(argv, env)) - POINTER - 1
    if size > room:
        return (f"the prompt is {size} bytes, but the OS allows {total + HEADROOM} bytes for a program's "
                f"arguments and environment together and the agent command and environment leave "
                f"{max(room, 0)} of them")
    return None


def prompt_problem(argv: tuple[str, ...], prompt: str, env: Mapping[str, str], prompt_stdin: bool) -> str | None:
    """Why the agent cannot be given this prompt, with what to do; None when it can.

    A prompt goes as the last argument when it fits the OS's limits, else on stdin if the
    agent reads it there; otherwise the run is refused with this reason, before it starts.
    """
    if not prompt or prompt_stdin:
        return None
    why = _misfit(tuple(argv), prompt, env)
    if why is None:
        return None
    return f"{why}; shorten the prompt file, or use an agent that reads its prompt from stdin (as `claude -p` does)"


def _too_big(argv: tuple[str, ...], env: Mapping[str, str]) -> str:
    """The real reason behind E2BIG: the sizes, the largest strings, the limits."""
    total, per_string = _limits()
    strings = _strings(argv, env)
    names = [f"argument {i}" for i in range(len(argv))] + [f"environment variable {k}" for k in env]
    largest = max(range(len(strings)), key=lambda i: len(strings[i]), default=None)
    biggest = f"; the largest is {names[largest]}, {len(strings[largest])} bytes" if largest is not None else ""
    one = f", at most {per_string - 1} in one string" if per_string is not None else ""
    return (f"its arguments and environment take {_cost(strings)} bytes, too many for the OS (about "
            f"{total + HEADROOM} in all{one}){biggest}; shorten the agent command, the prompt or the environment")


def _command_line(argv: tuple[str, ...], prompt: str, on_stdin: bool) -> str:
    """The command for the log's header: quoted, cut short, the prompt by its size only."""
    shown = shlex.join(argv)
    shown = shown if len(shown) <= 500 else shown[:500] + "..."
    if not prompt:
        return shown
    size = len(prompt.encode("utf-8", "surrogateescape"))
    return f"{shown} <prompt, {size} bytes{' on stdin' if on_stdin else ''}>"


def supervise(run: AgentRun, limits: Limits, clock: Clock | None = None,
              note: Callable[[str], None] = lambda _msg: None) -> Outcome:
    """Run the agent to its end, or kill its whole tree when stale, over time or interrupted."""
    clock = clock or SystemClock()
    become_subreaper()
    run.log.parent.mkdir(parents=True, exist_ok=True)
    start_mono, start_wall = clock.mono(), clock.wall()
    old = {s: signal.signal(s, _raise_once) for s in STOP_SIGNALS}
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
        misfit = _misfit(tuple(run.argv), run.prompt, run.env) if run.prompt else None
        on_stdin = misfit is not None and run.prompt_stdin
        argv = tuple(run.argv) + ((run.prompt,) if run.prompt and misfit is None else ())
        with open(run.log, "ab") as log:
            stamp = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
            log.write(f"=== genesis: {stamp} starting: {_command_line(run.argv, run.prompt, on_stdin)}\n"
                      .encode("utf-8", "replace"))
            log.flush()
            problem = prompt_problem(run.argv, run.prompt, run.env, run.prompt_stdin)
            if problem is None:
                proc, problem = _start(argv, run, log, run.prompt if on_stdin else None)
            if proc is None:
                log.write(f"=== genesis: not started: {problem}\n".encode("utf-8", "replace"))
                return Outcome("not_started", None, 0.0, detail=f"cannot start {run.argv[0]!r}: {problem}")
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


def _start(argv: tuple[str, ...], run: AgentRun, log, stdin_text: str | None
           ) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start the agent in its own session: (the process, "") or (None, why not and what to do)."""
    stdin = None
    try:
        if stdin_text is not None:
            # A temp file, not a pipe: no writer thread, and the agent may read it at leisure.
            # TemporaryFile has no name left by the time the agent starts.
            stdin = tempfile.TemporaryFile()
            stdin.write(stdin_text.encode("utf-8", "surrogateescape"))
            stdin.seek(0)
    except OSError as exc:
        if stdin is not None:
            stdin.close()
        return None, f"cannot write the prompt to a temporary file for its stdin ({exc.strerror}); free some space"
    try:
        return subprocess.Popen(argv, cwd=run.cwd, env=dict(run.env), stdin=stdin or subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True), ""
    except OSError as exc:
        if exc.errno == errno.E2BIG:
            return None, _too_big(argv, run.env)
        if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR):
            return None, f"{exc.strerror}; install it or fix the agent command (GENESIS_AGENT_CMD)"
        return None, exc.strerror or str(exc)
    except ValueError as exc:  # e.g. a NUL byte in the command or the environment
        return None, f"{exc}; fix the agent command or the environment"
    finally:
        if stdin is not None:
            stdin.close()


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


# Terminal control sequences in agent output: CSI (ESC [ or 0x9b) with its parameters; OSC,
# DCS, SOS, PM and APC strings up to their terminator (BEL, ESC \\ or 0x9c), or the line's
# end when cut off; any other ESC sequence; then every C0 and C1 control left, DEL, and the
# bidirectional overrides and isolates that make text read other than it is.
ESCAPES = re.compile(r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
                     r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                     r"|\x1b[\x20-\x2f]*[\x30-\x7e]?")
CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def sanitize(line: str, width: int = 300) -> str:
    """One line of agent output made safe for a terminal: control sequences and characters go,
    the text stays; a carriage return keeps what a terminal would show last; at most width."""
    line = ESCAPES.sub("", line)
    line = next((part for part in reversed(line.split("\r")) if part), "")
    line = CONTROLS.sub("", line.expandtabs(8))
    return line if len(line) <= width else line[:width - 1] + "\u2026"


def tail(path: Path, lines: int = 12, max_bytes: int = 16384, width: int = 300) -> list[str]:
    """The last lines of a log, sanitised for the console when an agent is killed."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").split("\n")
    if size > max_bytes:
        text = text[1:]  # begins mid-line, maybe mid-character or mid-sequence
    if text and text[-1] == "":
        text.pop()
    return [sanitize(line, width) for line in text[-lines:]]
