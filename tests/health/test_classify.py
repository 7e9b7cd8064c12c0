"""The stall score is a fraction of the window that applies: never above 1, however long the
silence (1: the window is spent, stuck); and a record an older Genesis wrote with more is shown
as at most 1."""

from __future__ import annotations

from genesis.alerts.tickets import ticket_for
from genesis.health.classify import classify


def test_the_stall_score_is_a_fraction_of_the_window_at_most_one():
    assert classify(30, 60, busy=False, stuck=False, wedged=False) == ("slow", 0.5)
    assert classify(60, 60, busy=False, stuck=False, wedged=False) == ("stuck", 1.0)
    assert classify(600, 60, busy=False, stuck=False, wedged=False) == ("stuck", 1.0)
    assert classify(600, 60, busy=True, stuck=False, wedged=False) == ("healthy", 0.0)


def test_an_older_records_score_above_one_is_told_as_one():
    ticket = ticket_for({"event": "health", "classification": "wedged", "stall_score": 3.41, "reason": "r",
                         "phase": "Builder", "iteration": 2, "run_id": "r1", "at": "2026-11-21T03:00:00Z"}, "/p")
    assert ticket is not None and "(stall score 1.00)" in ticket.evidence and "3.41" not in ticket.evidence
