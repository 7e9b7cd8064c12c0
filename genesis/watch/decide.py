"""The watcher's decision at one check, from what was read at it: go on, or end and why.

Nothing here reads a file, a process or a clock: the watcher gathers an Observation,
decide() turns it and the State carried from the previous check into the next State and a
Verdict, and the watcher acts on that. So a whole night's history replays in milliseconds.

Each ending names the window that fired (End.window: `stale`, `tool_silent`, `tool_busy`,
`runtime`, or one of the short windows of the hang classes below); the watcher carries it
(Outcome.window) into the phase's `phase_end` event and its incident, so the report says which
limit ended a phase, not only that it ended.

Some hangs need no general window to be told apart (docs/concepts/silences.md):
- `first_event`: nothing at all on the output and no heartbeat since the start: a CLI hung at
  start-up (Claude Code writes its `init` record within seconds, before it calls the API);
- `result_exit`: the final result was read and the process goes on with no work of its own left
  (no background command or sub-agent and its processes quiet for the window, or only
  background work whose processes are silent): the phase's work is done, so it ends as done,
  not stuck.
- `wakeup`: its turn ended (its result read) waiting for a wake-up it scheduled itself, and the
  wake-up has not come by its due time plus WAKEUP_MARGIN: nothing will wake it.
Work the CLI runs in the background (a command, a sub-agent) is judged as the tool it is: while
its processes work, the stale window waits (up to the tool-busy maximum), as for a busy tool.
A scheduled wake-up is waited for, once the turn has ended, until it is due plus the margin: a
silence by design, which holds the windows only while the turn is over (a wake-up scheduled by
a turn that then hangs holds nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from genesis.clock import iso
from genesis.health import toolwatch, watchdog
from genesis.health.activity import Sample
from genesis.health.classify import Snapshot, classify, fingerprint
from genesis.health.heartbeat import Heartbeat
from genesis.health.toolwatch import ToolMemory, ToolVerdict

if TYPE_CHECKING:
    from genesis.agents.base import ApiRetry

__all__ = ["Rules", "Judgement", "Observation", "State", "End", "Verdict", "begin", "decide", "this_runs",
           "WOULD_KEPT"]

WOULD_KEPT = 20  # warn-only mode: the newest would-be kills kept for the phase's outcome
WAKEUP_MARGIN = 60.0  # a scheduled wake-up may fire this late (the CLI's queue, a loaded machine)


@dataclass(frozen=True)
class Rules:
    """What holds for the whole phase: whose run it is, its windows and its cap."""
    run_id: str
    stale_after: float
    interval: float
    started: float                 # the watch's start, monotonic
    started_wall: float            # the same instant on the wall clock
    max_runtime: float
    count_output: bool = True      # output counts as a sign of life (bounded once it has beaten)
    tool_silent: float | None = None  # the tool-silent window (None: off)
    tool_busy_max: float = 3600.0
    hookless: bool = False
    enforce: bool = True           # False: warn only; only overtime ends the watch
    heartbeat_dir: str = ""        # named when the disk is full
    phase: str = ""
    iteration: int = 0
    first_event_after: float = 0.0  # nothing on its output and no heartbeat this long from the start: hung (0: off)
    result_exit_after: float = 0.0  # its final result read and no work of its own left this long: done (0: off)
    wakeup_margin: float = WAKEUP_MARGIN  # a wake-up it scheduled is waited for until due plus this

    @property
    def deadline(self) -> float:
        return self.started + self.max_runtime


@dataclass(frozen=True)
class Judgement:
    """What the judge of the phase's tool calls found at one check."""
    wedged: str = ""               # why the agent is wedged ("" when it is not)
    severity: str = ""             # by tool calls since the last successful one: ok, warn ... critical
    calls: int = 0                 # tool calls since the last successful one
    flying: str = ""               # the tool in flight, with its command and since when ("" none)
    last_ok: float | None = None   # when the last call succeeded (epoch; None: none yet)


