"""Supervising one agent run: start it in its own session, watch its heartbeat, end it.

The agent works all night with the user's permissions and may be careless or hostile, so
nothing it can do switches its supervision off: its output reaches the log through the
watcher (capped, and put back if the log is deleted); a stop signal it sends the watcher
is ignored where the platform names the sender; something planted at the heartbeat path is
removed; a pause of the watcher or a full disk is not charged to it; and whatever it leaves
behind is ended when the phase ends, however it tried to shed its ownership.
"""

from __future__ import annotations

import errno
import os
import re
import select
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import psutil

from . import cgroups, exitcodes
from .clock import Clock, SystemClock
from .heartbeat import read_heartbeat
from .proctree import (KillReport, ProcId, adopted, become_subreaper, command_line, descendants, descends_from,
                       identify, kill_all, marked, protected_pids, reap_zombie_children)
from .watchdog import Verdict, Watchdog

__all__ = ["AgentRun", "Limits", "Outcome", "Interrupted", "AgentLog", "prompt_problem", "supervise", "tail",
           "sanitize", "clear_planted", "disk_full"]

MIN_LOG_BYTES = 64 << 10   # the smallest log cap: room for a head, a tail and the line between
DISK_ROOM = 64 << 10       # less free space than this: the hook cannot write a heartbeat
SI_KERNEL = 0x80           # si_code of a signal the kernel sent (a terminal's Ctrl-C, a hangup)


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
    on_check: Callable[[], None] | None = None  # the loop's own repairs, run at every check


@dataclass(frozen=True)
class Limits:
    check_interval: float
    stale_after: float
    max_runtime: float
    kill_grace: float
    count_output: bool = True      # agent output counts as a sign of life (bounded once it has beaten)
    log_max_bytes: int = 50 << 20  # agent output kept per phase: the first half and the newest bytes

    def __post_init__(self) -> None:
        if self.log_max_bytes < MIN_LOG_BYTES:
            raise ValueError(f"the log cap must be at least {MIN_LOG_BYTES} bytes, not {self.log_max_bytes}")


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
    sender: int | None = None      # interrupted: who sent the signal (0: the kernel, e.g. a terminal)
    swept: int = 0                 # processes the end-of-phase sweep ended (a note says which and why)
    disk_full: bool = False        # the heartbeat's filesystem was full at a check of this phase

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
              note: Callable[[str], None] = lambda _msg: None,
              debug: Callable[[str], None] = lambda _msg: None) -> Outcome:
    """Run the agent to its end, or kill its whole tree when stale, over time or interrupted;
    either way end what it left behind. `note` gets what the user should hear, `debug` the rest."""
    return _Watcher(run, limits, clock or SystemClock(), note, debug).run()


