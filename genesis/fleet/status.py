"""`genesis fleet status`: every task of the project's fleet, live, as a screen or one JSON
document (schema 1: docs/reference/fleet-status-json.md).

Everything here only reads: the fleet ledger read-only, the monitor's heartbeat file, a
momentary shared probe of the monitor's lock, and each running child's own state through
the single loop's reader (status/view.py) in its worktree. Children are read under one time
bound, so a fleet of many children still answers quickly; a child left unread is said so.
The JSON document keeps status --json's promise: within one SCHEMA keys are only added,
every documented key is always present (null when its thing is absent), every time twice.

Besides the tasks it shows the monitor's lock and heartbeat, and the fleet-wide pause in force:
an account's usage limit or outage, or the cascade gate paused or probing.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from genesis import exitcodes, when
from genesis.clock import iso
from genesis.config import default_layout
from genesis.fleet import lifecycle
from genesis.fleet.ledger import Attempt, FleetEvent, FleetLedger, TaskRow
from genesis.fleet.mergeevidence import MERGE_EVENTS, MergeEvidence, merge_line, merges_of
from genesis.redact import redact
from genesis.repo.gitcmd import NotARepository, NotOwned
from genesis.status.view import Status, build
from genesis.store.atomicio import CorruptFile, read_json
from genesis.store.layout import state_dir_of, work_tree_of
from genesis.words import duration, one_line

__all__ = ["SCHEMA", "STATES", "ChildView", "TaskView", "Monitor", "Hold", "FleetStatus", "read", "document",
           "render", "run_fleet_status", "run_fleets_status", "fleet_dir_of", "lock_held", "READ_CHILDREN_SECONDS",
           "SHOWN", "from_ledger", "show", "details", "pick"]

SCHEMA = 1
# The words `fleet status` shows, in the order it lists them: the live ones first.
STATES = ("running", "merging", "restarting", "escalated", "waiting", "queued", "needs-review", "failed", "ready",
          "merged")
LIVE = lifecycle.CHILD_MAY_RUN  # a child loop may run: its own state is read (fleet/lifecycle.py)
READ_CHILDREN_SECONDS = 3.0   # all children's own states are read within this; the rest are said unread
SHOWN = 200                   # task rows on the screen (the JSON document has every one)
TEXT_LIMIT = 300
MONITOR_LIMIT = 64 << 10      # bytes of monitor.json: far more than a real one
HOLDS = {"limit_hold": "limit", "outage_hold": "outage"}
HOLD_ENDS = frozenset({"limit_resume", "outage_resume"})
CASCADE = {"cascade_pause": "paused", "cascade_probe": "probing", "cascade_resume": None}
STATE_STYLE = {"running": "green", "merging": "cyan", "restarting": "yellow", "escalated": "bold yellow",
               "waiting": "yellow", "queued": "dim", "needs-review": "bold magenta", "failed": "bold red",
               "ready": "green", "merged": "green"}
HEALTH_STYLE = {"healthy": "green", "slow": "yellow", "stuck": "bold red", "wedged": "bold magenta"}


RUNNING_ON = re.compile(r"attempt \d+ on (\S+?): ")


def fleet_dir_of(project: Path) -> Path:
    """Where the fleet's state lives: `<git dir of the main work tree>/genesis/fleet`."""
    return state_dir_of(project) / "fleet"


@dataclass(frozen=True)
class ChildView:
    """A running child's own state, as its loop's files and ledger say (None fields: not known)."""
    read: bool                     # False: not read within the time bound (or its worktree is gone)
    state: str                     # the single loop's word (RUNNING, FROZEN, STOPPED, NOT RUNNING); "" unread
    run_id: str
    phase: str | None
    iteration: int | None
    health: str | None             # healthy, slow, stuck, wedged
    stall_score: float | None
    heartbeat_at: float | None
    wait: str | None               # the wait the child sits out (usage limit, ...)
    wait_until: float | None
    error: str = ""


