"""What a phase's claim of a task is worth, and when the run's ticks count as done: pure
decisions, replayed from the events a run records."""

from __future__ import annotations

from genesis.loop.claims import AGENT_WORD, FAILED, PASSED, UNREVIEWED, CheckRun, judge, unproven
from genesis.repo.tasks import OPEN, REVIEW

PHASES = ("Builder", "Criticizer", "Planner")
OK = CheckRun("task", "make test", 0, 2.0)
BAD = CheckRun("task", "make test", 2, 3.0, ("FAILED test_health",))
SLOW = CheckRun("project", "make all", None, 600.0, timed_out=True)


def test_a_failed_check_reopens_the_task_whoever_ticked_it():
    for phase in ("Builder", "Criticizer"):
        verdict = judge([BAD, OK], phase, PHASES)
        assert (verdict.outcome, verdict.back_to) == (FAILED, OPEN)
        assert verdict.why == "`make test` exited 2 (after 3s)"
    killed = judge([OK, SLOW], "Criticizer", PHASES)
    assert (killed.outcome, killed.back_to) == (FAILED, OPEN)
    assert killed.why == "`make all` ran over its time bound (10m00s) and was killed"
    unstarted = judge([CheckRun("task", "x", None, 0.0, error="the box cannot run")], "Criticizer", PHASES)
    assert (unstarted.outcome, unstarted.why) == (FAILED, "`x` could not start: the box cannot run")


def test_a_tick_no_criticizer_saw_goes_back_for_review_where_the_phases_include_one():
    for runs in ([OK], []):
        verdict = judge(runs, "Builder", PHASES)
        assert (verdict.outcome, verdict.back_to) == (UNREVIEWED, REVIEW)
    assert judge([OK], "Builder", ("Builder", "Planner")).outcome == PASSED  # no Criticizer to wait for


def test_a_passing_check_is_done_on_evidence_and_no_check_on_the_agents_word():
    passed = judge([OK], "Criticizer", PHASES)
    assert (passed.outcome, passed.back_to, passed.why) == (PASSED, None, "`make test` exited 0 (after 2s)")
    word = judge([], "Builder", ("Builder",))
    assert (word.outcome, word.back_to, word.why) == (AGENT_WORD, None, "no check: done on the agent's word")


def work(*tasks: str) -> dict:
    return {"event": "phase_work", "tasks_done": list(tasks)}


def proof(task: str, outcome: str) -> dict:
    return {"event": "task_evidence", "task": task, "outcome": outcome}


def test_a_tick_counts_only_with_accepted_evidence_recorded_after_its_latest_claim():
    done = ["add  /health", "add the cache", "set up (before the run)"]
    # The run's history: /health ticked and refuted, ticked again and proven; the cache ticked,
    # proven, then ticked again later with no evidence after (its reopening was never written).
    events = [work("add /health"), proof("add /health", FAILED), work("add /health"), proof("add /health", PASSED),
              work("add the cache"), proof("add the cache", AGENT_WORD), work("add the cache")]
    assert unproven(events, done) == ["add the cache"]
    assert unproven(events[:4], done) == []
    assert unproven(events[:2], done) == ["add  /health"]  # refuted, and still [x]: its reopening failed
    assert unproven([work("add /health"), proof("add /health", UNREVIEWED)], done) == ["add  /health"]
    assert unproven([], done) == []  # nothing ticked in the run: nothing of the run's to prove


def test_each_verdict_reads_as_what_it_means():
    assert judge([BAD], "Builder", PHASES).said() == "check failed, reopened: `make test` exited 2 (after 3s)"
    assert judge([OK], "Builder", PHASES).said() == ("sent back for review: ticked done by the Builder, not by the "
                                                     "Criticizer: it awaits review")
    assert judge([OK], "Criticizer", PHASES).said() == "check passed: `make test` exited 0 (after 2s)"
    assert judge([], "Criticizer", PHASES).said() == "done on the agent's word (no check)"
