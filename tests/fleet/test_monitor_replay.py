"""The monitor's decisions on its children's ends, by replay: real monitors of real projects (real
git, real fleet ledgers, the real account store), fed the ends their children would have; no
child loop, the clock given.

Several projects under one monitor (a fleet file) share the cascade gate and the account's usage
limit; a child's refusal by the model's safeguards (exit 37) is its task's own. The whole fleets
run in tests/scenarios/test_fleet_projects.py and tests/e2e/test_fleet_limits.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.fleet import fleet_project
from helpers.git import new_repo

from genesis import exitcodes
from genesis.agents.base import Limit
from genesis.fleet import children as kids
from genesis.fleet import monitor as mon
from genesis.fleet import status
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.taskref import task_id
from genesis.loop.waiting import plan_limit
from genesis.reporting.fleet import load, render_text
from genesis.store.layout import private_dir, state_dir_of

from .test_monitor import Clock, clocked, dropping_launches, started_loop


def monitor_of(project: Path, ledger: FleetLedger, clock: Clock, **flags: str) -> mon.Monitor:
    return clocked(project, ledger, clock, GENESIS_FLEET_RESTART_BACKOFF_SECONDS="0.5", **flags)


def fleet_dir(project: Path) -> Path:
    return private_dir(private_dir(state_dir_of(project)) / "fleet")


def ledger_of(project: Path) -> FleetLedger:
    """The project's own fleet ledger, where `fleet status` and `report` read it."""
    return FleetLedger.open(fleet_dir(project) / "ledger.sqlite3")


def at_work(monitor: mon.Monitor, text: str) -> str:
    """A child of the monitor's project at work on `text` (its attempt recorded as a launch does)."""
    ident, now = task_id(text), monitor.clock()
    monitor.ledger.upsert_task(TaskRow(ident, text, "running", attempts=1, updated=now, created=now))
    monitor.ledger.begin_attempt(ident, "start", "", "configured", f"run-{ident}", now)
    monitor.children[ident] = kids.Child(ident, monitor.project, 0, 0.0, now, 1, run_id=f"run-{ident}")
    return ident


def end(monitor: mon.Monitor, ident: str, code: int, reason: str) -> None:
    """The child ended so, as the monitor's next check finds it (check_children)."""
    child = monitor.children.pop(ident)
    monitor.ended(ident, child, kids.Ending(code, monitor.clock(), reason))


def crash(monitor: mon.Monitor, ident: str) -> None:
    end(monitor, ident, 128 + 9, "killed by signal 9")  # SIGKILL


@pytest.mark.fault(104)
def test_fault_104_a_burst_of_crashes_in_one_project_pauses_the_restarts_of_the_other(tmp_path):
    app_texts = ["app one", "app two", "app three"]
    app, api = fleet_project(new_repo(tmp_path / "app"), app_texts), fleet_project(new_repo(tmp_path / "api"),
                                                                                   ["api one"])
    clock = Clock(time.time())
    with ledger_of(app) as a, ledger_of(api) as b:
        first, second = monitor_of(app, a, clock), monitor_of(api, b, clock)
        mon.share([first, second], max_parallel=None)
        try:
            crashing = [at_work(first, text) for text in app_texts]
            victim = at_work(second, "api one")
            for ident in crashing:  # app's three children crash at once
                crash(first, ident)
            assert first.gate.state == second.gate.state == "paused"
            crash(second, victim)  # then api's own child: one failure of its own, no cascade alone
            for _ in range(20):  # many checks, far past its restart backoff (0.5 s), short of the probe
                clock.at += 1
                for monitor in (first, second):
                    monitor.apply(monitor.decided(mon.decide.TimePassed(clock.at, monitor._ran_within(clock.at))))
                    monitor.launches(monitor.sync_queue())
        finally:
            dropping_launches(first)
            dropping_launches(second)
        events, (row,) = b.events(), b.tasks()
        (pause,) = a.events("cascade_pause")
        app_events = a.events()
        criticals = [e for e in a.events("alert") + b.events("alert") if e.detail["severity"] == "critical"]
    assert [e.detail["outcome"] for e in events if e.kind == "child_end"] == ["failed"]
    assert row.state == "restarting" and row.not_before < clock.at  # its backoff long past: held by the gate alone
    assert not [e for e in events if e.kind in ("launch", "restart", "escalate", "cascade_probe")]
    assert not [e for e in app_events if e.kind in ("launch", "restart", "escalate") and e.seq > pause.seq]
    assert len(criticals) == 1 and criticals[0] in app_events  # one alert, from the project where it began
    # The pause is in both projects' fleet ledgers: each one's status and report say it.
    for project in (app, api):
        assert status.document(status.read(project, now=clock.at))["cascade"]["state"] == "paused"
        report = render_text(load(fleet_dir(project) / "ledger.sqlite3", project, True, clock.at))
        assert "cascade: restarts paused 1 time; the last at" in report and "children failed within" in report