@dataclass(frozen=True)
class TaskView:
    row: TaskRow
    agent: str                     # the last attempt's agent ("" none yet)
    started: float | None          # the first attempt's start
    child: ChildView | None        # None: no child is meant to run
    attempts: tuple[Attempt, ...] = ()  # its retry history, oldest first
    merges: tuple[MergeEvidence, ...] = ()  # each merge with its evidence (checks green or red, lost hunks)
    place: str = ""                # the machine its attempt runs or last ran on (a Temporal fleet's; "" not recorded)


@dataclass(frozen=True)
class Monitor:
    alive: bool                    # its lock is held: the truth
    pid: int | None
    run_id: str
    started: float | None
    heartbeat_at: float | None     # monitor.json's "at" (None: no readable file)
    unreachable_since: float | None = None   # a Temporal fleet's home: since when Temporal has not answered


@dataclass(frozen=True)
class Hold:
    """A fleet-wide pause in force: an account's limit or outage, or the cascade gate."""
    kind: str                      # limit, outage, cascade
    state: str                     # held (limit, outage); paused or probing (cascade)
    since: float
    until: float | None
    reason: str
    task_id: str | None            # the task that met it, or the probe


@dataclass(frozen=True)
class FleetStatus:
    project: Path
    now: float
    ran: bool                      # a fleet ledger exists: a fleet ran on the project
    run_id: str
    parallel: int | None
    started: float | None
    ended: float | None
    exit_code: int | None
    end_reason: str
    monitor: Monitor
    limit: Hold | None
    cascade: Hold | None
    tasks: tuple[TaskView, ...]
    unread: int = 0                # running children not read within the bound
    error: str = ""
    source: str = ""               # "": this machine's ledger; else where it was read (Temporal)
    cost_usd: float | None = None  # what the latest run's ended attempts cost, as their children reported
    paused: Hold | None = None     # `genesis pause` (or the dashboard's, an alert's): no launch until resume

    @property
    def state(self) -> str:
        """running (the monitor runs), ended (the fleet recorded its end), stopped (the monitor
        is gone without recording one: killed), not_running (no fleet ever ran here)."""
        if not self.ran:
            return "not_running"
        if self.monitor.alive:
            return "running"
        return "ended" if self.ended is not None else "stopped"

    @property
    def code(self) -> int:
        return exitcodes.OK if self.ran else exitcodes.NOT_RUNNING

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATES}
        for t in self.tasks:
            if t.row.state in out:  # the ledger admits no other state
                out[t.row.state] += 1
        return out


# --- reading ---------------------------------------------------------------------------------

def lock_held(path: Path) -> bool:
    """The monitor holds its lock: asked of the kernel with a momentary shared lock (as
    store/looplock.current_holder asks of a loop's), never following a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e11
    return float(value) if ok else None


def _monitor(fleet_dir: Path) -> tuple[Monitor, str]:
    alive = lock_held(fleet_dir / "lock")
    try:
        data = read_json(fleet_dir / "monitor.json", limit=MONITOR_LIMIT)
        problem = ""
    except (CorruptFile, OSError) as exc:
        data, problem = None, f"{fleet_dir / 'monitor.json'} cannot be read: {exc}"
    if not isinstance(data, dict):
        return Monitor(alive, None, "", None, None), problem
    pid = data.get("pid")
    return Monitor(alive, pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
                   str(data.get("run_id") or ""), _number(data.get("started")), _number(data.get("at")),
                   _number(data.get("temporal_unreachable_since"))), problem


def _holds(events: Sequence[FleetEvent], now: float) -> tuple[Hold | None, Hold | None]:
    """The limit (or outage) and the cascade pause in force after this fleet run's events."""
    limit: Hold | None = None
    cascade: Hold | None = None
    for e in events:
        d = e.detail if isinstance(e.detail, dict) else {}
        if e.kind in HOLDS:
            limit = Hold(HOLDS[e.kind], "held", e.at, _number(d.get("until")), str(d.get("reason") or ""), e.task_id)
        elif e.kind in HOLD_ENDS:
            limit = None
        elif e.kind in CASCADE:
            state = CASCADE[e.kind]
            cascade = None if state is None else Hold("cascade", state, cascade.since if cascade else e.at, None,
                                                      str(d.get("reason") or (cascade.reason if cascade else "")),
                                                      e.task_id)
    if limit is not None and limit.until is not None and limit.until <= now:
        limit = None  # its reset has passed: the children resume on their own
    return limit, cascade


