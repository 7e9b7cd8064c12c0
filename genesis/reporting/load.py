"""The night read back from the ledger: one run's records as the report's model (model.py),
and one run's events from a view's read-only connection (run_events; the loop's own steps
read theirs through Step.events)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from genesis.health.incidents import UnknownIncident, read_incident
from genesis.hints import hint
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.claims import EVIDENCE_EVENT, REOPENED_EVENT
from genesis.reporting import kpis
from genesis.repo.history import Change, describe
from genesis.reporting.model import (ActionRow, AlertRow, BreakerChange, CommitRow, CommitTrouble, EvidenceRow,
                                     HistoryRow, IncidentRow, IterationRow, LeftOutRow, Night, PhaseRow, WaitRow)
from genesis.sandbox.refused import EVENT as REFUSED_EVENT
from genesis.sandbox.refused import summed
from genesis.store.atomicio import CorruptFile
from genesis.store.layout import Layout
from genesis.watch.agentlog import tail

__all__ = ["UnknownRun", "open_view", "run_events", "night", "final_alert_recorded", "MAX_FORENSICS"]

MAX_FORENSICS = 20_000  # characters of an incident's text kept in the night
TAIL_LINES = 3          # transcript lines shown under an abnormal phase


class UnknownRun(LookupError):
    """No such run in the ledger (or no ledger yet)."""


def open_view(layout: Layout) -> Ledger:
    """The ledger, read-only (a view never writes, and never holds up the loop)."""
    try:
        return Ledger.open(layout.ledger_file, readonly=True)
    except LedgerError as exc:
        raise UnknownRun(str(exc)) from None


def run_events(layout: Layout, run_id: str, ledger: Ledger | None = None) -> list[dict[str, Any]]:
    """The events of one run, oldest first (none if the run or the ledger is unknown)."""
    if ledger is not None:
        return ledger.events(run_id)
    try:
        with open_view(layout) as led:
            return led.events(run_id)
    except UnknownRun:
        return []


def pick_run(led: Ledger, run_id: str | None, since: float | None = None, project: Path | None = None) -> str:
    """run_id if the ledger knows it, else the latest run (started at or after since); an
    unknown run_id's error names the command that lists project's runs."""
    runs = led.runs(since)
    if not runs:
        raise UnknownRun(f"no Genesis run recorded in {led.path}" + (" since then" if since is not None else ""))
    if run_id is None:
        return runs[-1].run_id
    if run_id not in {r.run_id for r in led.runs()}:
        listing = f"; `{hint(project, 'report', '--list')}` lists the runs" if project is not None else ""
        raise UnknownRun(f"no run {run_id!r} in {led.path}{listing}")
    return run_id


def _json_list(text: Any) -> tuple[str, ...]:
    try:
        value = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def night(led: Ledger, run_id: str, *, running: bool = False, incidents_dir: Path | None = None,
          now: float | None = None) -> Night:
    """One run as the report shows it."""
    now = time.time() if now is None else now
    run = next(r for r in led.runs() if r.run_id == run_id)
    q = lambda sql: led.query(sql, (run_id,))  # noqa: E731 - every query here is of one run
    recorded = _recorded_tails(led, run_id)
    phases = [PhaseRow(
        iteration=r["iteration"] or 0, phase=r["phase"], attempt=r["attempt"] or 0, started=r["started"],
        ended=r["ended"], ending=r["ending"], exit_code=r["exit_code"], reason=r["detail"] or r["ending"],
        cost_usd=r["cost_usd"], turns=r["turns"], input_tokens=r["input_tokens"], output_tokens=r["output_tokens"],
        commits=_json_list(r["commits"]), files_changed=r["files_changed"], tasks_done=_json_list(r["tasks_done"]),
        killed=r["killed"] or 0, log=r["log"], tail=_tail(r["log"], r["ending"], recorded))
        for r in q("SELECT * FROM phases WHERE run_id = ? ORDER BY id")]
    events = led.events(run_id, kinds=("phase_skip", "health", "phase_start", "reap", "incident"))
    skipped: dict[int, list[str]] = {}
    for e in events:
        if e["event"] == "phase_skip" and isinstance(e.get("iteration"), int):
            skipped.setdefault(e["iteration"], []).append(str(e.get("phase")))
    iterations = []
    seen = set()
    for r in q("SELECT * FROM iterations WHERE run_id = ? ORDER BY iteration"):
        seen.add(r["iteration"])
        iterations.append(IterationRow(
            iteration=r["iteration"], started=r["started"], ended=r["ended"],
            progress=None if r["progress"] is None else bool(r["progress"]), breaker=r["breaker"],
            no_progress=r["no_progress"] or 0, phases=tuple(p for p in phases if p.iteration == r["iteration"]),
            skipped=tuple(skipped.get(r["iteration"], ()))))
    strays = [p for p in phases if p.iteration not in seen]  # a phase outside any recorded iteration
    if strays:
        iterations.append(IterationRow(0, strays[0].started, None, None, None, 0, tuple(strays)))
    waits = tuple(WaitRow(kind=r["kind"], started=r["started"], until=r["until"], ended=r["ended"],
                          reason=r["reason"] or "", iteration=r["iteration"], phase=r["phase"])
                  for r in q("SELECT * FROM waits WHERE run_id = ? ORDER BY id"))
    incidents = tuple(IncidentRow(id=r["id"], at=r["at"], iteration=r["iteration"], phase=r["phase"],
                                  kind=r["kind"] or "", reason=r["reason"] or "",
                                  forensics=_forensics(incidents_dir, r["id"]))
                      for r in q("SELECT * FROM incidents WHERE run_id = ? ORDER BY at"))
    changes = tuple(BreakerChange(at=r["at"], iteration=r["iteration"], before=r["before"], after=r["after"],
                                  no_progress=r["no_progress"] or 0)
                    for r in q("SELECT * FROM breaker_changes WHERE run_id = ? ORDER BY id"))
    told = {str((e.get("ticket") or {}).get("ticket_id")): e for e in led.events(run_id, kinds=("alert",))
            if isinstance(e.get("ticket"), dict)}  # what the table leaves out: channels skipped, folded
    alerts = tuple(AlertRow(ticket_id=r["ticket_id"], at=r["at"], severity=r["severity"] or "", cause=r["cause"] or "",
                            verdict=r["decision"] or "pending", delivered=_json_list(r["delivered"]),
                            why=r["why"] or "", by=r["decided_by"] or "", failed=_json_keys(r["failed"]),
                            final=_final(r["ticket"]), kind=r["kind"] or "",
                            skipped=_json_keys(told.get(r["ticket_id"], {}).get("skipped")),
                            folded=bool(told.get(r["ticket_id"], {}).get("folded")),
                            **_ticket_place(r["ticket"]))
                   for r in q("SELECT * FROM alerts WHERE run_id = ? ORDER BY at"))
    kept = led.events(run_id, kinds=("phase_work", "history_rewritten"))
    off = {(e.get("iteration"), e.get("phase")) for e in kept if e["event"] == "phase_work" and e.get("orphaned")}
    commits = tuple(CommitRow(sha=r["sha"], at=r["at"], subject=r["subject"] or "", iteration=r["iteration"],
                              phase=r["phase"], orphaned=(r["iteration"], r["phase"]) in off)
                    for r in q("SELECT * FROM commits WHERE run_id = ? ORDER BY at, rowid"))
    silent = {str(e.get("id")): float(e["silent_for"]) for e in events
              if e["event"] == "incident" and isinstance(e.get("silent_for"), (int, float))}
    retries = q("SELECT COUNT(*) FROM retries WHERE run_id = ?")[0][0]
    proofs = led.events(run_id, kinds=(EVIDENCE_EVENT, REOPENED_EVENT))
    reaped = sum(len(e.get("pids") or []) for e in events if e["event"] == "reap")
    return Night(
        run_id=run_id, project=run.project or "", started=run.started, ended=run.ended, reason=run.reason or "",
        exit_code=run.exit_code, running=running and run.ended is None, iterations=tuple(iterations), waits=waits,
        incidents=incidents, breaker_changes=changes, alerts=alerts, commits=commits,
        actions=tuple(ActionRow(e["epoch"], str(e.get("action") or ""), str(e.get("task") or ""),
                                str(e.get("source") or ""), str(e.get("credential") or ""), str(e.get("said") or ""))
                      for e in led.events(run_id, kinds=("action",))),
        kpis=kpis.compute(phases, incidents, silent, [e for e in events if e["event"] in ("health", "phase_start")],
                          retries, alerts),
        reaped=reaped, history=_history(kept),
        commit_troubles=_commit_troubles(led.events(run_id, kinds=("commit_failed", "index_lock_removed",
                                                                   "git_planted"))),
        left_out=_left_out(led.events(run_id, kinds=("commit_left_out", "agent_committed_secret"))),
        phase_order=_phase_order(led.events(run_id, kinds=("loop_start",)), events),
        evidence=_evidence(proofs),
        refuted=frozenset((e.get("iteration"), e.get("phase"), " ".join(str(e.get("task")).split()))
                          for e in proofs if e["event"] == REOPENED_EVENT), read_at=now,
        box=next((str(e["protects"]).replace("sandbox: ", "the agent's box: ", 1)
                  for e in led.events(run_id, kinds=("sandbox",)) if e.get("protects")), ""),
        refused=summed(led.events(run_id, kinds=(REFUSED_EVENT,))))


def final_alert_recorded(led: Ledger, run_id: str) -> bool:
    """The loop's end's ticket is in the ledger: its deliverer triaged it, told the channels and
    recorded what they did."""
    return any(_final(r["ticket"]) for r in led.query("SELECT ticket FROM alerts WHERE run_id = ?", (run_id,)))


def _phase_order(starts: list[dict[str, Any]], events: list[dict[str, Any]]) -> tuple[str, ...]:
    """GENESIS_PHASES as the run used it (its loop_start records them), then any other phase
    the ledger holds; a run an older Genesis recorded: the order its first iteration started or
    skipped them."""
    order: dict[str, None] = {}
    for e in starts:
        listed = e.get("phases")
        if isinstance(listed, list) and listed:
            order.update((str(name), None) for name in listed)
            break
    ran = [e for e in events if e["event"] in ("phase_start", "phase_skip") and e.get("phase")]
    first = min((e["iteration"] for e in ran if isinstance(e.get("iteration"), int)), default=None)
    for e in sorted(ran, key=lambda e: e.get("iteration") != first):  # stable: in the order recorded
        order.setdefault(str(e["phase"]), None)
    return tuple(order)


def _left_out(events: list[dict[str, Any]]) -> tuple[LeftOutRow, ...]:
    """Files auto-commits left out, and secret-looking files the agent committed itself, as recorded."""
    rows = []
    for e in events:
        for item in e.get("files") or []:
            if isinstance(item, dict):
                rows.append(LeftOutRow(at=float(e.get("epoch") or 0), iteration=e.get("iteration"),
                                       phase=e.get("phase"), path=str(item.get("path", "?")),
                                       reason=str(item.get("reason", "")), commit=str(item.get("commit") or "?")
                                       if e["event"] == "agent_committed_secret" else ""))
    return tuple(rows)


TROUBLE_KINDS = {"commit_failed": "failed", "index_lock_removed": "lock_removed", "git_planted": "planted"}


def _evidence(events: list[dict[str, Any]]) -> tuple[EvidenceRow, ...]:
    """Each task's latest evidence, with the times it was reopened, as the run recorded them."""
    latest: dict[str, dict[str, Any]] = {}
    reopened: dict[str, int] = {}
    for e in events:
        task = " ".join(str(e.get("task", "")).split())
        if e["event"] == REOPENED_EVENT:
            reopened[task] = reopened.get(task, 0) + 1
        else:
            latest.pop(task, None)  # re-inserted: the order is the latest evidence's
            latest[task] = e
    rows = []
    for task, e in latest.items():
        checks = [c for c in e.get("checks") or [] if isinstance(c, dict)]
        failed = next((c for c in checks if c.get("exit_code") != 0), None)
        seconds = [float(c["seconds"]) for c in checks if isinstance(c.get("seconds"), (int, float))]
        code = (failed or {}).get("exit_code") if failed else (0 if checks else None)
        rows.append(EvidenceRow(task=str(e.get("task", "")), at=float(e.get("epoch") or 0),
                                iteration=e.get("iteration"), phase=e.get("phase"), outcome=str(e.get("outcome", "")),
                                command="; ".join(str(c.get("command", "")) for c in checks),
                                exit_code=code if isinstance(code, int) else None,
                                seconds=sum(seconds) if seconds else None, why=str(e.get("why", "")),
                                tail=tuple(str(line) for line in e.get("tail") or []),
                                reopened=reopened.get(task, 0)))
    return tuple(rows)


