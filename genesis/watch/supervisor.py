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
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

import psutil

from genesis import exitcodes
from genesis.agents.base import Ending, Limit, OutputReader
from genesis.clock import Clock, SystemClock
from genesis.health.activity import Sample, sample
from genesis.health.classify import Snapshot
from genesis.health.beatorigin import Origins
from genesis.health.heartbeat import Heartbeat, read_heartbeat
from genesis.health.toollog import in_flight, read_head, read_tail, tool_log_path
from genesis.procs import cgroups
from genesis.procs import caps
from genesis.procs.memory import cap, raise_oom_score
from genesis.procs.nspid import boxed, ns_pids, outer_pid
from genesis.procs.proctree import (KillReport, ProcId, adopted, become_subreaper, command_line, descendants,
                                    descends_from, identify, kill_all, marked, protected_pids, reap_zombie_children)
from genesis.sandbox.box import Box
from genesis.watch.agentlog import MIN_LOG_BYTES, AgentLog, OutputPump, Transcriber, grow_pipe
from genesis.watch.cmdline import header_line, misfit, prompt_problem, too_big
from genesis.watch.companion import look
from genesis.watch.decide import (WAKEUP_MARGIN, End, Judgement, Observation, Rules, Verdict, begin, decide,
                                   this_runs)
from genesis.watch.heartdir import clear_planted, disk_full
from genesis.watch.waits import STOP_SIGNALS, ExitWait, SignalWait, deafen, honoured

__all__ = ["AgentRun", "Limits", "Outcome", "Interrupted", "supervise"]

SI_KERNEL = 0x80           # si_code of a signal the kernel sent (a terminal's Ctrl-C, a hangup)
SEEK_AGENT = 5.0          # seconds a box has to start its command, polled for every SEEK_POLL
SEEK_POLL = 0.05
KILLS = re.compile(r"(^|[\s;&|(/])(kill|pkill|killall)(\s|$)")  # a command that sends signals


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
    reader: OutputReader | None = None  # reads the output into the transcript and the ending
    on_health: Callable[[Snapshot], None] | None = None  # gets the phase's health snapshot at every check
    on_incident: Callable[..., None] | None = None  # forensics before an abnormal end's kill
    judge: Callable[[], Judgement] | None = None  # the phase's tool calls judged, at every check
    phase: str = ""
    iteration: int = 0
    box: Box | None = None         # the box the agent runs in (None: none)
    memory_max: int | None = None  # memory.max of the agent's cgroup, where it has one
    pids_max: int | None = None    # pids.max of the agent's cgroup (v2, or v1's pids hierarchy)
    loop: ProcId | None = None     # the bash loop: gone at a check, the phase ends with it


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
    first_event_after: float = 0.0  # nothing on its output and no heartbeat this long from the start: hung (0: off)
    result_exit_after: float = 0.0  # its final result read and no work of its own left this long: done (0: off)
    wakeup_margin: float = WAKEUP_MARGIN  # a wake-up it scheduled itself is waited for until due plus this

    def __post_init__(self) -> None:
        if self.log_max_bytes < MIN_LOG_BYTES:
            raise ValueError(f"the log cap must be at least {MIN_LOG_BYTES} bytes, not {self.log_max_bytes}")


@dataclass(frozen=True)
class Outcome:
    status: str                    # exited | done | stuck | wedged | overtime | api_fatal | interrupted | not_started
    returncode: int | None
    duration: float
    idle: float = 0.0
    kill: KillReport | None = None
    signum: int | None = None
    detail: str = ""
    pid: int | None = None         # the agent's pid (in a box: the CLI the box runs, not the box)
    box_pid: int | None = None     # in a box of its own pids: the agent's pid there, the one it tells
    sender: int | None = None      # interrupted: who sent the signal (0: the kernel, e.g. a terminal)
    swept: int = 0                 # processes the end-of-phase sweep ended (a note says which and why)
    disk_full: bool = False        # the heartbeat's filesystem was full at a check of this phase
    ending: Ending | None = None   # what the agent's output says of its end (limit, API error, result)
    api_retries: int = 0           # API retries of the CLI's own the watcher saw
    would_kill: tuple[str, ...] = ()  # warn-only mode: why the agent would have been killed, each time
    loop_lost: bool = False        # the loop was gone (killed) at a check: the phase ended with it
    window: str | None = None      # the window that fired: stale, tool_silent, tool_busy, runtime (None: none)
    capped: str = ""               # a resource cap bit the agent's tree (procs/caps.py), in words

    @property
    def exit_code(self) -> int:
        if self.status == "exited":
            return exitcodes.OK if self.returncode == 0 else exitcodes.AGENT_FAILED
        if self.status == "done":  # its result was written; it did not exit by itself
            return exitcodes.OK
        if self.status in ("stuck", "wedged"):
            return exitcodes.AGENT_STALE
        if self.status == "overtime":
            return exitcodes.AGENT_OVERTIME
        if self.status == "interrupted":
            return {signal.SIGINT: exitcodes.INTERRUPTED_INT, signal.SIGHUP: exitcodes.INTERRUPTED_HUP}.get(
                self.signum, exitcodes.INTERRUPTED_TERM)
        return exitcodes.AGENT_FAILED


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_once(signum: int, _frame: object) -> None:
    # The first signal interrupts the wait; later ones must not abort the cleanup it starts.
    deafen()
    raise Interrupted(signum)