class _Watcher:
    """One phase's watch: start, check every interval, end. Single-use."""

    def __init__(self, run: AgentRun, limits: Limits, clock: Clock, note: Callable[[str], None],
                 debug: Callable[[str], None]):
        self.run_, self.limits, self.clock, self.note, self.debug = run, limits, clock, note, debug
        self.proc: subprocess.Popen[bytes] | None = None
        self.root: ProcId | None = None
        self.since = 0.0                       # the agent's start (a create time): what came later is its
        self.group: cgroups.AgentGroup | None = None
        self.log: AgentLog | None = None
        self.pump: OutputPump | None = None
        self.waiter: SignalWait | ExitWait | None = None
        self.tampered: list[str] = []
        self.disk_full = False
        self.seen_output = 0
        self.found: dict[int, tuple[str, str]] = {}   # pid: (command line, why it is the agent's)
        self.late: list[tuple[int, int | None]] = []  # stop signals that came during the clean-up

    def run(self) -> Outcome:
        become_subreaper()
        self.run_.log.parent.mkdir(parents=True, exist_ok=True)
        self.start_mono, self.start_wall = self.clock.mono(), self.clock.wall()
        self.since = time.time()
        old = {s: signal.signal(s, _raise_once) for s in STOP_SIGNALS}
        try:
            return self._run()
        finally:
            self._close()
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if self.waiter is not None:
                self.waiter.close()  # after the handlers: nothing is left pending by now

    def _run(self) -> Outcome:
        run = self.run_
        self.log = AgentLog(run.log, self.limits.log_max_bytes)
        misfit = _misfit(tuple(run.argv), run.prompt, run.env) if run.prompt else None
        on_stdin = misfit is not None and run.prompt_stdin
        argv = tuple(run.argv) + ((run.prompt,) if run.prompt and misfit is None else ())
        stamp = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
        self.log.say(f"{stamp} starting: {_command_line(run.argv, run.prompt, on_stdin)}")
        try:
            problem = prompt_problem(run.argv, run.prompt, run.env, run.prompt_stdin)
            if problem is None:
                problem = self._start(argv, run.prompt if on_stdin else None)
            if self.proc is None:
                self.log.say(f"not started: {problem}")
                return Outcome("not_started", None, 0.0, detail=f"cannot start {run.argv[0]!r}: {problem}")
            return self._end(**self._watch())
        except Interrupted as exc:  # before the signals were blocked, or where no platform names a sender
            return self._end("interrupted", signum=exc.signum, detail=f"interrupted by {exc}")

    # --- start ------------------------------------------------------------------------

    def _start(self, argv: tuple[str, ...], stdin_text: str | None) -> str:
        """Start the agent in its own session (and cgroup); "" or why not and what to do."""
        run, stdin = self.run_, None
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
            return f"cannot write the prompt to a temporary file for its stdin ({exc.strerror}); free some space"
        self.group, why = cgroups.create(run.run_id)
        if self.group is None:
            self.debug(f"the agent runs without a cgroup of its own: {why}")
        out_r, out_w = os.pipe()
        _grow_pipe(out_w)
        try:
            self.proc = subprocess.Popen(argv, cwd=run.cwd, env=dict(run.env), stdin=stdin or subprocess.DEVNULL,
                                         stdout=out_w, stderr=out_w, start_new_session=True,
                                         preexec_fn=self.group.join if self.group else None)
        except OSError as exc:
            if exc.errno == errno.E2BIG:
                return _too_big(argv, run.env)
            if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR):
                return f"{exc.strerror}; install it or fix the agent command (GENESIS_AGENT_CMD)"
            return exc.strerror or str(exc)
        except ValueError as exc:  # e.g. a NUL byte in the command or the environment
            return f"{exc}; fix the agent command or the environment"
        finally:
            os.close(out_w)
            if stdin is not None:
                stdin.close()
            if self.proc is None:
                os.close(out_r)
                self._drop_group()
        # Only now: the agent must not inherit a mask that blocks the signals it is stopped with.
        self.waiter = SignalWait() if hasattr(signal, "sigtimedwait") else ExitWait(self.proc)
        self.pump = OutputPump(out_r, self.log)
        self.root = identify(self.proc.pid)
        self.since = self.root.create_time if self.root else self.since
        if self.group and not self.group.holds(self.proc.pid) and not self.group.pids():
            self.debug(f"the agent did not join its cgroup {self.group.path}; going on without it")
            self._drop_group()
        return ""

    # --- watch ------------------------------------------------------------------------

    def _watch(self) -> dict:
        """Sleep until a check is due, a signal comes or the agent exits; how the watch ended."""
        lim, clock = self.limits, self.clock
        dog = Watchdog(lim.stale_after, lim.check_interval, self.start_mono, self.start_wall)
        deadline = self.start_mono + lim.max_runtime
        next_check = self.start_mono + lim.check_interval
        while True:
            rc = self.proc.poll()
            if rc is not None:
                return {"status": "exited", "rc": rc}
            now = clock.mono()
            due = min(next_check, deadline)
            if now < due:
                got = self.waiter.wait(due - now)
                if got is not None and got.si_signo in STOP_SIGNALS:
                    stop = self._stop_signal(got)
                    if stop is not None:
                        return stop
                reap_zombie_children(keep=self.proc.pid)
                continue
            next_check = now + lim.check_interval
            ended = self._check(dog, deadline)
            if ended is not None:
                return ended

    def _check(self, dog: Watchdog, deadline: float) -> dict | None:
        run, lim, clock = self.run_, self.limits, self.clock
        reap_zombie_children(keep=self.proc.pid)
        planted = clear_planted(run.heartbeat)
        if planted:
            self.tampered.append(planted)
            self.note(planted)
        full = disk_full(run.heartbeat.parent)
        if full and not self.disk_full:
            self.note(f"disk full: heartbeats cannot be written ({run.heartbeat.parent}); silence is not counted "
                      f"while it lasts (the runtime cap still applies)")
        self.disk_full |= full
        for msg in self.log.problems():
            self.note(msg)
        if run.on_check is not None:
            try:
                run.on_check()
            except Exception as exc:  # a repair that fails must not end the watch
                self.note(f"a check of Genesis's own files failed: {exc}")
        beat, _why = read_heartbeat(run.heartbeat)
        ours = beat is not None and beat.run_id in ("", run.run_id)
        received = self.log.received
        grew, self.seen_output = lim.count_output and received > self.seen_output, received
        now = clock.mono()
        verdict = dog.observe(beat.epoch if ours else None, now, clock.wall(), grew, hold=full)
        for msg in verdict.notes:
            self.note(msg)
        if verdict.stale:
            return {"status": "stale", "idle": verdict.idle, "detail": self._stale_detail(verdict, dog, now)}
        if now >= deadline:
            return {"status": "overtime", "idle": verdict.idle,
                    "detail": f"ran for {now - self.start_mono:.0f}s (cap {lim.max_runtime:g}s)"}
        return None

    def _stale_detail(self, verdict: Verdict, dog: Watchdog, now: float) -> str:
        detail = f"no heartbeat for {verdict.idle:.1f}s (stale after {self.limits.stale_after:g}s)"
        if verdict.output_ignored and dog.last_beat is not None:
            detail += (f"; its output alone no longer counts: the last heartbeat was {now - dog.last_beat:.1f}s "
                       f"ago, more than a window")
        return "; ".join([detail, *dict.fromkeys(self.tampered)])

    # --- signals ----------------------------------------------------------------------
    # Linux blocks the stop signals and waits for them with sigtimedwait, which names the
    # sender. A stop sent by the agent's own tree (`pkill -f python` in a tool call) is
    # ignored; any other sender (the loop, the user's shell, the terminal) stops the phase.
    # SIGKILL cannot be caught: the loop counts a watcher that died as a failed phase.

    def _stop_signal(self, info) -> dict | None:
        name = signal.Signals(info.si_signo).name
        ours, who = self._sender(info)
        if ours:
            self.note(f"signal {name} from {who}: ignored (a process of the agent's own tree may not stop its "
                      f"watcher)")
            return None
        return {"status": "interrupted", "signum": info.si_signo, "sender": info.si_pid,
                "detail": f"interrupted by {name}"}

    def _sender(self, info) -> tuple[bool, str]:
        """(whether the sender belongs to the agent's tree, who it is)."""
        pid = info.si_pid
        if pid <= 0 or info.si_code == SI_KERNEL:
            return False, "the kernel (a terminal, or the session closing)"
        if pid == os.getpid():
            return False, f"pid {pid} (the watcher itself)"
        # A short-lived sender (`kill`, `pkill`) may be gone before, or while, it is looked at.
        # The loop and the user's shell outlive their signal and the terminal is the kernel,
        # so a sender nobody can examine any more is taken as the agent's.
        gone = f"pid {pid} (exited before it could be identified)"
        ident = identify(pid)
        if ident is None:
            return True, gone
        who = f"pid {pid} ({command_line(pid, 120)})"
        if descends_from(pid, os.getpid()):
            return True, who
        if self.group is not None and self.group.holds(pid):
            return True, who
        try:
            if psutil.Process(pid).environ().get("GENESIS_RUN_ID") == self.run_.run_id:
                return True, who
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
        if ident.process() is None:
            return True, gone
        return False, who

    def _late_signal(self, signum: int, _frame: object) -> None:
        self.late.append((signum, None))

    def _late_stop(self) -> tuple[int, int | None] | None:
        """A stop signal that came during the clean-up, from outside the agent's tree."""
        found = None
        for info in self.waiter.drain() if self.waiter else []:
            if info.si_signo not in STOP_SIGNALS:
                continue
            ours, who = self._sender(info)
            if ours:
                self.note(f"signal {signal.Signals(info.si_signo).name} from {who}: ignored (a process of the "
                          f"agent's own tree may not stop its watcher)")
            elif found is None:
                found = (info.si_signo, info.si_pid)
        return found or (self.late[0] if self.late else None)

    # --- end --------------------------------------------------------------------------

    def _end(self, status: str, rc: int | None = None, idle: float = 0.0, signum: int | None = None,
             detail: str = "", sender: int | None = None) -> Outcome:
        """Kill the tree unless the agent exited, sweep what is left, finish the log."""
        for sig in STOP_SIGNALS:  # from here a stop is recorded, never raised into the clean-up
            signal.signal(sig, self._late_signal)
        kill, pid = None, self.proc.pid if self.proc else None
        if status != "exited":
            kill = kill_all(self._everything, self.limits.kill_grace, keep=(pid,) if pid else ())
        try:
            rc = self.proc.wait(timeout=max(5.0, self.limits.kill_grace)) if self.proc else None
        except subprocess.TimeoutExpired:
            rc = None
        swept = self._sweep()
        if self.pump is not None:
            self.pump.finish(2.0)
        late = self._late_stop()
        if late is not None and status != "interrupted":
            status, (signum, sender) = "interrupted", late
            detail = f"interrupted by {signal.Signals(signum).name}"
        return Outcome(status, rc, self.clock.mono() - self.start_mono, idle, kill, signum, detail, pid,
                       sender=sender, swept=swept, disk_full=self.disk_full)

    def _everything(self) -> list[ProcId]:
        """Every process of the agent's tree, each with the proof that it is the agent's."""
        found: dict[ProcId, str] = {}
        if self.root is not None:
            found.update(dict.fromkeys(descendants(self.root), "a descendant of the agent"))
        for ident in marked({"GENESIS_RUN_ID": self.run_.run_id}):
            found.setdefault(ident, "carries this run's marker")
        for ident in adopted(self.since):
            found.setdefault(ident, "re-parented to the watcher, its subreaper")
        if self.group is not None:
            for ident in filter(None, map(identify, self.group.pids())):
                found.setdefault(ident, "in the agent's cgroup")
        for ident, why in found.items():
            if ident.pid not in self.found:
                self.found[ident.pid] = (command_line(ident.pid, 80), why)
        return list(found)

    def _sweep(self) -> int:
        """End whatever the agent left behind, however the phase ended; how many were ended."""
        self.found.clear()
        agent = self.proc.pid if self.proc else None
        report = kill_all(self._everything, self.limits.kill_grace, keep=(agent,) if agent else ())
        ended = {pid: self.found[pid] for pid in sorted(self.found) if pid != agent}
        count = report.targets
        if self.group is not None:
            count += self.group.kill(protected_pids())  # what forked past the other finds
            self._drop_group()
        if count:
            listing = "; ".join(f"pid {pid} {cmd!r} ({why})" for pid, (cmd, why) in list(ended.items())[:8])
            more = f" and {len(ended) - 8} more" if len(ended) > 8 else ""
            self.note(f"ended {count} process(es) the agent left behind: {listing}{more}")
        if report.survivors:
            self.note(f"could not end pids {', '.join(map(str, report.survivors))}")
        return count

    def _drop_group(self) -> None:
        if self.group is not None:
            if not self.group.remove():
                self.debug(f"could not remove the agent's cgroup {self.group.path}")
            self.group = None

    def _close(self) -> None:
        """Whatever happened, nothing is left open or running: bounded in time."""
        if self.pump is not None:
            self.pump.finish(0.0)
        if self.group is not None:
            self.group.kill(protected_pids())
            self._drop_group()
        if self.log is not None:
            for msg in self.log.close():
                self.note(msg)


