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
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import psutil

from genesis import exitcodes
from genesis.clock import Clock, SystemClock, iso
from genesis.health.activity import sample
from genesis.health.classify import Snapshot, classify, fingerprint
from genesis.health.heartbeat import read_heartbeat
from genesis.health.toolwatch import ToolVerdict, ToolWatch
from genesis.health.watchdog import Verdict, Watchdog
from genesis.procs import cgroups
from genesis.procs.proctree import (KillReport, ProcId, adopted, become_subreaper, command_line, descendants,
                                    descends_from, identify, kill_all, marked, protected_pids, reap_zombie_children)
from genesis.watch.agentlog import MIN_LOG_BYTES, AgentLog, OutputPump, Transcriber, grow_pipe
from genesis.watch.cmdline import header_line, misfit, prompt_problem, too_big

if TYPE_CHECKING:
    from genesis.agents.base import Ending, OutputReader

__all__ = ["AgentRun", "Limits", "Outcome", "Interrupted", "supervise", "clear_planted", "disk_full"]

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
    raw_log: Path | None = None    # the raw output, when the transcript (log) is rendered from it
    reader: "OutputReader | None" = None  # reads the output into the transcript and the ending
    on_health: Callable[[dict], None] | None = None  # gets the phase's health snapshot at every check
    on_incident: Callable[..., None] | None = None  # forensics before an abnormal end's kill
    judge: Callable[[], tuple] | None = None  # (wedged or "", severity, calls, in flight, last success)
    phase: str = ""
    iteration: int = 0


@dataclass(frozen=True)
class Limits:
    check_interval: float
    stale_after: float
    max_runtime: float
    kill_grace: float
    count_output: bool = True      # agent output counts as a sign of life (bounded once it has beaten)
    log_max_bytes: int = 50 << 20  # agent output kept per phase: the first half and the newest bytes
    tool_silent: float | None = None  # a tool in flight whose tree is idle this long is stuck (None: off)
    tool_busy_max: float = 3600.0  # a tool in flight whose tree works may be silent this long at most
    enforce: bool = True           # False: warn only; record what would be killed, kill nothing but overtime
    hookless: bool = False         # a CLI without hooks: its processes' work is a sign of life too

    def __post_init__(self) -> None:
        if self.log_max_bytes < MIN_LOG_BYTES:
            raise ValueError(f"the log cap must be at least {MIN_LOG_BYTES} bytes, not {self.log_max_bytes}")