def _child(row: TaskRow, now: float) -> ChildView:
    worktree = Path(row.worktree) if row.worktree else None
    if worktree is None or not worktree.is_dir():
        return ChildView(False, "", row.run_id, None, None, None, None, None, None, None,
                         error="its worktree is gone" if worktree is not None else "no worktree yet")
    try:
        st: Status = build(default_layout(worktree), now=now, recent=0)
    except (NotARepository, OSError, sqlite3.Error) as exc:
        return ChildView(False, "", row.run_id, None, None, None, None, None, None, None, error=str(exc))
    h = st.health
    return ChildView(True, st.state, st.run_id, st.phase.name if st.phase is not None else None, st.iteration,
                     h.classification if h is not None else None, h.stall_score if h is not None else None,
                     st.beat.epoch if st.beat is not None else None, st.wait.label if st.wait is not None else None,
                     st.wait.until if st.wait is not None else None, st.error)


def read(project: Path, now: float | None = None, clock: Callable[[], float] = time.time,
         bound: float = READ_CHILDREN_SECONDS) -> FleetStatus:
    """The fleet of the git work tree at project, as seen at now. NotARepository outside one."""
    try:
        project = work_tree_of(Path(project))
    except NotOwned:
        raise  # git's "dubious ownership": its own words, and the fix
    except NotARepository:
        raise NotARepository(f"{project} is not in a git work tree; pass --project with the fleet's git "
                             f"project") from None
    now = clock() if now is None else now
    fleet_dir = fleet_dir_of(project)
    monitor, problem = _monitor(fleet_dir)
    return from_ledger(project, fleet_dir / "ledger.sqlite3", monitor, now, clock, bound, problem)


def from_ledger(project: Path, path: Path, monitor: Monitor, now: float, clock: Callable[[], float] = time.time,
                bound: float = READ_CHILDREN_SECONDS, problem: str = "", source: str = "") -> FleetStatus:
    """The fleet a ledger records (the project's own, or a copy read from Temporal), its monitor
    as the caller found it."""
    empty = FleetStatus(project, now, False, "", None, None, None, None, "", monitor, None, None, (), error=problem)
    if not path.exists() and not path.is_symlink():
        return empty
    try:
        with FleetLedger.open(path, readonly=True) as led:
            rows, history = led.tasks(), led.attempts()
            starts, ends = led.events("fleet_start"), led.events("fleet_end")
            first = starts[-1].at if starts else None
            ends_now = [e for e in led.events("child_end", after=starts[-1].seq if starts else 0)
                        if isinstance(e.detail, dict)]
            spent = [e.detail.get("cost_usd") for e in ends_now]
            marks = [e for kind in (*HOLDS, *HOLD_ENDS, *CASCADE) for e in led.events(kind)
                     if first is None or e.at >= first]
            paused = led.last_event("paused", "resumed")
            merging = [e for kind in MERGE_EVENTS for e in led.events(kind)]
    except (sqlite3.Error, OSError, RuntimeError, ValueError) as exc:
        return FleetStatus(project, now, True, "", None, None, None, None, "", monitor, None, None, (),
                           error=f"the fleet ledger cannot be read: {exc}")
    start = starts[-1] if starts else None
    end = next((e for e in reversed(ends) if first is None or e.at >= first), None)
    marks.sort(key=lambda e: e.at)
    limit, cascade = _holds(marks, now) if end is None else (None, None)
    by_task: dict[str, list[Attempt]] = {}
    for a in history:
        by_task.setdefault(a.task_id, []).append(a)
    hosts = {e.task_id: str(e.detail["host"]) for e in ends_now if e.detail.get("host")}  # the newest wins
    merged_by: dict[str, list[FleetEvent]] = {}
    for e in merging:
        merged_by.setdefault(e.task_id or "", []).append(e)
    views, unread, deadline = [], 0, clock() + bound
    for row in sorted(rows, key=_order):
        tried = by_task.get(row.id, [])
        child = None
        if row.state == "running" or (row.state in LIVE and row.pid):  # a child loop was launched
            if clock() < deadline:
                child = _child(row, now)
            else:
                unread += 1
                child = ChildView(False, "", row.run_id, None, None, None, None, None, None, None,
                                  error="not read: the time bound for reading children was spent")
        views.append(TaskView(row, tried[-1].agent if tried else "", min((a.started for a in tried), default=None),
                              child, tuple(tried), merges_of(merged_by.get(row.id, [])), _place(row, hosts)))
    sd = start.detail if start is not None and isinstance(start.detail, dict) else {}
    ed = end.detail if end is not None and isinstance(end.detail, dict) else {}
    parallel = sd.get("parallel")
    code = ed.get("exit_code")
    return FleetStatus(project, now, True, str(sd.get("run_id") or ""),
                       parallel if isinstance(parallel, int) and not isinstance(parallel, bool) else None,
                       start.at if start is not None else None, end.at if end is not None else None,
                       code if isinstance(code, int) and not isinstance(code, bool) else None,
                       str(ed.get("reason") or ""), monitor, limit, cascade, tuple(views), unread, problem, source,
                       _spent(spent), _paused(paused, first, monitor) if end is None else None)