@dataclass(frozen=True)
class Observation:
    """Everything read at one check."""
    mono: float                    # the check's time, monotonic
    wall: float                    # the same instant on the wall clock
    beat: Heartbeat | None = None  # the heartbeat file as read, whichever run wrote it
    received: int = 0              # bytes of output received so far
    activity: Sample = field(default_factory=Sample)  # the tool's tree as sampled now
    judged: Judgement = field(default_factory=Judgement)
    retry: ApiRetry | None = None  # the CLI waits inside its own API retries
    hopeless: str | None = None    # the reader's message when no retry of the CLI's can help
    turns: int | None = None       # the model's turns so far, when the output tells
    disk_full: bool = False        # no heartbeat can be written
    planted: str = ""              # what was removed from the heartbeat path at this check
    upkeep: tuple[str, ...] = ()   # what the watcher's own upkeep reported (log problems, a failed repair)
    own: float = 0.0               # seconds since the previous check spent in the watcher's own work
    result_at: float | None = None  # when its final result was read (monotonic; None: none, or a turn began since)
    background: tuple[str, ...] = ()  # the work it runs in the background (commands, sub-agents), by name
    wakeup_at: float | None = None  # when the wake-up it scheduled itself is due (monotonic; None: none pending)

    @property
    def waits_to_wake(self) -> bool:
        """Its turn is over and it waits, idle by design, for the wake-up it scheduled."""
        return self.result_at is not None and self.wakeup_at is not None


@dataclass(frozen=True)
class State:
    """What the decision carries from one check to the next."""
    window: watchdog.Window        # the staleness window's memory
    tools: ToolMemory | None = None  # the tool watch's memory (None: the tool-silent window is off)
    seen_output: int = 0           # bytes of output received by the previous check
    retry_seen: tuple[int, float] | None = None  # the latest API retry said (attempt, seen)
    api_retries: int = 0           # API retries of the CLI's own seen
    disk_full: bool = False        # the disk was full at a check
    tampered: tuple[str, ...] = ()  # what was planted at the heartbeat path, each time
    would_kill: tuple[str, ...] = ()  # warn-only mode: why it would have been killed (the newest, oldest first)
    would_said: float = -1e18      # monotonic: when a would-be kill was last said
    bg_since: float | None = None  # monotonic: background work in flight since (None: none)
    bg_active: float = 0.0         # monotonic: its processes last worked
    worked: float | None = None    # monotonic: its processes last worked after its result (None: not since)
    wake_said: float | None = None  # the due time of the wake-up said to be waited for (None: none said)


@dataclass(frozen=True)
class End:
    """How the watch ended."""
    status: str                    # exited | done | stuck | wedged | overtime | api_fatal | interrupted
    idle: float = 0.0              # seconds since the last sign of life
    detail: str = ""
    rc: int | None = None          # exited: its return code
    signum: int | None = None      # interrupted: the signal
    sender: int | None = None      # interrupted: who sent it (0: the kernel)
    window: str | None = None      # the window that fired: stale, tool_silent, tool_busy, runtime (None: none)


@dataclass(frozen=True)
class Verdict:
    """What one check decided, in the order the watcher acts on it."""
    notes: tuple[str, ...] = ()    # what the user should hear of this check
    health: Snapshot | None = None  # the phase's health (None: it ended before it was judged)
    warning: str = ""              # warn-only mode: the kill held back, when it is due to be said
    end: End | None = None         # the watch ends now (None: it goes on)


def begin(rules: Rules) -> State:
    """The state at the watch's start."""
    window = watchdog.begin(rules.stale_after, rules.interval, rules.started, rules.started_wall)
    tools = ToolMemory(rules.tool_silent, rules.tool_busy_max, rules.hookless) if rules.tool_silent else None
    return State(window, tools)


def this_runs(beat: Heartbeat | None, run_id: str) -> Heartbeat | None:
    """The heartbeat if this run wrote it (or a hook too old to name its run); else None."""
    return beat if beat is not None and beat.run_id in ("", run_id) else None