class SignalWait:
    """Linux: sleep in sigtimedwait on the stop signals and SIGCHLD (the agent's exit).

    sigtimedwait returns the sender's pid, so a stop the agent sent can be told from the
    user's. The signals are blocked in this thread (and in the output thread, started after)
    so that they wait for it; no polling in between.
    """

    SIGNALS = frozenset({*STOP_SIGNALS, signal.SIGCHLD})

    def __init__(self) -> None:
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)

    def wait(self, timeout: float):
        return signal.sigtimedwait(self.SIGNALS, max(0.0, timeout))

    def drain(self) -> list:
        """The signals pending now (at most a few: standard signals do not queue)."""
        got = []
        for _ in range(len(self.SIGNALS)):
            info = signal.sigtimedwait(self.SIGNALS, 0)
            if info is None:
                break
            got.append(info)
        return got

    def close(self) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


class ExitWait:
    """Where sigtimedwait does not exist (macOS), sleep on the agent's exit; a stop signal
    interrupts as it always did, through the handler, whoever sent it: the platform does not
    say who did."""

    def __init__(self, proc: subprocess.Popen):
        self.exit = ExitWatch(proc)

    def wait(self, timeout: float) -> None:
        self.exit.wait(timeout)
        return None

    def drain(self) -> list:
        return []

    def close(self) -> None:
        self.exit.close()


