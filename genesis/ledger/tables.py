"""How each event kind lands in the tables the views read (inside the event's transaction).

Kinds not named here are kept in `events` only. Every field is taken defensively: an
event is the loop's record, and a bad field is stored as NULL rather than refused.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable

__all__ = ["project"]

Detail = dict[str, Any]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: Any, most: int = 2000) -> str | None:
    return value[:most] if isinstance(value, str) else None


def _loop_start(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    db.execute("INSERT OR IGNORE INTO runs (run_id, started, project, pid) VALUES (?, ?, ?, ?)",
               (run_id, at, _text(d.get("project")), _int(d.get("pid"))))


def _loop_end(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    db.execute("UPDATE runs SET ended = ?, reason = ?, exit_code = ? WHERE run_id = ?",
               (at, _text(d.get("reason")), _int(d.get("exit_code")), run_id))
    # A phase or wait the loop left open (it was stopped inside it) ends with the loop.
    db.execute("UPDATE phases SET ended = ?, ending = 'interrupted' WHERE run_id = ? AND ended IS NULL", (at, run_id))
    db.execute("UPDATE waits SET ended = ? WHERE run_id = ? AND ended IS NULL", (at, run_id))


def _iteration_start(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    db.execute("INSERT OR REPLACE INTO iterations (run_id, iteration, started) VALUES (?, ?, ?)",
               (run_id, _int(d.get("iteration")), at))


def _iteration_end(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    iteration, state = _int(d.get("iteration")), _text(d.get("breaker"), 20)
    before = db.execute("SELECT breaker FROM iterations WHERE run_id = ? AND breaker IS NOT NULL "
                        "ORDER BY iteration DESC LIMIT 1", (run_id,)).fetchone()
    db.execute("UPDATE iterations SET ended = ?, progress = ?, breaker = ?, no_progress = ?, waited = ? "
               "WHERE run_id = ? AND iteration = ?",
               (at, int(bool(d.get("progress"))), state, _int(d.get("no_progress")), int(bool(d.get("waited"))),
                run_id, iteration))
    previous = before[0] if before else "CLOSED"
    if state and state != previous:
        db.execute("INSERT INTO breaker_changes (run_id, at, iteration, before, after, no_progress) "
                   "VALUES (?, ?, ?, ?, ?, ?)", (run_id, at, iteration, previous, state, _int(d.get("no_progress"))))


def _phase_start(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    db.execute("INSERT INTO phases (run_id, iteration, phase, attempt, started, ending, log) "
               "VALUES (?, ?, ?, ?, ?, 'running', ?)",
               (run_id, _int(d.get("iteration")), _text(d.get("phase"), 100) or "?", _int(d.get("attempt")) or 0,
                _num(d.get("epoch")) or at, _text(d.get("log"))))


def _open_phase(db: sqlite3.Connection, run_id: str, d: Detail) -> int | None:
    row = db.execute("SELECT id FROM phases WHERE run_id = ? AND iteration IS ? AND phase = ? "
                     "ORDER BY id DESC LIMIT 1", (run_id, _int(d.get("iteration")), _text(d.get("phase"), 100))
                     ).fetchone()
    return row[0] if row else None


def _phase_end(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    ident = _open_phase(db, run_id, d)
    if ident is None or db.execute("SELECT ended FROM phases WHERE id = ?", (ident,)).fetchone()[0] is not None:
        # No start recorded (a watcher lost before it began): the phase is its end alone.
        ident = db.execute("INSERT INTO phases (run_id, iteration, phase, started, ending) VALUES (?, ?, ?, ?, ?)",
                           (run_id, _int(d.get("iteration")), _text(d.get("phase"), 100) or "?",
                            _num(d.get("started")) or at, "running")).lastrowid
    status = _text(d.get("status"), 40)
    ending = _text(d.get("ending"), 40) or status or "failed"
    db.execute("UPDATE phases SET ended = ?, status = ?, ending = ?, exit_code = ?, detail = ?, cost_usd = ?, "
               "turns = ?, input_tokens = ?, output_tokens = ?, killed = ?, api_retries = ?, attempt = ? "
               "WHERE id = ?",
               (at, status, ending, _int(d.get("returncode")), _text(d.get("detail")), _num(d.get("cost_usd")),
                _int(d.get("num_turns")), _int(d.get("input_tokens")), _int(d.get("output_tokens")),
                _int(d.get("killed")) or 0, _int(d.get("api_retries")) or 0, _int(d.get("attempt")) or 0, ident))


def _phase_work(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    ident = _open_phase(db, run_id, d)
    commits = [c for c in d.get("commits", []) if isinstance(c, dict) and isinstance(c.get("sha"), str)][:200]
    tasks = [t[:300] for t in d.get("tasks_done", []) if isinstance(t, str)][:200]
    if ident is not None:
        db.execute("UPDATE phases SET commits = ?, files_changed = ?, tasks_done = ? WHERE id = ?",
                   (json.dumps([c["sha"] for c in commits]), _int(d.get("files_changed")), json.dumps(tasks), ident))
    for c in commits:
        db.execute("INSERT OR IGNORE INTO commits (run_id, sha, at, subject, iteration, phase) VALUES (?, ?, ?, ?, ?, ?)",
                   (run_id, c["sha"][:40], _num(c.get("at")) or at, _text(c.get("subject"), 300),
                    _int(d.get("iteration")), _text(d.get("phase"), 100)))


def _incident(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    db.execute("INSERT OR REPLACE INTO incidents (id, run_id, at, iteration, phase, kind, reason) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)",
               (_text(d.get("id"), 200) or f"{run_id}-{at}", run_id, at, _int(d.get("iteration")),
                _text(d.get("phase"), 100), _text(d.get("kind"), 40), _text(d.get("reason"))))


def _retry(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    db.execute("INSERT INTO retries (run_id, at, iteration, phase, attempt, reason, fallback) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)",
               (run_id, at, _int(d.get("iteration")), _text(d.get("phase"), 100), _int(d.get("count")),
                _text(d.get("reason")), int(d.get("old_cmd") != d.get("new_cmd"))))


def _wait_start(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    db.execute("INSERT INTO waits (run_id, kind, started, until, reason, iteration, phase) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)",
               (run_id, _text(d.get("kind"), 40) or "?", at, _num(d.get("until")), _text(d.get("reason")),
                _int(d.get("iteration")), _text(d.get("phase"), 100)))


def _wait_end(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    row = db.execute("SELECT id FROM waits WHERE run_id = ? AND kind = ? AND ended IS NULL ORDER BY id DESC LIMIT 1",
                     (run_id, _text(d.get("kind"), 40))).fetchone()
    if row:
        db.execute("UPDATE waits SET ended = ? WHERE id = ?", (_num(d.get("epoch")) or at, row[0]))


def _alert(db: sqlite3.Connection, run_id: str, at: float, d: Detail) -> None:
    ticket = d.get("ticket") if isinstance(d.get("ticket"), dict) else {}
    db.execute("INSERT OR REPLACE INTO alerts (ticket_id, run_id, at, severity, cause, kind, decision, why, "
               "decided_by, delivered, failed, ticket) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               (_text(ticket.get("ticket_id"), 100) or f"{run_id}-{at}", run_id, at, _text(ticket.get("severity"), 20),
                _text(ticket.get("cause")), _text(ticket.get("kind"), 40), _text(d.get("decision"), 20),
                _text(d.get("why")), _text(d.get("by"), 20), json.dumps(d.get("delivered") or [], default=str),
                json.dumps(d.get("failed") or {}, default=str), json.dumps(ticket, default=str)))


PROJECTIONS: dict[str, Callable[[sqlite3.Connection, str, float, Detail], None]] = {
    "loop_start": _loop_start, "loop_end": _loop_end,
    "iteration_start": _iteration_start, "iteration_end": _iteration_end,
    "phase_start": _phase_start, "phase_end": _phase_end, "phase_work": _phase_work,
    "incident": _incident, "retry": _retry, "wait_start": _wait_start, "wait_end": _wait_end, "alert": _alert,
}


def project(db: sqlite3.Connection, run_id: str, at: float, kind: str, detail: Detail) -> None:
    """Apply one event to the tables (nothing for kinds only the events table keeps)."""
    apply = PROJECTIONS.get(kind)
    if apply is not None:
        apply(db, run_id, at, detail)
