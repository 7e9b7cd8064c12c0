"""loop/commitfail.py: failed auto-commits counted in a row, one alert per streak."""

from __future__ import annotations

import genesis.loop.raising
from genesis.loop.commitfail import ALERT_AFTER, commit_failed, in_a_row

RUN = "run-commitfail"


def phase(step, n: int, fails: bool) -> int | None:
    count = commit_failed(step, "Builder", n, f"git commit failed: {n}") if fails else None
    step.event("phase_work", iteration=n, phase="Builder", commits=[])
    return count


def test_failures_count_in_a_row_and_a_commit_ends_the_streak(step, monkeypatch):
    raised = []
    monkeypatch.setattr(genesis.loop.raising, "ticket_for", lambda event, project: raised.append(event) or None)
    assert [phase(step, n, True) for n in (1, 2, 3, 4)] == [1, 2, 3, 4]
    # One alert per streak: at the third failure in a row, not at every one after it.
    assert [e["in_a_row"] for e in raised if e["event"] == "commit_failed"] == [ALERT_AFTER]
    phase(step, 5, False)
    assert in_a_row(step) == 0
    assert phase(step, 6, True) == 1