def _paused(last: FleetEvent | None, first: float | None, monitor: Monitor) -> Hold | None:
    """The pause asked of this run's monitor, while it runs (a new monitor starts unpaused)."""
    if last is None or last.kind != "paused" or not monitor.alive or (first is not None and last.at < first):
        return None
    source = last.detail.get("source") if isinstance(last.detail, dict) else None
    return Hold("paused", "paused", last.at, None, f"asked from the {source}" if source else "", None)


def _place(row: TaskRow, hosts: dict[str | None, str]) -> str:
    """The machine a Temporal fleet's task runs on (its running attempt's, as the home words it
    in its reason: temporal/mirror.py's `attempt N on HOST: ...`), else the one its last ended
    attempt ran on; "" for a local fleet's (they all run here)."""
    running = RUNNING_ON.match(row.reason or "") if row.state == "running" else None
    return one_line(running.group(1) if running else hosts.get(row.id, ""), 80)


def _spent(costs: Sequence[Any]) -> float | None:
    known = [float(c) for c in costs if isinstance(c, (int, float)) and not isinstance(c, bool) and c >= 0]
    return round(sum(known), 6) if known else None


def _order(row: TaskRow) -> tuple[int, float, str]:
    rank = STATES.index(row.state) if row.state in STATES else len(STATES)
    return rank, row.created, row.id


# --- the JSON document -------------------------------------------------------------------------

def _text(value: object, limit: int = TEXT_LIMIT) -> str:
    return one_line(redact(str(value)), limit)


def _or_none(value: str) -> str | None:
    return value if value else None


def _time(name: str, epoch: float | None) -> dict[str, Any]:
    if epoch is None:
        return {name: None, f"{name}_epoch": None}
    return {name: iso(epoch), f"{name}_epoch": round(float(epoch), 3)}


def _age(now: float, epoch: float | None) -> float | None:
    return round(max(0.0, now - epoch), 1) if epoch is not None else None


