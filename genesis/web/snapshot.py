"""The dashboard's one document (`/api/state`, schema 1): every project's `status --json` and
`fleet status --json` documents, its health score, and the tiles the overview draws.

It is rebuilt twice a second for as long as a page watches, over fleets of fifty children, so
what is read is read only when it changed: a loop's state is rebuilt from its files when a file
of its state folder (or its TASKS.md, or its lock) changed since the last read, else the last
read is reused with the new time. A project that cannot be read gets its `error`; the others
are still shown.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from genesis import exitcodes
from genesis.actions.errors import EVENT as ACTION_EVENT
from genesis.actions.offered import for_fleet, for_loop, for_task
from genesis.clock import iso
from genesis.config import default_layout
from genesis.fleet import lifecycle
from genesis.fleet.status import ChildView, FleetStatus, lock_held
from genesis.fleet.status import document as fleet_document
from genesis.fleet.status import read as fleet_read
from genesis.ledger.store import Ledger, LedgerError
from genesis.redact import redact
from genesis.repo.gitcmd import GitFailed, NotARepository
from genesis.repo.tasks import TASKS_FILE
from genesis.status.document import document as status_document
from genesis.status.screen import home_short
from genesis.status.view import Status, build
from genesis.store.layout import Layout
from genesis.store.looplock import FLEET_RUN
from genesis.web.discovery import key_of
from genesis.web.metrics import ProjectSource
from genesis.web.score import ENDED_WELL, Score, machine_score, score  # the score's "ended well": the colour's too
from genesis.words import one_line

__all__ = ["SCHEMA", "Reader", "snapshot", "colour_of_loop", "colour_of_task", "ALERTS", "READ_BOUND"]

SCHEMA = 1
ALERTS = 10             # alerts listed, per project and for the machine
READ_BOUND = 3.0        # seconds the children of one project are read within; the rest are said unread
REFRESH = 5.0           # a loop's state is rebuilt at least this often even when no file changed
TEXT_LIMIT = 300
LOOP_PAGES = 64         # loop pages whose last read is kept
# A loop whose agent was just killed as stuck or wedged stays red this long: its retry starts
# healthy a second later, and a page that looks every half second would miss the red.
STUCK_RED = 60.0
STUCK_KINDS = ("stuck", "wedged")
TASK_YELLOW = frozenset({"merging", "restarting", "escalated", "waiting", "queued"})
TASK_RED = frozenset({"needs-review", "failed"})
TASK_LIVE = lifecycle.UNFINISHED  # not decided yet (fleet/lifecycle.py): its child may run or be relaunched


def _text(value: object, limit: int = TEXT_LIMIT) -> str:
    return one_line(redact(str(value)), limit)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _listing(folder: Path) -> tuple[tuple[str, int, int], ...]:
    try:
        with os.scandir(folder) as entries:
            out = []
            for e in entries:
                if e.is_file(follow_symlinks=False) and not e.name.endswith("-shm"):  # readers touch it
                    st = e.stat(follow_symlinks=False)
                    if not (e.name.endswith("-wal") and st.st_size == 0):  # a reader's first open makes it
                        out.append((e.name, st.st_mtime_ns, st.st_size))
            return tuple(sorted(out))
    except OSError:
        return ()


def _signature(layout: Layout) -> tuple[Any, ...]:
    """What a loop's status is read from, cheaply: a change to any of it means a new read."""
    return (lock_held(layout.loop_lock), _listing(layout.state_dir), _listing(layout.heartbeat_dir),
            _stamp(layout.project / TASKS_FILE), _stamp(layout.breaker_file))


@dataclass
class _Seen:
    signature: tuple[Any, ...]
    at: float                  # monotonic time of the read
    value: Any
    doc: dict[str, Any] | None = None   # the status document, as of the read (a child's: see Reader.child)


