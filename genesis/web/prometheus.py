"""`/metrics` in Prometheus's text format: what a team's Prometheus scrapes from `genesis serve`.

Built with the official client library from three things the dashboard already has: the state
document (`/api/state`: each project's loop and fleet as seen now), the metrics document
(`/api/metrics`: the ledgers' figures by agent, model and project) and, for the counters that
only grow, each project's ledgers read with a few aggregate queries (every run's stalls, kills,
incidents and limit holds, not only the current run's). A fresh registry per scrape: nothing is
kept between two. docs/reference/dashboard-metrics.md lists every metric.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from genesis.fleet.ledger import FleetLedger
from genesis.ledger.store import Ledger, LedgerError
from genesis.store.looplock import FLEET_RUN
from genesis.web.metrics import ProjectSource, _Children, _names, _present

__all__ = ["CONTENT_TYPE", "STALL_ENDINGS", "KILL_ENDINGS", "Figures", "exposition", "figures"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
# A phase's ending that is a stall (its agent stopped making progress) and one whose agent tree
# Genesis killed (a stall, or past its runtime ceiling): genesis/words.py LABELS.
STALL_ENDINGS = ("stuck", "stale", "wedged")
KILL_ENDINGS = STALL_ENDINGS + ("overtime",)
LIVE = ("running", "waiting", "frozen")


@dataclass
class Figures:
    """One project's counters read from its ledgers (every run, not only the current one)."""
    phases: dict[str, int] = field(default_factory=dict)      # ending -> phases (running ones: "running")
    killed: int = 0                                            # phases whose agent tree Genesis killed
    incidents: dict[str, int] = field(default_factory=dict)   # kind -> incidents
    waits: dict[str, int] = field(default_factory=dict)       # kind (limit, outage, ...) -> waits
    waited: dict[str, float] = field(default_factory=dict)    # kind -> seconds waited (ended waits)
    alerts: dict[str, int] = field(default_factory=dict)      # severity -> alerts
    cost: float = 0.0
    attempts: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, outcome) -> fleet attempts
    holds: dict[str, int] = field(default_factory=dict)       # limit, outage, cascade -> fleet holds begun
    children: dict[str, int] = field(default_factory=dict)    # stalls, kills, incidents of the fleet's children
    error: str | None = None