def document(fs: FleetStatus) -> dict[str, Any]:
    """The fleet as one JSON-ready document (docs/reference/fleet-status-json.md)."""
    now, m = fs.now, fs.monitor
    return {
        "schema": SCHEMA,
        **_time("generated_at", now),
        "project": str(fs.project),
        "state": fs.state,
        "exit_code": fs.code,
        "error": _text(fs.error, 2000) if fs.error else None,
        "source": _or_none(fs.source),
        "fleet": {
            "run_id": _or_none(fs.run_id), "parallel": fs.parallel, **_time("started", fs.started),
            **_time("ended", fs.ended), "exit_code": fs.exit_code, "reason": _or_none(_text(fs.end_reason)),
            "cost_usd": fs.cost_usd,
        } if fs.ran else None,
        "monitor": {
            "alive": m.alive, "pid": m.pid, "run_id": _or_none(m.run_id), **_time("started", m.started),
            **_time("heartbeat_at", m.heartbeat_at), "heartbeat_age_seconds": _age(now, m.heartbeat_at),
            **_time("temporal_unreachable_since", m.unreachable_since),
        },
        "limit": _hold(fs.limit, now),
        "cascade": _hold(fs.cascade, now),
        "paused": _hold(fs.paused, now),
        "counts": {state.replace("-", "_"): n for state, n in fs.counts().items()},
        "tasks_unread": fs.unread,
        "tasks": [_task(t, now) for t in fs.tasks],
    }


def _hold(h: Hold | None, now: float) -> dict[str, Any] | None:
    if h is None:
        return None
    return {"kind": h.kind, "state": h.state, **_time("since", h.since), **_time("until", h.until),
            "seconds_left": round(max(0.0, h.until - now), 1) if h.until is not None else None,
            "reason": _or_none(_text(h.reason)), "task_id": h.task_id}


def _task(t: TaskView, now: float) -> dict[str, Any]:
    r = t.row
    return {
        "id": r.id, "text": _text(r.text), "state": r.state, "attempts": r.attempts, "restarts": r.restarts,
        "escalations": r.escalations, "strategy": r.strategy, "agent": _or_none(_text(t.agent)),
        "branch": _or_none(r.branch), "worktree": _or_none(r.worktree), "reason": _or_none(_text(r.reason)),
        "merged_sha": _or_none(r.merged_sha), "run_id": _or_none(r.run_id), "pid": r.pid,
        **_time("started", t.started), **_time("updated", r.updated),
        **_time("not_before", r.not_before if r.not_before and r.not_before > now else None),
        "child": _child_doc(t.child, now) if t.child is not None else None,
        "merges": [_merge_doc(m) for m in t.merges],
        "place": _or_none(t.place),
    }


def _merge_doc(m: MergeEvidence) -> dict[str, Any]:
    return {**_time("at", m.at), "result": m.result, "checks": [_text(c) for c in m.checks],
            "tail": [_text(t) for t in m.tail], "lost": [_text(h) for h in m.lost], "to": _or_none(m.to)}


def _child_doc(c: ChildView, now: float) -> dict[str, Any]:
    return {
        "read": c.read, "state": c.state.lower().replace(" ", "_") if c.state else None,
        "run_id": _or_none(c.run_id), "phase": _or_none(_text(c.phase or "", 100)), "iteration": c.iteration,
        "health_class": c.health, "stall_score": c.stall_score, **_time("heartbeat_at", c.heartbeat_at),
        "heartbeat_age_seconds": _age(now, c.heartbeat_at), "wait": _or_none(c.wait or ""),
        **_time("wait_until", c.wait_until), "error": _or_none(_text(c.error, 2000)),
    }


# --- the screen ------------------------------------------------------------------------------

def _line(text: str) -> Text:
    return Text(one_line(redact(text), TEXT_LIMIT))


def _ago(now: float, epoch: float | None) -> str:
    return "-" if epoch is None else f"{duration(now - epoch)} ago"


