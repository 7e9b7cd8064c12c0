"""The run ledger: one SQLite file (WAL) in Genesis's private state, written by the loop's
steps and read by every view (status, report, incidents' KPIs).

Each event is one short transaction: the raw event in `events`, and its projection into
the tables the views read (see tables.py). WAL lets any number of readers (a `status
--watch` in another terminal, a report) read while the loop writes: a reader never
blocks the loop. Writers wait for each other at most BUSY_TIMEOUT, then the event is
reported as not recorded rather than the loop waiting on.

A ledger that is not one any more (corrupt, another program's, its tables dropped) is kept
aside with its -wal and -shm and a new one started, said once; a symlink or FIFO at its path is
refused, never opened. The watcher's writes wait at most a fraction of a second
(`waiting_at_most`): its judgement never waits on a ledger another program holds.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from genesis.clock import iso
from genesis.ledger import tables
from genesis.ledger.schema import MIGRATIONS, VERSION
from genesis.redact import redact_all
from genesis.store.atomicio import DiskFull, free_bytes, quarantine

__all__ = ["Ledger", "LedgerError", "RunRecord", "BUSY_TIMEOUT", "WATCH_TIMEOUT", "MAX_DETAIL_CHARS", "iso"]

BUSY_TIMEOUT = 5.0          # seconds a write waits for another writer
WATCH_TIMEOUT = 0.25        # seconds a write of the watcher's waits (see Ledger.waiting_at_most)
READ_TIMEOUT = 1.0          # seconds a reader waits (only a checkpoint or a migration can hold it up)
MAX_DETAIL_CHARS = 64 << 10  # an event's detail beyond this is cut: the ledger stays small


class LedgerError(RuntimeError):
    """The ledger cannot be used; the message says why and what to do."""


class Damaged(sqlite3.DatabaseError):
    """A ledger SQLite opens, but without the tables of its schema."""


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    started: float
    ended: float | None
    reason: str | None
    exit_code: int | None
    project: str | None
    pid: int | None


class Ledger:
    """An open ledger. Use as a context manager, or call close()."""

    def __init__(self, conn: sqlite3.Connection, path: Path, clock: Callable[[], float]):
        self.conn = conn
        self.path = path
        self.clock = clock
        self.reset_note: str | None = None  # a damaged ledger was kept aside on opening: to be said once

    @classmethod
    def open(cls, path: Path, *, readonly: bool = False, clock: Callable[[], float] = time.time) -> "Ledger":
        """Open (for writing: create or upgrade) the ledger at path.

        A file that is not a ledger (corrupt, or another program's) is moved aside and a new
        ledger started when opened for writing; a reader gets LedgerError. A symlink, FIFO or
        anything but a regular file at path is refused, never opened through.
        """
        path = Path(path)
        _check_regular(path, missing_ok=not readonly)
        try:
            conn = _connect(path, readonly)
            if readonly:
                conn = _readable(conn, path)
            else:
                _prepare(conn)
            missing = _missing_tables(conn)
            if missing:  # dropped by hand or by an agent: each write and read would fail
                conn.close()
                raise Damaged(f"the ledger lacks its tables {', '.join(missing)}")
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, Damaged) and readonly:
                raise LedgerError(f"the ledger {path} is damaged ({exc}); the loop's next start keeps it aside "
                                  f"and starts a new one") from None
            if readonly or not (isinstance(exc, Damaged) or _not_a_database(exc)):
                raise _error(exc, path) from None
            kept = quarantine(path, clock())
            for suffix in ("-wal", "-shm"):  # with the file they belong to: the WAL may hold its last events
                try:
                    os.rename(f"{path}{suffix}", f"{kept}{suffix}")
                except FileNotFoundError:
                    pass
            conn = _connect(path, readonly)
            _prepare(conn)
            ledger = cls(conn, path, clock)
            ledger.record("-", "ledger_reset", kept=str(kept), why=str(exc))
            ledger.reset_note = (f"the ledger was damaged ({exc}): kept aside as {kept} (with its -wal and -shm) "
                                 f"and a new one started; the runs before are in the kept file")
            return ledger
        return cls(conn, path, clock)

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def waiting_at_most(self, seconds: float) -> Iterator["Ledger"]:
        """Inside, a write waits at most `seconds` for another writer (then LedgerError): for
        the watcher, whose judgement must never wait on a ledger another program holds."""
        self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
        try:
            yield self
        finally:
            try:
                self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            except sqlite3.Error:
                pass  # closed inside (its file was taken): nothing to restore

    # -- writing ---------------------------------------------------------------------

    def record(self, run_id: str, kind: str, /, at: float | None = None, **detail: Any) -> int:
        """Record one event and its projection, in one transaction; returns its id.

        A full disk raises atomicio.DiskFull (nothing of the event is kept); a writer that
        holds the ledger past BUSY_TIMEOUT raises LedgerError.
        """
        at = self.clock() if at is None else at
        detail = redact_all(detail)  # an agent's words reach events: no secret is kept
        text = json.dumps(detail, default=str)
        if len(text) > MAX_DETAIL_CHARS:
            text = json.dumps({"cut": True, **{k: (v if len(json.dumps(v, default=str)) < 2000 else "(cut)")
                                               for k, v in detail.items()}}, default=str)[:MAX_DETAIL_CHARS]
        iteration = detail.get("iteration") if isinstance(detail.get("iteration"), int) else None
        phase = detail.get("phase") if isinstance(detail.get("phase"), str) else None
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                cur = self.conn.execute(
                    "INSERT INTO events (run_id, at, kind, iteration, phase, detail) VALUES (?, ?, ?, ?, ?, ?)",
                    (run_id, at, kind, iteration, phase, text))
                tables.project(self.conn, run_id, at, kind, detail)
                self.conn.execute("COMMIT")
            except BaseException:
                _rollback(self.conn)
                raise
        except sqlite3.OperationalError as exc:
            raise _error(exc, self.path, len(text)) from None
        return int(cur.lastrowid or 0)

    # -- reading ---------------------------------------------------------------------

    def events(self, run_id: str | None = None, *, kinds: Iterable[str] | None = None, since: float | None = None,
               iteration: int | None = None, after_id: int = 0, limit: int | None = None,
               newest: bool = False) -> list[dict[str, Any]]:
        """Events as dicts (at: ISO time, epoch, run_id, event, seq: the ledger's number, and
        the detail), oldest first; `newest` takes the last `limit` of them (still oldest first)."""
        where, args = ["id > ?"], [after_id]
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        if since is not None:
            where.append("at >= ?")
            args.append(since)
        if iteration is not None:
            where.append("iteration = ?")
            args.append(iteration)
        kinds = list(kinds) if kinds is not None else None
        if kinds is not None:
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            args += kinds
        order = "DESC" if newest else "ASC"
        sql = f"SELECT id, run_id, at, kind, detail FROM events WHERE {' AND '.join(where)} ORDER BY id {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._read(sql, args)
        if newest:
            rows.reverse()
        return [_event(row) for row in rows]

    def runs(self, since: float | None = None) -> list[RunRecord]:
        """Every run in the order they started (those started at or after `since`)."""
        rows = self._read("SELECT run_id, started, ended, reason, exit_code, project, pid FROM runs "
                          "WHERE started >= ? ORDER BY started, rowid", [since if since is not None else -1.0])
        return [RunRecord(*row) for row in rows]

    def query(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        """Rows of a read-only query, for the views (rows read by column name)."""
        return self._read(sql, list(args))

    def _read(self, sql: str, args: list[Any]) -> list[Any]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            raise _error(exc, self.path) from None


def _event(row: sqlite3.Row) -> dict[str, Any]:
    ident, run_id, at, kind, detail = row
    try:
        data = json.loads(detail)
    except ValueError:
        data = {}
    # The detail's own keys (an incident's id, a phase's epoch) are kept as recorded.
    return {"at": iso(at), "epoch": at, **(data if isinstance(data, dict) else {}), "seq": ident,
            "run_id": run_id, "event": kind}


def _check_regular(path: Path, missing_ok: bool) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if missing_ok:
            return
        raise LedgerError(f"no ledger at {path}: no loop has run in this project yet") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise LedgerError(f"{path} is {what}; remove it and the ledger starts again")


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=READ_TIMEOUT,
                               isolation_level=None, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


def _readable(conn: sqlite3.Connection, path: Path) -> sqlite3.Connection:
    """A reader's connection. A ledger of an older schema is read from a copy in memory brought
    up to date (a reader never writes the file; the loop's next open upgrades it in place)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > VERSION:
        conn.close()
        raise LedgerError(f"{path} was written by a newer Genesis (schema {version}, this one reads up to "
                          f"{VERSION}); upgrade Genesis to read it")
    if not 0 < version < VERSION:
        return conn
    copy = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        conn.backup(copy)
        _migrate(copy)
    except BaseException:
        copy.close()
        raise
    finally:
        conn.close()
    copy.row_factory = sqlite3.Row
    return copy


def _prepare(conn: sqlite3.Connection) -> None:
    """WAL, and the schema brought up to date (one writer migrates; the others wait, then see it done)."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # WAL stays consistent on a crash; a power cut may lose the last events
    _migrate(conn)


def _migrate(conn: sqlite3.Connection) -> None:
    """Apply the migrations the ledger lacks, in one transaction."""
    if conn.execute("PRAGMA user_version").fetchone()[0] == VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > VERSION:
            raise LedgerError(f"the ledger was written by a newer Genesis (schema {version}, this one knows up to "
                              f"{VERSION}); upgrade Genesis, or move the file aside to start a new ledger")
        for number, steps in enumerate(MIGRATIONS[version:], version + 1):
            for step in steps:
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


@functools.cache
def _schema_tables() -> frozenset[str]:
    """The tables a ledger of this schema has (built once, in memory)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        _migrate(conn)
        return frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    finally:
        conn.close()


def _missing_tables(conn: sqlite3.Connection) -> list[str]:
    """The schema's tables the ledger lacks (none of a ledger from before the schema versions)."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not have and conn.execute("PRAGMA user_version").fetchone()[0] == 0:
        return []
    return sorted(_schema_tables() - have)


def _rollback(conn: sqlite3.Connection) -> None:
    """Undo the open transaction, if SQLite has not already (it does on a full disk)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _not_a_database(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "file is encrypted" in text


def _error(exc: sqlite3.Error, path: Path, need: int | None = None) -> OSError | LedgerError:
    text = str(exc)
    if "disk is full" in text or "disk full" in text:
        try:
            free = free_bytes(path.parent)
        except OSError:
            free = None
        return DiskFull(path, free, need)
    if "locked" in text or "busy" in text:
        return LedgerError(f"the ledger {path} is held by another writer ({text}); the event was not recorded")
    if "readonly" in text or "read-only" in text:
        return LedgerError(f"the ledger {path} cannot be written ({text}); check its permissions")
    return LedgerError(f"the ledger {path} failed: {text}; if it persists, move the file aside (a new one starts)")