# --- the agent's output -----------------------------------------------------------------

MARK_ROOM = 200  # bytes kept free for the line that says what was dropped


class AgentLog:
    """The agent's output on its way to its log file, written by the watcher alone.

    At most `cap` bytes per phase: past the cap the first half is kept, then a line saying
    how many bytes were dropped there, then a rolling tail of the newest bytes (between a
    quarter and a half of the cap; it is compacted in halves, so each byte is copied at most
    twice). Written through an open descriptor: a log file or folder deleted mid-phase (`git
    clean -fdx`, `rm -rf orchestrator`) is recreated with everything written so far, read
    back from the descriptor of the deleted file. Thread-safe: the output thread writes while
    the watcher checks.
    """

    def __init__(self, path: Path, cap: int):
        self.path, self.cap = Path(path), cap
        self.lock = threading.Lock()
        self.received = 0              # bytes of agent output read: a sign of life
        self.dropped = 0               # bytes of it cut out past the cap
        self.lost = 0                  # bytes that could not be written (a full disk)
        self._error = ""               # the first write error, said once
        self._error_said = False
        self._heal_failed = False
        self.fd = self._open()
        self.base = self.size = os.fstat(self.fd).st_size  # what the file held before (kept as it was)
        self.head_end = self.base + cap // 2
        self.tail_start: int | None = None                  # set once something was dropped

    def _open(self) -> int:
        """The log, appended to; a symlink, FIFO or other non-file planted there is replaced."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise
            return self._fresh(None)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return self._fresh(None)
        os.set_blocking(fd, True)
        return fd

    def _fresh(self, old: int | None) -> int:
        """A new file at the path with the first `size` bytes of `old`, renamed into place."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            offset = 0
            while old is not None and offset < self.size:
                chunk = os.pread(old, min(1 << 20, self.size - offset), offset)
                if not chunk:
                    break
                _pwrite_all(fd, chunk, offset)
                offset += len(chunk)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return fd

    def say(self, text: str) -> None:
        """A line of Genesis's own in the log."""
        self.write(f"=== genesis: {text}\n".encode("utf-8", "replace"), own=True)

    def write(self, data: bytes, own: bool = False) -> None:
        with self.lock:
            if not own:
                self.received += len(data)
            if self.size + len(data) <= self.base + self.cap:
                self._append(data)
                return
            if self.tail_start is None and self.size < self.head_end:
                head = data[:self.head_end - self.size]
                self._append(head)
                data = data[len(head):]
            self._compact(data)

    def _append(self, data: bytes) -> None:
        self.size += self._put(self.size, data)

    def _put(self, offset: int, data: bytes) -> int:
        try:
            return _pwrite_all(self.fd, data, offset)
        except OSError as exc:
            self.lost += len(data)
            self._error = self._error or (f"cannot write the agent's log {self.path} ({exc.strerror}); its output "
                                          f"is dropped meanwhile")
            return 0

    def _compact(self, data: bytes) -> None:
        """Past the cap: keep the head, the marker and the newest half of the tail's room."""
        region = self.tail_start if self.tail_start is not None else self.head_end
        room = self.base + self.cap - self.head_end - MARK_ROOM
        keep = room // 2
        total = self.size - region + len(data)
        if len(data) >= keep:
            kept = bytes(data[len(data) - keep:])
        else:
            want = keep - len(data)
            try:
                older = os.pread(self.fd, want, self.size - want)
            except OSError:
                older = b""
            kept = older + bytes(data)
        self.dropped += total - len(kept)
        marker = (f"\n=== genesis: {self.dropped} bytes of output dropped here (log cap "
                  f"{self.cap / (1 << 20):g} MiB) ===\n").encode()
        self.size = self.head_end
        self._append(marker)
        self.tail_start = self.size
        self._append(kept)
        try:
            os.ftruncate(self.fd, self.size)
        except OSError:
            pass

    def heal(self) -> str | None:
        """Put the log back if it was deleted or replaced; what to tell the user, if anything."""
        with self.lock:
            try:
                mine = os.fstat(self.fd)
                try:
                    there = os.lstat(self.path)
                    if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                        return None
                except FileNotFoundError:
                    pass
                fd = self._fresh(self.fd)
            except OSError as exc:
                if self._heal_failed:
                    return None
                self._heal_failed = True
                return (f"the agent's log {self.path} was deleted or replaced and cannot be put back "
                        f"({exc.strerror or exc}); retrying at each check")
            os.close(self.fd)
            self.fd, self._heal_failed = fd, False
            return (f"the agent's log {self.path} was deleted or replaced mid-phase; put back with the "
                    f"{self.size - self.base} bytes written so far")

    def problems(self) -> list[str]:
        """What went wrong since the last call: the log put back, a write error (once)."""
        found = [msg for msg in (self.heal(),) if msg]
        with self.lock:
            if self._error and not self._error_said:
                found.append(self._error)
                self._error_said = True
        return found

    def close(self) -> list[str]:
        found = self.problems()
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        return found


