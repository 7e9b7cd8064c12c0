"""What a fleet tells at its end, and the follow-up when a task comes home after trouble."""

from __future__ import annotations

import uuid

from genesis import exitcodes
from genesis.alerts.tickets import Ticket, iso
from genesis.fleet.telling import Outcome, end_ticket, resolution

AT = 1_800_000_000.0


def outcome(code=exitcodes.OK, **kw) -> Outcome:
    base = dict(project="/work/night", code=code, reason="every task is finished", home=("add the parser",),
                failed=(), review=(), still_open=0, cost_usd=0.0068, seconds=754.0)
    return Outcome(**{**base, **kw})


def told(kind="phase_failed", run="r1", resolves=None, final=False) -> Ticket:
    return Ticket(ticket_id=uuid.uuid4().hex, created_at=iso(AT), run_id=run, iteration=1, phase="Builder",
                  project="/work/night", severity="high", cause=f"task t: Builder {kind}", reasoning="why",
                  suggested_action="act", evidence="seen", steps_since_success=None, stall_minutes=None, kind=kind,
                  final=final, headline="flaky: Builder stuck after 0 retries, gave up", resolves=resolves)


def test_a_fleet_that_did_everything_says_so_quietly_with_its_cost():
    ticket = end_ticket([outcome(home=("add the parser", "add the printer"))], "fleet-1", AT)
    assert (ticket.kind, ticket.final, ticket.severity) == ("fleet_end", True, "low")
    assert ticket.headline == "fleet over: 2/2 tasks came home"
    assert ticket.lines[0] == "Ended: every task is finished (exit 0)."
    assert "Came home: add the parser, add the printer." in ticket.lines
    assert "Cost $0.0068, duration 12m34s." in ticket.lines
    assert ticket.lines[-1] == "Nothing to do: the fleet's report has the night."


def test_failed_and_unreviewed_tasks_are_named_with_why_and_what_to_do():
    ticket = end_ticket([outcome(exitcodes.FLEET_TASKS_FAILED, reason="every task is finished",
                                 failed=(("never works", "exit 1; the ladder is spent"),),
                                 review=(("conflicting", "the Merger left a conflict"),), cost_usd=None)],
                        "fleet-1", AT)
    assert ticket.severity == "high" and ticket.headline == "fleet over: 1/3 home, 1 failed, 1 to review"
    assert "Failed: never works (exit 1; the ladder is spent)." in ticket.lines
    assert "Needs review: conflicting (the Merger left a conflict)." in ticket.lines
    assert any(line.startswith("Cost not known, duration") for line in ticket.lines)
    assert ticket.lines[-1].startswith("Act: ")


def test_several_projects_are_one_message_named_after_the_first():
    ticket = end_ticket([outcome(), outcome(project="/work/other", home=("b",), cost_usd=0.01)], "fleet-1", AT)
    assert ticket.project == "night and 1 more project(s)"
    assert ticket.headline == "fleet over: 2/2 tasks came home"
    assert "Cost $0.0168, duration 12m34s." in ticket.lines


def test_a_stopped_fleet_says_why_in_its_title():
    ticket = end_ticket([outcome(exitcodes.INTERRUPTED_INT, reason="interrupted by SIGINT", home=())], "f", AT)
    assert ticket.headline == "fleet stopped: interrupted (Ctrl-C)" and ticket.severity == "high"


def test_a_task_home_after_a_told_stall_resolves_the_newest_open_alert_only():
    first, second = told(run="r1"), told(run="r2")
    fixed = resolution("flaky task", 2, [first, second], "/work/night", "fleet-1", AT)
    assert fixed is not None and fixed.resolves == second.ticket_id and fixed.kind == "resolved"
    assert fixed.headline == "resolved: flaky task came home" and fixed.severity == "low"
    assert fixed.lines[0] == "flaky task came home on attempt 2."
    settled = told(kind="resolved", resolves=second.ticket_id)
    assert resolution("flaky task", 2, [second, settled], "/work/night", "fleet-1", AT) is None
    assert resolution("t", 1, [], "/work/night", "fleet-1", AT) is None
    assert resolution("t", 1, [told(kind="monitor_down")], "/work/night", "fleet-1", AT) is None


def test_several_projects_are_told_by_the_worst_end():
    failed = outcome(exitcodes.FLEET_TASKS_FAILED, failed=(("x", "why"),))
    stopped = outcome(exitcodes.INTERRUPTED_TERM, reason="interrupted by SIGTERM", project="/work/b")
    review = outcome(exitcodes.FLEET_NEEDS_REVIEW, review=(("y", "conflict"),), project="/work/c")
    assert end_ticket([outcome(), review, failed], "f", AT).lines[0] == "Ended: every task is finished (exit 31)."
    assert end_ticket([failed, stopped, review], "f", AT).headline == "fleet stopped: stopped (SIGTERM)"
