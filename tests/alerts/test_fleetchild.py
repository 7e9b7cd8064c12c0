"""A fleet's child tells through the fleet: which of its tickets go, and how they read."""

from __future__ import annotations

import uuid
from pathlib import Path

from genesis.alerts.fleetchild import as_fleets, child_of, fleets_own
from genesis.alerts.tickets import Ticket, iso


def ticket(kind="retry", headline="Builder stuck, retrying", holds=False) -> Ticket:
    return Ticket(ticket_id=uuid.uuid4().hex, created_at=iso(1.8e9), run_id="r", iteration=1, phase="Builder",
                  project="/repo/.git/genesis-worktrees/add-the-parser-1a2b3c", severity="medium",
                  cause="Builder stuck, retrying", reasoning="why", suggested_action="act", evidence="seen",
                  steps_since_success=None, stall_minutes=None, kind=kind, final=kind == "loop_end",
                  headline=headline, lines=("What happened.", "Nothing to do."), holds_for_end=holds)


ENV = {"GENESIS_FLEET_DIR": "/repo/.git/genesis/fleet", "GENESIS_TASK": "add the parser",
       "GENESIS_TASK_ID": "add-the-parser-1a2b3c"}


def test_a_loop_of_its_own_is_no_child():
    assert child_of({}) is None and child_of({"GENESIS_FLEET_DIR": " "}) is None


def test_a_child_knows_its_fleets_project_ledger_and_task():
    child = child_of(ENV)
    assert child is not None
    assert (child.project, child.ledger) == ("/repo", Path("/repo/.git/genesis/ledger.sqlite3"))
    assert (child.task_id, child.task) == ("add-the-parser-1a2b3c", "add the parser")


def test_the_childs_end_and_what_the_ladder_handles_are_the_fleets_to_tell():
    assert fleets_own("loop_end", {}) and fleets_own("recovery_spent", {})
    assert fleets_own("iteration_end", {"breaker": "OPEN"}) and not fleets_own("iteration_end", {"breaker": "HALF_OPEN"})
    assert not fleets_own("retry", {}) and not fleets_own("phase_failed", {}) and not fleets_own("disk_full", {})


def test_a_childs_ticket_is_titled_by_the_project_and_its_task_and_never_held():
    child = child_of(ENV)
    mine = as_fleets(ticket(holds=True), child)
    assert mine.project == "/repo" and mine.headline == "add the parser: Builder stuck, retrying"
    assert mine.cause == "task add-the-parser-1a2b3c: Builder stuck, retrying"
    assert mine.lines[0] == "Task: add the parser" and not mine.holds_for_end
    fixed = as_fleets(ticket("resolved", "resolved: Builder recovered on retry 1"), child)
    assert fixed.headline == "resolved: add the parser: Builder recovered on retry 1"


def test_the_monitors_absence_is_one_cause_for_every_child():
    down = as_fleets(ticket("monitor_down", "the fleet's monitor is down"), child_of(ENV))
    assert down.cause == "Builder stuck, retrying" and down.headline == "the fleet's monitor is down"
    assert down.project == "/repo"
