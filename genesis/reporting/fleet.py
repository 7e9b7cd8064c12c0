"""`genesis report` on a fleet: its timeline, each task with its attempts (each with its own
end, cost and log: the evidence), escalations, time, cost and merged commits, the children's
incidents, every alert (the fleet's and its children's, all in the project's run ledger), each
merge's evidence (its checks on the merged tree, green or red, and a dropping merge's lost
hunks), and the fleet's figures, read from the fleet ledger (and, where the monitor recorded no cost, from
each child's own ledger while its worktree is there).

The figures (docs/guides/morning.md says the same for the reader):
- completion rate: tasks merged (or ready, in branch mode) with no escalation, over all tasks;
- MTTD: from a child's failure (its own recorded end, else when it was last seen alive) to the
  monitor detecting it (its `child_end`), over the abnormal ends;
- MTTR: from that detection to the task's next child running healthy (`child_healthy`, else the
  first healthy check or finished phase in the child's ledger);
- false-positive rate: restarts of a child that had not failed (its attempt not ended, or
  ended other than failed) over all restarts and escalations. The monitor restarts only a
  child whose loop has ended abnormally, so this measures that it never did otherwise;
- retries per task: restarts and escalations over tasks; escalation rate: tasks escalated at
  least once over tasks; final failure rate: tasks failed permanently over tasks;
- cost per retry: the cost of the retried attempts over their number;
- ledger writes per second: fleet-ledger records (events, attempt starts and ends) over the
  fleet's span (first start to last end, or now).
"""

from __future__ import annotations

import dataclasses
import io
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from genesis.config import default_layout
from genesis.fleet.ledger import Attempt, FleetEvent, FleetLedger
from genesis.fleet.mergeevidence import MERGE_EVENTS, MergeEvidence, merge_line, merges_of
from genesis.fleet.taskref import PLANNER
from genesis.ledger.store import Ledger, LedgerError
from genesis.reporting.load import _final, _json_keys, _json_list, _ticket_place
from genesis.reporting.model import AlertRow
from genesis.reporting.text import alert_lines
from genesis.redact import redact
from genesis.repo.gitcmd import NotARepository
from genesis.reporting.html import CSS, CSP, _e, _section, _table
from genesis.when import clock, stamp
from genesis.words import duration, money, one_line, plural, sanitize

__all__ = ["TaskReport", "FleetKpis", "FleetReport", "AttemptEvidence", "FleetIncident", "Moment", "fleet_ledger_of",
           "load", "merges_of", "MergeEvidence", "compute_kpis", "render_text", "render_html", "sections", "plain",
           "kpi_rows", "RETRIES", "COMPLETE", "FIGURES"]

RETRIES = frozenset({"restart", "escalate"})   # attempt kinds that are a retry of the task
COMPLETE = frozenset({"merged", "ready"})
NOTHING_ADDED = "nothing-added"   # the state shown for a Planner's pass that brought no task home
SHOWN = 500          # task rows in the text and the page (the JSON has every one)
CHILD_LEDGERS = 200  # child ledgers opened for costs the monitor did not record, at most
MOMENTS = 400        # timeline lines in the text and the page (the JSON has every one)
FIGURES = "fleet figures"
# The fleet ledger's events the timeline tells, in words (task events name their task).
TOLD = {"fleet_start": "fleet started", "fleet_end": "fleet ended", "launch": "started", "child_end": "ended",
        "merged": "came home", "rebased": "rebased", "needs_review": "needs review",
        "failed_permanently": "failed permanently", "reopened": "reopened", "cascade_pause": "cascade: restarts paused",
        "cascade_probe": "cascade: one child probes", "cascade_resume": "cascade: restarts resumed",
        "limit_hold": "usage limit: no child starts", "limit_resume": "usage limit over: children start again",
        "merge_held": "merge held", "merger": "the Merger resolves a conflict",
        "merge_red": "merge red, not landed",
        "agent_died": "its agent was killed inside its running child (counted toward the cascade)",
        "agent_restart": "its agent may start again inside its running child (the restart budget's go)",
        "branch_moved": "a child moved the project branch: put back"}