def figures(source: ProjectSource) -> Figures:
    """The project's counters; a ledger that cannot be read leaves its counters out, said in error."""
    out = Figures()
    try:
        _loop_figures(source, out)
        _fleet_figures(source, out)
    except (LedgerError, sqlite3.Error, OSError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def _loop_figures(source: ProjectSource, out: Figures) -> None:
    path = source.layout.ledger_file
    if not _present(path):
        return
    with Ledger.open(path, readonly=True) as led:
        conn = led.conn
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'phases'").fetchone() is None:
            return  # being created this moment
        for ending, n, cost in conn.execute(
                "SELECT COALESCE(ending, 'running'), COUNT(*), SUM(cost_usd) FROM phases GROUP BY 1"):
            out.phases[str(ending)] = int(n)
            out.cost += float(cost or 0.0)
        out.killed = sum(out.phases.get(e, 0) for e in KILL_ENDINGS)
        out.incidents = {str(k or "unknown"): int(n) for k, n in
                         conn.execute("SELECT kind, COUNT(*) FROM incidents GROUP BY kind")}
        for kind, n, waited in conn.execute(
                "SELECT kind, COUNT(*), SUM(CASE WHEN ended IS NOT NULL THEN ended - started ELSE 0 END) FROM waits "
                "GROUP BY kind"):
            out.waits[str(kind)] = int(n)
            out.waited[str(kind)] = max(0.0, float(waited or 0.0))
        out.alerts = {str(s or "unknown"): int(n) for s, n in
                      conn.execute("SELECT severity, COUNT(*) FROM alerts GROUP BY severity")}


def _fleet_figures(source: ProjectSource, out: Figures) -> None:
    path = source.fleet_ledger
    if path is None or not _present(path):
        return
    with FleetLedger.open(path, readonly=True) as led:
        conn = led.conn
        out.attempts = {(str(k), str(o or "running")): int(n) for k, o, n in
                        conn.execute("SELECT kind, outcome, COUNT(*) FROM attempts GROUP BY kind, outcome")}
        for kind, n in conn.execute("SELECT kind, COUNT(*) FROM events WHERE kind IN "
                                    "('limit_hold', 'outage_hold', 'cascade_pause') GROUP BY kind"):
            out.holds[{"limit_hold": "limit", "outage_hold": "outage"}.get(kind, "cascade")] = int(n)
        worktrees = [w for (w,) in conn.execute("SELECT worktree FROM tasks WHERE worktree != ''")]
    children = _Children(source.layout)
    try:
        stalls = kills = incidents = 0
        for worktree in worktrees:
            child = children.ledger(worktree)
            if child is None:
                continue
            marks = ",".join("?" * len(KILL_ENDINGS))
            for ending, n in child.conn.execute(
                    f"SELECT ending, COUNT(*) FROM phases WHERE ending IN ({marks}) GROUP BY ending", KILL_ENDINGS):
                kills += int(n)
                stalls += int(n) if ending in STALL_ENDINGS else 0
            incidents += int(child.conn.execute("SELECT COUNT(*) FROM incidents").fetchone()[0])
        out.children = {"stalls": stalls, "kills": kills, "incidents": incidents}
    finally:
        children.close()


# --- the exposition ----------------------------------------------------------------------------

def exposition(state: dict[str, Any], metrics: dict[str, Any], sources: Sequence[ProjectSource],
               counted: dict[str, Figures] | None = None) -> bytes:
    """The text Prometheus scrapes. `counted` (project label -> Figures) is read here when not given.
    A project's label is its name, told apart by its path when two share one (as the metrics
    document's `by.project`): two series with one label set would fail the whole scrape."""
    labels = {str(s.project): name for s, name in _names(sources).items()}
    if counted is None:
        counted = {labels[str(s.project)]: figures(s) for s in sources}
    projects = [{**p, "name": labels.get(str(p.get("path")), p.get("name"))} for p in state.get("projects", [])]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector({**state, "projects": projects}, metrics, counted))
    return generate_latest(registry)


class _Collector:
    def __init__(self, state: dict[str, Any], metrics: dict[str, Any], counted: dict[str, Figures]):
        self.state, self.metrics, self.counted = state, metrics, counted

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from _machine(self.state)
        yield from _projects(self.state.get("projects", []))
        yield from _counters(self.counted)
        yield from _ledger(self.metrics)


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _counter(name: str, doc: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=list(labels))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _machine(state: dict[str, Any]) -> Iterator[Metric]:
    machine = state.get("machine") or {}
    score = _gauge("genesis_machine_score", "The machine's health score, 0 to 100 (the dashboard's).")
    score.add_metric([], _num(machine.get("score")) or 0.0)
    running = _gauge("genesis_loops_running", "Loops and fleet children running on the machine now.")
    running.add_metric([], _num(machine.get("loops_running")) or 0.0)
    yield score
    yield running


