"""The recovery ladder replayed: what the real `after_stall` decides after a stuck or wedged
phase (a retry, with the fallback command when one is set; a phase failed once its retries are
spent; the loop stopped once the night's budget is), on a real run's ledger and state folder."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from genesis import exitcodes
from genesis.loop.recovery import after_stall, retries_so_far, retry_command
from genesis.loop.step import Step, forget_ledger

RUN = "run-1"
NOW = 1_800_000_000.0
AGENT = ("agent.sh", "-p")
STUCK = "no heartbeat for 2.0s (stale after 1.5s)"


def with_cfg(step: Step, **changes) -> Step:
    return Step(replace(step.cfg, **changes), step.layout, step.run_id, step.say)


def stalled(step: Step, iteration: int, phase: str = "Builder", kind: str = "stuck") -> int | None:
    return after_stall(step, phase, iteration, kind, STUCK, AGENT, rng=lambda: 0.0, now=NOW)


def test_a_stuck_phase_is_retried_after_the_delay_with_the_same_command(step, said):
    step = with_cfg(step, phase_retries=1, retry_delay=10.0)
    assert retry_command(step, 1, "Builder") is None  # no fallback set: every run uses the agent command
    assert stalled(step, 1) == exitcodes.WAIT
    (retry,) = step.events(kinds=("retry",))
    assert (retry["type"], retry["count"], retry["night"]) == ("stuck", 1, 1)
    assert retry["old_cmd"] == retry["new_cmd"] == "agent.sh -p" and retry["reason"] == STUCK
    wait = json.loads(step.layout.wait_file.read_text())
    assert (wait["kind"], wait["phase"], wait["iteration"], wait["until"]) == ("retry", "Builder", 1, NOW + 10)
    assert said[-1] == ("warn", "Builder: stuck; retrying in 10s (retry 1 of 1; 1 of 8 tonight)")
    assert retry_command(step, 1, "Builder") is None


def test_a_retry_runs_the_fallback_agent_command_and_only_a_retry_does(step, said):
    step = with_cfg(step, fallback_agent_cmd=("fallback.sh",))
    assert retry_command(step, 1, "Builder") is None  # the phase's first run: the agent command
    assert stalled(step, 1, kind="wedged") == exitcodes.WAIT
    (retry,) = step.events(kinds=("retry",))
    assert (retry["type"], retry["old_cmd"], retry["new_cmd"]) == ("wedged", "agent.sh -p", "fallback.sh")
    assert "with the fallback agent: fallback.sh" in said[-1][1]
    assert retry_command(step, 1, "Builder") == ("fallback.sh",)
    assert retry_command(step, 1, "Planner") is None and retry_command(step, 2, "Builder") is None


def test_a_phase_whose_retries_are_spent_fails_for_the_iteration_and_the_loop_goes_on(step, said):
    step = with_cfg(step, phase_retries=1, max_recoveries=8)
    assert stalled(step, 1) == exitcodes.WAIT
    assert stalled(step, 1) is None  # the retry stuck again: failed, not a stop
    (failed,) = step.events(kinds=("phase_failed",))
    assert (failed["iteration"], failed["phase"], failed["kind"], failed["retries"]) == (1, "Builder", "stuck", 1)
    assert said[-1] == ("error", "Builder: stuck again; its retries (PHASE_RETRIES=1) are spent: the phase failed "
                                 "for this iteration")
    assert stalled(step, 2) == exitcodes.WAIT  # the next iteration's phase has its own retries


def test_a_spent_night_budget_stops_the_loop_as_thrashing(step, said):
    step = with_cfg(step, phase_retries=1, max_recoveries=1)
    assert stalled(step, 1) == exitcodes.WAIT
    assert stalled(step, 1) is None
    assert stalled(step, 2) == exitcodes.RECOVERY_SPENT
    (spent,) = step.events(kinds=("recovery_spent",))
    assert (spent["iteration"], spent["phase"], spent["retries"]) == (2, "Builder", 1)
    assert "recovery budget (GENESIS_MAX_RECOVERIES=1) is spent: the loop only thrashes" in said[-1][1]
    assert len(step.events(kinds=("retry",))) == 1


@pytest.mark.fault(75)
def test_the_loops_own_count_keeps_the_budget_when_the_ledger_loses_its_retries(step):
    """An agent that drops the ledger's tables (a new ledger is started) never grants more retries."""
    step = with_cfg(step, phase_retries=1, max_recoveries=1)
    assert stalled(step, 1) == exitcodes.WAIT
    forget_ledger(step.layout)
    step.layout.ledger_file.unlink()
    assert step.events(kinds=("retry",)) == [] and retries_so_far(step) == 1
    assert stalled(step, 1) is None
    assert stalled(step, 2) == exitcodes.RECOVERY_SPENT


def test_another_runs_count_grants_and_takes_nothing(step):
    step = with_cfg(step, phase_retries=1, max_recoveries=1)
    assert stalled(step, 1) == exitcodes.WAIT
    later = Step(step.cfg, step.layout, "run-2", step.say)
    assert retries_so_far(later) == 0 and stalled(later, 1) == exitcodes.WAIT