class Reader:
    """Reads loops' states and ledgers' alerts, each again only when its files changed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, refresh: float = REFRESH):
        self.clock = clock
        self.refresh = refresh
        self._status: dict[Path, _Seen] = {}
        self._alerts: dict[Path, _Seen] = {}
        self._actions: dict[Path, _Seen] = {}
        self._fleets: dict[Path, _Seen] = {}
        self._touched: set[Path] = set()
        self._layouts: dict[Path, Layout | None] = {}
        self._loops: dict[str, _Seen] = {}
        self._stuck: dict[Path, _Seen] = {}

    def layout(self, worktree: Path) -> Layout | None:
        """A worktree's layout (asked of git once per worktree); None when it is no work tree."""
        if worktree not in self._layouts:
            try:
                self._layouts[worktree] = default_layout(worktree) if worktree.is_dir() else None
            except (NotARepository, GitFailed, OSError):
                return None  # maybe not yet: ask again next time
        return self._layouts[worktree]

    def status(self, layout: Layout, now: float) -> Status:
        sig, tick = _signature(layout), self.clock()
        self._touched.add(layout.state_dir)
        seen = self._status.get(layout.state_dir)
        if seen is None or seen.signature != sig or tick - seen.at >= self.refresh:
            seen = _Seen(sig, tick, build(layout, now=now, recent=0))
            self._status[layout.state_dir] = seen
        return replace(seen.value, now=now)

    def fleet(self, source: ProjectSource, now: float) -> FleetStatus:
        """The project's fleet without its children's own states, read again only when its
        ledger, its monitor's heartbeat or its lock changed (or REFRESH passed)."""
        fleet_dir = source.layout.state_dir / "fleet"
        sig, tick = (lock_held(fleet_dir / "lock"), _listing(fleet_dir)), self.clock()
        seen = self._fleets.get(fleet_dir)
        if seen is None or seen.signature != sig or tick - seen.at >= self.refresh:
            seen = _Seen(sig, tick, fleet_read(source.project, now, bound=0.0))  # children: read one by one
            self._fleets[fleet_dir] = seen
        return replace(seen.value, now=now)

    def child(self, layout: Layout, now: float) -> tuple[Status, dict[str, Any]]:
        """A fleet child's state and its status document as of its last read: a document is
        made (and its texts redacted) once per change, not twice a second for every child; what
        ages with the clock is worked out from its epochs where it is shown."""
        st = self.status(layout, now)
        seen = self._status[layout.state_dir]
        if seen.doc is None:
            seen.doc = status_document(st, exitcodes.OK if st.running else exitcodes.NOT_RUNNING, now)
        return st, seen.doc

    def loop(self, key: str, layout: Layout, make: Callable[[], Any]) -> Any:
        """make()'s value for a loop's page, made again only when the loop's files changed (or
        REFRESH passed): each open loop page asks every second, and a page costs a ledger read
        and a timeline. Called from several threads: a value is made at worst twice."""
        sig, tick = _signature(layout), self.clock()
        seen = self._loops.get(key)
        if seen is None or seen.signature != sig or tick - seen.at >= self.refresh:
            seen = _Seen(sig, tick, make())
            self._loops[key] = seen
            while len(self._loops) > LOOP_PAGES:
                self._loops.pop(next(iter(self._loops)), None)  # the oldest read first
        return seen.value

    def stuck_at(self, layout: Layout) -> float | None:
        """When the loop's newest stuck or wedged incident was recorded (None: never), read
        again only when its ledger changed."""
        ledger = layout.ledger_file
        sig = (_stamp(ledger), _stamp(ledger.with_name(ledger.name + "-wal")))
        seen = self._stuck.get(ledger)
        if seen is None or seen.signature != sig:
            seen = _Seen(sig, self.clock(), _read_stuck(ledger))
            self._stuck[ledger] = seen
        return seen.value

    def alerts(self, layout: Layout, name: str) -> list[dict[str, Any]]:
        """The project's last ALERTS alerts, newest first."""
        ledger = layout.ledger_file
        sig = (_stamp(ledger), _stamp(ledger.with_name(ledger.name + "-wal")))
        seen = self._alerts.get(ledger)
        if seen is None or seen.signature != sig:
            seen = _Seen(sig, self.clock(), _read_alerts(ledger, name))
            self._alerts[ledger] = seen
        return seen.value

    def actions(self, layout: Layout) -> list[dict[str, Any]]:
        """The project's last ALERTS actions (genesis/actions/), newest first."""
        ledger = layout.ledger_file
        sig = (_stamp(ledger), _stamp(ledger.with_name(ledger.name + "-wal")))
        seen = self._actions.get(ledger)
        if seen is None or seen.signature != sig:
            seen = _Seen(sig, self.clock(), _read_actions(ledger))
            self._actions[ledger] = seen
        return seen.value

    def sweep(self) -> None:
        """Forget the loops not read since the last sweep (a fleet's children that ended): a
        night of fleets must not grow the server."""
        for state in [s for s in self._status if s not in self._touched]:
            del self._status[state]
            self._stuck.pop(state / "ledger.sqlite3", None)
        self._touched = set()


