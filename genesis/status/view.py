"""What `genesis status` shows of one project, read from the ledger and the loop's state files.

Everything here only reads: the ledger is opened read-only for one refresh (a WAL reader
never blocks the writer) and closed again, so no read transaction outlives it; the loop's
small JSON files are replaced atomically, so a read sees a whole one. Times are epoch
seconds; what is shown "now" is computed by the renderer from these and its own clock.
"""

from __future__ import annotations

import json
import math
import socket
import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from genesis import when
from genesis.config import default_layout as layout_of  # status reads only what never moves
from genesis.config import load_snapshot
from genesis.hints import hint
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.breaker import BreakerState, retry_time
from genesis.loop.claims import ACCEPTED, AGENT_WORD, EVIDENCE_EVENT, evidence_of
from genesis.repo.tasks import DONE, OPEN, REVIEW, read_tasks
from genesis.sandbox.refused import EVENT as REFUSED_EVENT
from genesis.sandbox.refused import Refused, refused_line, summed
from genesis.store.atomicio import CorruptFile, read_json
from genesis.store.layout import Layout
from genesis.procs.proctree import ProcId
from genesis.store.looplock import FLEET_RUN, Holder, current_holder
from genesis.watch.companion import look
from genesis.words import FORMER, WAIT_LABELS, duration, ending_label, epoch_of

__all__ = ["Phase", "Beat", "Health", "Wait", "Breaker", "Totals", "Line", "LastRun", "Status", "build",
           "layout_of", "describe", "totals", "read_breaker", "max_iterations", "RECENT"]

RECENT = 8                   # events shown by default
SNAPSHOT_LIMIT = 64 << 10    # bytes of a heartbeat, health or wait file: far more than any real one
BEFORE_START = 1.0           # a heartbeat or snapshot this close before the phase's start is still its own
LAST_EPOCH = 1e11            # about the year 5000: any later "time" is garbage
UNREADABLE = "the ledger cannot be read"


@dataclass(frozen=True)
class Phase:
    """The phase that runs now."""
    iteration: int | None
    name: str
    attempt: int                 # 0 first run; 1.. a retry after a stall
    started: float


@dataclass(frozen=True)
class Beat:
    """The running phase's last heartbeat (the agent's hook writes one per tool call)."""
    epoch: float
    event: str                   # PreToolUse, PostToolUse, ...
    tool: str


@dataclass(frozen=True)
class Health:
    """The watcher's judgment at its last check (see genesis/health/classify.py)."""
    classification: str          # healthy, slow, stuck, wedged
    stall_score: float | None
    reason: str
    last_event: str
    tool_in_flight: str          # "" when the agent is inside no tool
    turns: int | None
    at: float | None             # when the watcher took it


@dataclass(frozen=True)
class Wait:
    """A wait the loop sits out now: a usage limit, an outage's backoff, a cooldown, a retry's delay."""
    kind: str
    until: float
    reason: str
    phase: str
    iteration: int

    @property
    def label(self) -> str:
        return WAIT_LABELS.get(self.kind, self.kind)


@dataclass(frozen=True)
class Breaker:
    state: str                   # CLOSED, HALF_OPEN, OPEN; "?" when the file cannot be read
    no_progress: int
    retry_at: float | None       # an OPEN breaker's next trial, with a cooldown
    problem: str = ""


@dataclass(frozen=True)
class Totals:
    """One run's figures: the run the loop is in, else the last one. Never a calendar day's: a
    night crosses midnight, and a project's other runs are not this one's."""
    run_id: str
    current: bool                # the run the loop is in now; False: the last run, which ended
    since: float                 # the run's start
    until: float | None          # its recorded end (None: it runs, or no end was recorded)
    iterations: int
    phases: int                  # phases run (or running) in the run, every attempt counted
    finished: int
    abnormal: int                # ended other than finished
    endings: tuple[tuple[str, int], ...]  # (ending, phases) of the ended phases, most first
    cost_usd: float | None       # None: no agent reported a cost
    input_tokens: int | None
    output_tokens: int | None
    commits: int
    incidents: int
    retries: int
    waits: int
    waited: float                # seconds
    tasks_done: int              # TASKS.md items the run's phases ticked (but those Genesis reopened)
    on_word: int = 0             # of those, done on the agent's word: no check ran (loop/claims.py)
    refused: tuple[Refused, ...] = ()  # what the box's network refused in the run (sandbox/refused.py)


