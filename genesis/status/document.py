"""`genesis status --json`: the status as one JSON document, for a tmux status line, a cron
check or a monitoring probe (the schema is docs/reference/status-json.md).

Its promise: within one SCHEMA, keys are only ever added, never renamed, removed or given
another type. Every documented key is always present (null when its thing is absent),
keys are snake_case, and every time is given twice: `<name>` in UTC ISO 8601 and
`<name>_epoch` in epoch seconds. Text from the ledger or an agent is on one line, cut, and
redacted, as on the screen.
"""

from __future__ import annotations

from typing import Any, Sequence

from genesis.clock import iso
from genesis.health.heartbeat import BEFORE_TOOL, tool_event
from genesis.redact import redact
from genesis.status.loops import Ended, Loop
from genesis.status.view import Status
from genesis.words import one_line

__all__ = ["SCHEMA", "document", "state_of"]

SCHEMA = 1
TEXT_LIMIT = 300     # characters of one reason or event
ERROR_LIMIT = 2000   # characters of what went wrong (it may name several files)


def _text(value: object, limit: int = TEXT_LIMIT) -> str:
    return one_line(redact(str(value)), limit)


def _or_none(value: str) -> str | None:
    return value if value else None


def _time(name: str, epoch: float | None) -> dict[str, Any]:
    """A time as `name` (UTC ISO) and `name_epoch` (seconds), both null when unknown."""
    if epoch is None:
        return {name: None, f"{name}_epoch": None}
    return {name: iso(epoch), f"{name}_epoch": round(float(epoch), 3)}


def _seconds(value: float | None) -> float | None:
    return round(max(0.0, value), 1) if value is not None else None


def state_of(st: Status | None, loops: Sequence[Loop] | None = None) -> str:
    """running, waiting, frozen, stopped or not_running: the loop in one word (with no project,
    whether any loop on this machine runs)."""
    if st is None:
        return "running" if loops else "not_running"
    if st.frozen:
        return "frozen"
    if st.running:
        return "waiting" if st.phase is None and st.wait is not None else "running"
    return "stopped" if st.killed else "not_running"


def document(st: Status | None, code: int, now: float, loops: Sequence[Loop] | None = None,
             ended: Sequence[Ended] | None = None, error: str = "") -> dict[str, Any]:
    """The document for st (None: no project) as seen at now; code is the command's exit code.
    loops and ended: the machine's loops for --all (None without it: `loops` is null)."""
    problem = error or (st.error if st is not None else "")
    return {
        "schema": SCHEMA,
        **_time("generated_at", now),
        "project": str(st.project) if st is not None else None,
        "state": state_of(st, loops),
        "exit_code": code,
        "error": _text(problem, ERROR_LIMIT) if problem else None,
        "note": _text(st.note) if st is not None and st.note else None,
        "run": _run(st, now) if st is not None and st.run_id else None,
        "phase": _phase(st, now) if st is not None and st.phase is not None else None,
        "wait": _wait(st, now) if st is not None and st.wait is not None else None,
        "breaker": _breaker(st) if st is not None else None,
        "totals": _totals(st) if st is not None and st.totals is not None else None,
        "tasks": _tasks(st) if st is not None and st.task_counts is not None else None,
        "events": [{**_time("at", line.at), "kind": line.kind, "text": _text(line.text)}
                   for line in (st.recent if st is not None else ())],
        "loops": _loops(loops, ended or (), now) if loops is not None else None,
    }


def _run(st: Status, now: float) -> dict[str, Any]:
    last = st.last_run if st.last_run is not None and st.last_run.run_id == st.run_id else None
    ended = last.ended if last is not None and not st.running else None
    end = ended if ended is not None else None if not st.running else now
    return {
        "id": st.run_id,
        "pid": st.pid or None,
        **_time("started", st.started),
        **_time("ended", ended),
        "duration_seconds": _seconds(end - st.started) if end is not None and st.started is not None else None,
        "iteration": st.iteration,
        "max_iterations": st.max_iterations,
        "exit_code": last.exit_code if last is not None and not st.running else None,
        "reason": _or_none(_text(last.reason)) if last is not None and not st.running else None,
        **_time("frozen_since", st.frozen_since if st.frozen else None),
        **_time("killed_at", st.killed_at if st.killed else None),
    }