def decide(rules: Rules, state: State, obs: Observation) -> tuple[State, Verdict]:
    """The state after one check, and what the check decided."""
    notes = [obs.planted] if obs.planted else []
    if obs.disk_full and not state.disk_full:
        notes.append(f"disk full: heartbeats cannot be written ({rules.heartbeat_dir}); silence is not counted "
                     f"while it lasts (the runtime cap still applies)")
    notes += obs.upkeep
    state = replace(state, disk_full=state.disk_full or obs.disk_full,
                    tampered=state.tampered + ((obs.planted,) if obs.planted else ()))
    if obs.hopeless is not None:
        return state, Verdict(tuple(notes), end=End("api_fatal", detail=obs.hopeless))
    beat, now, judged = this_runs(obs.beat, rules.run_id), obs.mono, obs.judged
    grew = obs.received > state.seen_output
    state = replace(state, seen_output=obs.received)
    stuck = End("wedged", 0.0, judged.wedged) if judged.wedged else None
    state, api_until, said = _api_wait(state, obs.retry)
    notes += said
    busy_until, tool = api_until, ToolVerdict()
    if state.tools is not None:
        tools, tool = toolwatch.check(state.tools, beat, now, grew, obs.activity)
        state = replace(state, tools=tools)
        if tool.note:
            notes.append(tool.note + (f"; running {judged.flying}" if judged.flying else ""))
        if tool.busy_until is not None:
            busy_until = max(busy_until or tool.busy_until, tool.busy_until)
    state, bg_until, said = _background(rules, state, obs, tool, grew)
    notes += said
    if bg_until is not None:
        busy_until = max(busy_until or bg_until, bg_until)
    asleep = obs.waits_to_wake and now < obs.wakeup_at + rules.wakeup_margin  # on purpose, until it is due
    if asleep:
        busy_until = max(busy_until or now, now)
        if state.wake_said != obs.wakeup_at:
            state = replace(state, wake_said=obs.wakeup_at)
            notes.append(f"its turn is over and it waits for the wake-up it scheduled, due in "
                         f"{max(0.0, obs.wakeup_at - now):.0f}s: asleep on purpose, not stuck, until then plus "
                         f"{rules.wakeup_margin:g}s")
    window, seen = watchdog.check(state.window, beat.epoch if beat is not None else None, now, obs.wall,
                                  grew and rules.count_output, hold=obs.disk_full, busy_until=busy_until,
                                  own=obs.own)
    state = replace(state, window=window)
    notes += seen.notes
    if stuck is None:
        stuck = _hang_class(rules, state, obs, beat)
    if stuck is not None and stuck.status == "done" and rules.enforce:
        return state, Verdict(tuple(notes), _health(rules, state, obs, beat, seen.idle, tool, None,
                                                    api_busy=api_until is not None or asleep), end=stuck)
    if stuck is None and tool.stuck:
        stuck = End("stuck", now - state.tools.last_active, "; ".join([tool.stuck, *dict.fromkeys(state.tampered)]),
                    window="tool_silent")
    elif stuck is None and seen.stale:  # its heartbeat is stale: after a busy tool's allowance, that is what ran out
        busy = _busy_too_long(state.tools, now, tool.change is not None and tool.change.busy)
        stuck = End("stuck", seen.idle, _stale_detail(rules, state, seen, now, busy),
                    window="tool_busy" if busy else "stale")
    if stuck is not None and stuck.status == "stuck" and judged.flying:
        stuck = replace(stuck, detail=f"{stuck.detail}; the tool in flight: {judged.flying}")
    health = _health(rules, state, obs, beat, seen.idle, tool, stuck, api_busy=api_until is not None or asleep)
    warning = ""
    if stuck is not None:
        if rules.enforce:
            return state, Verdict(tuple(notes), health, end=stuck)
        state, warning = _would_kill(rules, state, stuck.detail, now)
    end = None
    if now >= rules.deadline:
        end = End("overtime", seen.idle, f"ran for {now - rules.started:.0f}s, past the runtime cap "
                                         f"({rules.max_runtime:g}s)", window="runtime")
    return state, Verdict(tuple(notes), health, warning, end)