@dataclass(frozen=True)
class Line:
    """One recent event, said in words."""
    at: float
    kind: str
    text: str


@dataclass(frozen=True)
class LastRun:
    run_id: str
    started: float
    ended: float | None          # None: no end recorded (the loop was killed)
    reason: str
    exit_code: int | None


@dataclass(frozen=True)
class Status:
    project: Path
    now: float                   # when it was read
    running: bool
    run_id: str                  # the running run, else the last one ("" when none is known)
    pid: int | None              # the loop's pid (None or 0: unknown)
    started: float | None        # the run's start
    iteration: int | None
    phase: Phase | None          # None: between phases, waiting, or not running
    beat: Beat | None
    health: Health | None
    breaker: Breaker | None      # None: no breaker file yet (a fresh CLOSED breaker)
    wait: Wait | None
    recent: tuple[Line, ...]
    totals: Totals | None        # the shown run's; None: no run, or no ledger to count from
    last_run: LastRun | None     # the run shown (running or not); None when no run is recorded
    note: str = ""               # why something is missing: no run yet, a ledger that cannot be read
    tasks: str = ""              # TASKS.md's tasks counted by state ("" without a readable TASKS.md)
    frozen: bool = False         # the loop's process is stopped (SIGSTOP): it holds the lock, nothing runs
    frozen_since: float | None = None  # when its companion first saw it stopped (None: not recorded)
    killed: bool = False         # the run ended without recording its end (SIGKILL), or its end says so
    killed_at: float | None = None     # when that was recorded (None: nobody could record it)
    error: str = ""              # a ledger or state file that cannot be read, and why ("" none)
    max_iterations: int | None = None  # the running loop's limit, from its settings (None: none, or not known)
    task_counts: tuple[int, int, int] | None = None  # TASKS.md's open, awaiting review, done (None: unreadable)

    @property
    def state(self) -> str:
        """RUNNING, FROZEN, STOPPED (killed) or NOT RUNNING: the loop as one word."""
        if self.frozen:
            return "FROZEN"
        if self.running:
            return "RUNNING"
        return "STOPPED" if self.killed else "NOT RUNNING"


_ASK: Any = object()


def build(layout: Layout, now: float | None = None, recent: int = RECENT, clock: Callable[[], float] = time.time,
          holder: Any = _ASK) -> Status:
    """The status of layout's project at `now`. `holder`: the loop's lock holder when the
    caller has just asked the lock (None: no loop runs); by default the lock is asked here."""
    tasks = read_tasks(layout.project)
    if holder is _ASK:
        holder = current_holder(layout.loop_lock, layout.loop_record)
    st = replace(_build(layout, now, recent, clock, holder), tasks=tasks.summary() if tasks is not None else "",
                 task_counts=(tasks.count(OPEN), tasks.count(REVIEW), tasks.count(DONE)) if tasks is not None else None)
    if holder is not None and st.run_id:
        st = replace(st, max_iterations=max_iterations(layout, st.run_id))
    if holder is not None and holder.run_id.startswith(FLEET_RUN):
        st = replace(st, note=f"a fleet runs on this project: `{hint(layout.project, 'fleet', 'status')}` shows "
                              f"every task and its child loop")
    return replace(_loop_state(st, layout, holder), error=_damage(layout, st))


def _damage(layout: Layout, st: Status) -> str:
    """Why the state files read here cannot be used, if any of them cannot ("" all well): a
    damaged file is passed over where it is read, and said here once."""
    problems = [st.error] if st.error else []
    if st.breaker is not None and st.breaker.problem:
        problems.append(st.breaker.problem)
    paths = [layout.wait_file] + ([layout.heartbeat_file(st.phase.name), layout.health_file(st.phase.name)]
                                  if st.phase is not None else [])
    for path in paths:
        try:
            read_json(path, limit=SNAPSHOT_LIMIT)
        except (CorruptFile, OSError) as exc:
            problems.append(str(exc) if isinstance(exc, CorruptFile) else f"{path} cannot be read: {exc}")
    return "; ".join(problems)


