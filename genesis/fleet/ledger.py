"""The fleet ledger: one SQLite file (WAL) in the fleet's private state folder, written by
the monitor and read by `fleet status` and `report`.

Three tables: `tasks` (one row per task: its state and counters, what the views show),
`attempts` (the retry history: every launch of a task's child, its kind, reason, agent,
times and outcome) and `events` (everything the monitor decided, in order). One
connection, one short transaction per write: the monitor of a 50-child fleet writes many
events a second while any number of readers read (WAL never blocks a reader).

A file that is not a fleet ledger (corrupt, another program's) is kept aside with its -wal and
-shm, and a new one started.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable

from genesis.fleet import lifecycle
from genesis.ledger.store import BUSY_TIMEOUT, MAX_DETAIL_CHARS, READ_TIMEOUT, LedgerError
from genesis.redact import redact_all
from genesis.store.atomicio import DiskFull, free_bytes, quarantine

__all__ = ["FleetLedger", "FleetLedgerError", "TaskRow", "Attempt", "FleetEvent", "TERMINAL", "STATES", "KINDS",
           "OUTCOMES", "Beats", "FILE_NAME", "SCHEMA_VERSION", "MAX_EVENTS"]

FILE_NAME = "ledger.sqlite3"
SCHEMA_VERSION = 1
STATES = frozenset(lifecycle.STATES)      # a task's lifecycle (fleet/lifecycle.py)
TERMINAL = lifecycle.TERMINAL             # a restarted monitor never retries these
KINDS = frozenset({"start", "restart", "escalate", "resume"})          # why an attempt was launched
OUTCOMES = frozenset({"verified", "failed", "limit", "outage", "stopped", "config"})
MAX_TEXT_CHARS = 4000        # a task's text, a reason: cut beyond (the ledger stays small)
MAX_EVENTS = 200_000         # the events kept; the oldest go beyond (a whole night is far fewer)
PRUNE_EVERY = 1000           # inserts between two checks of the bound

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tasks (
        id TEXT PRIMARY KEY, text TEXT NOT NULL, state TEXT NOT NULL, strategy INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0, restarts INTEGER NOT NULL DEFAULT 0,
        escalations INTEGER NOT NULL DEFAULT 0, branch TEXT NOT NULL DEFAULT '',
        worktree TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL DEFAULT '', merged_sha TEXT NOT NULL DEFAULT '',
        run_id TEXT NOT NULL DEFAULT '', pid INTEGER, not_before REAL NOT NULL DEFAULT 0,
        updated REAL NOT NULL, created REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS attempts (
        task_id TEXT NOT NULL, attempt INTEGER NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL,
        agent TEXT NOT NULL, strategy INTEGER NOT NULL DEFAULT 0, started REAL NOT NULL, ended REAL,
        exit_code INTEGER, outcome TEXT, run_id TEXT NOT NULL DEFAULT '', PRIMARY KEY (task_id, attempt))""",
    """CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, task_id TEXT, detail TEXT NOT NULL)""",
    # One row per task: the newest heartbeat of its child the monitor saw, and how many it saw.
    # Upserted, never appended: a night of beats from 50 children keeps the file small.
    """CREATE TABLE IF NOT EXISTS beats (
        task_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, last_beat REAL NOT NULL, last_seen REAL NOT NULL,
        seen INTEGER NOT NULL, lag_max REAL NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS events_kind ON events (kind, id)",
    "CREATE INDEX IF NOT EXISTS events_task ON events (task_id, id)",
)
_TABLES = frozenset({"tasks", "attempts", "events", "beats"})
_FIRST_TABLES = frozenset({"tasks", "attempts", "events"})  # a ledger of the first fleets: `beats` is added


class FleetLedgerError(LedgerError):
    """The fleet ledger cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class TaskRow:
    id: str
    text: str
    state: str
    strategy: int = 0          # index into ladder.strategies(cfg)
    attempts: int = 0          # attempts launched so far
    restarts: int = 0          # restarts at the current strategy
    escalations: int = 0
    branch: str = ""
    worktree: str = ""
    reason: str = ""
    merged_sha: str = ""
    run_id: str = ""           # the running (or last) child's run id
    pid: int | None = None     # the child loop's pid (its liveness is its loop lock, never this alone)
    not_before: float = 0.0    # relaunch not before (epoch)
    updated: float = 0.0
    created: float = 0.0


