"""A fleet task's lifecycle: its words, its moves, and the sets the views read, one of each."""

from __future__ import annotations

import pytest

from genesis.fleet import lifecycle
from genesis.fleet.lifecycle import Move, Task


def test_the_lifecycle_allows_the_moves_of_its_diagram_and_refuses_the_rest():
    assert lifecycle.step("queued", Move.LAUNCH) is Task.RUNNING
    assert lifecycle.step("running", Move.END_VERIFIED) is Task.MERGING
    assert lifecycle.step("merging", Move.MERGED) is Task.MERGED
    assert lifecycle.step("restarting", Move.HOLD) is Task.RESTARTING   # a held relaunch keeps its rung
    assert lifecycle.step("queued", Move.HOLD) is Task.WAITING
    assert lifecycle.step("failed", Move.REOPEN) is Task.QUEUED
    for state, move in (("merged", Move.LAUNCH), ("queued", Move.END_VERIFIED), ("failed", Move.RESTART),
                        ("needs-review", Move.REOPEN), ("running", Move.MERGED)):
        assert not lifecycle.may(state, move)
        with pytest.raises(lifecycle.Illegal, match=f"a task {state} cannot"):
            lifecycle.step(state, move)
    with pytest.raises(lifecycle.Illegal, match="not a task state: 'verified'"):
        lifecycle.step("verified", Move.MERGED)
    assert lifecycle.as_ledger("verified") is Task.MERGING


def test_one_set_of_words_for_the_ledger_the_status_and_the_dashboard():
    from genesis.fleet import ledger, status
    from genesis.web import snapshot
    assert ledger.STATES == set(lifecycle.STATES) == set(status.STATES)
    assert ledger.TERMINAL == lifecycle.TERMINAL
    assert snapshot.TASK_LIVE == lifecycle.UNFINISHED == set(lifecycle.STATES) - lifecycle.TERMINAL
    assert status.LIVE == lifecycle.CHILD_MAY_RUN <= lifecycle.UNFINISHED
    assert "queued" in lifecycle.UNFINISHED and Task.QUEUED == "queued" and f"{Task.NEEDS_REVIEW}" == "needs-review"


def test_every_state_is_reached_and_every_terminal_one_is_left_only_by_a_reopen_or_a_review():
    reached = {after for move in Move for state in lifecycle.STATES if lifecycle.may(state, move)
               for after in [lifecycle.step(state, move)]}
    assert reached == set(lifecycle.STATES)
    for state in lifecycle.TERMINAL:
        leaving = {move for move in Move if lifecycle.may(state, move) and lifecycle.step(state, move) != state}
        assert leaving <= {Move.REOPEN, Move.REVIEW, Move.MERGED}, (state, leaving)