def max_iterations(layout: Layout, run_id: str) -> int | None:
    """The run's iteration limit, as the settings it started with say (0 there: none)."""
    try:
        snap = load_snapshot(layout.config_snapshot, run_id)
    except OSError:
        return None
    settings = snap.get("settings") if snap is not None else None
    value = settings.get("GENESIS_MAX_ITERATIONS") if isinstance(settings, dict) else None
    value = value[0] if isinstance(value, list) and value else value
    try:
        limit = int(str(value))
    except ValueError:
        return None
    return limit if limit > 0 else None


KILLED_PREFIX = "the loop was killed"  # how genesis/loop/lostloop.py words the end it records


def _loop_state(st: Status, layout: Layout, holder: Holder | None) -> Status:
    """A lock holder is not always a running loop: its process may be stopped (FROZEN), or gone
    while a step it started still holds the lock (STOPPED, killed). A run with no end
    recorded, or whose recorded end says it was killed, was STOPPED too."""
    if holder is not None and holder.pid and holder.host == socket.gethostname():
        sight = look(ProcId(holder.pid, holder.create_time))
        if not sight.alive:
            return replace(st, running=False, killed=True, killed_at=None)
        if sight.stopped:
            return replace(st, frozen=True, frozen_since=_frozen_since(layout, holder.run_id))
        return st
    run = st.last_run
    if holder is None and run is not None and (run.ended is None or (run.reason or "").startswith(KILLED_PREFIX)):
        return replace(st, killed=True, killed_at=run.ended)
    return st


def _frozen_since(layout: Layout, run_id: str) -> float | None:
    """When the companion first saw the loop stopped, if it recorded it and not its thaw since."""
    led, _ = _open(layout)
    if led is None:
        return None
    try:
        with led:
            marks = led.events(run_id, kinds=("loop_frozen", "loop_thawed"))
    except (LedgerError, sqlite3.Error):
        return None
    last = marks[-1] if marks else None
    return float(last["since"]) if last is not None and last.get("event") == "loop_frozen" and \
        _epoch(last.get("since")) else None


def _build(layout: Layout, now: float | None, recent: int, clock: Callable[[], float], holder: Any) -> Status:
    now = clock() if now is None else now
    breaker = read_breaker(layout)
    led, note = _open(layout)
    if led is None:
        return _bare(layout, holder, breaker, now, note)
    try:
        with led:
            return _from_ledger(layout, led, holder, breaker, now, recent)
    except (LedgerError, sqlite3.Error) as exc:
        return _bare(layout, holder, breaker, now, f"{UNREADABLE}: {exc}")


def _bare(layout: Layout, holder: Holder | None, breaker: Breaker | None, now: float, note: str) -> Status:
    """What the lock and the state files tell without the ledger."""
    error = note if note.startswith(UNREADABLE) else ""
    if holder is None:
        return Status(layout.project, now, False, "", None, None, None, None, None, None, breaker, None, (), None,
                      None, note, error=error)
    return Status(layout.project, now, True, holder.run_id, holder.pid, epoch_of(holder.started_at), None, None,
                  None, None, breaker, _wait(layout, holder.run_id), (), None, None, note, error=error)



def _open(layout: Layout) -> tuple[Ledger | None, str]:
    if not layout.ledger_file.exists():
        return None, "no run recorded yet"
    try:
        return Ledger.open(layout.ledger_file, readonly=True), ""
    except LedgerError as exc:
        return None, f"{UNREADABLE}: {exc}"


