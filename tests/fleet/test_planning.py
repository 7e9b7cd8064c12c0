"""The monitor's pure decisions: a child's end, the launch gate, the fleet's exit code."""

from __future__ import annotations

import pytest

from genesis import exitcodes
from genesis.fleet.planning import fleet_exit, launch_gate, outcome_of

MB = 1 << 20


@pytest.mark.parametrize("code, verified, stopping, signalled, outcome, fleet_code", [
    (0, True, False, False, "verified", None),
    (0, False, False, False, "failed", None),          # iterations spent without its task done
    (0, False, True, False, "stopped", None),          # the stop flag ended it
    (20, False, False, False, "limit", None),          # a limit is no failure: no restart spent
    (21, False, False, False, "outage", None),
    (2, False, False, False, "failed", None),          # a child's own worktree in the way: its ladder
    (28, False, False, False, "config", 28),
    (29, False, False, False, "config", 29),
    (6, False, False, False, "config", 6),
    (22, False, False, False, "config", 22),          # a refused login or tool permission: every child alike
    (36, False, False, False, "config", 36),          # a limit weeks away binds every child of the account
    (37, False, False, False, "failed", None),         # a policy refusal is its task's own: its ladder
    (23, False, False, False, "stopped", 23),          # a ceiling: nothing more launches
    (24, False, False, False, "stopped", 24),
    (34, False, False, False, "stopped", None),        # its monitor was gone: no failure, nothing else stops
    (35, False, False, False, "stopped", None),        # it stepped aside (its push refused): no failure either
    (130, False, False, True, "stopped", None),        # the monitor's own Ctrl-C
    (143, False, True, False, "stopped", None),
    (143, False, False, False, "failed", None),        # a SIGTERM nobody in the fleet sent
    (3, False, False, False, "failed", None),          # breaker OPEN
    (137, False, False, False, "failed", None),        # killed
    (None, False, False, False, "failed", None),       # vanished without a recorded end
])
def test_a_childs_end_means_what_the_design_says(code, verified, stopping, signalled, outcome, fleet_code):
    verdict = outcome_of(code, verified, stopping, signalled)
    assert (verdict.outcome, verdict.fleet_code) == (outcome, fleet_code)
    assert verdict.reason


def test_the_fleet_exit_code_a_failed_task_wins_over_one_needing_review():
    assert fleet_exit(["merged", "merged"]) == exitcodes.OK
    assert fleet_exit([]) == exitcodes.OK
    assert fleet_exit(["merged", "ready"]) == exitcodes.OK
    assert fleet_exit(["merged", "needs-review"]) == exitcodes.FLEET_NEEDS_REVIEW == 32
    assert fleet_exit(["needs-review", "failed", "merged"]) == exitcodes.FLEET_TASKS_FAILED == 31
    assert fleet_exit(["failed"], fatal=28) == 28
    assert fleet_exit(["failed"], fatal=28, interrupted=130) == 130


def gate(**kw):
    base = dict(running=0, parallel=3, stopping=False, since_last=10.0, stagger=5.0, available=8000 * MB,
                floor=1024 * MB, limit="")
    return launch_gate(**{**base, **kw})


def test_the_launch_gate():
    assert gate().open
    assert not gate(running=3).open and gate(running=3).why == ""       # N at once: no note, just later
    assert not gate(since_last=1.0).open                                 # staggered
    assert not gate(stopping=True).open
    held = gate(available=512 * MB)
    assert not held.open and "512 MB is below the floor GENESIS_FLEET_MEMORY_FLOOR_MB=1024" in held.why
    limited = gate(limit="a usage limit of claude is known")
    assert not limited.open and limited.why == "a usage limit of claude is known"
    assert gate(available=1024 * MB).open                                # at the floor: allowed
