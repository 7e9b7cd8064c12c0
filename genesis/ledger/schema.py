"""The ledger's schema, one migration per version (PRAGMA user_version counts them).

A migration is only ever appended: a ledger written by an older Genesis is brought up to
date when it is opened for writing; one written by a newer Genesis is refused, not guessed at.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "VERSION"]

MIGRATIONS: tuple[tuple[str, ...], ...] = (
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
            status TEXT,                    -- the watcher's: exited, stale, wedged, overtime, ...
            ending TEXT NOT NULL,           -- finished, failed, limit, outage, fatal, stale, ...; running
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
)

VERSION = len(MIGRATIONS)