def _from_ledger(layout: Layout, led: Ledger, holder: Holder | None, breaker: Breaker | None, now: float,
                 recent: int) -> Status:
    runs = led.runs()
    run = None
    if holder is not None:
        run = next((r for r in runs if r.run_id == holder.run_id), None)
        if run is None and not holder.run_id:
            run = next((r for r in reversed(runs) if r.ended is None), None)  # the lock's record is gone
    elif runs:
        run = runs[-1]
    run_id = run.run_id if run else holder.run_id if holder else ""
    last = LastRun(run.run_id, run.started, run.ended, run.reason or "", run.exit_code) if run else None
    phase = iteration = beat = health = wait = None
    if holder is not None and run_id:
        phase = _running_phase(led, run_id)
        row = led.query("SELECT MAX(iteration) FROM iterations WHERE run_id = ?", (run_id,))
        iteration = row[0][0] if row else None
        if phase is not None:
            iteration = phase.iteration if phase.iteration is not None else iteration
            beat = _beat(layout, run_id, phase)
            health = _health(layout, run_id, phase)
        wait = _wait(layout, run_id)
    lines = tuple(Line(e["epoch"], e["event"], describe(e, layout.project))
                  for e in led.events(run_id, limit=recent, newest=True)) if run_id and recent > 0 else ()
    pid = holder.pid if holder is not None else run.pid if run else None
    started = run.started if run else epoch_of(holder.started_at) if holder else None
    counted = totals(led, run_id, holder is not None, started, run.ended if run else None, now) \
        if run_id and started is not None else None
    return Status(layout.project, now, holder is not None, run_id, pid, started, iteration, phase, beat, health,
                  breaker, wait, lines, counted, last, "" if runs else "no run recorded yet")


def _running_phase(led: Ledger, run_id: str) -> Phase | None:
    rows = led.query("SELECT iteration, phase, attempt, started FROM phases WHERE run_id = ? AND ended IS NULL "
                     "ORDER BY id DESC LIMIT 1", (run_id,))
    if not rows:
        return None
    r = rows[0]
    return Phase(r["iteration"], r["phase"], r["attempt"] or 0, r["started"])


def totals(led: Ledger, run_id: str, current: bool, since: float, until: float | None, now: float) -> Totals:
    """run_id's figures at now; a wait that lasts counts up to now."""
    p = led.query(
        "SELECT COUNT(*), SUM(ending = 'finished'), SUM(ended IS NOT NULL AND ending NOT IN ('finished', 'running')), "
        "SUM(cost_usd), SUM(input_tokens), SUM(output_tokens) FROM phases WHERE run_id = ?", (run_id,))[0]
    endings = tuple((str(r[0]), int(r[1])) for r in led.query(
        "SELECT ending, COUNT(*) FROM phases WHERE run_id = ? AND ended IS NOT NULL GROUP BY ending "
        "ORDER BY COUNT(*) DESC, ending", (run_id,)))
    count = {table: led.query(f"SELECT COUNT(*) FROM {table} WHERE run_id = ?", (run_id,))[0][0]  # noqa: S608
             for table in ("iterations", "commits", "incidents", "retries")}
    w = led.query("SELECT COUNT(*), SUM(MAX(0, COALESCE(ended, MIN(?, COALESCE(until, ?))) - started)) FROM waits "
                  "WHERE run_id = ?", (now, now, run_id))[0]
    done: set[str] = set()
    for (ticked,) in led.query("SELECT tasks_done FROM phases WHERE run_id = ? AND tasks_done IS NOT NULL", (run_id,)):
        try:
            items = json.loads(ticked)
        except ValueError:
            continue  # cut at its size cap: not counted rather than guessed
        if isinstance(items, list):
            done.update(" ".join(t.split()) for t in items if isinstance(t, str))
    latest = evidence_of(led.events(run_id, kinds=(EVIDENCE_EVENT,)))
    done -= {task for task, e in latest.items() if e.get("outcome") not in ACCEPTED}  # reopened: not done
    on_word = sum(1 for task in done if latest.get(task, {}).get("outcome") == AGENT_WORD)
    return Totals(run_id, current, since, until, count["iterations"], p[0], p[1] or 0, p[2] or 0, endings, p[3], p[4],
                  p[5], count["commits"], count["incidents"], count["retries"], w[0], float(w[1] or 0.0), len(done),
                  on_word, summed(led.events(run_id, kinds=(REFUSED_EVENT,))))