def fleet_ledger_of(state_dir: Path) -> Path:
    """The fleet ledger of the project whose state folder is state_dir."""
    return state_dir / "fleet" / "ledger.sqlite3"


@dataclass(frozen=True)
class AttemptEvidence:
    """One attempt's own end, as the monitor recorded it (not the next attempt's reason)."""
    attempt: int
    kind: str
    agent: str
    started: float
    ended: float | None
    exit_code: int | None
    outcome: str | None
    why: str                       # how this attempt ended, in its own words
    cost_usd: float | None
    log: str                       # its child's output
    run_id: str


@dataclass(frozen=True)
class FleetIncident:
    """A stuck or wedged phase of a child, from its own ledger (while its worktree is there)."""
    task_id: str
    attempt: int
    id: str
    at: float
    phase: str | None
    kind: str
    reason: str


@dataclass(frozen=True)
class Moment:
    """One line of the fleet's timeline."""
    at: float
    task_id: str | None
    what: str


@dataclass(frozen=True)
class TaskReport:
    id: str
    text: str
    state: str
    attempts: int
    restarts: int
    escalations: int
    agent: str                     # the last attempt's agent
    seconds: float                 # the time of every attempt (a running one up to now)
    cost_usd: float | None         # None: no child reported a cost
    merged_sha: str
    commits: tuple[str, ...]       # the task's commits that came home
    reason: str
    history: tuple[Attempt, ...]
    evidence: tuple[AttemptEvidence, ...] = ()
    merges: tuple[MergeEvidence, ...] = ()

    @property
    def planner(self) -> bool:
        """The Planner's pass, not a task of TASKS.md: no count or KPI of the tasks holds it."""
        return self.id.startswith(PLANNER)


@dataclass(frozen=True)
class FleetKpis:
    tasks: int
    completed: int                 # merged or ready
    completed_clean: int           # ... with no escalation
    completion_rate: float | None
    mttd_seconds: float | None
    detections: int
    mttr_seconds: float | None
    recoveries: int
    false_positive_rate: float | None
    restarts_of_healthy: int
    retries: int
    retries_per_task: float | None
    escalated: int
    escalation_rate: float | None
    failed: int
    final_failure_rate: float | None
    retry_cost_usd: float | None
    cost_per_retry_usd: float | None
    writes: int
    span_seconds: float | None
    ledger_writes_per_second: float | None


@dataclass(frozen=True)
class FleetReport:
    project: str
    run_id: str                    # the latest fleet run's
    started: float | None          # the first fleet start
    ended: float | None            # the last fleet end (None: running, or killed)
    exit_code: int | None
    reason: str
    running: bool
    parallel: int | None
    tasks: tuple[TaskReport, ...]
    kpis: FleetKpis
    cost_usd: float | None
    # The cascade gate's moves (at, event, reason): with several projects under one monitor,
    # a pause that began in another project is recorded here too.
    cascade: tuple[tuple[float, str, str], ...] = ()
    timeline: tuple[Moment, ...] = ()
    incidents: tuple[FleetIncident, ...] = ()
    alerts: tuple[AlertRow, ...] = ()      # the fleet's and its children's, oldest first

    @property
    def listed(self) -> tuple[TaskReport, ...]:
        """The tasks of TASKS.md (the Planner's passes aside)."""
        return tuple(t for t in self.tasks if not t.planner)


def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def _detail(e: FleetEvent) -> dict[str, Any]:
    return e.detail if isinstance(e.detail, dict) else {}


def _match(e: FleetEvent, a: Attempt) -> bool:
    """e is about attempt a (the monitor names its run, or its number)."""
    d = _detail(e)
    if e.task_id != a.task_id:
        return False
    if a.run_id and d.get("run_id"):
        return d.get("run_id") == a.run_id
    return d.get("attempt") == a.attempt