def _read_stuck(ledger: Path) -> float | None:
    if not ledger.is_file():
        return None
    try:
        with Ledger.open(ledger, readonly=True) as led:
            rows = led.query(f"SELECT MAX(at) AS at FROM incidents WHERE kind IN ({','.join('?' * len(STUCK_KINDS))})",
                             STUCK_KINDS)
    except (LedgerError, sqlite3.Error, OSError):
        return None
    return float(rows[0]["at"]) if rows and rows[0]["at"] is not None else None


def _read_alerts(ledger: Path, name: str) -> list[dict[str, Any]]:
    if not ledger.is_file():
        return []
    try:
        with Ledger.open(ledger, readonly=True) as led:
            rows = led.query("SELECT at, severity, cause, kind, decision FROM alerts ORDER BY at DESC LIMIT ?",
                             (ALERTS,))
    except (LedgerError, sqlite3.Error, OSError):
        return []
    return [{"at": iso(r["at"]), "at_epoch": round(float(r["at"]), 3), "project": name,
             "severity": _text(r["severity"] or "", 20), "title": _text(r["cause"] or r["kind"] or "alert"),
             "decision": _text(r["decision"] or "pending", 20)} for r in rows]


def _read_actions(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.is_file():
        return []
    try:
        with Ledger.open(ledger, readonly=True) as led:
            rows = led.events(kinds=(ACTION_EVENT,), limit=ALERTS, newest=True)
    except (LedgerError, sqlite3.Error, OSError):
        return []
    return [{"at": e["at"], "at_epoch": round(float(e["epoch"]), 3), "action": _text(e.get("action") or "", 20),
             "task": _text(e.get("task") or "", 200), "source": _text(e.get("source") or "", 20),
             "credential": _text(e.get("credential") or "", 80), "said": _text(e.get("said") or "")}
            for e in reversed(rows)]


# --- colours -------------------------------------------------------------------------------------

def colour_of_loop(doc: dict[str, Any]) -> str:
    """green running and healthy; yellow slow, waiting or frozen; red stuck, wedged, breaker OPEN,
    killed or ended abnormally; grey ended well or never ran."""
    state, phase, breaker = doc.get("state"), doc.get("phase") or {}, doc.get("breaker") or {}
    if state in ("running", "waiting", "frozen"):
        if phase.get("health_class") in ("stuck", "wedged") or breaker.get("state") == "OPEN":
            return "red"
        if state != "running" or phase.get("health_class") == "slow" or doc.get("wait"):
            return "yellow"
        return "green"
    run = doc.get("run") or {}
    if state == "stopped" or (run and run.get("exit_code") not in ENDED_WELL):
        return "red"
    return "grey"


def colour_of_task(task: dict[str, Any], child: dict[str, Any] | None, fleet_state: str) -> str:
    """A fleet task's colour: its state in the fleet, and its child loop's health while it runs."""
    state = task.get("state")
    if state in TASK_RED:
        return "red"
    if state in TASK_LIVE and fleet_state == "stopped":
        return "red"  # its monitor was killed: nothing moves it on
    if state == "running":
        return colour_of_loop(child) if child is not None and child.get("state") != "not_running" else "green"
    if state in TASK_YELLOW:
        return "yellow"
    return "grey"


# --- tiles ---------------------------------------------------------------------------------------

def _killed_lately(stuck_at: float | None, now: float) -> bool:
    return stuck_at is not None and 0 <= now - stuck_at < STUCK_RED


def _tile_of_loop(key: str, title: str, kind: str, doc: dict[str, Any] | None, now: float,
                  stuck_at: float | None = None) -> dict[str, Any]:
    doc = doc or {}
    colour = colour_of_loop(doc) if doc else "grey"
    if doc.get("state") in ("running", "waiting", "frozen") and _killed_lately(stuck_at, now):
        colour = "red"  # its agent was killed as stuck a moment ago: its retry has yet to prove itself
    phase, wait, breaker = doc.get("phase") or {}, doc.get("wait"), doc.get("breaker") or {}
    tool = phase.get("tool_in_flight") or {}
    beat = phase.get("heartbeat_at_epoch")
    return {"key": key, "kind": kind, "title": title, "colour": colour,
            "state": doc.get("state") or "not_running", "phase": phase.get("name"),
            "health": phase.get("health_class"),
            "heartbeat_age_seconds": round(max(0.0, now - beat), 1) if beat is not None else None,
            "tool": tool.get("text") or tool.get("name") or None,
            "wait": {"kind": wait.get("kind"), "until_epoch": wait.get("until_epoch"), "reason": wait.get("reason")}
            if wait else None,
            "breaker": breaker.get("state"), "attempts": (phase.get("attempt") or 0) + 1 if phase else 0,
            "href": f"/loop/{key}", "stuck_at_epoch": stuck_at if _killed_lately(stuck_at, now) else None,
            "reason": None, "merge": None, "place": None,
            "actions": for_loop(doc.get("state"), (wait or {}).get("kind"))}


def _tile_of_task(pkey: str, task: dict[str, Any], child: dict[str, Any] | None, fleet_state: str,
                  now: float, stuck_at: float | None = None) -> dict[str, Any]:
    key = f"{pkey}--{task['id']}"
    tile = _tile_of_loop(key, task.get("text") or task["id"], "task", child, now, stuck_at)
    colour = colour_of_task(task, child, fleet_state)
    if task.get("state") in TASK_LIVE and _killed_lately(stuck_at, now):
        colour = "red"  # its agent was killed as stuck a moment ago: its retry has yet to prove itself
    tile.update(colour=colour, state=task.get("state"), attempts=task.get("attempts") or 0,
                reason=task.get("reason") if task.get("state") in TASK_RED else None,
                actions=for_task(task.get("state"), ((child or {}).get("wait") or {}).get("kind")))
    tile["place"] = task.get("place")  # a Temporal fleet's machine: one fleet, its machines as places
    merges = task.get("merges") or []
    if merges:  # the last merge's evidence, in a line: green, red with its first check, or what it dropped
        m = merges[-1]
        said = (m.get("lost") if m.get("result") == "dropped" else m.get("checks")) or []
        tile["merge"] = {"result": m.get("result"), "at_epoch": m.get("at_epoch"), "said": said[0] if said else None}
    if tile["wait"] is None and task.get("not_before_epoch"):
        tile["wait"] = {"kind": "retry", "until_epoch": task["not_before_epoch"], "reason": task.get("reason")}
    return tile


# --- one project -----------------------------------------------------------------------------------

def _child_view(st: Status) -> ChildView:
    h = st.health
    return ChildView(True, st.state, st.run_id, st.phase.name if st.phase is not None else None, st.iteration,
                     h.classification if h is not None else None, h.stall_score if h is not None else None,
                     st.beat.epoch if st.beat is not None else None, st.wait.label if st.wait is not None else None,
                     st.wait.until if st.wait is not None else None, st.error)


def _fleet(source: ProjectSource, reader: Reader, now: float,
           clock: Callable[[], float]) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, float | None]]:
    """The fleet's document, its running children read by the reader (within READ_BOUND), and
    each read child's own status document and newest stuck kill by task id."""
    fs = reader.fleet(source, now)
    children: dict[str, dict[str, Any]] = {}
    stuck: dict[str, float | None] = {}
    tasks, unread, deadline = [], 0, clock() + READ_BOUND
    for t in fs.tasks:
        if t.child is None or not t.row.worktree:
            tasks.append(t)
            continue
        layout = reader.layout(Path(t.row.worktree)) if clock() < deadline else None
        if layout is None:
            unread += 1
            tasks.append(t)
            continue
        st, children[t.row.id] = reader.child(layout, now)
        stuck[t.row.id] = reader.stuck_at(layout)
        tasks.append(replace(t, child=_child_view(st)))
    return fleet_document(replace(fs, tasks=tuple(tasks), unread=unread)), children, stuck