def _read(path: Path) -> Any:
    try:
        return read_json(path, limit=SNAPSHOT_LIMIT)
    except (CorruptFile, OSError):
        return None


def _beat(layout: Layout, run_id: str, phase: Phase) -> Beat | None:
    data = _read(layout.heartbeat_file(phase.name))
    if not isinstance(data, dict) or not _epoch(data.get("epoch")):
        return None
    if data.get("run_id") not in (None, "", run_id) or data["epoch"] < phase.started - BEFORE_START:
        return None  # an earlier run's, or the phase's previous attempt's
    return Beat(float(data["epoch"]), str(data.get("event", "")), str(data.get("tool", "")))


def _health(layout: Layout, run_id: str, phase: Phase) -> Health | None:
    data = _read(layout.health_file(phase.name))
    if not isinstance(data, dict) or data.get("run_id") != run_id or data.get("iteration") != phase.iteration:
        return None
    at = epoch_of(data.get("at")) if isinstance(data.get("at"), str) else None
    if at is not None and at < phase.started - BEFORE_START:
        return None  # the previous attempt's: this one has had no check yet
    score, turns, cls = data.get("stall_score"), data.get("turns"), str(data.get("classification", "?"))
    return Health(FORMER.get(cls, cls), float(score) if _number(score) else None,
                  str(data.get("reason", "")), str(data.get("last_event", "")), str(data.get("tool_in_flight", "")),
                  turns if isinstance(turns, int) and not isinstance(turns, bool) else None, at)


def _wait(layout: Layout, run_id: str) -> Wait | None:
    data = _read(layout.wait_file)
    if not isinstance(data, dict) or data.get("run_id") != run_id or not _epoch(data.get("until")):
        return None
    iteration = data.get("iteration")
    return Wait(str(data.get("kind", "?")), float(data["until"]), str(data.get("reason", "")),
                str(data.get("phase", "")), iteration if isinstance(iteration, int) else 0)


def read_breaker(layout: Layout) -> Breaker | None:
    """The breaker as the user's file says (a mirror of the loop's own while it runs), else
    the loop's own; read only: an unreadable file is reported, never moved aside."""

    for path in (layout.breaker_file, layout.breaker_truth):
        try:
            data = read_json(path)
        except (CorruptFile, OSError) as exc:
            return Breaker("?", 0, None, f"{path} cannot be read: {exc}")
        if data is None:
            continue
        try:
            state = BreakerState.from_json(data)
            return Breaker(state.state, state.no_progress_count, retry_time(state))
        except ValueError as exc:
            return Breaker("?", 0, None, f"{path} is not a breaker file: {exc}")
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _epoch(value: Any) -> bool:
    """A time a clock can show (a file an agent can reach may hold any number)."""
    return _number(value) and 0 <= value < LAST_EPOCH


def _count(items: Any) -> int:
    return len(items) if isinstance(items, list) else 0


def _where(e: dict[str, Any]) -> str:
    it, phase = e.get("iteration"), e.get("phase")
    return " ".join(x for x in (f"iteration {it}" if isinstance(it, int) else "", str(phase) if phase else "") if x)