class _Children:
    """The children's own ledgers, opened read-only on demand (a pruned worktree's is gone)."""

    def __init__(self, limit: int = CHILD_LEDGERS):
        self.open: dict[str, Ledger | None] = {}
        self.limit = limit

    def ledger(self, worktree: str) -> Ledger | None:
        if worktree in self.open:
            return self.open[worktree]
        led = None
        if worktree and len(self.open) < self.limit and Path(worktree).is_dir():
            try:
                path = default_layout(Path(worktree)).ledger_file
                led = Ledger.open(path, readonly=True) if path.is_file() else None
            except (NotARepository, LedgerError, OSError, sqlite3.Error):
                led = None
        self.open[worktree] = led
        return led

    def cost(self, worktree: str, run_id: str) -> float | None:
        led = self.ledger(worktree)
        if led is None or not run_id:
            return None
        try:
            return _num(led.query("SELECT SUM(cost_usd) FROM phases WHERE run_id = ?", (run_id,))[0][0])
        except (LedgerError, sqlite3.Error):
            return None

    def ended(self, worktree: str, run_id: str) -> float | None:
        led = self.ledger(worktree)
        if led is None or not run_id:
            return None
        try:
            return next((r.ended for r in led.runs() if r.run_id == run_id), None)
        except (LedgerError, sqlite3.Error):
            return None

    def healthy(self, worktree: str, run_id: str) -> float | None:
        """When the child first ran healthy: its first healthy check, or its first finished phase."""
        led = self.ledger(worktree)
        if led is None or not run_id:
            return None
        try:
            for e in led.events(run_id, kinds=("health", "phase_end")):
                if (e.get("event") == "health" and e.get("classification") == "healthy") or \
                        (e.get("event") == "phase_end" and e.get("ending") == "finished"):
                    return _num(e.get("epoch"))
        except (LedgerError, sqlite3.Error):
            return None
        return None

    def incidents(self, worktree: str, run_id: str) -> list[tuple[str, float, str | None, str, str]]:
        """(id, at, phase, kind, reason) of the child run's incidents."""
        led = self.ledger(worktree)
        if led is None or not run_id:
            return []
        try:
            rows = led.query("SELECT id, at, phase, kind, reason FROM incidents WHERE run_id = ? ORDER BY at",
                             (run_id,))
        except (LedgerError, sqlite3.Error):
            return []
        return [(str(r[0]), float(r[1]), r[2], str(r[3] or ""), str(r[4] or "")) for r in rows]

    def close(self) -> None:
        for led in self.open.values():
            if led is not None:
                led.close()


def load(path: Path, project: Path, running: bool, now: float | None = None) -> FleetReport:
    """The fleet ledger at path as the report shows it; running: the monitor runs now. Its
    alerts are read from the project's run ledger beside the fleet's folder."""
    now = time.time() if now is None else now
    children = _Children()
    try:
        with FleetLedger.open(path, readonly=True) as led:
            rows, history, events = led.tasks(), led.attempts(), led.events()
        report = _report(project, rows, history, events, running, now, children)
        runs = {a.run_id for a in history if a.run_id} | {str(_detail(e).get("run_id")) for e in events
                                                           if e.kind in ("child_end", "fleet_start", "launch")}
        alerts = fleet_alerts(path.parent.parent / "ledger.sqlite3", runs - {"", "None"})
        told = tuple(Moment(a.at, None, one_line(redact(f"alert {a.severity}: {alert_lines(a)[0]}"), 300))
                     for a in alerts)
        return dataclasses.replace(report, alerts=alerts,
                                   timeline=tuple(sorted(report.timeline + told, key=lambda m: m.at)))
    finally:
        children.close()


def fleet_alerts(ledger: Path, runs: set[str]) -> tuple[AlertRow, ...]:
    """The alerts of the fleet's runs and its children's, as their deliverers recorded them
    in the project's run ledger (none when it cannot be read)."""
    if not ledger.is_file() or not runs:
        return ()
    try:
        with Ledger.open(ledger, readonly=True) as led:
            marks = ",".join("?" * len(runs))
            rows = led.query(f"SELECT * FROM alerts WHERE run_id IN ({marks}) ORDER BY at", sorted(runs))
            return tuple(AlertRow(ticket_id=r["ticket_id"], at=r["at"], severity=r["severity"] or "",
                                  cause=r["cause"] or "", verdict=r["decision"] or "pending",
                                  delivered=_json_list(r["delivered"]), why=r["why"] or "", by=r["decided_by"] or "",
                                  failed=_json_keys(r["failed"]), final=_final(r["ticket"]), kind=r["kind"] or "",
                                  **_ticket_place(r["ticket"])) for r in rows)
    except (LedgerError, sqlite3.Error, OSError):
        return ()