def _api_wait(state: State, retry: ApiRetry | None) -> tuple[State, float | None, list[str]]:
    """Until when (monotonic) the CLI waits inside its own API retries (None: it is not
    retrying), and the note of a retry not said before. Its api_retry event names the delay
    before its next try: the agent is waiting on the API, not stuck, until that delay is
    over; after it, silence counts again."""
    if retry is None:
        return state, None, []
    said = []
    if state.retry_seen != (retry.attempt, retry.seen):
        state = replace(state, retry_seen=(retry.attempt, retry.seen), api_retries=state.api_retries + 1)
        status = f"{retry.status} " if retry.status else ""
        said.append(f"the model API is failing ({status}{retry.error}); the agent retries by itself "
                    f"(attempt {retry.attempt} of {retry.max_retries}, next in {retry.delay:.0f}s): waiting on "
                    f"the API, not stuck")
    return state, retry.seen + retry.delay, said


def _background(rules: Rules, state: State, obs: Observation, tool: ToolVerdict,
                grew: bool) -> tuple[State, float | None, list[str]]:
    """The CLI's background work, judged by its processes as a tool in flight is: until when
    (monotonic) its work holds the stale window (None: it does not), and what to say of it."""
    now = obs.mono
    busy = tool.change is not None and tool.change.busy
    if obs.result_at is None:
        state = replace(state, worked=None)
    elif busy:  # after its result: a hook of its end (SessionEnd) may still run
        state = replace(state, worked=now)
    if not obs.background:
        return replace(state, bg_since=None), None, []
    said = []
    if state.bg_since is None:
        state = replace(state, bg_since=now, bg_active=now)
        said.append(f"it works in the background ({', '.join(obs.background)}): judged by its processes, "
                    f"busy or silent, as a tool in flight is")
    if busy or grew:
        state = replace(state, bg_active=now)
    if busy and state.tools is not None and now - state.bg_since <= state.tools.busy_max:
        return state, now, said
    return state, None, said


def _hang_class(rules: Rules, state: State, obs: Observation, beat: Heartbeat | None) -> End | None:
    """A hang told apart by its own short window (see the module's text), or None."""
    now = obs.mono
    since = now - rules.started
    if (rules.first_event_after and obs.received == 0 and beat is None and state.window.last_beat is None
            and since >= rules.first_event_after):
        return End("stuck", since, f"no first event in {rules.first_event_after:g}s: nothing on its output and no "
                                   f"heartbeat since it started (hung at start-up)", window="first_event")
    if obs.waits_to_wake:
        late = now - obs.wakeup_at
        if late < rules.wakeup_margin:
            return None
        return End("stuck", now - obs.result_at, f"scheduled wake-up did not come: it was due {late:.0f}s ago "
                                                  f"(margin {rules.wakeup_margin:g}s) and nothing else will wake it",
                   window="wakeup")
    if not rules.result_exit_after or obs.result_at is None:
        return None
    after = now - obs.result_at
    quiet = now - max(obs.result_at, state.worked if state.worked is not None else obs.result_at)
    if after < rules.result_exit_after:
        return None
    if not obs.background:
        if quiet < rules.result_exit_after:  # its processes worked since (a hook of its end): not yet
            return None
        return End("done", after, f"result written, process did not exit: its final result came {after:.0f}s ago "
                                  f"and nothing of its own is left to run (window {rules.result_exit_after:g}s); "
                                  f"the phase's work is done: ended as done, not stuck", window="result_exit")
    silent = now - state.bg_active
    if state.tools is not None and silent >= state.tools.silent_after:
        return End("done", after, f"result written, process did not exit: its final result came {after:.0f}s ago "
                                  f"and it waits on its background {', '.join(obs.background)}, whose processes "
                                  f"were silent for {silent:.0f}s (tool-silent window {state.tools.silent_after:g}s); "
                                  f"the phase's work is done: ended as done, its background work with it",
                   window="result_exit")
    return None