def _session_leader() -> int | None:
    try:
        return os.getsid(0)
    except OSError:
        return None


def supervise(run: AgentRun, limits: Limits, clock: Clock | None = None,
              note: Callable[[str], None] = lambda _msg: None,
              debug: Callable[[str], None] = lambda _msg: None) -> Outcome:
    """Run the agent to its end, or kill its whole tree when stuck, wedged, over time or interrupted;
    either way end what it left behind. `note` gets what the user should hear, `debug` the rest.
    Interrupted, it returns with the stop signals ignored: the caller records the end, then exits."""
    return _Watcher(run, limits, clock or SystemClock(), note, debug).run()


class _AgentProcs:
    """The agent's processes as the judge of the beats' origin sees them (genesis/health/beatorigin.py):
    a pid of the hook's ancestors, in the box's PID namespace where there is one, as the watcher's."""

    def __init__(self, watcher: "_Watcher"):
        self.w = watcher

    def resolve(self, pid: int) -> ProcId | None:
        root, box = self.w.root, self.w.run_.box
        if root is None:
            return None
        if box is not None and box.pid_namespace:
            pid = self.w._outer(pid)
            if pid is None:
                return None
        if pid != root.pid and not descends_from(pid, root.pid):
            return None
        return identify(pid)

    def alive(self, ident: ProcId) -> bool:
        return ident.process() is not None

    def above(self, upper: ProcId, lower: ProcId) -> bool:
        return upper.process() is not None and descends_from(lower.pid, upper.pid)