def _project(source: ProjectSource, reader: Reader, now: float,
             clock: Callable[[], float]) -> tuple[dict[str, Any], Score]:
    pkey = key_of(source.project)
    out: dict[str, Any] = {"key": pkey, "name": _text(source.name, 100), "path": _text(source.project, 1000),
                           "shown_path": _text(home_short(source.project), 1000),
                           "error": None, "status": None, "fleet": None, "tiles": [], "retries": [],
                           "escalations": [], "pauses": [], "alerts": [], "cost_usd": None, "actions": [],
                           "fleet_actions": []}
    try:
        st = reader.status(source.layout, now)
        status = status_document(st, exitcodes.OK if st.running else exitcodes.NOT_RUNNING, now)
        fleet, children, stuck = _fleet(source, reader, now, clock) if source.fleet_ledger is not None \
            else (None, {}, {})
        own_stuck = reader.stuck_at(source.layout)
        alerts = reader.alerts(source.layout, out["name"])
    except Exception as exc:  # noqa: BLE001 - one project's damage must never take the page down
        out["error"] = _text(f"{type(exc).__name__}: {exc}", 2000)
        s = score(None, None, now, error=out["error"])
        return {**out, "score": s.value, "reasons": [r.as_json() for r in s.reasons]}, s
    out.update(status=status, fleet=fleet, alerts=alerts, actions=reader.actions(source.layout),
               fleet_actions=for_fleet(bool(fleet and (fleet.get("monitor") or {}).get("alive"))))
    run_id = str((status.get("run") or {}).get("id") or "")
    # A fleet's monitor holds the project's loop lock under a fleet run id: its tasks are the tiles.
    own_ran = (status.get("run") is not None or status.get("state") in ("running", "waiting", "frozen")) and \
        not run_id.startswith(FLEET_RUN)
    if own_ran:
        out["tiles"].append(_tile_of_loop(pkey, out["name"], "loop", status, now, own_stuck))
    costs = [(status.get("totals") or {}).get("cost_usd")]
    if fleet is not None:
        costs.append((fleet.get("fleet") or {}).get("cost_usd"))  # the ended attempts'; running ones below
        for task in fleet["tasks"]:
            child = children.get(task["id"])
            tile = _tile_of_task(pkey, task, child, fleet["state"], now, stuck.get(task["id"]))
            out["tiles"].append(tile)
            costs.append(((child or {}).get("totals") or {}).get("cost_usd"))
            if task["state"] == "restarting" or (task["state"] in TASK_LIVE and (task.get("restarts") or 0) > 0):
                out["retries"].append({"key": tile["key"], "title": tile["title"], "attempt": task.get("attempts"),
                                       "reason": task.get("reason")})
            if task["state"] == "escalated":
                out["escalations"].append({"key": tile["key"], "title": tile["title"],
                                           "escalations": task.get("escalations"), "reason": task.get("reason")})
        for hold in (fleet.get("limit"), fleet.get("cascade"), fleet.get("paused")):
            if hold:
                out["pauses"].append({"kind": hold["kind"] if hold["kind"] in ("cascade", "paused") else "limit",
                                      "until_epoch": hold.get("until_epoch"), "reason": hold.get("reason")})
    phase, wait = status.get("phase") or {}, status.get("wait") or {}
    if phase.get("attempt"):
        out["retries"].append({"key": pkey, "title": out["name"], "attempt": phase["attempt"] + 1,
                               "reason": phase.get("health_reason")})
    if wait.get("kind") in ("limit", "outage"):
        out["pauses"].append({"kind": "limit", "until_epoch": wait.get("until_epoch"), "reason": wait.get("reason")})
    known = [c for c in costs if isinstance(c, (int, float))]
    out["cost_usd"] = round(sum(known), 4) if known else None
    # A tile red from a recent kill whose health no longer says stuck (its retry runs) costs too.
    killed = [t["title"] for t in out["tiles"] if t.get("stuck_at_epoch") and t.get("health") not in STUCK_KINDS]
    s = score(status, fleet, now, killed=killed)
    out.update(score=s.value, reasons=[r.as_json() for r in s.reasons])
    return out, s