def _report(project: Path, rows: Sequence[Any], history: Sequence[Attempt], events: Sequence[FleetEvent],
            running: bool, now: float, children: _Children) -> FleetReport:
    by_kind: dict[str, list[FleetEvent]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    by_task: dict[str, list[Attempt]] = {}
    for a in history:
        by_task.setdefault(a.task_id, []).append(a)
    worktree = {r.id: r.worktree for r in rows}
    cost: dict[tuple[str, int], float | None] = {}
    for a in history:
        recorded = next((_num(_detail(e).get("cost_usd")) for e in by_kind.get("child_end", []) if _match(e, a)),
                        None)
        cost[(a.task_id, a.attempt)] = recorded if recorded is not None else \
            children.cost(worktree.get(a.task_id, ""), a.run_id)
    ends = {(e.task_id, a.attempt): e for a in history for e in by_kind.get("child_end", []) if _match(e, a)}
    logs = {(e.task_id, _detail(e).get("attempt")): str(_detail(e).get("log") or "") for e in by_kind.get("launch", [])}
    tasks, incidents = [], []
    for r in sorted(rows, key=lambda r: (r.created, r.id)):
        tried = sorted(by_task.get(r.id, []), key=lambda a: a.attempt)
        evidence = []
        for a in tried:
            end = ends.get((a.task_id, a.attempt))
            d = _detail(end) if end is not None else {}
            run = a.run_id or str(d.get("run_id") or "")
            evidence.append(AttemptEvidence(a.attempt, a.kind, a.agent, a.started, a.ended, a.exit_code, a.outcome,
                                            str(d.get("reason") or ""), cost[(a.task_id, a.attempt)],
                                            logs.get((a.task_id, a.attempt), ""), run))
            incidents += [FleetIncident(r.id, a.attempt, *found) for found in children.incidents(r.worktree, run)]
        costs = [c for c in (cost[(a.task_id, a.attempt)] for a in tried) if c is not None]
        merged = [e for e in by_kind.get("merged", []) if e.task_id == r.id]
        commits = tuple(str(c) for e in merged for c in (_detail(e).get("commits") or ()) if isinstance(c, str))
        # A Planner that added nothing is recorded as done with nothing to merge: no merge to show.
        state = NOTHING_ADDED if r.id.startswith(PLANNER) and r.state in COMPLETE and not (commits or r.merged_sha) \
            else r.state
        tasks.append(TaskReport(
            r.id, r.text, state, r.attempts, r.restarts, r.escalations, tried[-1].agent if tried else "",
            sum(max(0.0, (a.ended if a.ended is not None else now) - a.started) for a in tried),
            sum(costs) if costs else None, r.merged_sha, commits, r.reason, tuple(tried), tuple(evidence),
            merges_of([e for kind in MERGE_EVENTS for e in by_kind.get(kind, []) if e.task_id == r.id])))
    starts, ends = by_kind.get("fleet_start", []), by_kind.get("fleet_end", [])
    last_start = starts[-1] if starts else None
    last_end = ends[-1] if ends and (last_start is None or ends[-1].at >= last_start.at) else None
    started = starts[0].at if starts else min((a.started for a in history), default=None)
    ended = last_end.at if last_end is not None and not running else None
    kpis = compute_kpis([t for t in tasks if not t.planner], history, by_kind, cost, children, worktree, writes=len(events) + len(history) +
                        sum(1 for a in history if a.ended is not None),
                        span=((ended if ended is not None else now) - started) if started is not None else None)
    sd = _detail(last_start) if last_start is not None else {}
    ed = _detail(last_end) if last_end is not None else {}
    parallel, code = sd.get("parallel"), ed.get("exit_code")
    every = [t.cost_usd for t in tasks if t.cost_usd is not None]
    return FleetReport(str(project), str(sd.get("run_id") or ""), started, ended,
                       code if isinstance(code, int) and not isinstance(code, bool) else None,
                       str(ed.get("reason") or ""), running,
                       parallel if isinstance(parallel, int) and not isinstance(parallel, bool) else None,
                       tuple(tasks), kpis, sum(every) if every else None,
                       tuple((e.at, e.kind, str(_detail(e).get("reason") or "")) for e in events
                             if e.kind.startswith("cascade_")),
                       timeline(events), tuple(sorted(incidents, key=lambda i: i.at)))


def timeline(events: Sequence[FleetEvent]) -> tuple[Moment, ...]:
    """The fleet's night in order, one line an event that changed something (TOLD)."""
    moments = []
    for e in events:
        if e.kind not in TOLD:
            continue
        d, what = _detail(e), TOLD[e.kind]
        if e.kind == "launch":
            what = f"attempt {d.get('attempt', '?')} started ({d.get('how', 'start')}, agent {d.get('agent', '?')})"
        elif e.kind == "child_end":
            what = (f"attempt {d.get('attempt', '?')} ended: exit {d.get('exit_code')}, {d.get('outcome', '?')}"
                    + (f" ({d['reason']})" if d.get("reason") else ""))
        elif e.kind == "merged":
            what += f" ({str(d.get('sha') or '')[:12]})" if d.get("sha") else ""
            what += ", its checks green" if d.get("checks") else ""
        elif e.kind == "fleet_start":
            what += f" (run {d.get('run_id', '?')}, parallel {d.get('parallel', '?')})"
        elif e.kind == "fleet_end":
            what += f": {d.get('reason') or '?'} (exit {d.get('exit_code')})"
        elif d.get("reason"):
            what += f": {d['reason']}"
        moments.append(Moment(e.at, e.task_id, one_line(redact(str(what)), 300)))
    return tuple(moments)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def compute_kpis(tasks: Sequence[TaskReport], history: Sequence[Attempt], by_kind: dict[str, list[FleetEvent]],
                 cost: dict[tuple[str, int], float | None], children: _Children, worktree: dict[str, str],
                 writes: int, span: float | None) -> FleetKpis:
    """Seed 000's KPIs over the fleet (the module's docstring defines each)."""
    n = len(tasks)
    completed = [t for t in tasks if t.state in COMPLETE]
    clean = [t for t in completed if t.escalations == 0]
    by_task: dict[str, list[Attempt]] = {}
    for a in sorted(history, key=lambda a: (a.task_id, a.attempt)):
        by_task.setdefault(a.task_id, []).append(a)
    detect, recover, healthy_restarts, retries = [], [], 0, 0
    for attempts in by_task.values():
        for i, a in enumerate(attempts):
            if a.kind in RETRIES:
                retries += 1
                before = attempts[i - 1] if i else None
                if before is not None and (before.ended is None or before.ended > a.started
                                           or before.outcome != "failed"):
                    healthy_restarts += 1
            if a.outcome != "failed" or a.ended is None:
                continue
            end_event = next((e for e in by_kind.get("child_end", []) if _match(e, a)), None)
            detected = end_event.at if end_event is not None else a.ended
            d = _detail(end_event) if end_event is not None else {}
            failed = _num(d.get("ended_at"))
            failed = failed if failed is not None else _num(d.get("last_seen"))
            failed = failed if failed is not None else children.ended(worktree.get(a.task_id, ""), a.run_id)
            if failed is not None:
                detect.append(max(0.0, detected - failed))
            after = attempts[i + 1] if i + 1 < len(attempts) else None
            if after is None:
                continue
            seen = next((e.at for e in by_kind.get("child_healthy", []) if _match(e, after)), None)
            seen = seen if seen is not None else children.healthy(worktree.get(a.task_id, ""), after.run_id)
            if seen is not None and seen >= detected:
                recover.append(seen - detected)
    retried = [cost.get((a.task_id, a.attempt)) for a in history if a.kind in RETRIES]
    known = [c for c in retried if c is not None]
    escalated = sum(1 for t in tasks if t.escalations > 0)
    failed_tasks = sum(1 for t in tasks if t.state == "failed")
    return FleetKpis(
        n, len(completed), len(clean), _rate(len(clean), n), _mean(detect), len(detect), _mean(recover),
        len(recover), _rate(healthy_restarts, retries), healthy_restarts, retries, _rate(retries, n) if n else None,
        escalated, _rate(escalated, n), failed_tasks, _rate(failed_tasks, n), sum(known) if known else None,
        (sum(known) / len(known)) if known else None, writes, span,
        writes / span if span is not None and span > 0 else None)


# --- rendering -----------------------------------------------------------------------------------

def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"



def kpi_rows(k: FleetKpis) -> list[tuple[str, str, str]]:
    """(name, value, what it measures): "n/a" where the fleet gave nothing to compute it from."""
    return [
        ("completion rate", _percent(k.completion_rate),
         f"tasks merged without escalation: {k.completed_clean} of {plural(k.tasks, 'task')} "
         f"({k.completed} merged in all)"),
        ("MTTD", "n/a" if k.mttd_seconds is None else duration(k.mttd_seconds),
         f"mean time from a child's failure to the monitor seeing it ({plural(k.detections, 'detection')})"),
        ("MTTR", "n/a" if k.mttr_seconds is None else duration(k.mttr_seconds),
         f"mean time from a detection to the restarted child running healthy "
         f"({plural(k.recoveries, 'recovery', 'recoveries')})"),
        ("false-positive rate", _percent(k.false_positive_rate),
         f"restarts of a child that had not failed: {k.restarts_of_healthy} of {plural(k.retries, 'restart')}"),
        ("retries per task", "n/a" if k.retries_per_task is None else f"{k.retries_per_task:.2f}",
         "restarts and escalations, per task"),
        ("escalation rate", _percent(k.escalation_rate),
         f"tasks escalated to another strategy: {k.escalated} of {k.tasks}"),
        ("final failure rate", _percent(k.final_failure_rate), f"tasks failed permanently: {k.failed} of {k.tasks}"),
        ("cost per retry", "n/a" if k.cost_per_retry_usd is None else money(k.cost_per_retry_usd),
         "what a restarted or escalated child cost, as its agents reported"
         + (f" ({money(k.retry_cost_usd)} in all)" if k.retry_cost_usd is not None else "")),
        ("ledger writes/s", "n/a" if k.ledger_writes_per_second is None else f"{k.ledger_writes_per_second:.3g}",
         f"fleet-ledger records ({k.writes}) per second of the fleet's span"),
    ]


def _line(text: str, width: int | None = 300) -> str:
    return one_line(redact(text), width)


def _head(r: FleetReport) -> list[str]:
    state = "running" if r.running else (f"ended {stamp(r.ended)} (exit {r.exit_code if r.exit_code is not None else '?'}"
                                         + (f": {_line(r.reason)})" if r.reason else ")")
                                         if r.ended is not None else "no end recorded (the monitor was stopped)")
    lines = [f"Genesis fleet report: {r.project}",
             f"fleet {r.run_id or '?'}" + (f", parallel {r.parallel}" if r.parallel is not None else "")
             + (f", started {stamp(r.started)}" if r.started is not None else "") + f", {state}"]
    counts: dict[str, int] = {}
    for t in r.listed:
        counts[t.state] = counts.get(t.state, 0) + 1
    planner = [t.state for t in r.tasks if t.planner]
    lines.append(f"{plural(len(r.listed), 'task')}: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                                                          or "none") +
                 (f"; the Planner: {', '.join(planner)}" if planner else "") +
                 (f"; cost {money(r.cost_usd)}" if r.cost_usd is not None else ""))
    pauses = [c for c in r.cascade if c[1] == "cascade_pause"]
    if pauses:
        at, _kind, why = pauses[-1]
        resumed = any(c[1] == "cascade_resume" and c[0] >= at for c in r.cascade)
        lines.append(f"cascade: restarts paused {plural(len(pauses), 'time')}; the last at {stamp(at)}"
                     + (", since resumed" if resumed else ", not resumed") + (f": {_line(why)}" if why else ""))
    return lines


def _tries(t: TaskReport) -> str:
    """Attempts, with the restarts and escalations among them."""
    among = [plural(n, word) for n, word in ((t.restarts, "restart"), (t.escalations, "escalation")) if n]
    return f"{t.attempts}" + (f" ({', '.join(among)})" if among else "")


def _merged(t: TaskReport) -> str:
    """The commits that came home (the first, and how many more), else the merge's sha."""
    if t.commits:
        return t.commits[0][:12] + (f" +{len(t.commits) - 1}" if len(t.commits) > 1 else "")
    return t.merged_sha[:12] if t.merged_sha else "-"


def _attempt_line(a: AttemptEvidence) -> str:
    """An attempt with its own end: `2. restart 01:10-01:40 exit 0 verified, agent claude, $0.42: why`."""
    end = (f"{clock(a.ended)} exit {a.exit_code if a.exit_code is not None else '?'} {a.outcome or '?'}"
           if a.ended is not None else "running")
    cost = f", {money(a.cost_usd)}" if a.cost_usd is not None else ""
    return (f"{a.attempt}. {a.kind} {clock(a.started)}-{end}, agent {_line(a.agent, 80)}{cost}"
            + (f": {_line(a.why, 200)}" if a.why else "") + (f" (log {a.log})" if a.log else ""))


def render_text(r: FleetReport, width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), highlight=False)
    for line in _head(r):
        console.print(line, soft_wrap=True)
    console.print()
    console.rule("tasks", align="left")
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in ("task", "state", "attempts", "time", "cost", "merged", "reason"):
        grid.add_column(name, overflow="fold")
    for t in r.tasks[:SHOWN]:
        grid.add_row(f"{t.id}\n{_line(t.text, 120)}", t.state, _tries(t), duration(t.seconds),
                     money(t.cost_usd) if t.cost_usd is not None else "-", _merged(t), _line(t.reason, 160) or "-")
    console.print(grid)
    if len(r.tasks) > SHOWN:
        console.print(f"... and {len(r.tasks) - SHOWN} more task(s): `--json` has every one")
    retried = [t for t in r.tasks[:SHOWN] if len(t.history) > 1 or t.state in ("failed", "needs-review")]
    if retried:
        console.print()
        console.rule("attempts", align="left")
        for t in retried:
            console.print(f"{t.id}:")
            for a in t.evidence:
                console.print("    " + _attempt_line(a), soft_wrap=True)
    merged = [t for t in r.tasks[:SHOWN] if t.merges]
    if merged:
        console.print()
        console.rule("merges", align="left")
        for t in merged:
            console.print(f"{t.id}:")
            for m in t.merges:
                console.print("    " + merge_line(m), soft_wrap=True)
                for line in m.tail:
                    console.print("      | " + _line(line, 200), soft_wrap=True)
    if r.incidents:
        console.print()
        console.rule(f"incidents ({len(r.incidents)})", align="left")
        for i in r.incidents:
            console.print(f"  {clock(i.at)}  {i.task_id} attempt {i.attempt}  {i.phase or '-'} {i.kind}: "
                          f"{_line(i.reason, 200)}  ({i.id})", soft_wrap=True)
    if r.alerts:
        console.print()
        console.rule(f"alerts ({len(r.alerts)})", align="left")
        for a in r.alerts:
            what, why = alert_lines(a)
            console.print("  ".join((clock(a.at), a.severity, a.verdict, _line(what, 300))), soft_wrap=True)
            console.print(f"    {why}", soft_wrap=True)
    if r.timeline:
        console.print()
        console.rule("timeline", align="left")
        for m in r.timeline[:MOMENTS]:
            console.print(f"  {clock(m.at)}  " + (f"{m.task_id}: " if m.task_id else "") + m.what, soft_wrap=True)
        if len(r.timeline) > MOMENTS:
            console.print(f"  ... and {len(r.timeline) - MOMENTS} more: `--json` has every one")
    console.print()
    console.rule(FIGURES, align="left")
    kg = Table(box=None, pad_edge=False, show_edge=False, show_header=False)
    for _ in range(3):
        kg.add_column(overflow="fold")
    for row in kpi_rows(r.kpis):
        kg.add_row(*row)
    console.print(kg)
    text = console.export_text(styles=False)
    return "".join(sanitize(line, None).rstrip() + "\n" for line in text.splitlines())


