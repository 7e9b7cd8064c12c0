"""One loop's page (`/api/loop/{key}`): its status, its timeline so far (the morning report's,
growing while the run goes on), its incidents with their forensics, and the live tail of the
running attempt's transcript. A fleet task's page also lists every attempt of the task, each
with its own end, and the task's state and reason (a failed task says why).

The key is a project's (its own loop) or `<project key>--<task id>` (a fleet task's child loop,
in its worktree). The ledger is opened read-only; the transcript is read from its end, never
through a symlink, stripped of escape sequences and redacted (watch/evidence.py).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Sequence

from genesis import exitcodes
from genesis.clock import iso
from genesis.actions.offered import for_loop, for_task
from genesis.fleet.ledger import FleetLedger
from genesis.fleet.mergeevidence import MERGE_EVENTS, merges_of
from genesis.ledger.store import Ledger, LedgerError
from genesis.redact import redact, redact_all
from genesis.reporting.html import timeline_svg
from genesis.reporting.load import night
from genesis.sandbox.refused import refused_line
from genesis.status.document import document as status_document
from genesis.status.view import build
from genesis.store.layout import Layout
from genesis.watch.evidence import transcript_tail
from genesis.web.discovery import key_of
from genesis.web.metrics import ProjectSource
from genesis.web.snapshot import Reader
from genesis.words import one_line

__all__ = ["loop_document", "TAIL_LINES", "TAIL_BYTES", "FORENSICS_LIMIT"]

TAIL_LINES = 200
TAIL_BYTES = 64 << 10
FORENSICS_LIMIT = 20_000
# A fleet task's page whose worktree is gone: its child's own files went with it.
GONE: dict[str, Any] = {"status": None, "timeline": None, "incidents": [], "evidence": [], "tail": [],
                        "tail_file": None, "run_id": None,
                        "error": "its worktree is gone (merged or removed): its child's own records went with it"}


def _where(sources: Sequence[ProjectSource], key: str, snapshot: dict[str, Any] | None,
           reader: Reader) -> tuple[Layout | None, str] | None:
    """The layout of the loop the key names, and its title; None for a key no project has. A
    fleet task whose worktree is gone (merged, removed) has no layout: its record is still shown."""
    pkey, _, task_id = key.partition("--")
    source = next((s for s in sources if key_of(s.project) == pkey), None)
    if source is None:
        return None
    if not task_id:
        return source.layout, source.name
    project = next((p for p in (snapshot or {}).get("projects", []) if p.get("key") == pkey), None)
    task = next((t for t in ((project or {}).get("fleet") or {}).get("tasks", []) if t.get("id") == task_id), None)
    if task is None:
        return None
    layout = reader.layout(Path(task["worktree"])) if task.get("worktree") else None
    return layout, f"{task.get('text') or task_id}"


def loop_document(sources: Sequence[ProjectSource], key: str, now: float, reader: Reader,
                  snapshot: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The document of the loop the key names, None when no project shown has it."""
    found = _where(sources, key, snapshot, reader)
    if found is None:
        return None
    layout, title = found
    out, log = reader.loop(key, layout, lambda: _read(layout, now)) if layout is not None else (GONE, None)
    out = {**out, "schema": 1, "key": key, "title": one_line(redact(title), 300), "generated_at": iso(now),
           "generated_at_epoch": round(now, 3)}
    if log is not None:  # the tail is read every time: it is what grows
        out["tail"] = transcript_tail(log, TAIL_LINES, TAIL_BYTES)
    pkey, _, task_id = key.partition("--")
    source = next((s for s in sources if key_of(s.project) == pkey), None)
    out["task"] = _task(source.fleet_ledger, task_id) if task_id and source is not None and source.fleet_ledger \
        else None
    status = out.get("status") or {}
    wait_kind = (status.get("wait") or {}).get("kind")
    out["actions"] = for_task(out["task"]["state"], wait_kind) if out["task"] else \
        for_loop(status.get("state"), wait_kind, page=True)
    return out