class _Watcher:
    """One phase's watch: start, check every interval, end. Single-use."""

    def __init__(self, run: AgentRun, limits: Limits, clock: Clock, note: Callable[[str], None],
                 debug: Callable[[str], None]):
        self.run_, self.limits, self.clock, self.note, self.debug = run, limits, clock, note, debug
        self.proc: subprocess.Popen[bytes] | None = None
        self.root: ProcId | None = None
        self._below: tuple[int | None, ProcId | None] = (None, None)  # the hook's parent, when below the root
        self._outer_pids: dict[int, ProcId] = {}  # a pid in the box's namespace: the watcher's
        self.agent: tuple[ProcId, int] | None = None  # in a box of its own pids: the CLI it runs, its pid there
        self.since = 0.0                       # the agent's start (a create time): what came later is its
        self.group: cgroups.AgentGroup | None = None
        self.caps: caps.Caps | None = None  # cgroup v1's pids and memory groups, without a v2 group
        self.log: AgentLog | None = None
        self.out: Transcriber | None = None
        self.pump: OutputPump | None = None
        self.waiter: SignalWait | ExitWait | None = None
        self.found: dict[int, tuple[str, str]] = {}   # pid: (command line, why it is the agent's)
        self.seen: set[ProcId] = set()         # the agent's tree as every check saw it: proof of descent
        self.foreign: dict[int, str] = {}      # pid: command line, in the agent's cgroup without proof
        self.late: list[tuple[int, int | None]] = []  # stop signals that came during the clean-up
        self.stops = honoured()                # under nohup, a hangup is not a stop
        self.loop_frozen = False               # the loop was stopped (state T) at the last check
        self.origins: Origins | None = None    # who runs the hook: the CLI, or a loop below a tool
        self.trusted: Heartbeat | None = None  # the newest heartbeat that counted as a sign of life
        self.forged: set[int] = set()          # runners of beats not counted, said once each
        self.loop_lost = False                 # the loop was gone at a check

    def run(self) -> Outcome:
        become_subreaper()
        self.run_.log.parent.mkdir(parents=True, exist_ok=True)
        self.start_mono, self.start_wall = self.clock.mono(), self.clock.wall()
        self.own = 0.0  # seconds the latest check spent in its own work (see _watch)
        self.since = time.time()
        run, lim = self.run_, self.limits
        self.rules = Rules(run.run_id, stale_after=lim.stale_after, interval=lim.check_interval,
                           started=self.start_mono, started_wall=self.start_wall, max_runtime=lim.max_runtime,
                           count_output=lim.count_output, tool_silent=lim.tool_silent, tool_busy_max=lim.tool_busy_max,
                           hookless=lim.hookless, enforce=lim.enforce, heartbeat_dir=str(run.heartbeat.parent),
                           phase=run.phase, iteration=run.iteration, first_event_after=lim.first_event_after,
                           result_exit_after=lim.result_exit_after, wakeup_margin=lim.wakeup_margin)
        self.state = begin(self.rules)  # what the decision carries from one check to the next
        old = {s: signal.signal(s, _raise_once) for s in self.stops}
        outcome: Outcome | None = None
        try:
            outcome = self._run()
            return outcome
        finally:
            self._close()
            # Interrupted, the signals right behind the first (the loop forwards what it got, a
            # closed terminal sends more) must not cut short the recording of the phase's end.
            stopped = outcome is not None and outcome.status == "interrupted"
            if stopped:
                deafen()
            else:
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
            return self._end(self._watch())
        except Interrupted as exc:  # before the signals were blocked, or where no platform names a sender
            return self._end(End("interrupted", signum=exc.signum, detail=f"interrupted by {exc}"))

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
        # Each cap in the v2 group where it has the controller; else in cgroup v1's hierarchy.
        v2 = self.group.path if self.group is not None else None
        memory_v2 = bool(run.memory_max) and v2 is not None and (v2 / "memory.max").exists()
        pids_v2 = bool(run.pids_max) and v2 is not None and (v2 / "pids.max").exists()
        for capped in (cap(v2, run.memory_max) if memory_v2 else "",
                       caps.cap_pids(v2, run.pids_max) if pids_v2 else ""):
            if capped:
                self.note(capped)
        self._cap_v1(None if pids_v2 else run.pids_max, None if memory_v2 else run.memory_max)
        out_r, out_w = os.pipe()
        grow_pipe(out_w)
        # Linux: the stop signals are blocked before the agent starts, so that one its first
        # command sends is queued for sigtimedwait (which names the sender), not raised at
        # once; the agent itself starts with them unblocked.
        if hasattr(signal, "sigtimedwait"):
            self.waiter = SignalWait()
        group, box, v1 = self.group, run.box, self.caps
        if box is not None:
            argv = box.wrap(argv)

        def in_child() -> None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SignalWait.SIGNALS)
            if group is not None:
                group.join()
            if v1 is not None:
                v1.join()
            raise_oom_score()  # the OOM killer's first choice: the agent's tree, never its watcher
            if box is not None:
                box.in_child()

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
        except subprocess.SubprocessError as exc:  # the box refused in the child: never run unboxed
            return f"the {box.kind if box else ''} box could not be set up ({exc}); set GENESIS_SANDBOX=off to run " \
                   f"without it"
        finally:
            os.close(out_w)
            if stdin is not None:
                stdin.close()
            if self.proc is None:
                os.close(out_r)
                self._drop_group()
                self._drop_caps()
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

    def _watch(self) -> End:
        """Sleep until a check is due, a signal comes or the agent exits; how the watch ended."""
        lim, clock = self.limits, self.clock
        deadline = self.rules.deadline
        next_check = self.start_mono + lim.check_interval
        while True:
            rc = self.proc.poll()
            if rc is not None:
                return End("exited", rc=rc)
            now = clock.mono()
            due = min(next_check, deadline)
            if now < due:
                got = self.waiter.wait(min(due - now, SEEK_POLL) if self._seek_agent(now) else due - now)
                if got is not None and got.si_signo in self.stops:
                    stop = self._stop_signal(got)
                    if stop is not None:
                        return stop
                reap_zombie_children(keep=self.proc.pid)
                continue
            next_check = now + lim.check_interval
            gone = self._loop_gone()
            if gone is not None:
                return gone
            self.state, verdict = decide(self.rules, self.state, replace(self._observe(), own=self.own))
            self._act(verdict)
            if verdict.end is not None:
                return verdict.end
            # The check's own work (its writes may wait on a ledger another program holds) is
            # the watcher's time, not a pause of it: the next check does not count it as one.
            self.own = max(0.0, clock.mono() - now)

    def _seek_agent(self, now: float, last: bool = False) -> bool:
        """In a box of its own pids, the agent is the command the box starts, found in its first
        seconds (a quick agent is gone by the first check), and once more at the end (`last`);
        whether it is still sought. Past its seconds no scan is made on every wake."""
        box = self.run_.box
        if self.agent is not None or self.root is None or box is None or not box.pid_namespace:
            return False
        if not last and now - self.start_mono >= SEEK_AGENT:
            return False
        found = boxed(self.root)
        told = ns_pids(found.pid) if found is not None else ()
        if len(told) > 1:
            self.agent = (found, told[-1])
        return self.agent is None and now - self.start_mono < SEEK_AGENT

    def _loop_gone(self) -> End | None:
        """The loop that started this phase, looked at once a check: gone, the phase ends with it
        (nobody is left to act on its end); frozen, said once (the companion records it)."""
        loop = self.run_.loop
        if loop is None:
            return None
        sight = look(loop)
        if not sight.alive:
            self.loop_lost = True
            return End("interrupted", detail=f"the loop (pid {loop.pid}) is gone: killed (SIGKILL?) by someone; "
                                             f"the phase ends with it")
        if sight.stopped and not self.loop_frozen:
            self.note(f"the loop (pid {loop.pid}) is frozen (stopped, SIGSTOP?): this phase goes on, nothing "
                      f"follows it until the loop is continued")
        self.loop_frozen = sight.stopped
        return None

    def _observe(self) -> Observation:
        """Everything the check decides on, read after the upkeep due at every check."""
        run = self.run_
        reap_zombie_children(keep=self.proc.pid)
        if self.group is not None and self.root is not None:
            # What a move into its cgroup later cannot forge; only what is still in it is kept.
            inside = set(self.group.pids())
            self.seen = {i for i in self.seen if i.pid in inside} | set(descendants(self.root))
        planted = clear_planted(run.heartbeat) or ""
        full = disk_full(run.heartbeat.parent)
        upkeep = [msg for log in self.out.logs for msg in log.problems()]
        if run.on_check is not None:
            try:
                run.on_check()
            except Exception as exc:  # a repair that fails must not end the watch
                upkeep.append(f"a check of Genesis's own files failed: {exc}")
        reader = run.reader
        hopeless = reader.hopeless.message if reader is not None and reader.hopeless is not None else None
        beat = self._counted(read_heartbeat(run.heartbeat)[0])
        received = self.out.received
        now, wall = self.clock.mono(), self.clock.wall()
        judged = self._judge()
        activity = sample(self._tool_root(this_runs(beat, run.run_id))) if self.rules.tool_silent else Sample()
        return Observation(now, wall, beat, received, activity, judged,
                           retry=reader.retry if reader is not None else None, hopeless=hopeless,
                           turns=reader.turns if reader is not None else None, disk_full=full, planted=planted,
                           upkeep=tuple(upkeep), result_at=reader.result_at if reader is not None else None,
                           background=reader.background if reader is not None else (),
                           wakeup_at=reader.wakeup_at if reader is not None else None)

    def _counted(self, beat: Heartbeat | None) -> Heartbeat | None:
        """The newest heartbeat that counts as a sign of life: one the CLI's own hook call wrote.
        A beat a loop below a tool wrote is not one; the last that counted stands instead."""
        mine = this_runs(beat, self.run_.run_id)
        if mine is None or self.root is None:
            return beat
        procs = _AgentProcs(self)
        if self.origins is None:
            self.origins = Origins(self.root)
        if self.origins.cli is None:
            try:
                first = next((c for c in read_head(tool_log_path(self.run_.heartbeat)) if c.pp), None)
            except OSError:  # unreadable: judged by the beats alone
                first = None
            if first is not None:
                self.origins.pin(first.pp, first.t, procs)
        verdict = self.origins.judge(mine, procs)
        if verdict.counts:
            self.trusted = beat
            return beat
        key = verdict.runner.pid if verdict.runner is not None else 0
        if key not in self.forged:
            self.forged.add(key)
            who = f" ({command_line(key, 80)})" if key else ""
            self.note(f"heartbeats not counted as signs of life: {verdict.why}{who}")
        return self.trusted

    def _judge(self) -> Judgement:
        """The judge's findings on the tool calls; none when there is no judge or it fails."""
        if self.run_.judge is None:
            return Judgement()
        try:
            return self.run_.judge()
        except Exception as exc:  # a judge that fails must not end the watch
            self.debug(f"the tool calls could not be judged: {exc}")
            return Judgement()

    def _act(self, verdict: Verdict) -> None:
        """Say what the check decided and keep the phase's health; ending is the caller's."""
        for msg in verdict.notes:
            self.note(msg)
        if verdict.health is not None and self.run_.on_health is not None:
            try:
                self.run_.on_health(verdict.health)
            except Exception as exc:  # keeping the record must not end the watch
                self.debug(f"the health snapshot could not be kept: {exc}")
        if verdict.warning:
            self.note(verdict.warning)

    def _tool_root(self, beat: Heartbeat | None) -> ProcId | None:
        """Whose descendants the tools are: the process that ran the hook, when it is below the
        agent. A CLI started through a launcher (npm's node wrapper of Codex's binary, Gemini
        CLI relaunching itself) would otherwise count its own work as its tools'."""
        pid = beat.pid if beat is not None else None
        if self.root is None or not pid or pid == self.root.pid:
            return self.root
        if self.run_.box is not None and self.run_.box.pid_namespace:
            pid = self._outer(pid)
            if pid is None:
                return self.root
        if self._below[0] != pid:
            below = identify(pid)
            self._below = (pid, below if below is not None and descends_from(pid, self.root.pid) else None)
        return self._below[1] if self._below[1] is not None and self._below[1].process() is not None else self.root

    def _outer(self, inner: int) -> int | None:
        """The hook's pid in the box's PID namespace as the watcher's pid; remembered while it lives."""
        known = self._outer_pids.get(inner)
        if known is not None and known.process() is not None:
            return known.pid
        outer = outer_pid(inner, self.root)
        ident = identify(outer) if outer is not None else None
        if ident is not None:
            self._outer_pids[inner] = ident
        return outer

    # --- signals ----------------------------------------------------------------------
    # Linux blocks the stop signals and waits for them with sigtimedwait, which names the
    # sender. A stop sent by the agent's own tree (`pkill -f python` in a tool call) is
    # ignored; any other sender (the loop, the user's shell, the terminal) stops the phase.
    # SIGKILL cannot be caught: the loop counts a watcher that died as a failed phase.

    def _stop_signal(self, info) -> End | None:
        name = signal.Signals(info.si_signo).name
        ours, who = self._sender(info)
        if ours:
            self.note(f"signal {name} from {who}: ignored (a process of the agent's own tree may not stop its "
                      f"watcher)")
            return None
        behind = self._agent_behind(info.si_pid)
        detail = f"the agent sent {name} to the loop: {behind}" if behind else f"interrupted by {name}"
        return End("interrupted", signum=info.si_signo, sender=info.si_pid, detail=detail)

    def _agent_behind(self, sender: int) -> str:
        """Why a stop the loop passed on looks like the agent's doing ("" when nothing says so).

        The loop is bash, which cannot tell who signalled it: it passes every stop on to this
        watcher as its own. What the watcher can see at that moment: the agent's tool call in
        flight, or a process of its tree, that kills."""
        loop = self.run_.loop
        if loop is None or sender != loop.pid:
            return ""
        try:
            flying = in_flight(read_tail(tool_log_path(self.run_.heartbeat), most=50))
        except OSError:
            flying = None
        if flying is not None and KILLS.search(flying.cmd):
            return f"its tool call `{flying.cmd[:100]}` was running when the loop got it"
        for ident in descendants(self.root) if self.root is not None else ():
            line = command_line(ident.pid, 100)
            if KILLS.search(line):
                return f"its process {ident.pid} `{line}` was running when the loop got it"
        return ""

    def _sender(self, info) -> tuple[bool, str]:
        """(whether the sender belongs to the agent's tree, who it is)."""
        pid = info.si_pid
        if pid <= 0 or info.si_code == SI_KERNEL:
            return False, "the kernel (a terminal, or the session closing)"
        if pid == os.getpid():
            return False, f"pid {pid} (the watcher itself)"
        # A short-lived sender (`kill`, `pkill`) may be gone before, or while, it is looked at.
        # The loop and the user's shell outlive their signal and the terminal is the kernel,
        # so a sender nobody can examine any more is taken as the agent's, unless the box
        # keeps the agent from signalling anything outside it.
        gone = f"pid {pid} (exited before it could be identified)"
        if pid == _session_leader():
            # The shell that held the terminal passing on its hangup: the agent runs in a
            # session of its own, and a session leader's pid is not reused while it leads.
            return False, f"pid {pid} (the session's leader: the terminal's shell)"
        boxed = self.run_.box is not None and self.run_.box.signals_scoped
        ident = identify(pid)
        if ident is None:
            return not boxed, gone
        who = f"pid {pid} ({command_line(pid, 120)})"
        if descends_from(pid, os.getpid()):
            return True, who
        if self.group is not None and self.group.holds(pid) and self._descent(ident):
            return True, who  # in its cgroup and proven its: moved in from outside is not enough
        try:
            env = psutil.Process(pid).environ()
            if all(env.get(k) == v for k, v in self._markers().items()):
                return True, who
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
        if ident.process() is None:
            return not boxed, gone
        return False, who

    def _late_signal(self, signum: int, _frame: object) -> None:
        self.late.append((signum, None))

    def _late_stop(self) -> tuple[int, int | None] | None:
        """A stop signal that came during the clean-up, from outside the agent's tree."""
        found = None
        for info in self.waiter.drain() if self.waiter else []:
            if info.si_signo not in self.stops:
                continue
            ours, who = self._sender(info)
            if ours:
                self.note(f"signal {signal.Signals(info.si_signo).name} from {who}: ignored (a process of the "
                          f"agent's own tree may not stop its watcher)")
            elif found is None:
                found = (info.si_signo, info.si_pid)
        return found or (self.late[0] if self.late else None)

    # --- end --------------------------------------------------------------------------

    def _end(self, end: End) -> Outcome:
        """Kill the tree unless the agent exited, sweep what is left, finish the log."""
        status, detail, signum, sender, window = end.status, end.detail, end.signum, end.sender, end.window
        for sig in self.stops:  # from here a stop is recorded, never raised into the clean-up
            signal.signal(sig, self._late_signal)
        kill, pid, box_pid = None, self.proc.pid if self.proc else None, None
        self._seek_agent(self.clock.mono(), last=True)
        if status in ("stuck", "overtime", "wedged", "done") and self.run_.on_incident is not None:
            try:  # what the tree was doing, before it is gone
                self.run_.on_incident(self.root, self._everything(), status, detail, window=end.window)
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
        ending = self._ending(status, rc if status == "exited" else 0 if status == "done" else None)
        late = self._late_stop()
        if late is not None and status != "interrupted":
            status, (signum, sender), window = "interrupted", late, None
            detail = f"interrupted by {signal.Signals(signum).name}"
        if self.agent is not None:  # the CLI in its box: the pid it tells is its box's
            pid, box_pid = self.agent[0].pid, self.agent[1]
        return Outcome(status, rc, self.clock.mono() - self.start_mono, end.idle, kill, signum, detail, pid,
                       box_pid, sender=sender, swept=swept, disk_full=self.state.disk_full, ending=ending,
                       api_retries=self.state.api_retries, would_kill=self.state.would_kill,
                       loop_lost=self.loop_lost, window=window, capped=self._capped())

    def _ending(self, status: str, rc: int | None) -> Ending | None:
        """What the output says of the run's end; a reader's failure is noted, never raised."""
        if self.out is None or self.out.reader is None:
            return None
        if status == "api_fatal" and self.run_.reader is not None and self.run_.reader.hopeless is not None:
            hopeless = self.run_.reader.hopeless
            return Ending(limit=hopeless) if isinstance(hopeless, Limit) else Ending(api_error=hopeless)
        try:
            self.out.flush()
            return self.out.reader.ending(rc) if self.out.reader is not None else None
        except Exception as exc:
            self.note(f"the agent's output could not be read for how it ended ({exc!r})")
            return None

    def _markers(self) -> dict[str, str]:
        """This run's markers: its run id, and its project where the agent carries one (a run id
        alone could be another project's, e.g. two loops started in the same second)."""
        found = {"GENESIS_RUN_ID": self.run_.run_id}
        if self.run_.env.get("GENESIS_PROJECT_DIR"):
            found["GENESIS_PROJECT_DIR"] = self.run_.env["GENESIS_PROJECT_DIR"]
        return found

    def _everything(self) -> list[ProcId]:
        """Every process of the agent's tree, each with the proof that it is the agent's."""
        found: dict[ProcId, str] = {}
        if self.root is not None:
            found.update(dict.fromkeys(descendants(self.root), "a descendant of the agent"))
        for ident in marked(self._markers(), every=True):
            found.setdefault(ident, "carries this run's marker")
        for ident in adopted(self.since):
            found.setdefault(ident, "re-parented to the watcher, its subreaper")
        if self.group is not None:
            # The cgroup proves nothing alone: whoever can write its cgroup.procs (the agent
            # itself) can move any process of the user's in. A member counts only with a proof.
            for ident in filter(None, map(identify, self.group.pids())):
                if ident in found:
                    continue
                why = self._descent(ident)
                if why:
                    found[ident] = why
                elif ident.pid not in self.foreign:
                    self.foreign[ident.pid] = command_line(ident.pid, 80)
        for ident, why in found.items():
            if ident.pid not in self.found:
                self.found[ident.pid] = (command_line(ident.pid, 80), why)
        return list(found)

    def _descent(self, ident: ProcId) -> str:
        """Why a process in the agent's cgroup is the agent's ("" without proof): one of its
        tree a check saw, or started after it with a parent chain that leads to it."""
        if ident in self.seen:
            return "in the agent's cgroup, seen in its tree"
        if ident.create_time >= self.since and self.root is not None and descends_from(ident.pid, self.root.pid):
            return "in the agent's cgroup, a descendant of the agent"
        return ""

    def _kill_group(self) -> int:
        """End the agent's cgroup, sparing what was moved into it from outside: those are
        moved out first (left alone); how many processes were in it."""
        self._everything()  # who is in it without proof, now
        inside = set(self.group.pids())
        outsiders = [pid for pid in self.foreign if pid in inside]
        stuck = self.group.evict(outsiders)
        return self.group.kill(protected_pids() | set(stuck)) - len(stuck)

    def _sweep(self) -> int:
        """End whatever the agent left behind, however the phase ended; how many were ended."""
        self.found.clear()
        agent = self.proc.pid if self.proc else None
        report = kill_all(self._everything, self.limits.kill_grace, keep=(agent,) if agent else ())
        ended = {pid: self.found[pid] for pid in sorted(self.found) if pid != agent}
        count = report.targets
        if self.group is not None:
            count += self._kill_group()  # what forked past the other finds
            self._drop_group()
        if count:
            listing = "; ".join(f"pid {pid} {cmd!r} ({why})" for pid, (cmd, why) in list(ended.items())[:8])
            more = f" and {len(ended) - 8} more" if len(ended) > 8 else ""
            self.note(f"ended {count} process(es) the agent left behind: {listing}{more}")
        if report.survivors:
            self.note(f"could not end pids {', '.join(map(str, report.survivors))}")
        if self.foreign:
            listing = "; ".join(f"pid {pid} {cmd!r}" for pid, cmd in sorted(self.foreign.items())[:8])
            self.note(f"moved into the agent's cgroup from outside: left alone: {listing}")
        return count

    def _cap_v1(self, pids_max: int | None, memory_max: int | None) -> None:
        """The caps the v2 group cannot take, in cgroup v1's hierarchies where writable."""
        if not (pids_max or memory_max):
            return
        self.caps, why = caps.open_v1(f"genesis-{self.run_.run_id}-{os.getpid()}", pids_max, memory_max)
        if why:
            self.note(f"the agent runs {'partly ' if self.caps else ''}uncapped: {why}")

    def _capped(self) -> str:
        folders = ((self.group.path,) if self.group is not None else ()) + (self.caps.folders if self.caps else ())
        return caps.bitten(folders, self.run_.pids_max, self.run_.memory_max)

    def _drop_caps(self) -> None:
        if self.caps is not None:
            self.caps.remove()
            self.caps = None

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
            self._kill_group()
            self._drop_group()
        self._drop_caps()
        for log in self.out.logs if self.out is not None else ():
            for msg in log.close():
                self.note(msg)