@dataclass(frozen=True)
class Outcome:
    status: str                    # exited | stale | wedged | overtime | api_fatal | interrupted | not_started
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
    ending: "Ending | None" = None # what the agent's output says of its end (limit, API error, result)
    api_retries: int = 0           # API retries of the CLI's own the watcher saw
    would_kill: tuple[str, ...] = ()  # warn-only mode: why the agent would have been killed, each time

    @property
    def exit_code(self) -> int:
        if self.status == "exited":
            return exitcodes.OK if self.returncode == 0 else exitcodes.AGENT_FAILED
        if self.status in ("stale", "wedged"):
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
        self._below: tuple[int | None, ProcId | None] = (None, None)  # the hook's parent, when below the root
        self.since = 0.0                       # the agent's start (a create time): what came later is its
        self.group: cgroups.AgentGroup | None = None
        self.log: AgentLog | None = None
        self.out: Transcriber | None = None
        self.pump: OutputPump | None = None
        self.retry_seen: tuple[int, float] | None = None  # the CLI's latest API retry noted (attempt, seen)
        self.tools = ToolWatch(limits.tool_silent, limits.tool_busy_max, limits.hookless) if limits.tool_silent \
            else None
        self.retries = 0
        self.would: list[str] = []
        self.would_said = -1e18        # monotonic: when a would-be kill was last said
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
        raw = AgentLog(run.raw_log, self.limits.log_max_bytes) if run.raw_log is not None else None
        self.out = Transcriber(self.log, raw, run.reader)
        unfit = misfit(tuple(run.argv), run.prompt, run.env) if run.prompt else None
        on_stdin = unfit is not None and run.prompt_stdin
        argv = tuple(run.argv) + ((run.prompt,) if run.prompt and unfit is None else ())
        stamp = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
        self.log.say(f"{stamp} starting: {header_line(run.argv, run.prompt, on_stdin)}")
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
        grow_pipe(out_w)
        # Linux: the stop signals are blocked before the agent starts, so that one its first
        # command sends is queued for sigtimedwait (which names the sender), not raised at
        # once; the agent itself starts with them unblocked.
        if hasattr(signal, "sigtimedwait"):
            self.waiter = SignalWait()
        group = self.group

        def in_child() -> None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SignalWait.SIGNALS)
            if group is not None:
                group.join()

        try:
            self.proc = subprocess.Popen(argv, cwd=run.cwd, env=dict(run.env), stdin=stdin or subprocess.DEVNULL,
                                         stdout=out_w, stderr=out_w, start_new_session=True, preexec_fn=in_child)
        except OSError as exc:
            if exc.errno == errno.E2BIG:
                return too_big(argv, run.env)
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
        if self.waiter is None:
            self.waiter = ExitWait(self.proc)
        self.pump = OutputPump(out_r, self.out, {*STOP_SIGNALS, signal.SIGCHLD})
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
        for log in self.out.logs:
            for msg in log.problems():
                self.note(msg)
        if run.on_check is not None:
            try:
                run.on_check()
            except Exception as exc:  # a repair that fails must not end the watch
                self.note(f"a check of Genesis's own files failed: {exc}")
        hopeless = run.reader.hopeless if run.reader is not None else None
        if hopeless is not None:
            return {"status": "api_fatal", "detail": hopeless.message}
        beat, _why = read_heartbeat(run.heartbeat)
        ours = beat is not None and beat.run_id in ("", run.run_id)
        received = self.out.received
        grew, self.seen_output = received > self.seen_output, received
        now = clock.mono()
        stuck, severity, calls, flying, last_ok = None, "", 0, "", None
        if run.judge is not None:
            try:
                wedged, severity, calls, flying, last_ok = run.judge()
            except Exception as exc:  # a judge that fails must not end the watch
                wedged = ""
                self.debug(f"the tool calls could not be judged: {exc}")
            if wedged:
                stuck = {"status": "wedged", "idle": 0.0, "detail": wedged}
        api_until = self._api_wait()
        busy_until = api_until
        tool = ToolVerdict()
        if self.tools is not None:
            tool = self.tools.observe(beat if ours else None, now, grew, sample(self._tool_root(beat if ours else None)))
            if tool.note:
                self.note(tool.note + (f"; running {flying}" if flying else ""))
            if tool.busy_until is not None:
                busy_until = max(busy_until or tool.busy_until, tool.busy_until)
        verdict = dog.observe(beat.epoch if ours else None, now, clock.wall(), grew and lim.count_output,
                              hold=full, busy_until=busy_until)
        for msg in verdict.notes:
            self.note(msg)
        if stuck is None and tool.stuck:
            stuck = {"status": "stale", "idle": now - self.tools.last_active,
                     "detail": "; ".join([tool.stuck, *dict.fromkeys(self.tampered)])}
        elif stuck is None and verdict.stale:
            stuck = {"status": "stale", "idle": verdict.idle, "detail": self._stale_detail(verdict, dog, now)}
        if stuck is not None and stuck["status"] == "stale" and flying:
            stuck["detail"] += f"; the tool in flight: {flying}"
        self._health(beat if ours else None, verdict.idle, tool, stuck, severity, calls, flying, last_ok,
                     api_busy=api_until is not None)
        if stuck is not None:
            if lim.enforce:
                return stuck
            self._would_kill(stuck["detail"], now)
        if now >= deadline:
            return {"status": "overtime", "idle": verdict.idle,
                    "detail": f"ran for {now - self.start_mono:.0f}s (cap {lim.max_runtime:g}s)"}
        return None

    def _tool_root(self, beat) -> "ProcId | None":
        """Whose descendants the tools are: the process that ran the hook, when it is below the
        agent. A CLI started through a launcher (npm's node wrapper of Codex's binary, Gemini
        CLI relaunching itself) would otherwise count its own work as its tools'."""
        pid = beat.pid if beat is not None else None
        if self.root is None or not pid or pid == self.root.pid:
            return self.root
        if self._below[0] != pid:
            below = identify(pid)
            self._below = (pid, below if below is not None and descends_from(pid, self.root.pid) else None)
        return self._below[1] if self._below[1] is not None and self._below[1].process() is not None else self.root

    def _would_kill(self, detail: str, now: float) -> None:
        """Warn-only mode: record what would have been killed; say it at most once a window."""
        self.would = (self.would + [detail])[-20:]
        if now - self.would_said >= self.limits.stale_after:
            self.would_said = now
            self.note(f"would kill as stuck (GENESIS_HEALTH_ENFORCE=false, so it runs on): {detail}")

    def _health(self, beat, idle: float, tool: "ToolVerdict", stuck: dict | None, severity: str,
                calls: int, flying: str, last_ok: float | None, api_busy: bool) -> None:
        """The phase's health snapshot, for the loop to keep and to record changes of."""
        run = self.run_
        if run.on_health is None:
            return
        busy = tool.busy_until is not None or api_busy
        # The window closest to running out: the general one, or the tool-silent one inside a tool.
        silent, window = idle, self.limits.stale_after
        if tool.tool and self.tools is not None:
            tool_silent = self.clock.mono() - self.tools.last_active
            if tool_silent / self.tools.silent_after > idle / window:
                silent, window = tool_silent, self.tools.silent_after
        wedged = stuck is not None and stuck["status"] == "wedged"
        cls, score = classify(silent, window, busy, stuck is not None and not wedged, wedged)
        age = f", {max(0.0, self.clock.wall() - beat.epoch):.0f}s ago" if beat is not None else ""
        last_event = f"{beat.event or 'beat'} {beat.tool or '-'}{age}" if beat is not None else "none yet"
        snap = Snapshot(run.run_id, run.phase, run.iteration, iso(self.clock.wall()), cls, score, round(idle, 1),
                        last_event, severity,
                        round(self.clock.wall() - last_ok, 1) if last_ok is not None else None, flying,
                        run.reader.turns if run.reader is not None else None,
                        tool.tool or (beat.tool if beat is not None else ""), calls,
                        fingerprint(beat.epoch if beat is not None else 0, self.out.received, calls),
                        stuck["detail"] if stuck else (tool.note if busy else ""))
        try:
            run.on_health(snap.to_json())
        except Exception as exc:  # keeping the record must not end the watch
            self.debug(f"the health snapshot could not be kept: {exc}")

    def _api_wait(self) -> float | None:
        """Until when (monotonic) the CLI said it waits inside its own API retries; None if it is
        not retrying. Its api_retry event names the delay before its next try: the agent is
        waiting on the API, not stuck, until that delay is over; after it, silence counts again."""
        retry = self.run_.reader.retry if self.run_.reader is not None else None
        if retry is None:
            return None
        if self.retry_seen != (retry.attempt, retry.seen):
            self.retry_seen = (retry.attempt, retry.seen)
            self.retries += 1
            status = f"{retry.status} " if retry.status else ""
            self.note(f"the model API is failing ({status}{retry.error}); the agent retries by itself "
                      f"(attempt {retry.attempt} of {retry.max_retries}, next in {retry.delay:.0f}s): waiting on "
                      f"the API, not stuck")
        return retry.seen + retry.delay

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
        if status in ("stale", "overtime", "wedged") and self.run_.on_incident is not None:
            try:  # what the tree was doing, before it is gone
                self.run_.on_incident(self.root, self._everything(), status, detail)
            except Exception as exc:
                self.note(f"the incident record could not be written: {exc}")
        if status != "exited":
            kill = kill_all(self._everything, self.limits.kill_grace, keep=(pid,) if pid else ())
        try:
            rc = self.proc.wait(timeout=max(5.0, self.limits.kill_grace)) if self.proc else None
        except subprocess.TimeoutExpired:
            rc = None
        swept = self._sweep()
        if self.pump is not None:
            self.pump.finish(2.0)
        ending = self._ending(status, rc if status == "exited" else None)
        late = self._late_stop()
        if late is not None and status != "interrupted":
            status, (signum, sender) = "interrupted", late
            detail = f"interrupted by {signal.Signals(signum).name}"
        return Outcome(status, rc, self.clock.mono() - self.start_mono, idle, kill, signum, detail, pid,
                       sender=sender, swept=swept, disk_full=self.disk_full, ending=ending,
                       api_retries=self.retries, would_kill=tuple(self.would[-20:]))

    def _ending(self, status: str, rc: int | None) -> "Ending | None":
        """What the output says of the run's end; a reader's failure is noted, never raised."""
        if self.out is None or self.out.reader is None:
            return None
        if status == "api_fatal" and self.run_.reader is not None and self.run_.reader.hopeless is not None:
            from genesis.agents.base import Ending, Limit

            hopeless = self.run_.reader.hopeless
            return Ending(limit=hopeless) if isinstance(hopeless, Limit) else Ending(api_error=hopeless)
        try:
            self.out.flush()
            return self.out.reader.ending(rc) if self.out.reader is not None else None
        except Exception as exc:
            self.note(f"the agent's output could not be read for how it ended ({exc!r})")
            return None

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
        for log in self.out.logs if self.out is not None else ():
            for msg in log.close():
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