@dataclass(frozen=True)
class Attempt:
    task_id: str
    attempt: int               # 1, 2, ... per task
    kind: str                  # start | restart | escalate | resume
    reason: str
    agent: str
    started: float
    ended: float | None
    exit_code: int | None
    outcome: str | None        # verified | failed | limit | outage | stopped | config; None while it runs
    run_id: str
    strategy: int = 0          # the strategy it ran with


@dataclass(frozen=True)
class Beats:
    task_id: str
    run_id: str                # the child run the newest beat came from (a new run starts the count again)
    last_beat: float           # the newest heartbeat's own time
    last_seen: float           # when the monitor saw it
    seen: int                  # heartbeats seen in this run
    lag_max: float             # the longest from a beat to its sighting, in s


@dataclass(frozen=True)
class FleetEvent:
    at: float
    kind: str
    task_id: str | None
    detail: dict
    seq: int = 0               # the ledger's number: read on from the last one seen


_TASK_FIELDS = tuple(f.name for f in fields(TaskRow))
_SETTABLE = frozenset(_TASK_FIELDS) - {"id", "created", "updated", "state", "reason"}


class FleetLedger:
    """An open fleet ledger. Use as a context manager, or call close()."""

    def __init__(self, conn: sqlite3.Connection, path: Path, clock: Callable[[], float], readonly: bool):
        self.conn = conn
        self.path = path
        self.clock = clock
        self.readonly = readonly
        self.reset_note: str | None = None  # a damaged ledger was kept aside on opening: to be said once
        self._lock = threading.RLock()      # one connection: one transaction at a time, whatever the thread
        self._inserts = 0

    @classmethod
    def open(cls, path: Path, readonly: bool = False, *, clock: Callable[[], float] = time.time) -> "FleetLedger":
        """Open the ledger at path (for writing: created if absent).

        A file that is not a fleet ledger (corrupt, or another program's) is kept aside
        (`<name>.corrupt-<stamp>`, with its -wal and -shm) and a new one started when opened for
        writing; a reader gets FleetLedgerError. A symlink or anything but a regular file at the
        path (or at its -wal, -shm) is refused, never opened through.
        """
        path = Path(path)
        _check_regular(path, missing_ok=not readonly)
        try:
            conn = _connect(path, readonly)
            try:
                _prepare(conn, readonly)
            except BaseException:
                conn.close()
                raise
        except sqlite3.DatabaseError as exc:
            if readonly:
                raise FleetLedgerError(f"the fleet ledger {path} cannot be read ({exc}); the fleet's next start "
                                       f"keeps it aside and starts a new one") from None
            if not (isinstance(exc, _Damaged) or _not_a_database(exc)):
                raise _error(exc, path) from None
            kept = quarantine(path, clock())
            for suffix in ("-wal", "-shm"):  # with the file they belong to: the WAL may hold its last writes
                try:
                    os.rename(f"{path}{suffix}", f"{kept}{suffix}")
                except FileNotFoundError:
                    pass
            conn = _connect(path, readonly)
            _prepare(conn, readonly)
            ledger = cls(conn, path, clock, readonly)
            ledger.record("ledger_reset", kept=str(kept), why=str(exc))
            ledger.reset_note = (f"the fleet ledger was damaged ({exc}): kept aside as {kept} and a new one "
                                 f"started; the tasks' history before is in the kept file")
            return ledger
        return cls(conn, path, clock, readonly)

    def __enter__(self) -> "FleetLedger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    # -- tasks -----------------------------------------------------------------------

    def upsert_task(self, row: TaskRow) -> None:
        """Insert the task, or replace every field of it but `created`."""
        _check_state(row.state)
        now = self.clock()
        values = asdict(row)
        values["text"] = _cut(values["text"])
        values["reason"] = _cut(redact_all(values["reason"]))
        values["updated"] = row.updated or now
        values["created"] = row.created or now
        names = ", ".join(_TASK_FIELDS)
        marks = ", ".join(f":{n}" for n in _TASK_FIELDS)
        update = ", ".join(f"{n} = excluded.{n}" for n in _TASK_FIELDS if n not in ("id", "created"))
        self._write(lambda c: c.execute(f"INSERT INTO tasks ({names}) VALUES ({marks}) "
                                        f"ON CONFLICT(id) DO UPDATE SET {update}", values))

    def task(self, id: str) -> TaskRow | None:
        rows = self._read(f"SELECT {', '.join(_TASK_FIELDS)} FROM tasks WHERE id = ?", [id])
        return TaskRow(*rows[0]) if rows else None

    def tasks(self) -> list[TaskRow]:
        """Every task, in the order they were first recorded."""
        return [TaskRow(*r) for r in self._read(f"SELECT {', '.join(_TASK_FIELDS)} FROM tasks "
                                                 f"ORDER BY created, rowid", [])]

    def set_state(self, id: str, state: str, reason: str = "", *, now: float | None = None,
                  **changes: Any) -> TaskRow:
        """Set a task's state, its reason and any other of its fields, in one transaction; the
        row as it is now. FleetLedgerError if there is no such task."""
        _check_state(state)
        unknown = set(changes) - _SETTABLE
        if unknown:
            raise TypeError(f"set_state: not a settable field of a task: {', '.join(sorted(unknown))}")
        values = {**changes, "state": state, "reason": _cut(redact_all(reason)),
                  "updated": self.clock() if now is None else now, "id": id}
        assigns = ", ".join(f"{n} = :{n}" for n in values if n != "id")

        def write(conn: sqlite3.Connection) -> sqlite3.Row:
            if conn.execute(f"UPDATE tasks SET {assigns} WHERE id = :id", values).rowcount != 1:
                raise FleetLedgerError(f"the fleet ledger has no task {id!r}")
            return conn.execute(f"SELECT {', '.join(_TASK_FIELDS)} FROM tasks WHERE id = ?", [id]).fetchone()

        return TaskRow(*self._write(write))

    # -- attempts: the retry history -------------------------------------------------

    def begin_attempt(self, task_id: str, kind: str, reason: str, agent: str, run_id: str, now: float,
                      strategy: int | None = None) -> Attempt:
        """Record a new attempt of the task (numbered on from its last) and count it on the
        task's row; `strategy` None: the task's current one."""
        if kind not in KINDS:
            raise ValueError(f"begin_attempt: kind {kind!r} is not one of {', '.join(sorted(KINDS))}")
        reason, agent = _cut(redact_all(reason)), _cut(redact_all(agent))

        def write(conn: sqlite3.Connection) -> Attempt:
            number = conn.execute("SELECT COALESCE(MAX(attempt), 0) + 1 FROM attempts WHERE task_id = ?",
                                  [task_id]).fetchone()[0]
            row = conn.execute("SELECT strategy FROM tasks WHERE id = ?", [task_id]).fetchone()
            used = strategy if strategy is not None else (row[0] if row else 0)
            conn.execute("INSERT INTO attempts (task_id, attempt, kind, reason, agent, strategy, started, run_id) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [task_id, number, kind, reason, agent, used, now, run_id])
            conn.execute("UPDATE tasks SET attempts = ?, run_id = ?, updated = ? WHERE id = ?",
                         [number, run_id, now, task_id])
            return Attempt(task_id, number, kind, reason, agent, now, None, None, None, run_id, used)

        return self._write(write)

    def end_attempt(self, task_id: str, attempt: int, exit_code: int | None, outcome: str, now: float) -> None:
        """Record how an attempt ended (an attempt already ended keeps its first ending)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"end_attempt: outcome {outcome!r} is not one of {', '.join(sorted(OUTCOMES))}")
        self._write(lambda c: c.execute("UPDATE attempts SET ended = ?, exit_code = ?, outcome = ? "
                                        "WHERE task_id = ? AND attempt = ? AND ended IS NULL",
                                        [now, exit_code, outcome, task_id, attempt]))

    def refute_attempt(self, task_id: str, attempt: int) -> None:
        """An attempt that ended verified whose work then failed its merge's checks: it counts as
        failed (the ladder climbs on it), as if it had ended so."""
        self._write(lambda c: c.execute("UPDATE attempts SET outcome = 'failed' WHERE task_id = ? AND attempt = ? "
                                        "AND outcome = 'verified'", [task_id, attempt]))

    def attempts(self, task_id: str | None = None) -> list[Attempt]:
        """The retry history (of one task, or of all), oldest first."""
        cols = "task_id, attempt, kind, reason, agent, started, ended, exit_code, outcome, run_id, strategy"
        if task_id is None:
            rows = self._read(f"SELECT {cols} FROM attempts ORDER BY started, task_id, attempt", [])
        else:
            rows = self._read(f"SELECT {cols} FROM attempts WHERE task_id = ? ORDER BY attempt", [task_id])
        return [Attempt(*r) for r in rows]

    # -- events ----------------------------------------------------------------------

    def record(self, kind: str, task_id: str | None = None, now: float | None = None, **detail: Any) -> int:
        """Record one event; its number. A full disk raises atomicio.DiskFull, another writer
        holding the file past BUSY_TIMEOUT FleetLedgerError."""
        at = self.clock() if now is None else now
        text = json.dumps(redact_all(detail), default=str)  # an agent's words reach events: no secret kept
        if len(text) > MAX_DETAIL_CHARS:
            text = json.dumps({"cut": True, **{k: (v if len(json.dumps(v, default=str)) < 2000 else "(cut)")
                                               for k, v in redact_all(detail).items()}}, default=str)
            text = text if len(text) <= MAX_DETAIL_CHARS else json.dumps({"cut": True})

        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute("INSERT INTO events (at, kind, task_id, detail) VALUES (?, ?, ?, ?)",
                               [at, kind, task_id, text])
            self._inserts += 1
            if self._inserts % PRUNE_EVERY == 0:
                conn.execute("DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?", [MAX_EVENTS])
            return int(cur.lastrowid or 0)

        return self._write(write)

    def events(self, kind: str | None = None, *, task_id: str | None = None, after: int = 0,
               limit: int | None = None) -> list[FleetEvent]:
        """Events oldest first: of one kind, one task, after the event numbered `after`."""
        where, args = ["id > ?"], [after]
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        if task_id is not None:
            where.append("task_id = ?")
            args.append(task_id)
        sql = f"SELECT at, kind, task_id, detail, id FROM events WHERE {' AND '.join(where)} ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [FleetEvent(at, k, t, _detail(d), ident) for at, k, t, d, ident in self._read(sql, args)]

    def last_event(self, *kinds: str) -> FleetEvent | None:
        """The newest event of any of these kinds (any kind if none given)."""
        sql = "SELECT at, kind, task_id, detail, id FROM events"
        if kinds:
            sql += f" WHERE kind IN ({','.join('?' * len(kinds))})"
        rows = self._read(sql + " ORDER BY id DESC LIMIT 1", list(kinds))
        return FleetEvent(rows[0][0], rows[0][1], rows[0][2], _detail(rows[0][3]), rows[0][4]) if rows else None

    # -- heartbeats seen ---------------------------------------------------------------

    def note_beats(self, sightings: list[tuple[str, str, float, float]]) -> None:
        """Count new heartbeats (task id, child run id, beat time, seen at), one transaction a check."""
        if not sightings:
            return

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                """INSERT INTO beats (task_id, run_id, last_beat, last_seen, seen, lag_max)
                   VALUES (?1, ?2, ?3, ?4, 1, MAX(?4 - ?3, 0))
                   ON CONFLICT (task_id) DO UPDATE SET
                     seen = CASE WHEN run_id = ?2 THEN seen + 1 ELSE 1 END,
                     lag_max = CASE WHEN run_id = ?2 THEN MAX(lag_max, ?4 - ?3) ELSE MAX(?4 - ?3, 0) END,
                     run_id = ?2, last_beat = ?3, last_seen = ?4""", sightings)

        self._write(write)

    def beats(self) -> dict[str, Beats]:
        """What the monitor saw of each task's heartbeats, by task id."""
        if not self._read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'beats'", []):
            return {}  # a first fleet's ledger, read before a monitor added the table
        rows = self._read("SELECT task_id, run_id, last_beat, last_seen, seen, lag_max FROM beats", [])
        return {r[0]: Beats(*r) for r in rows}

    def fleet_run_id(self) -> str | None:
        """The run id of the fleet's newest run (its `fleet_start` event), if any."""
        last = self.last_event("fleet_start")
        run_id = last.detail.get("run_id") if last else None
        return run_id if isinstance(run_id, str) else None

    # -- plumbing --------------------------------------------------------------------

    def _write(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        if self.readonly:
            raise FleetLedgerError(f"the fleet ledger {self.path} was opened for reading only")
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    result = body(self.conn)
                    self.conn.execute("COMMIT")
                except BaseException:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as exc:
                raise _error(exc, self.path) from None
            return result

    def _read(self, sql: str, args: list[Any]) -> list[Any]:
        with self._lock:
            try:
                return self.conn.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                raise _error(exc, self.path) from None


class _Damaged(sqlite3.DatabaseError):
    """A SQLite file that opens, but is not a fleet ledger (tables missing, another schema)."""


def _check_state(state: str) -> None:
    if state not in STATES:
        raise ValueError(f"not a task state: {state!r} (one of {', '.join(sorted(STATES))})")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS - 1] + "\u2026"


def _detail(text: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _check_regular(path: Path, missing_ok: bool) -> None:
    for candidate, may_miss in ((path, missing_ok), (Path(f"{path}-wal"), True), (Path(f"{path}-shm"), True)):
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            if may_miss:
                continue
            raise FleetLedgerError(f"no fleet ledger at {path}: no fleet has run in this project yet") from None
        if not stat.S_ISREG(st.st_mode):
            what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise FleetLedgerError(f"{candidate} is {what}; remove it and the fleet ledger starts again")


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=READ_TIMEOUT,
                               isolation_level=None, check_same_thread=False)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)