def snapshot(sources: Sequence[ProjectSource], now: float, reader: Reader | None = None,
             clock: Callable[[], float] = time.monotonic, problems: Sequence[str] = ()) -> dict[str, Any]:
    """The `/api/state` document for these projects, as seen at now."""
    reader = reader if reader is not None else Reader(clock)
    read = [_project(s, reader, now, clock) for s in sources]
    reader.sweep()
    projects = [p for p, _ in read]
    machine = machine_score([s for _, s in read], [p["name"] for p in projects])
    alerts = sorted((a for p in projects for a in p["alerts"]), key=lambda a: -a["at_epoch"])[:ALERTS]
    running = sum(1 for p in projects for t in p["tiles"]
                  if t["state"] in (("running", "waiting", "frozen") if t["kind"] == "loop" else ("running",)))
    costs = [p["cost_usd"] for p in projects if p["cost_usd"] is not None]
    return {"schema": SCHEMA, "generated_at": iso(now), "generated_at_epoch": round(now, 3),
            "machine": {"score": machine.value, "reasons": [r.as_json() for r in machine.reasons],
                        "loops_running": running, "cost_usd": round(sum(costs), 4) if costs else None},
            "projects": projects, "alerts": alerts, "problems": [_text(p, 2000) for p in problems]}