def _commit_troubles(events: list[dict[str, Any]]) -> tuple[CommitTrouble, ...]:
    """Failed auto-commits, in git's words, the stale index.lock files removed before one, and git
    config the agent planted (undone before the auto-commit)."""
    return tuple(CommitTrouble(at=float(e.get("epoch") or 0), iteration=e.get("iteration"), phase=e.get("phase"),
                               kind=TROUBLE_KINDS[e["event"]],
                               text=str(e.get("error") or e.get("text") or e.get("what") or "")) for e in events)


def _history(events: list[dict[str, Any]]) -> tuple[HistoryRow, ...]:
    """Every change to history the run's phases made, as history_rewritten events recorded them."""
    rows = []
    for e in events:
        if e["event"] != "history_rewritten":
            continue
        for data in e.get("changes") or []:
            change = Change.from_json(data)
            if change is not None:
                rows.append(HistoryRow(at=float(e.get("epoch") or 0), iteration=e.get("iteration"),
                                       phase=e.get("phase"), kind=change.kind, text=describe(change),
                                       allowed=bool(e.get("allowed"))))
    return tuple(rows)


def _recorded_tails(led: Ledger, run_id: str) -> dict[str, list[str]]:
    """Each attempt's evidence as its phase_end recorded it, by its own log."""
    return {e["log"]: e["tail"] for e in led.events(run_id, kinds=("phase_end",))
            if isinstance(e.get("log"), str) and isinstance(e.get("tail"), list)}