def _projects(projects: Sequence[dict[str, Any]]) -> Iterator[Metric]:
    score = _gauge("genesis_project_score", "A project's health score, 0 to 100.", ["project"])
    cost = _gauge("genesis_project_cost_usd", "What the project's current loop run and fleet run cost so far "
                  "(a fleet's running children included).", ["project"])
    alerts = _gauge("genesis_project_alerts_listed", "The project's newest alerts the dashboard lists.", ["project"])
    loop_state = _gauge("genesis_loop_state", "1 for the state the project's own loop is in.", ["project", "state"])
    stall = _gauge("genesis_loop_stall_score", "The running phase's stall score (1: its window spent).",
                   ["project"])
    beat = _gauge("genesis_loop_heartbeat_age_seconds", "Seconds since the running phase's last heartbeat.",
                  ["project"])
    breaker = _gauge("genesis_loop_breaker_open", "1 when the loop's circuit breaker is OPEN.", ["project"])
    waiting = _gauge("genesis_loop_waiting", "1 while the loop sits out a wait of this kind (limit, outage, ...).",
                     ["project", "kind"])
    tasks = _gauge("genesis_fleet_tasks", "A fleet's tasks in each state.", ["project", "state"])
    fleet_state = _gauge("genesis_fleet_state", "1 for the state the project's fleet is in.", ["project", "state"])
    hold = _gauge("genesis_fleet_hold", "1 while a fleet-wide hold is in force (limit, outage, cascade).",
                  ["project", "kind"])
    task_attempts = _gauge("genesis_fleet_task_attempts", "A fleet task's attempts so far.", ["project", "task"])
    for p in projects:
        name = str(p.get("name"))
        if _num(p.get("score")) is not None:
            score.add_metric([name], float(p["score"]))
        if _num(p.get("cost_usd")) is not None:
            cost.add_metric([name], float(p["cost_usd"]))
        alerts.add_metric([name], float(len(p.get("alerts") or [])))
        status = p.get("status") or {}
        run_id = str((status.get("run") or {}).get("id") or "")
        if status and not run_id.startswith(FLEET_RUN) and (status.get("run") or status.get("state") in LIVE):
            loop_state.add_metric([name, str(status.get("state"))], 1.0)
            phase = status.get("phase") or {}
            if _num(phase.get("stall_score")) is not None:
                stall.add_metric([name], min(1.0, float(phase["stall_score"])))
            if _num(phase.get("heartbeat_at_epoch")) is not None and _num(status.get("generated_at_epoch")):
                beat.add_metric([name], max(0.0, float(status["generated_at_epoch"]) -
                                            float(phase["heartbeat_at_epoch"])))
            breaker.add_metric([name], 1.0 if (status.get("breaker") or {}).get("state") == "OPEN" else 0.0)
            wait = status.get("wait") or {}
            if wait.get("kind"):
                waiting.add_metric([name, str(wait["kind"])], 1.0)
        fleet = p.get("fleet")
        if not fleet:
            continue
        fleet_state.add_metric([name, str(fleet.get("state"))], 1.0)
        for state, n in (fleet.get("counts") or {}).items():
            tasks.add_metric([name, str(state).replace("_", "-")], float(n))
        for key in ("limit", "cascade"):
            h = fleet.get(key)
            if h:
                hold.add_metric([name, str(h.get("kind"))], 1.0)
        for t in fleet.get("tasks") or []:
            task_attempts.add_metric([name, str(t.get("id"))], float(t.get("attempts") or 0))
    yield from (score, cost, alerts, loop_state, stall, beat, breaker, waiting, fleet_state, tasks, hold,
                task_attempts)