def render(fs: FleetStatus, shown: int = SHOWN, detail: bool = False) -> RenderableType:
    """The fleet in one screenful: the fleet's line, its pauses, the counts, then one line per
    task (cut to the screen's width); `detail`: every task's whole record instead (see details())."""
    now, parts = fs.now, []
    if not fs.ran:
        parts.append(Text(f"No fleet has run on {fs.project} (start one with "
                          f"`start-multi-agent-loop.sh --project {fs.project} --parallel N`)."))
        if fs.error:
            parts.append(Text(f"error: {one_line(fs.error)}", style="red"))
        return Group(*parts)
    word = {"running": ("RUNNING", "bold green"), "ended": ("ENDED", "bold"), "stopped": ("STOPPED", "bold red")}
    label, style = word[fs.state]
    head = Text.assemble(("fleet ", "bold"), (label, style), f"  {fs.project}")
    if fs.parallel is not None:
        head.append(f"  parallel {fs.parallel}")
    if fs.run_id:
        head.append(f"  run {fs.run_id}")
    parts.append(head)
    m = fs.monitor
    if fs.source:
        parts.append(Text(f"read from {fs.source}; the fleet's workflow "
                          + ("runs" if m.alive else "has ended" if fs.ended is not None else "is gone")))
    elif m.alive:
        parts.append(Text(f"monitor: pid {m.pid or '?'}, alive; heartbeat {_ago(now, m.heartbeat_at)}"))
        if m.unreachable_since is not None:
            parts.append(Text(f"Temporal unreachable since {when.stamp(m.unreachable_since)} "
                              f"({duration(now - m.unreachable_since)}), retrying", style="yellow"))
    else:
        last = f"; last heartbeat {_ago(now, m.heartbeat_at)}" if m.heartbeat_at is not None else ""
        parts.append(Text(f"monitor: not running{last}", style="red" if fs.state == "stopped" else ""))
    if fs.started is not None:
        span = f"started {when.stamp(fs.started)}"
        if fs.ended is not None:
            span += f", ended {when.stamp(fs.ended)} (exit {fs.exit_code if fs.exit_code is not None else '?'}"
            span += f": {one_line(redact(fs.end_reason), TEXT_LIMIT)})" if fs.end_reason else ")"
        parts.append(Text(span))
    for h in (fs.limit, fs.cascade, fs.paused):
        if h is not None:
            parts.append(_hold_line(h))
    counts = fs.counts()
    parts.append(Text("tasks: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) if fs.tasks
                      else "tasks: none recorded yet"))
    if fs.error:
        parts.append(Text(f"error: {one_line(redact(fs.error), 2000)}", style="red"))
    if fs.tasks:
        parts.append(details(fs.tasks[:shown], now) if detail else _table(fs.tasks[:shown], now))
        if len(fs.tasks) > shown:
            parts.append(Text(f"... and {len(fs.tasks) - shown} more task(s): `--json` lists every one"))
    if fs.unread:
        parts.append(Text(f"{fs.unread} running child(ren) not read: the time bound was spent"))
    return Group(*parts)


def _hold_line(h: Hold) -> Text:
    until = f" until {when.clock(h.until)}" if h.until is not None else ""
    if h.kind == "paused":
        text = f"LAUNCHES PAUSED: no child starts until `genesis resume` (since {when.clock(h.since)})"
    elif h.kind == "cascade":
        what = ("CASCADE PAUSE: restarts stopped" if h.state == "paused"
                else "CASCADE PAUSE: probing with one child" + (f" ({h.task_id})" if h.task_id else ""))
        text = f"{what} since {when.clock(h.since)}"
    else:
        name = "usage limit" if h.kind == "limit" else "API outage"
        who = f", met by {h.task_id}" if h.task_id else ""
        text = f"{name.upper()}: no child starts a phase{until} (since {when.clock(h.since)}{who})"
    return Text(text + (f": {one_line(redact(h.reason), TEXT_LIMIT)}" if h.reason else ""), style="bold yellow")