def _tail(log: str | None, ending: str, recorded: dict[str, list[str]]) -> tuple[str, ...]:
    """The last lines of an abnormal phase's transcript: as its end recorded them, or, for a run
    recorded before attempts kept their evidence, read from its log where it still is."""
    if not log or ending in ("finished", "running"):
        return ()
    if log in recorded:
        return tuple(str(line) for line in recorded[log] if str(line).strip())[-TAIL_LINES:]
    return tuple(line for line in tail(Path(log), TAIL_LINES) if line.strip())


def _json_keys(value: Any) -> tuple[str, ...]:
    """The keys of an object, or of one in JSON text (channel -> why), () if it is none."""
    try:
        value = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return ()
    return tuple(str(k) for k in value) if isinstance(value, dict) else ()


def _ticket_place(ticket: Any) -> dict[str, Any]:
    """The iteration and phase a ticket is about, where it says them."""
    try:
        data = json.loads(ticket) if isinstance(ticket, str) else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    iteration, phase = data.get("iteration"), data.get("phase")
    return {"iteration": iteration if isinstance(iteration, int) and not isinstance(iteration, bool) else None,
            "phase": phase if isinstance(phase, str) else None}


def _final(ticket: Any) -> bool:
    try:
        return bool(json.loads(ticket).get("final")) if isinstance(ticket, str) else False
    except (ValueError, AttributeError):
        return False


def _forensics(directory: Path | None, ident: str) -> str:
    """An incident's readable text, cut to MAX_FORENSICS ("" if its file is gone)."""
    if directory is None:
        return ""

    try:
        text = read_incident(directory, ident)
    except (UnknownIncident, CorruptFile, OSError, ValueError):
        return ""
    return text if len(text) <= MAX_FORENSICS else text[:MAX_FORENSICS] + "\n... (cut)"