def _prepare(conn: sqlite3.Connection, readonly: bool) -> None:
    """WAL and the schema (a writer creates it; a reader checks it is there)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise FleetLedgerError(f"the fleet ledger was written by a newer Genesis (schema {version}, this one knows "
                               f"up to {SCHEMA_VERSION}); upgrade Genesis")
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if readonly:
        if not _FIRST_TABLES <= have:
            raise _Damaged(f"it lacks the tables {', '.join(sorted(_FIRST_TABLES - have))}")
        return
    if have and not (version == SCHEMA_VERSION and _FIRST_TABLES <= have):
        raise _Damaged("it is not a fleet ledger (other tables, or its tables missing)")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # WAL stays consistent on a crash; a power cut may lose the last writes
    if version == SCHEMA_VERSION and _TABLES <= have:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for step in _SCHEMA:
            conn.execute(step)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _not_a_database(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "file is encrypted" in text


def _error(exc: sqlite3.Error, path: Path) -> OSError | FleetLedgerError:
    text = str(exc)
    if "disk is full" in text or "disk full" in text:
        try:
            free = free_bytes(path.parent)
        except OSError:
            free = None
        return DiskFull(path, free, None)
    if "locked" in text or "busy" in text:
        return FleetLedgerError(f"the fleet ledger {path} is held by another writer ({text}); not recorded")
    if "readonly" in text or "read-only" in text:
        return FleetLedgerError(f"the fleet ledger {path} cannot be written ({text}); check its permissions")
    return FleetLedgerError(f"the fleet ledger {path} failed: {text}; if it persists, move the file aside "
                            f"(a new one starts)")
