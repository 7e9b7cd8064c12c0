"""The loop's end waits for its final alert's outcome, so that the report it prints says where
the alert went: at once when it is recorded, at most FINAL_ALERT_WAIT seconds when it is not,
and not at all when no channel is set (nothing will go out)."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from helpers.loop import GENESIS
from helpers.state import events_of, state_of

from genesis.config import layout_for, resolve
from genesis.loop.finish import FINAL_ALERT_WAIT, _await_final_alert
from genesis.loop.step import Step, ledger_of
from genesis.store.layout import private_dir

RUN = "20261124T031500Z-7070"


class Clock:
    """A monotonic clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now, self.slept = 100.0, 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def step_with(project: Path, **env: str) -> Step:
    cfg = resolve(project, env={"GENESIS_NOTIFY_DESKTOP": "false", **env})
    lay = layout_for(cfg)
    private_dir(lay.state_dir)
    made = Step(cfg, lay, RUN, lambda msg, kind="info": None)
    made.event("loop_start")
    return made


def final_alert(step: Step) -> None:
    ledger_of(step.layout).record(RUN, "alert", ticket={"ticket_id": "f" * 32, "run_id": RUN, "severity": "low",
                                                        "cause": "loop ended", "kind": "loop_end", "final": True},
                                  decision="intervene", why="the loop's end is always told", by="rules",
                                  delivered=["webhook"], failed={})


@pytest.mark.fault(90)
def test_a_final_alert_not_recorded_is_waited_for_at_most_the_bound(project):
    step = step_with(project, GENESIS_NOTIFY_WEBHOOK="http://127.0.0.1:9/hook")
    clock = Clock()
    assert _await_final_alert(step, clock, clock.sleep) == ("webhook",)
    assert FINAL_ALERT_WAIT <= clock.slept < FINAL_ALERT_WAIT + 0.5


@pytest.mark.fault(90)
def test_a_recorded_final_alert_ends_the_wait_at_once(project):
    step = step_with(project, GENESIS_NOTIFY_WEBHOOK="http://127.0.0.1:9/hook")
    final_alert(step)
    clock = Clock()
    assert _await_final_alert(step, clock, clock.sleep) == ("webhook",)
    assert clock.slept == 0


@pytest.mark.fault(90)
def test_with_no_channel_set_nothing_is_waited_for(project):
    step = step_with(project)
    clock = Clock()
    assert _await_final_alert(step, clock, clock.sleep) == ()
    assert clock.slept == 0


def test_an_agent_that_cannot_start_ends_the_loop_naming_its_cause_and_the_alert_says_it(project):
    from genesis.alerts.tickets import ticket_for
    from genesis.loop.finish import _said

    step = step_with(project)
    assert _said(step, 2) is None  # nothing recorded: the loop's own words stand
    words = "error: unknown option '--dangerously-skip-permisions'"
    step.event("agent_cannot_start", phase="Builder", failures=3, words=words, command=["claude", "-p"])
    reason = _said(step, 2)
    assert reason == f"the agent cannot start: {words}"
    ticket = ticket_for({"event": "loop_end", "exit_code": 2, "reason": reason, "run_id": RUN,
                         "at": "2026-11-24T03:20:00Z"}, project)
    assert ticket is not None and "cannot start: error: unknown option '--dangerously" in ticket.headline, ticket.headline
    assert ticket.headline.endswith(", loop stopped") and len(ticket.headline) <= 80


@pytest.mark.fault(75)
@pytest.mark.parametrize("begun_by", ["finish", "another writer"])
def test_a_run_whose_ledger_was_damaged_ends_on_its_own_record_in_the_new_one(project, begun_by):
    """The agent drops the ledger's tables mid-run; the new ledger is begun by the loop's finish
    or, first, by another of Genesis's writers (an alert's deliverer): either way the run's start
    is recorded again beside its end, and the report shows the run."""
    from genesis.ledger.store import Ledger

    (project / "orchestrator" / "logs" / RUN).mkdir(parents=True)  # as preflight makes it
    state_of(project).mkdir(mode=0o700)
    ledger = state_of(project) / "ledger.sqlite3"
    with Ledger.open(ledger) as led:
        led.record(RUN, "loop_start", at=time.time() - 60)
    with sqlite3.connect(ledger) as db:
        db.execute("DROP TABLE events")
    if begun_by == "another writer":
        with Ledger.open(ledger) as led:
            assert led.reset_note
    done = subprocess.run(GENESIS + ["--project", str(project), "finish", "--run-id", RUN, "--reason", "spent",
                                     "--code", "25"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "no summary" not in done.stderr and f"Genesis run {RUN}" in done.stderr, done.stderr
    assert [e["event"] for e in events_of(project, RUN)][:1] == ["loop_start"]
    report = subprocess.run(GENESIS + ["--project", str(project), "report", "--list"], capture_output=True,
                            text=True, timeout=60)
    assert report.returncode == 0 and RUN in report.stdout and "exit 25: spent" in report.stdout, report
