"""Parity: one scripted history through both drivers' decision paths, the same decisions out.

The local monitor hears an attempt's end as one event (ChildEnded: the ladder, the failure,
the gate); the Temporal fleet workflow hears a task workflow's failure note and, apart, its
end, and judges the gate at its next turn. Fed the same night, both must move the cascade
gate the same way, raise the same alerts and allow or hold the same relaunches."""

from __future__ import annotations

import time

import pytest

from genesis.config import resolve
from genesis.fleet import decide as d
from genesis.fleet import monitor as mon
from genesis.fleet.ledger import Attempt, FleetLedger, TaskRow
from genesis.fleet.planning import outcome_of
from genesis.fleet.resources import fleet_settings
from genesis.store.layout import private_dir, state_dir_of

pytest.importorskip("temporalio")
from genesis.temporal.workflows import FleetWorkflow  # noqa: E402

T0 = 2_000_000.0
RAN = 6
# (seconds from T0, task, what): a burst of failures, a probe that fails, one that comes home.
NIGHT = [(10, "t0", "fail"), (11, "t1", "fail"), (12, "t2", "fail"), (13, "t3", "fail"),
         (20, "t4", "relaunch"), (75, None, "tick"), (80, "t0", "relaunch"), (81, "t1", "relaunch"),
         (90, "t0", "fail"), (150, None, "tick"), (211, None, "tick"), (212, "t1", "relaunch"),
         (230, "t1", "verified"), (231, "t2", "relaunch"), (233, "t3", "relaunch"), (240, "t3", "relaunch")]


def kept(effects: list) -> list:
    """What both drivers must agree on: the gate's moves, the fleet-wide alerts, launch or hold."""
    out = []
    for e in effects:
        if isinstance(e, d.GateMoved):
            out.append(("gate", e.step.action, e.step.state))
        elif isinstance(e, d.Alert) and e.about == "cascade":
            out.append(("alert", e.severity, e.cause, e.what))
        elif isinstance(e, (d.Launch, d.Hold)):
            out.append((type(e).__name__, e.task_id, getattr(e, "probe", None), getattr(e, "reason", None)))
    return out


def local_night(monitor: mon.Monitor) -> list:
    seen = []
    attempts = {f"t{n}": 1 for n in range(RAN)}
    for offset, task, what in NIGHT:
        now = T0 + offset
        if what in ("fail", "verified"):
            row = TaskRow(task, f"task {task}", "running", branch=f"genesis/task/{task}")
            history = tuple(Attempt(task, n, "start" if n == 1 else "restart", "", "configured", T0, now, 1,
                                    "failed", "") for n in range(1, attempts[task] + 1))
            verdict = outcome_of(0 if what == "verified" else 1, what == "verified", False, False)
            seen += kept(monitor.decided(d.ChildEnded(row, history, verdict, now, now, RAN, task)))
        elif what == "tick":
            seen += kept(monitor.decided(d.TimePassed(now, RAN)))
        else:
            go = monitor.decided(d.RelaunchDue(task, "restart", now))
            seen += kept(go)
            if isinstance(go[0], d.Launch):
                attempts[task] += 1
                monitor.decided(d.Relaunched(task, now, go[0].probe, task))
    return seen


def temporal_night(flow: FleetWorkflow) -> list:
    seen = []
    for offset, task, what in NIGHT:
        now = T0 + offset
        if what == "fail":   # the task workflow's note, then the gatekeeper's turn
            seen += kept(flow._decided(d.Failure(now, task)))
            seen += kept(flow._decided(d.TimePassed(now, RAN)))
        elif what == "verified":
            seen += kept(flow._decided(d.ProbeEnded(task, True, now)))
            seen += kept(flow._decided(d.TimePassed(now, RAN)))
        elif what == "tick":
            seen += kept(flow._decided(d.TimePassed(now, RAN)))
        else:
            go = flow._decided(d.RelaunchDue(task, "restart", now))
            seen += kept(go)
            if isinstance(go[0], d.Launch):
                flow._decided(d.Relaunched(task, now, go[0].probe, task))
    return seen


def test_the_same_night_moves_both_drivers_the_same_way(project, tmp_path):
    cfg = resolve(project, flags={"GENESIS_FLEET_RESTART_EVERY_SECONDS": "5s", "GENESIS_FLEET_CASCADE_PERCENT": "30",
                                  "GENESIS_FLEET_CASCADE_WINDOW_SECONDS": "5m", "GENESIS_FLEET_MAX_TASK_RESTARTS": "5"})
    with FleetLedger.open(tmp_path / "ledger.sqlite3", clock=time.time) as led:
        monitor = mon.Monitor(project, cfg, fleet_settings(cfg.settings), 3, led,
                              private_dir(private_dir(state_dir_of(project)) / "fleet"), "fleet-test",
                              mon.project_branch(project), {})
        local = local_night(monitor)
    flow = FleetWorkflow()
    flow.gate, flow.budget = d.CascadeGate(monitor.gate.policy), d.RestartBudget(cfg.fleet_restart_every)
    flow.rules = monitor.rules()
    remote = temporal_night(flow)
    assert local == remote
    moves = [m[1] for m in local if m[0] == "gate"]
    assert moves == ["pause", "probe", "probe_failed", "probe", "resume"]
    assert [m for m in local if m[0] == "alert"] == [("alert", "critical", "cascade: many children failed at once",
                                                      local[1][3])]
    holds = [m for m in local if m[0] == "Hold"]
    assert ("Hold", "t4", None, d.PAUSE_HOLD) in holds                       # paused: no relaunch
    assert any(m[0] == "Hold" and m[1] == "t3" and "restart budget" in m[3] for m in holds)
    assert [m[1:3] for m in local if m[0] == "Launch"] == [("t0", True), ("t1", True), ("t2", False), ("t3", False)]