def describe(e: dict[str, Any], project: Path | None = None) -> str:
    """One event in a few words (the ledger's text is the loop's, or an agent's: the renderer
    makes it safe to show); project's, to name the command that shows more."""
    kind, where = e.get("event", "?"), _where(e)
    if kind == "loop_start":
        return f"loop started (pid {e.get('pid', '?')})"
    if kind == "loop_end":
        return f"loop ended: {e.get('reason', '')} (exit {e.get('exit_code', '?')})"
    if kind == "alert":
        ticket = e.get("ticket") if isinstance(e.get("ticket"), dict) else {}
        sent = ", ".join(str(c) for c in e.get("delivered") or []) if isinstance(e.get("delivered"), list) else ""
        told = f"told ({sent})" if e.get("decision") == "intervene" and sent else \
            "to tell, but no channel took it" if e.get("decision") == "intervene" else "dismissed by triage"
        return f"alert, {ticket.get('severity', '?')}: {ticket.get('cause', '?')}: {told}"
    if kind == "iteration_start":
        return f"{where} started"
    if kind == "iteration_end":
        progress = "progress" if e.get("progress") else "no progress"
        return f"{where} ended: {progress}, breaker {e.get('breaker', '?')}"
    if kind == "phase_start":
        attempt = e.get("attempt") or 0
        return f"{where} started" + (f" (retry {attempt})" if attempt else "")
    if kind == "phase_end":
        status, ending = e.get("status"), e.get("ending")
        took = f" after {duration(e['duration'])}" if _number(e.get("duration")) else ""
        if ending == "finished":
            return f"{where} finished{took}"
        code = e.get("returncode") if isinstance(e.get("returncode"), int) else None
        detail = e.get("detail")
        return f"{where}: {ending_label(str(ending or status), code)}{took}" + (f": {detail}" if detail else "")
    if kind == "phase_skip":
        return f"{where} skipped" + (f": {e['why']}" if e.get("why") else "")
    if kind == REFUSED_EVENT:
        return f"{where} {refused_line(summed([e]), most=3)}"
    if kind == "health":
        score = e.get("stall_score")
        shown = f" (stall score {min(score, 1.0):.2f})" if _number(score) else ""
        return f"{where} {e.get('classification', '?')}" + shown \
            + (f": {e['reason']}" if e.get("reason") else "")
    if kind == "incident":
        ident = e.get("id") if isinstance(e.get("id"), str) else None
        what = f"{where} incident recorded ({e.get('kind', '?')})"
        if project is None:
            return what + (f": {ident}" if ident else "")
        return what + f": see `{hint(project, 'incidents', 'show', ident) if ident else hint(project, 'incidents')}`"
    if kind == "retry":
        return f"{where} to run again (retry {e.get('count', '?')}): {e.get('reason', '')}"
    if kind == "wait_start":
        until = when.clock(e["until"], seconds=True) if _epoch(e.get("until")) else "?"
        return f"waiting out a {WAIT_LABELS.get(str(e.get('kind')), e.get('kind'))} until {until}"
    if kind == "wait_end":
        waited = f" after {duration(e['waited'])}" if _number(e.get("waited")) else ""
        return f"{WAIT_LABELS.get(str(e.get('kind')), e.get('kind'))} wait {e.get('how', 'ended')}{waited}"
    if kind == "phase_work":
        return f"{where}: {_count(e.get('commits'))} commit(s), {_count(e.get('tasks_done'))} task(s) done"
    if kind == "phase_failed":
        return f"{where} failed for this iteration ({e.get('kind', '?')} again, its retries spent)"
    if kind == "reap":
        return f"ended {_count(e.get('pids'))} leftover process(es) {e.get('when', '')}".rstrip()
    if kind == "tamper":
        return f"repaired: {e.get('what', '')}"
    if kind == "stop_reason":
        return f"stopping: {e.get('reason', '')}"
    if kind == "loop_frozen":
        return f"the loop (pid {e.get('pid', '?')}) is frozen: stopped by a signal"
    if kind == "loop_thawed":
        lasted = f" after {duration(e['lasted'])} frozen" if _number(e.get("lasted")) else ""
        return f"the loop (pid {e.get('pid', '?')}) runs again{lasted}"
    if kind == "action":  # genesis/actions/: acted on from the terminal, the dashboard or an alert
        on = f" {e['task']}" if e.get("task") else ""
        return f"{e.get('action', '?')}{on}, from the {e.get('source', '?')} ({e.get('credential', '?')}): " \
            f"{e.get('said', '')}"
    if kind == "hook_removed":
        return f"the heartbeat hook was removed by the user from {e.get('path', '?')}: not put back"
    return f"{where}: {str(kind).replace('_', ' ')}" if where else str(kind).replace("_", " ")
