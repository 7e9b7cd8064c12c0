"""A fleet's child watching its monitor's heartbeat between phases: one "monitor down" a run,
recorded in its ledger, and "monitor back" when it beats again; nothing at all outside a fleet.
With GENESIS_FLEET_MONITOR_STOP_SECONDS, a monitor gone that long stops the child (exit 34)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from genesis import exitcodes
from genesis.alerts.tickets import ticket_for
from genesis.loop.monitorwatch import monitor_age, monitor_gone, watch_monitor

RUN = "20260101T000000Z-77"
NOW = 1_800_000_000.0


@pytest.fixture
def fleet(project: Path) -> Path:
    folder = project / ".git" / "genesis" / "fleet"
    folder.mkdir(parents=True)
    return folder


def beat(folder: Path, at: float) -> None:
    (folder / "monitor.json").write_text(json.dumps({"pid": 4242, "run_id": "r", "started": at - 100, "at": at}))


def told(step) -> list[str]:
    return [e["event"] for e in step.events(kinds=("monitor_down", "monitor_back"))]


def env_of(folder: Path) -> dict[str, str]:
    return {"GENESIS_FLEET_DIR": str(folder), "GENESIS_TASK": "Add a greeting",
            "GENESIS_TASK_ID": "add-a-greeting-0a1b2c"}


def test_a_stale_heartbeat_is_told_once_and_its_return_once(step, fleet, said):
    step = replace(step, cfg=replace(step.cfg, monitor_stale=60.0))
    beat(fleet, NOW - 10)
    assert watch_monitor(step, env_of(fleet), NOW) is True
    assert told(step) == []
    beat(fleet, NOW - 61)
    for later in (0, 5, 30):  # every check between phases while it stays down: one record, one alert
        assert watch_monitor(step, env_of(fleet), NOW + later) is False
    assert told(step) == ["monitor_down"]
    (down,) = step.events(kinds=("monitor_down",))
    assert down["pid"] == 4242 and down["age"] == 61.0 and down["task_id"] == "add-a-greeting-0a1b2c"
    assert down["project"] == str(fleet.parent.parent.parent)
    assert [m for k, m in said if "monitor looks down" in m] == [
        "the fleet's monitor looks down: its heartbeat is 61s old (more than GENESIS_FLEET_MONITOR_STALE_SECONDS=60)."
        " This loop goes on to its own end; starting the fleet again adopts it"]
    beat(fleet, NOW + 40)
    assert watch_monitor(step, env_of(fleet), NOW + 45) is True
    assert told(step) == ["monitor_down", "monitor_back"]
    beat(fleet, NOW)  # down again later: news again
    assert watch_monitor(step, env_of(fleet), NOW + 500) is False
    assert told(step) == ["monitor_down", "monitor_back", "monitor_down"]


def test_no_heartbeat_or_an_unreadable_one_is_a_monitor_down(step, fleet, tmp_path):
    assert watch_monitor(step, env_of(fleet), NOW) is False
    assert "has no heartbeat" in step.events(kinds=("monitor_down",))[0]["why"]
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"at": NOW}))
    os.symlink(target, fleet / "monitor.json")  # a planted link is never followed
    age, pid, why = monitor_age(fleet, NOW)
    assert age is None and "symlink" in why
    (fleet / "monitor.json").unlink()
    os.mkfifo(fleet / "monitor.json")  # never waited on
    assert monitor_age(fleet, NOW)[0] is None


def test_a_loop_outside_a_fleet_checks_nothing(step):
    assert watch_monitor(step, {}, NOW) is None
    assert told(step) == []


def test_the_monitor_down_ticket_says_what_stops_and_what_to_do(project):
    event = {"event": "monitor_down", "run_id": RUN, "why": "its heartbeat is 75s old", "task": "Add a greeting",
             "project": "/src/myapp"}
    ticket = ticket_for(event, project)
    assert ticket.severity == "high" and ticket.headline == "the fleet's monitor is down"
    assert ticket.lines[0] == "A child working on Add a greeting found the monitor down: its heartbeat is 75s old."
    assert "start-multi-agent-loop.sh --project /src/myapp --parallel N" in ticket.lines[-1]
    back = ticket_for({"event": "monitor_back", "run_id": RUN, "age": 1.5}, project)
    assert back.severity == "low" and back.headline == "resolved: the fleet's monitor is back"


def stopping(step, seconds: float):
    return replace(step, cfg=replace(step.cfg, monitor_stale=2.0, monitor_stop=seconds))


def test_a_heartbeat_older_than_the_stop_bound_stops_the_child_with_its_reason(step, fleet, said):
    step = stopping(step, 30.0)
    beat(fleet, NOW - 29)
    assert monitor_gone(step, env_of(fleet), NOW) is None  # down (one alert), not yet gone for good
    assert told(step) == ["monitor_down"] and step.events(kinds=("monitor_lost",)) == []
    assert monitor_gone(step, env_of(fleet), NOW + 1) == exitcodes.MONITOR_LOST == 34
    (lost,) = step.events(kinds=("monitor_lost",))
    assert lost["gone"] == 30.0 and lost["pid"] == 4242 and lost["task_id"] == "add-a-greeting-0a1b2c"
    (why,) = step.events(kinds=("stop_reason",))
    assert why["code"] == 34 and why["reason"].startswith(
        "the fleet's monitor is gone (its heartbeat is 30s old, GENESIS_FLEET_MONITOR_STOP_SECONDS=30): this loop "
        "stops so that it never works its task beside another machine's loop")
    assert any(kind == "error" and "monitor is gone" in m for kind, m in said)


def test_a_missing_heartbeat_stops_the_child_once_it_has_been_missing_that_long(step, fleet):
    step = stopping(step, 30.0)
    assert monitor_gone(step, env_of(fleet), NOW) is None  # missing from this check on
    assert monitor_gone(step, env_of(fleet), NOW + 29) is None
    assert monitor_gone(step, env_of(fleet), NOW + 30) == exitcodes.MONITOR_LOST
    (lost,) = step.events(kinds=("monitor_lost",))
    assert lost["gone"] == 30.0 and "has no heartbeat" in lost["why"]


def test_a_monitor_beating_again_in_time_keeps_the_child(step, fleet):
    step = stopping(step, 30.0)
    beat(fleet, NOW - 20)
    assert monitor_gone(step, env_of(fleet), NOW) is None
    beat(fleet, NOW + 5)
    assert monitor_gone(step, env_of(fleet), NOW + 6) is None
    assert told(step) == ["monitor_down", "monitor_back"] and step.events(kinds=("monitor_lost",)) == []


def test_without_the_stop_bound_a_gone_monitor_is_only_told(step, fleet):
    assert step.cfg.monitor_stop == 0  # the default: the local fleet's children never stop for it
    beat(fleet, NOW - 86400)
    assert monitor_gone(step, env_of(fleet), NOW) is None
    assert monitor_gone(step, env_of(fleet), NOW + 86400) is None
    assert told(step) == ["monitor_down"] and step.events(kinds=("monitor_lost", "stop_reason")) == []
    assert monitor_gone(stopping(step, 30.0), {}, NOW) is None  # no fleet: nothing to watch