def _starting(row: TaskRow, c: ChildView) -> bool:
    """A child launched that has not begun its first iteration: its loop holds its lock and has
    not started one, or has not taken its lock yet while the loop the monitor started lives."""
    if c.state == "RUNNING":
        return c.iteration is None
    return c.state in ("NOT RUNNING", "STOPPED") and row.state == "running" and row.pid is not None and \
        _alive(row.pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _doing(t: TaskView, now: float) -> Text:
    """What the task is at, in a few words: its child's phase and health, or why it stands."""
    r, c = t.row, t.child
    if c is not None and c.read:
        doing = Text(c.phase or (f"waiting: {c.wait}" if c.wait else "starting" if _starting(r, c)
                                  else c.state.lower()))
        if c.iteration is not None and c.phase:
            doing.append(f" (it {c.iteration})")
        if c.health:
            doing.append(", ").append(c.health, style=HEALTH_STYLE.get(c.health, ""))
        if c.heartbeat_at is not None:
            doing.append(f", beat {duration(now - c.heartbeat_at)} ago")
        return doing
    if c is not None:
        return Text("not read: " + one_line(c.error or "?", 80), style="dim")
    reason = one_line(redact(r.reason), TEXT_LIMIT)
    if r.state in ("merged", "ready") and r.merged_sha:
        reason = f"{r.merged_sha[:12]}" + (f" {reason}" if reason else "")
    if r.not_before and r.not_before > now:
        reason = f"next try {when.clock(r.not_before, seconds=True)}" + (f"; {reason}" if reason else "")
    return Text(reason or "-")


def _tries(r: TaskRow) -> str:
    return f"{r.attempts}" + (f" ({r.restarts}r {r.escalations}e)" if r.restarts or r.escalations else "")


ID_WIDTH = 30   # a task's id on its line: cut past this (`--task` takes a start of it)


class _Rows:
    """One line per task, whatever the screen's width: the id, the state, the tries, then what
    it is at, cut to fit (`--task ID` or `-v` shows it whole)."""

    def __init__(self, tasks: Sequence[TaskView], now: float):
        self.rows = [(r.id, r.state, _tries(r), _doing(t, now)) for t in tasks for r in (t.row,)]

    def __rich_console__(self, console: Console, options: Any):
        width = options.max_width
        wide = [min(ID_WIDTH, max([4, *(len(r[0]) for r in self.rows)])), max([5, *(len(r[1]) for r in self.rows)]),
                max([5, *(len(r[2]) for r in self.rows)])]
        head = Text(f"{'task':<{wide[0]}}  {'state':<{wide[1]}}  {'tries':<{wide[2]}}  now", style="bold")
        head.truncate(width, overflow="ellipsis")
        yield head
        for ident, state, tries, doing in self.rows:
            cut = ident if len(ident) <= wide[0] else ident[:wide[0] - 1] + "…"
            line = Text.assemble(f"{cut:<{wide[0]}}  ", (f"{state:<{wide[1]}}", STATE_STYLE.get(state, "")),
                                 f"  {tries:<{wide[2]}}  ", doing)
            line.truncate(width, overflow="ellipsis")
            line.no_wrap = True
            yield line


def _table(tasks: Sequence[TaskView], now: float) -> "_Rows":
    return _Rows(tasks, now)


def details(tasks: Sequence[TaskView], now: float) -> Group:
    """Every task's whole record, a few lines each (wrapped to the screen, never cut)."""
    blocks: list[RenderableType] = []
    for t in tasks:
        r, c = t.row, t.child
        head = Text.assemble((r.id, "bold"), "  ", (r.state, STATE_STYLE.get(r.state, "")))
        lines = [head, Text("  task: ") + _line(r.text),
                 Text(f"  tries: {r.attempts} ({r.restarts} restart(s), {r.escalations} escalation(s)), agent ")
                 + _line(t.agent or "-")
                 + Text(f", first started {when.stamp(t.started)}" if t.started is not None else "")]
        if c is not None:
            lines.append(Text("  child: ") + _doing(t, now))
        lines += [Text("  now: ") + _doing(t, now)] if c is None else []
        lines += [Text("  branch: ") + _line(r.branch or "-"), Text("  worktree: ") + _line(r.worktree or "-")]
        lines += [Text("  machine: ") + _line(t.place)] if t.place else []
        if r.reason and c is not None:
            lines.append(Text("  reason: ") + _line(r.reason))
        for a in t.attempts:
            ended = (f"ended {when.stamp(a.ended)}, exit {a.exit_code if a.exit_code is not None else '?'}, "
                     f"{a.outcome or '?'}") if a.ended is not None else "running"
            lines.append(Text(f"  attempt {a.attempt}: {a.kind}, {one_line(a.agent, 40)}, started "
                              f"{when.stamp(a.started)}, {ended}" + (f"; {one_line(redact(a.reason), 160)}"
                                                                      if a.reason else "")))
        for m in t.merges:  # the merged tree's checks, green or red; a dropping merge's lost hunks
            lines.append(Text("  merge " + one_line(redact(merge_line(m)), 600)))
        blocks.append(Group(*lines))
        blocks.append(Text(""))
    return Group(*blocks[:-1])


def run_fleet_status(project: Path, as_json: bool = False, out: TextIO | None = None,
                     clock: Callable[[], float] = time.time, task: str | None = None, verbose: bool = False) -> int:
    """Print the fleet's status (or its JSON document); returns the exit code: 0 when a fleet
    ran on the project, NOT_RUNNING when none ever did. NotARepository when project is not in a
    git work tree (with as_json, a document that says so, and USAGE). `task`: that task alone,
    whole (its id, a start of it, or its text); `verbose`: every task whole."""
    out = out if out is not None else sys.stdout
    try:
        fs = read(project, clock=clock)
    except NotARepository as exc:
        if not as_json:
            raise
        fs = FleetStatus(Path(project), clock(), False, "", None, None, None, None, "",
                         Monitor(False, None, "", None, None), None, None, (), error=str(exc))
        doc = {**document(fs), "exit_code": exitcodes.USAGE, "project": None, "monitor": None}
        out.write(json.dumps(doc, indent=2) + "\n")
        return exitcodes.USAGE
    if task is not None:
        chosen = pick(fs.tasks, task)
        if not chosen:
            sys.stderr.write(f"no task {task!r} in the fleet on {fs.project}: `fleet status` lists them (the first "
                             f"column is the id)\n")
            return exitcodes.USAGE
        fs = replace(fs, tasks=chosen)
    return show(fs, as_json, out, detail=verbose or task is not None)


def pick(tasks: Sequence[TaskView], wanted: str) -> tuple[TaskView, ...]:
    """The task named by its id, its text, or (when only one starts so) a start of its id."""
    wanted = wanted.strip()
    exact = tuple(t for t in tasks if wanted in (t.row.id, t.row.text))
    if exact:
        return exact
    started = tuple(t for t in tasks if t.row.id.startswith(wanted))
    return started if len(started) == 1 else ()


def show(fs: FleetStatus, as_json: bool, out: TextIO, detail: bool = False) -> int:
    """The status on out (the screen, or its JSON document); its exit code."""
    if as_json:
        out.write(json.dumps(document(fs), indent=2) + "\n")
    else:
        Console(file=out, highlight=False).print(render(fs, detail=detail))
    return fs.code


def run_fleets_status(fleet_file: Path, projects: Sequence[Path], as_json: bool = False, out: TextIO | None = None,
                      clock: Callable[[], float] = time.time) -> int:
    """Every project of a fleet file (`--fleet`): one section each, or one JSON document whose
    `projects` are the documents `fleet status --json` gives for each (schema 1:
    docs/reference/fleet-status-json.md). Exit 0 when a fleet ran on one of them, NOT_RUNNING otherwise."""
    out = out if out is not None else sys.stdout
    now = clock()
    found = [read(project, now=now) for project in projects]
    code = exitcodes.OK if any(fs.ran for fs in found) else exitcodes.NOT_RUNNING
    if as_json:
        doc = {"schema": SCHEMA, **_time("generated_at", now), "fleet_file": str(fleet_file), "exit_code": code,
               "projects": [document(fs) for fs in found]}
        out.write(json.dumps(doc, indent=2) + "\n")
        return code
    console = Console(file=out, highlight=False)
    console.print(Text(f"fleet file {fleet_file}: {len(found)} project(s), "
                       f"{sum(1 for fs in found if fs.monitor.alive)} running"))
    for fs in found:
        console.print()
        console.rule(str(fs.project), align="left")
        console.print(render(fs))
    return code