def _counters(counted: dict[str, Figures]) -> Iterator[Metric]:
    phases = _counter("genesis_loop_phases", "A project's loop phases by how they ended (every run in its ledger).",
                      ["project", "ending"])
    stalls = _counter("genesis_loop_stalls", "A project's loop phases that stalled (stuck, stale or wedged).",
                      ["project"])
    kills = _counter("genesis_loop_kills", "A project's loop phases whose agent tree Genesis killed (a stall, or "
                     "past its runtime ceiling).", ["project"])
    incidents = _counter("genesis_incidents", "Incidents recorded in the project's ledger, by kind.",
                         ["project", "kind"])
    waits = _counter("genesis_loop_limit_holds", "Waits the project's loops sat out (usage limit, outage, cooldown, "
                     "retry, a fleet's restart budget), by kind.", ["project", "kind"])
    waited = _counter("genesis_loop_waited_seconds", "Seconds the project's loops waited (ended waits), by kind.",
                      ["project", "kind"])
    alerts = _counter("genesis_alerts", "Alerts recorded in the project's ledger, by severity.",
                      ["project", "severity"])
    cost = _counter("genesis_loop_cost_usd", "What the project's loop phases cost (every run in its ledger).",
                    ["project"])
    attempts = _counter("genesis_fleet_attempts", "A fleet's child attempts, by kind (first, restart, escalate, "
                        "resume) and outcome (running while under way).", ["project", "kind", "outcome"])
    holds = _counter("genesis_fleet_holds", "Fleet-wide holds begun (limit, outage, cascade).", ["project", "kind"])
    children = _counter("genesis_fleet_children", "Stalls, kills and incidents in the fleet's children's own "
                        "ledgers (those whose worktrees are still there).", ["project", "what"])
    errors = _gauge("genesis_ledger_read_error", "1 when the project's ledgers could not be read for the counters.",
                    ["project"])
    for name, f in counted.items():
        errors.add_metric([name], 1.0 if f.error else 0.0)
        for ending, n in f.phases.items():
            phases.add_metric([name, ending], float(n))
        if f.phases:
            stalls.add_metric([name], float(sum(f.phases.get(e, 0) for e in STALL_ENDINGS)))
            kills.add_metric([name], float(f.killed))
            cost.add_metric([name], round(f.cost, 6))
        for kind, n in f.incidents.items():
            incidents.add_metric([name, kind], float(n))
        for kind, n in f.waits.items():
            waits.add_metric([name, kind], float(n))
            waited.add_metric([name, kind], round(f.waited.get(kind, 0.0), 3))
        for severity, n in f.alerts.items():
            alerts.add_metric([name, severity], float(n))
        for (kind, outcome), n in f.attempts.items():
            attempts.add_metric([name, kind, outcome], float(n))
        for kind, n in f.holds.items():
            holds.add_metric([name, kind], float(n))
        for what, n in f.children.items():
            children.add_metric([name, what], float(n))
    yield from (phases, stalls, kills, incidents, waits, waited, alerts, cost, attempts, holds, children, errors)


def _ledger(metrics: dict[str, Any]) -> Iterator[Metric]:
    """The metrics page's figures: runs by agent, model and project, what retries cost."""
    by = metrics.get("by") or {}
    for dim in ("agent", "model", "project"):
        runs = _counter(f"genesis_runs_by_{dim}", f"Agent runs by {dim} (a loop's phase run, a fleet "
                        "child's attempt), by verdict (running or neither: undecided).", [dim, "verdict"])
        spent = _counter(f"genesis_runs_cost_usd_by_{dim}", f"What the agent runs cost, by {dim}.", [dim])
        for row in by.get(dim) or []:
            key = str(row.get("key"))
            ok, bad, total = int(row.get("succeeded") or 0), int(row.get("failed") or 0), int(row.get("phases") or 0)
            runs.add_metric([key, "succeeded"], float(ok))
            runs.add_metric([key, "failed"], float(bad))
            runs.add_metric([key, "undecided"], float(max(0, total - ok - bad)))
            spent.add_metric([key], float(row.get("cost_usd") or 0.0))
        yield runs
        yield spent
    over = metrics.get("over_time") or {}
    retries = _counter("genesis_retries", "Restarts, escalations and failures in the metrics window.", ["kind"])
    for kind in ("restarts", "escalations", "failures"):
        retries.add_metric([kind], float(sum(over.get(kind) or [])))
    retry_cost = _counter("genesis_retry_cost_usd", "What the retried runs cost.")
    retry_cost.add_metric([], float(metrics.get("retry_cost_usd") or 0.0))
    hist = _gauge("genesis_units_by_retries", "Units of work (a loop's phase in one iteration, a fleet task) by "
                  "the retries they needed.", ["retries"])
    histogram = metrics.get("retry_histogram") or {}
    for label, n in zip(histogram.get("labels") or [], histogram.get("counts") or []):
        hist.add_metric([str(label)], float(n))
    yield from (retries, retry_cost, hist)