def _phase(st: Status, now: float) -> dict[str, Any]:
    p, h, b = st.phase, st.health, st.beat
    assert p is not None
    return {
        "name": _text(p.name, 100),
        "iteration": p.iteration,
        "attempt": p.attempt,
        **_time("started", p.started),
        "running_seconds": _seconds(now - p.started),
        "health_class": h.classification if h is not None else None,
        "stall_score": h.stall_score if h is not None else None,
        "health_reason": _or_none(_text(h.reason)) if h is not None else None,
        **_time("checked_at", h.at if h is not None else None),
        **_time("heartbeat_at", b.epoch if b is not None else None),
        "heartbeat_age_seconds": _seconds(now - b.epoch) if b is not None else None,
        "heartbeat_event": _or_none(_text(b.event, 40)) if b is not None else None,
        "heartbeat_tool": _or_none(_text(b.tool, 60)) if b is not None else None,
        "tool_in_flight": _tool(st, now),
    }


def _tool(st: Status, now: float) -> dict[str, Any] | None:
    """The tool the agent is inside: named by its last heartbeat (a call not yet answered),
    described by the watcher's last check."""
    b, h = st.beat, st.health
    flying = b is not None and tool_event(b.event) == BEFORE_TOOL and bool(b.tool)
    text = h.tool_in_flight if h is not None and h.tool_in_flight else ""
    if not flying and not text:
        return None
    since = b.epoch if flying and b is not None else None
    return {
        "name": _text(b.tool, 60) if flying and b is not None else None,
        "text": _text(text or (b.tool if b is not None else "")),
        **_time("since", since),
        "seconds": _seconds(now - since) if since is not None else None,
    }


def _wait(st: Status, now: float) -> dict[str, Any]:
    w = st.wait
    assert w is not None
    return {
        "kind": _text(w.kind, 40),
        "label": _text(w.label, 60),
        **_time("until", w.until),
        "seconds_left": _seconds(w.until - now),
        "reason": _or_none(_text(w.reason)),
        "phase": _or_none(_text(w.phase, 100)),
        "iteration": w.iteration or None,
    }


def _breaker(st: Status) -> dict[str, Any]:
    b = st.breaker
    if b is None:  # no breaker file yet: a fresh breaker
        return {"state": "CLOSED", "no_progress": 0, **_time("retry_at", None), "error": None}
    return {"state": b.state, "no_progress": b.no_progress, **_time("retry_at", b.retry_at),
            "error": _text(b.problem) if b.problem else None}


def _totals(st: Status) -> dict[str, Any]:
    t = st.totals
    assert t is not None
    return {
        "scope": "this_run" if t.current else "last_run",
        "run_id": t.run_id,
        **_time("since", t.since),
        **_time("until", t.until),
        "iterations": t.iterations,
        "phases": t.phases,
        "finished": t.finished,
        "abnormal_phases": t.abnormal,
        "phases_by_ending": {_text(ending, 40): n for ending, n in t.endings},
        "incidents": t.incidents,
        "retries": t.retries,
        "commits": t.commits,
        "tasks_done": t.tasks_done,
        "cost_usd": round(t.cost_usd, 4) if t.cost_usd is not None else None,
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "waits": t.waits,
        "waited_seconds": _seconds(t.waited),
        "network_refused": [{"host": _text(r.host, 255), "port": r.port, "count": r.count} for r in t.refused],
    }


def _tasks(st: Status) -> dict[str, int]:
    assert st.task_counts is not None
    open_, review, done = st.task_counts
    return {"open": open_, "awaiting_review": review, "done": done}


def _loops(loops: Sequence[Loop], ended: Sequence[Ended], now: float) -> list[dict[str, Any]]:
    """The machine's running loops, then the projects' runs that ended lately, latest first."""
    out: list[dict[str, Any]] = []
    for lp in loops:
        out.append({
            "project": str(lp.project), "run_id": lp.run_id,
            "state": "waiting" if lp.phase is None and lp.wait is not None else "running",
            "pid": lp.pid or None, **_time("started", lp.started), **_time("ended", None),
            "duration_seconds": _seconds(now - lp.started) if lp.started is not None else None,
            "iteration": lp.iteration, "phase": _text(lp.phase.name, 100) if lp.phase is not None else None,
            "health_class": lp.health or None, "exit_code": None, "reason": None,
        })
    for e in ended:
        out.append({
            "project": str(e.project), "run_id": e.run_id, "state": "stopped" if e.killed else "ended",
            "pid": None, **_time("started", e.started), **_time("ended", e.ended),
            "duration_seconds": _seconds(e.ended - e.started) if e.ended is not None else None,
            "iteration": None, "phase": None, "health_class": None, "exit_code": e.exit_code,
            "reason": _or_none(_text(e.reason)),
        })
    return out
