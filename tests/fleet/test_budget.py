"""The fleet's restart budget: an injected clock; no processes, no sleeps."""

from __future__ import annotations

import pytest

from genesis.config import resolve
from genesis.fleet.budget import RestartBudget, budget_of
from genesis.fleet.ledger import FleetEvent, FleetLedger

T0 = 50_000.0


def test_at_most_one_restart_per_period():
    budget = RestartBudget(60)
    assert budget.may_restart(T0) and budget.next_at(T0) == T0
    budget.spend(T0)
    assert not budget.may_restart(T0 + 59.9) and budget.next_at(T0 + 10) == T0 + 60
    assert budget.may_restart(T0 + 60)


def test_the_budget_holds_ten_waiting_restarts_to_one_a_minute():
    """Ten tasks failed at once and all wait for a restart; the monitor checks every 2 s for 5 minutes."""
    budget = RestartBudget(60)
    waiting = [f"task-{n}" for n in range(10)]
    restarted: list[tuple[float, str]] = []
    for check in range(150):
        now = T0 + 2 * check
        if waiting and budget.may_restart(now):
            budget.spend(now)
            restarted.append((now, waiting.pop(0)))
    assert [at - T0 for at, _ in restarted] == [0, 60, 120, 180, 240]
    assert len(waiting) == 5


def test_a_restarted_monitor_keeps_the_budget_spent_before_it_died(tmp_path):
    path = tmp_path / "fleet" / "ledger.sqlite3"
    with FleetLedger.open(path) as led:
        led.record("restart", "a", now=T0)
        led.record("escalate", "b", now=T0 + 30)
        led.record("child_end", "c", now=T0 + 50)  # spends nothing
    with FleetLedger.open(path) as led:
        budget = RestartBudget.from_events(60, led.events())
    assert budget.last == T0 + 30
    assert not budget.may_restart(T0 + 89) and budget.may_restart(T0 + 90)
    assert RestartBudget.from_events(60, [FleetEvent(T0, "launch", "a", {}, 1)]).may_restart(T0)


def test_a_clock_set_back_does_not_hold_restarts_all_night():
    budget = RestartBudget(60, last=T0 + 3600)
    assert budget.may_restart(T0)
    budget = RestartBudget(60, last=T0 + 30)  # within one period ahead: still held for it
    assert not budget.may_restart(T0)


def test_zero_is_no_bound_and_the_knob_sets_the_period(project):
    budget = RestartBudget(0)
    budget.spend(T0)
    assert budget.may_restart(T0)
    assert budget_of(resolve(project, env={})).every == 60
    assert budget_of(resolve(project, env={"GENESIS_FLEET_RESTART_EVERY_SECONDS": "5"})).every == 5
    with pytest.raises(ValueError):
        RestartBudget(-1)