def _task(path: Path, task_id: str) -> dict[str, Any] | None:
    """A fleet task's state, reason and every attempt (each with its own end), from the fleet ledger."""
    try:
        with FleetLedger.open(path, readonly=True) as led:
            row, tried = led.task(task_id), led.attempts(task_id)
            ends = led.events("child_end", task_id=task_id)
            merges = merges_of([e for kind in MERGE_EVENTS for e in led.events(kind, task_id=task_id)])
    except (LedgerError, sqlite3.Error, OSError, RuntimeError, ValueError):
        return None
    if row is None:
        return None

    def end_of(a: Any) -> dict[str, Any]:
        found = [e.detail for e in ends if isinstance(e.detail, dict) and e.detail.get("attempt") == a.attempt]
        return found[-1] if found else {}

    return {"id": row.id, "state": row.state, "reason": one_line(redact(row.reason), 500) or None,
            "attempts": [{"attempt": a.attempt, "kind": a.kind, "agent": one_line(redact(a.agent), 200),
                          "started": iso(a.started), "started_epoch": round(a.started, 3),
                          "ended": iso(a.ended) if a.ended is not None else None,
                          "ended_epoch": round(a.ended, 3) if a.ended is not None else None,
                          "exit_code": a.exit_code, "outcome": a.outcome,
                          "why": one_line(redact(str(end_of(a).get("reason") or "")), 500) or None,
                          "cost_usd": end_of(a).get("cost_usd")} for a in tried],
            # Each merge's evidence: the merged tree's checks green or red (its tail), a drop's lost hunks.
            "merges": [{"at": iso(m.at), "at_epoch": round(m.at, 3), "result": m.result,
                        "checks": [one_line(redact(c), 500) for c in m.checks],
                        "tail": [one_line(redact(t), 500) for t in m.tail],
                        "lost": [one_line(redact(h), 500) for h in m.lost], "to": m.to or None} for m in merges]}


def _read(layout: Layout, now: float) -> tuple[dict[str, Any], Path | None]:
    """What the loop's files say (its status, timeline and incidents), and its running phase's
    transcript when it lies in the loop's log folder."""
    out: dict[str, Any] = {"status": None, "timeline": None, "incidents": [], "evidence": [], "tail": [],
                           "tail_file": None, "run_id": None, "error": None, "network": None}
    transcript = None
    try:
        st = build(layout, now=now)
        out["status"] = status_document(st, exitcodes.OK if st.running else exitcodes.NOT_RUNNING, now)
        if layout.ledger_file.is_file():
            with Ledger.open(layout.ledger_file, readonly=True) as led:
                runs = led.runs()
                if runs:
                    run_id = st.run_id if st.run_id in {r.run_id for r in runs} else runs[-1].run_id
                    out["run_id"] = run_id
                    # Redacted whole before rendering, as the morning report does: reasons and
                    # forensics come from agents' words and files.
                    n = redact_all(night(led, run_id, running=st.running, incidents_dir=layout.incidents_dir,
                                         now=now))
                    out["timeline"] = timeline_svg(n, now)
                    out["incidents"] = [{"id": i.id, "at": iso(i.at), "at_epoch": round(i.at, 3), "kind": i.kind,
                                         "phase": i.phase, "iteration": i.iteration,
                                         "reason": one_line(redact(i.reason), 300),
                                         "forensics": redact(i.forensics[:FORENSICS_LIMIT])} for i in n.incidents]
                    out["evidence"] = [{"task": one_line(r.task, 300), "outcome": r.said,
                                        "command": one_line(r.command, 1000), "exit_code": r.exit_code,
                                        "seconds": r.seconds, "at_epoch": round(r.at, 3), "iteration": r.iteration,
                                        "phase": r.phase, "reopened": r.reopened,
                                        "tail": [one_line(line, 300) for line in r.tail]} for r in n.evidence]
                    out["network"] = one_line(redact(refused_line(n.refused)), 1000) or None
                    starts = led.events(run_id, kinds=("phase_start",))
                    log = starts[-1].get("log") if starts else None
                    if isinstance(log, str) and log:
                        out["tail_file"] = one_line(redact(log), 1000)
                        transcript = _in_log_dir(Path(log), layout)
    except (LedgerError, sqlite3.Error, OSError, StopIteration, ValueError) as exc:
        out["error"] = one_line(redact(f"{type(exc).__name__}: {exc}"), 2000)
    return out, transcript


def _in_log_dir(log: Path, layout: Layout) -> Path | None:
    """The transcript when it lies in the loop's log folder: the ledger names it, and a ledger
    is a file anyone who can write the state folder can write; the file itself is still opened
    without following a symlink."""
    try:
        folder = log.parent.resolve(strict=True)
        return log if folder.is_relative_to(layout.log_dir.resolve(strict=True)) else None
    except OSError:
        return None