def _pwrite_all(fd: int, data: bytes, offset: int) -> int:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
    return done


def _grow_pipe(fd: int) -> None:
    """Linux: a 1 MiB pipe (the unprivileged maximum) takes bursts with fewer wake-ups."""
    try:
        import fcntl
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ"), 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


class OutputPump:
    """Reads the agent's stdout and stderr from a pipe into its log, in a thread of its own:
    the agent never blocks on a full pipe while the watcher sleeps, checks or kills."""

    CHUNK = 1 << 20

    def __init__(self, fd: int, log: AgentLog):
        self.fd, self.log = fd, log
        self._wake_r, self._wake_w = os.pipe()
        self._stop = threading.Event()
        os.set_blocking(fd, False)
        self.thread = threading.Thread(target=self._run, name="genesis-agent-output", daemon=True)
        # The thread starts with the signals blocked, so they always reach the main thread:
        # its wait is what a signal must interrupt (or, on Linux, what takes them).
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {*STOP_SIGNALS, signal.SIGCHLD})
        try:
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll())
            if self.fd in ready and not self._drain():
                return  # the end of the output: every writer is gone
        self._drain(most=2 * self.log.cap)  # what is left in the pipe, without waiting for more

    def _drain(self, most: int | None = None) -> bool:
        """Read what is there now; False at the end of the output."""
        got = 0
        while most is not None or not self._stop.is_set():
            if most is not None and got >= most:
                return True
            try:
                data = os.read(self.fd, self.CHUNK)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            got += len(data)
            self.log.write(data)
        return True

    def finish(self, wait: float) -> None:
        """Read to the end of the output for at most `wait` seconds, then stop (bounded)."""
        if self.fd < 0:
            return
        self.thread.join(wait)
        if self.thread.is_alive():
            self._stop.set()
            os.write(self._wake_w, b"x")
            self.thread.join(5.0)
        if self.thread.is_alive():
            return  # stuck writing (a hung filesystem): leave its descriptors to it
        for fd in (self.fd, self._wake_r, self._wake_w):
            os.close(fd)
        self.fd = -1