def test_a_usage_limit_a_child_of_one_project_met_holds_the_launches_of_the_other(tmp_path):
    """The account store is every loop's of this user: a limit a child of app met holds api's
    task too, `waiting` with why, and nothing starts in either project while it is known."""
    app, api = fleet_project(new_repo(tmp_path / "app"), ["app one"]), fleet_project(new_repo(tmp_path / "api"),
                                                                                      ["api one"])
    clock = Clock(time.time())
    limit = Limit(clock.at + 600, "five_hour", "You've hit your 5-hour limit")
    assert plan_limit(started_loop(app), limit, "Builder", 1, clock.at) == exitcodes.WAIT
    with ledger_of(app) as a, ledger_of(api) as b:
        first, second = monitor_of(app, a, clock), monitor_of(api, b, clock)
        mon.share([first, second], max_parallel=None)
        try:
            for _ in range(3):  # several checks of each
                clock.at += 1
                for monitor in (first, second):
                    monitor.launches(monitor.sync_queue())
        finally:
            dropping_launches(first)
            dropping_launches(second)
        for led in (a, b):
            (row,) = led.tasks()
            assert not led.events("launch") and [e.kind for e in led.events("limit_hold")] == ["limit_hold"]
            assert row.state == "waiting" and "usage limit of claude" in row.reason


def test_a_policy_refusal_sends_its_task_at_once_to_a_strategy_with_another_agent_and_the_fleet_goes_on(tmp_path):
    """The model's safeguards refused one task's request: its child ends with 37. The task goes
    at once, no restart spent, to its ladder's next strategy, another model; nothing stops the
    fleet's launches, and the other task's child works on."""
    project = fleet_project(new_repo(tmp_path / "project"), ["Write the port scanner", "Log each request"])
    another = "claude -p --model claude-haiku-4-5 --dangerously-skip-permissions"
    clock = Clock(time.time())
    with ledger_of(project) as led:
        monitor = monitor_of(project, led, clock, GENESIS_FLEET_ESCALATION=another)
        refused, other = at_work(monitor, "Write the port scanner"), at_work(monitor, "Log each request")
        clock.at += 30
        end(monitor, refused, exitcodes.POLICY_REFUSED, "Builder: refused by the model's safeguards: API Error: "
                                                        "the request was flagged")
        row, (attempt,), ended = led.task(refused), led.attempts(refused), led.events("child_end")[0].detail
        assert (attempt.exit_code, attempt.outcome) == (exitcodes.POLICY_REFUSED, "failed")
        assert ended["exit_code"] == exitcodes.POLICY_REFUSED and "safeguards" in ended["reason"]
        assert (row.state, row.restarts, row.escalations) == ("escalated", 0, 1)
        assert row.not_before <= clock.at  # at once: the same request is not asked again
        assert monitor._settings_for(row.strategy)["GENESIS_AGENT_CMD"] == another
        assert monitor.fatal is None and led.task(other).state == "running" and other in monitor.children
