"""The iteration's end replayed on a real project's step: progress measured, the breaker moved or
spared, and the loop told to go on or stop. The test plays each iteration's phases itself (a commit
or none, a wait sat out or none); no loop, no agent, no clock."""

from __future__ import annotations

import json

import pytest
from helpers.git import git

from genesis import exitcodes
from genesis.loop.iteration import iteration_finish, iteration_start
from genesis.loop.step import Step, ledger_of

RUN = "run-iteration"


def iteration(step: Step, n: int, commit: bool = False, waited: str = "") -> int:
    """Iteration n from its start to its end: a phase commits a file, or changes nothing; `waited`,
    the kind of wait (limit, outage) a phase sat out in it, recorded as the wait step records it."""
    assert iteration_start(step, n) == exitcodes.OK
    if commit:
        (step.cfg.project / f"work-{n}.txt").write_text(f"iteration {n}\n")
        git(step.cfg.project, "add", "-A")
        git(step.cfg.project, "commit", "-qm", f"work of iteration {n}")
    if waited:
        ledger_of(step.layout).record(step.run_id, "wait_start", kind=waited, until=0.0, seconds=8.0,
                                      phase="Builder", iteration=n, attempt=1, reason="")
    return iteration_finish(step, n)


def ends(step: Step) -> list[tuple]:
    return [(e["iteration"], e["progress"], e["waited"], e["no_progress"], e["breaker"])
            for e in step.events(kinds=("iteration_end",))]


@pytest.mark.fault(38)
def test_an_idle_iteration_that_waited_out_a_limit_or_an_outage_is_not_counted_for_the_breaker(step, said):
    assert iteration(step, 1, commit=True) == exitcodes.OK
    assert iteration(step, 2, waited="limit") == exitcodes.OK
    assert iteration(step, 3) == exitcodes.OK
    assert iteration(step, 4, waited="outage") == exitcodes.OK
    assert iteration(step, 5, commit=True, waited="limit") == exitcodes.OK
    assert ends(step) == [(1, True, False, 0, "CLOSED"), (2, False, True, 0, "CLOSED"), (3, False, False, 1, "CLOSED"),
                          (4, False, True, 1, "CLOSED"), (5, True, True, 0, "CLOSED")]
    assert ("info", "iteration 2: no progress, but it waited out a usage limit or an API outage: not counted; "
                    "breaker CLOSED") in said


def test_idle_iterations_move_the_breaker_to_half_open_at_three_and_open_at_five_which_stops_the_loop(step, said):
    # The shipped thresholds (CB_WARNING_THRESHOLD=3, CB_STOP_THRESHOLD=5) and no cooldown.
    assert [iteration(step, n) for n in range(1, 6)] == [exitcodes.OK] * 4 + [exitcodes.BREAKER_OPEN]
    assert [(n, count, state) for n, _, _, count, state in ends(step)] == [
        (1, 1, "CLOSED"), (2, 2, "CLOSED"), (3, 3, "HALF_OPEN"), (4, 4, "HALF_OPEN"), (5, 5, "OPEN")]
    words = [text for _, text in said]
    assert any(text.startswith("iteration 3: no progress; breaker HALF_OPEN") for text in words), words
    assert any(text.startswith("iteration 5: no progress; breaker OPEN after 5 iteration(s) in a row without "
                               "progress: stopping the loop") for text in words), words
    breaker = json.loads(step.layout.breaker_file.read_text())  # the mirror a user reads
    assert breaker["state"] == "OPEN" and breaker["no_progress_count"] == 5
    assert [(t["to_state"], t["iteration"]) for t in breaker["history"]] == [("HALF_OPEN", 3), ("OPEN", 5)]