# --- the heartbeat's surroundings ---------------------------------------------------------

KINDS = {stat.S_IFLNK: "a symlink", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
         stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def clear_planted(path: Path) -> str | None:
    """Remove anything but a regular file at the heartbeat path; say what it was.

    The watcher owns the heartbeat directory. What is planted there is never followed: the
    directory is opened without following a symlink, and only its entry is removed (a planted
    directory with everything in it, links not followed), nothing outside it.
    """
    try:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None  # no directory (yet), or not a real one: not the watcher's to clean
    try:
        try:
            st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode):
            return None
        kind = KINDS.get(stat.S_IFMT(st.st_mode), "something other than a file")
        try:
            if stat.S_ISDIR(st.st_mode):
                if sys.version_info >= (3, 11):
                    shutil.rmtree(path.name, dir_fd=dfd)
                else:
                    shutil.rmtree(path)
            else:
                os.unlink(path.name, dir_fd=dfd)
        except OSError as exc:
            return f"{kind} was planted at the heartbeat path and could not be removed ({exc.strerror})"
        return f"{kind} was planted at the heartbeat path and removed"
    finally:
        os.close(dfd)


def disk_full(directory: Path) -> bool:
    """Whether the hook has no room to write a heartbeat in `directory` (space or inodes)."""
    try:
        st = os.statvfs(directory)
    except OSError as exc:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    root = os.geteuid() == 0  # root may use the blocks reserved for it
    free = (st.f_bfree if root else st.f_bavail) * st.f_frsize
    inodes = st.f_ffree if root else st.f_favail
    return free < DISK_ROOM or (st.f_files > 0 and inodes == 0)


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