def plain(r: FleetReport) -> dict[str, Any]:
    """The report as JSON-ready data."""
    data = dataclasses.asdict(r)
    data["kpis"] = dataclasses.asdict(r.kpis)
    return data


def render_html(r: FleetReport) -> str:
    """One self-contained page (the night's page's style and content policy)."""
    head = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>Genesis fleet · {_e(Path(r.project).name)}</title>", f"<style>{CSS}</style>", "</head><body>"]
    return "\n".join([*head, *sections(r), "</body></html>\n"])


def sections(r: FleetReport, prefix: str = "") -> list[str]:
    """The page's body: the fleet's head, its tasks and KPIs (prefix: the sections' ids, for a
    page that holds several fleets)."""
    intro = "".join(f"<p>{_e(line)}</p>" for line in _head(r))
    rows = [[_e(f"{t.id}: {_line(t.text, 200)}"), _e(t.state), _e(t.attempts), _e(t.restarts), _e(t.escalations),
             _e(duration(t.seconds)), _e(money(t.cost_usd) if t.cost_usd is not None else "-"),
             _e(" ".join(c[:12] for c in t.commits) or t.merged_sha[:12] or "-"), _e(_line(t.reason, 300) or "-")]
            for t in r.tasks[:SHOWN]]  # the page has room for every commit
    tasks = _table(["task", "state", "attempts", "restarts", "escalations", "time", "cost", "merged", "reason"],
                   rows, numeric=(2, 3, 4, 5, 6), text=(0, 8))
    kpis = _table(["figure", "value", "what it measures"], [[_e(a), _e(b), _e(c)] for a, b, c in kpi_rows(r.kpis)],
                  text=(2,))
    parts = [intro, _section(prefix + "tasks", "Tasks", tasks)]
    tried = [t for t in r.tasks[:SHOWN] if len(t.history) > 1 or t.state in ("failed", "needs-review")]
    if tried:
        body = "".join(f"<h3>{_e(t.id)}</h3><ol>" + "".join(f"<li>{_e(_attempt_line(a).split('. ', 1)[1])}</li>"
                                                           for a in t.evidence) + "</ol>" for t in tried)
        parts.append(_section(prefix + "attempts", "Attempts", body))
    merged = [t for t in r.tasks[:SHOWN] if t.merges]
    if merged:
        body = "".join(f"<h3>{_e(t.id)}</h3><ol>" + "".join(
            f"<li>{_e(merge_line(m))}" + (f"<pre>{_e(chr(10).join(m.tail))}</pre>" if m.tail else "") + "</li>"
            for m in t.merges) + "</ol>" for t in merged)
        parts.append(_section(prefix + "merges", "Merges", body))
    if r.incidents:
        rows = [[_e(clock(i.at)), _e(i.task_id), _e(i.attempt), _e(i.phase or "-"), _e(i.kind), _e(_line(i.reason)),
                 f"<code>{_e(i.id)}</code>"] for i in r.incidents]
        parts.append(_section(prefix + "incidents", f"Incidents ({len(r.incidents)})",
                              _table(["time", "task", "attempt", "phase", "kind", "reason", "incident"], rows,
                                     text=(5,))))
    if r.alerts:
        rows = [[_e(clock(a.at)), _e(a.severity), _e(a.verdict), _e(_line(alert_lines(a)[0])),
                 _e(_line(a.why) or "-")] for a in r.alerts]
        parts.append(_section(prefix + "alerts", f"Alerts ({len(r.alerts)})",
                              _table(["time", "severity", "verdict", "what, and where it went", "why"], rows,
                                     text=(3, 4))))
    if r.timeline:
        rows = [[_e(clock(m.at)), _e(m.task_id or "-"), _e(m.what)] for m in r.timeline[:MOMENTS]]
        parts.append(_section(prefix + "timeline", "Timeline", _table(["time", "task", "what"], rows, text=(2,))))
    parts.append(_section(prefix + "kpis", FIGURES.capitalize(), kpis))
    return parts