def _busy_too_long(tools: ToolMemory | None, now: float, working: bool) -> str:
    """The busy work that was allowed no longer ("" when none): a tool in flight whose tree is
    `working`, or a hookless agent's processes, busy past the tool-busy maximum, after which the
    stale window counts."""
    if tools is None:
        return ""
    # A tree that worked within its tool-silent window still counts as working: on a loaded
    # machine it can miss one check's CPU, and what ran out is still its busy allowance.
    worked = tools.last_active > tools.since and now - tools.last_active < tools.silent_after
    working = working or (tools.tool != "" and worked)
    if tools.tool and working and now - tools.since > tools.busy_max:
        return f"inside {tools.tool} for {now - tools.since:.0f}s"
    if tools.hookless and tools.busy_since is not None and now - tools.busy_since > tools.busy_max:
        return f"its processes worked for {now - tools.busy_since:.0f}s"
    return ""


def _stale_detail(rules: Rules, state: State, seen: watchdog.Verdict, now: float, busy: str = "") -> str:
    detail = f"no heartbeat for {seen.idle:.1f}s (stale after {rules.stale_after:g}s)"
    if busy:  # the stale window counted only once the busy work's allowance was spent
        detail = (f"{busy}, busy past the tool-busy maximum ({state.tools.busy_max:g}s), and no heartbeat for "
                  f"{seen.idle:.1f}s more (stale after {rules.stale_after:g}s)")
    if seen.output_ignored and state.window.last_beat is not None:
        detail += (f"; its output alone no longer counts: the last heartbeat was "
                   f"{now - state.window.last_beat:.1f}s ago, more than a window")
    return "; ".join([detail, *dict.fromkeys(state.tampered)])


def _would_kill(rules: Rules, state: State, detail: str, now: float) -> tuple[State, str]:
    """Warn-only mode: record what would have been killed; say it at most once a window."""
    state = replace(state, would_kill=(state.would_kill + (detail,))[-WOULD_KEPT:])
    if now - state.would_said < rules.stale_after:
        return state, ""
    return (replace(state, would_said=now),
            f"would kill as stuck (GENESIS_HEALTH_ENFORCE=false, so it runs on): {detail}")


def _health(rules: Rules, state: State, obs: Observation, beat: Heartbeat | None, idle: float, tool: ToolVerdict,
            stuck: End | None, api_busy: bool) -> Snapshot:
    """The phase's health snapshot, for the loop to keep and to record changes of."""
    busy = tool.busy_until is not None or api_busy
    # The window closest to running out: the general one, or the tool-silent one inside a tool.
    silent, window = idle, rules.stale_after
    if tool.tool and state.tools is not None:
        tool_silent = obs.mono - state.tools.last_active
        if tool_silent / state.tools.silent_after > idle / window:
            silent, window = tool_silent, state.tools.silent_after
    wedged = stuck is not None and stuck.status == "wedged"
    cls, score = classify(silent, window, busy, stuck is not None and not wedged, wedged)
    age = f", {max(0.0, obs.wall - beat.epoch):.0f}s ago" if beat is not None else ""
    last_event = f"{beat.event or 'beat'} {beat.tool or '-'}{age}" if beat is not None else "none yet"
    judged = obs.judged
    return Snapshot(rules.run_id, rules.phase, rules.iteration, iso(obs.wall), cls, score, round(idle, 1),
                    last_event, judged.severity,
                    round(obs.wall - judged.last_ok, 1) if judged.last_ok is not None else None, judged.flying,
                    obs.turns, tool.tool or (beat.tool if beat is not None else ""), judged.calls,
                    fingerprint(beat.epoch if beat is not None else 0, obs.received, judged.calls),
                    stuck.detail if stuck else (tool.note if busy else ""))
