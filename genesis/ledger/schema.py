"""The ledger's schema, one migration per version (PRAGMA user_version counts them).

A migration is only ever appended: a ledger written by an older Genesis is brought up to
date when it is opened for writing (a view reads it through an up-to-date copy in memory);
one written by a newer Genesis is refused, not guessed at.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable

__all__ = ["MIGRATIONS", "VERSION", "STUCK_RENAMED", "renamed_stuck"]

# What version 2 renamed (frozen with it): the agent's stuck state, which the watcher called
# stale and the health judgment stalled. (event kind, detail key) -> the old value.
STUCK_RENAMED = {("phase_end", "status"): "stale", ("phase_end", "ending"): "stale",
                 ("health", "classification"): "stalled", ("incident", "kind"): "stale",
                 ("retry", "type"): "stalled", ("phase_failed", "kind"): "stalled"}
RETRY_REASON = "stalled: "  # a retry's wait said why: "stalled: retry 1"


def renamed_stuck(kind: str, detail: dict[str, Any]) -> dict[str, Any]:
    """An event's detail with the stuck state under its one name (for events an older Genesis wrote)."""
    new = dict(detail)
    for (of, key), old in STUCK_RENAMED.items():
        if of == kind and new.get(key) == old:
            new[key] = "stuck"
    reason = new.get("reason")
    if kind == "wait_start" and isinstance(reason, str) and reason.startswith(RETRY_REASON):
        new["reason"] = "stuck: " + reason[len(RETRY_REASON):]
    return new


def _stuck_in_events(db: sqlite3.Connection) -> None:
    """The events' details as renamed_stuck says (in Python: SQLite's JSON functions are optional)."""
    kinds = sorted({kind for kind, _ in STUCK_RENAMED} | {"wait_start"})
    rows = db.execute(f"SELECT id, kind, detail FROM events WHERE kind IN ({','.join('?' * len(kinds))}) "
                      "AND (detail LIKE '%\"stale\"%' OR detail LIKE '%\"stalled%')", kinds).fetchall()
    for ident, kind, detail in rows:
        try:
            data = json.loads(detail)
        except ValueError:
            continue  # a detail cut at its size cap is no JSON: kept as it is
        new = renamed_stuck(kind, data) if isinstance(data, dict) else data
        if new != data:
            db.execute("UPDATE events SET detail = ? WHERE id = ?", (json.dumps(new, default=str), ident))


MigrationStep = str | Callable[[sqlite3.Connection], None]  # SQL, or a function of the open transaction

MIGRATIONS: tuple[tuple[MigrationStep, ...], ...] = (
    # 1: every event the loop records, and the tables the views read.
    (
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            at REAL NOT NULL,               -- epoch seconds
            kind TEXT NOT NULL,
            iteration INTEGER,
            phase TEXT,
            detail TEXT NOT NULL            -- the rest of the event, a JSON object
        )""",
        "CREATE INDEX events_by_run ON events (run_id, id)",
        "CREATE INDEX events_by_time ON events (at)",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            started REAL NOT NULL,
            ended REAL,
            reason TEXT,
            exit_code INTEGER,
            project TEXT,
            pid INTEGER
        )""",
        """CREATE TABLE iterations (
            run_id TEXT NOT NULL,
            iteration INTEGER NOT NULL,
            started REAL NOT NULL,
            ended REAL,
            progress INTEGER,               -- 1/0; NULL until measured
            breaker TEXT,
            no_progress INTEGER,
            waited INTEGER,
            PRIMARY KEY (run_id, iteration)
        )""",
        """CREATE TABLE phases (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            iteration INTEGER,
            phase TEXT NOT NULL,
            attempt INTEGER NOT NULL DEFAULT 0,
            started REAL NOT NULL,
            ended REAL,
            status TEXT,                    -- the watcher's: exited, stuck, wedged, overtime, ...
            ending TEXT NOT NULL,           -- finished, failed, limit, outage, fatal, stuck, ...; running
            exit_code INTEGER,
            detail TEXT,
            cost_usd REAL,
            turns INTEGER,
            input_tokens INTEGER,
            output_tokens INTEGER,
            commits TEXT,                   -- JSON list of short shas
            files_changed INTEGER,
            tasks_done TEXT,                -- JSON list of TASKS.md items ticked
            killed INTEGER,
            api_retries INTEGER,
            log TEXT
        )""",
        "CREATE INDEX phases_by_run ON phases (run_id, iteration, phase)",
        """CREATE TABLE commits (
            run_id TEXT NOT NULL,
            sha TEXT NOT NULL,
            at REAL NOT NULL,
            subject TEXT,
            iteration INTEGER,
            phase TEXT,
            PRIMARY KEY (run_id, sha)
        )""",
        """CREATE TABLE incidents (
            id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            at REAL NOT NULL,
            iteration INTEGER,
            phase TEXT,
            kind TEXT,
            reason TEXT
        )""",
        """CREATE TABLE retries (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            at REAL NOT NULL,
            iteration INTEGER,
            phase TEXT,
            attempt INTEGER,
            reason TEXT,
            fallback INTEGER
        )""",
        """CREATE TABLE waits (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,             -- limit, outage, cooldown, retry
            started REAL NOT NULL,
            until REAL,
            ended REAL,
            reason TEXT,
            iteration INTEGER,
            phase TEXT
        )""",
        """CREATE TABLE breaker_changes (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            at REAL NOT NULL,
            iteration INTEGER,
            before TEXT NOT NULL,
            after TEXT NOT NULL,
            no_progress INTEGER
        )""",
        """CREATE TABLE alerts (
            ticket_id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            at REAL NOT NULL,
            severity TEXT,
            cause TEXT,
            kind TEXT,
            decision TEXT,                  -- dismiss, intervene
            why TEXT,
            decided_by TEXT,                -- rules, command
            delivered TEXT,                 -- JSON list of channels
            failed TEXT,                    -- JSON object channel -> error
            ticket TEXT                     -- the whole ticket, JSON
        )""",
    ),
    # 2: one word for the agent's stuck state, in the tables and the events' details. (An
    # alert's ticket stays as it was sent.)
    (
        "UPDATE phases SET status = 'stuck' WHERE status = 'stale'",
        "UPDATE phases SET ending = 'stuck' WHERE ending = 'stale'",
        "UPDATE incidents SET kind = 'stuck' WHERE kind = 'stale'",
        f"UPDATE waits SET reason = 'stuck: ' || substr(reason, {len(RETRY_REASON) + 1}) "
        f"WHERE kind = 'retry' AND substr(reason, 1, {len(RETRY_REASON)}) = '{RETRY_REASON}'",
        _stuck_in_events,
    ),
)

VERSION = len(MIGRATIONS)
