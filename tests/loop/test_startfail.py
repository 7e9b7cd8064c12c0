"""An agent that cannot start: the same quick failure START_FAILURES times in a row is a
configuration error (exit 2); until then its iterations are not counted by the breaker.

Events are recorded in a real ledger, as run-phase records them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from genesis import exitcodes
from genesis.config import resolve
from genesis.loop.preflight import root_problem
from genesis.loop.startfail import QUICK, START_FAILURES, Streak, failed_to_start, spares_breaker, \
    stop_if_it_cannot_start, streak
from genesis.loop.step import Step

RUN = "run-startfail"
ROOT = "the agent exited with status 1; its last line: --dangerously-skip-permissions cannot be used with root/sudo " \
       "privileges for security reasons"


def end(step: Step, iteration: int, detail: str = ROOT, duration: float = 0.4, status: str = "exited",
        ending: str = "failed") -> None:
    step.event("phase_end", iteration=iteration, phase="Builder", status=status, ending=ending, duration=duration,
               detail=detail, returncode=1)


def test_only_a_quick_error_or_no_start_at_all_is_a_failure_to_start():
    assert failed_to_start({"status": "exited", "ending": "failed", "duration": QUICK - 0.1})
    assert failed_to_start({"status": "not_started", "duration": 0})
    assert not failed_to_start({"status": "exited", "ending": "failed", "duration": QUICK})
    assert not failed_to_start({"status": "exited", "ending": "finished", "duration": 1})
    assert not failed_to_start({"status": "exited", "ending": "limit", "duration": 1})
    assert not failed_to_start({"status": "stuck", "ending": "stuck", "duration": 1})


def test_the_streak_counts_the_newest_failures_and_those_with_the_newest_words():
    quick = {"status": "exited", "ending": "failed", "duration": 1}
    assert streak([]) == Streak(0, 0, "")
    assert streak([{**quick, "detail": "a"}] * 3) == Streak(3, 3, "a")
    assert streak([{**quick, "detail": "a"}, {**quick, "detail": "b"}, {**quick, "detail": "b"}]) == Streak(2, 3, "b")
    assert streak([{**quick, "detail": "b"}, {**quick, "detail": "a"}, {**quick, "detail": "b"}]) == Streak(1, 3, "b")
    finished = {"status": "exited", "ending": "finished", "duration": 1, "detail": "finished"}
    assert streak([{**quick, "detail": "a"}, finished, {**quick, "detail": "a"}]) == Streak(1, 1, "a")


@pytest.mark.fault(63)
def test_the_same_quick_failure_three_times_in_a_row_is_a_configuration_error(step, said, tmp_path):
    command = ("claude", "-p", "--dangerously-skip-permisions")
    log = tmp_path / "iter-0003-Builder.log"
    log.write_text("=== genesis: 2026-11-23T22:06:54Z starting: claude -p <prompt, 608 bytes>\n"
                   "error: unknown option '--dangerously-skip-permisions'\n\x1b[31m(Did you mean "
                   "--dangerously-skip-permissions?)\x1b[0m\n")
    for n in range(1, START_FAILURES):
        end(step, n)
        assert stop_if_it_cannot_start(step, "Builder", command, log) is None
        assert spares_breaker(step, n) is not None  # not counted while it may still be bad luck
    end(step, START_FAILURES)
    assert stop_if_it_cannot_start(step, "Builder", command, log) == exitcodes.USAGE
    kind, message = said[-1]
    assert kind == "error"
    assert f"failed to start {START_FAILURES} times in a row, each within {QUICK:g}s, saying: error: unknown " \
           f"option '--dangerously-skip-permisions' / (Did you mean --dangerously-skip-permissions?). That is a " \
           f"configuration error" in message  # the agent's own lines, escape sequences gone, never Genesis's
    assert "the breaker was not moved" in message and "claude -p --dangerously-skip-permisions" in message
    assert step.events(kinds=("agent_cannot_start",))[0]["failures"] == START_FAILURES


@pytest.mark.fault(63)
def test_the_same_failure_in_every_phase_of_an_iteration_counts_in_one_streak(step, said, tmp_path):
    """Builder and Planner fail in iteration 1, the Builder again in iteration 2: the third stops
    the loop, and iteration 1 was never counted by the breaker."""
    log = tmp_path / "iter-0002-Builder.log"
    log.write_text("error: unknown option '--dangerously-skip-permisions'\n")
    for iteration, phase in ((1, "Builder"), (1, "Planner")):
        step.event("phase_end", iteration=iteration, phase=phase, status="exited", ending="failed", duration=0.4,
                   detail=ROOT, returncode=1)
        assert stop_if_it_cannot_start(step, phase, ("claude",), log) is None
    assert spares_breaker(step, 1) == Streak(2, 2, ROOT)
    end(step, 2)
    assert stop_if_it_cannot_start(step, "Builder", ("claude",), log) == exitcodes.USAGE
    assert f"failed to start {START_FAILURES} times in a row" in said[-1][1]
    assert [e["failures"] for e in step.events(kinds=("agent_cannot_start",))] == [START_FAILURES]


def test_an_agent_that_printed_nothing_is_quoted_by_how_it_ended(step, said, tmp_path):
    for n in range(1, START_FAILURES + 1):
        end(step, n, detail="cannot start 'claude': [Errno 13] Permission denied", status="not_started", ending="")
    assert stop_if_it_cannot_start(step, "Builder", ("claude",), tmp_path / "missing.log") == exitcodes.USAGE
    assert "saying: cannot start 'claude': [Errno 13] Permission denied." in said[-1][1]


def test_different_words_never_stop_the_loop_and_are_counted_once_it_cannot_be_bad_luck(step):
    for n in range(1, 5):
        end(step, n, detail=f"the agent exited with status 1; its last line: error {n}")
        assert stop_if_it_cannot_start(step, "Builder", ("agent",), Path("no.log")) is None
        assert (spares_breaker(step, n) is None) == (n >= START_FAILURES)


def test_an_iteration_with_a_phase_that_worked_is_counted(step):
    end(step, 1)
    step.event("phase_end", iteration=1, phase="Planner", status="exited", ending="finished", duration=30,
               detail="finished", returncode=0)
    assert spares_breaker(step, 1) is None
    end(step, 2, duration=QUICK + 5)  # a long run that failed: it started
    assert spares_breaker(step, 2) is None


# --- preflight: Claude Code as root --------------------------------------------------------

@pytest.mark.parametrize("command, flag", [
    ("claude -p --dangerously-skip-permissions", "--dangerously-skip-permissions"),
    ("claude -p --permission-mode bypassPermissions", "--permission-mode bypassPermissions"),
    ("claude -p --permission-mode=bypassPermissions", "--permission-mode=bypassPermissions"),
    ("claude -p --allow-dangerously-skip-permissions", "--allow-dangerously-skip-permissions"),
])
def test_claude_code_as_root_skipping_permissions_is_refused_outside_a_sandbox(project, command, flag):
    cfg = resolve(project, env={"GENESIS_AGENT_CMD": command})
    why = root_problem(cfg, euid=0, env={"IS_SANDBOX": "yes"})
    assert f"Claude Code refuses {flag} as root unless IS_SANDBOX=1 is set (it is 'yes'; only 1 counts)" in why
    assert "Run the loop as another user" in why and "run `export IS_SANDBOX=1` and start the loop again" in why
    assert root_problem(cfg, euid=0, env={"IS_SANDBOX": "1"}) is None
    assert root_problem(cfg, euid=1000, env={}) is None


def test_root_is_refused_only_what_claude_code_refuses(project):
    allowed = resolve(project, env={"GENESIS_AGENT_CMD": "claude -p --allowedTools Bash"})
    assert root_problem(allowed, euid=0, env={}) is None
    other_cli = resolve(project, env={"GENESIS_AGENT_CMD": "opencode run --dangerously-skip-permissions"})
    assert root_problem(other_cli, euid=0, env={}) is None
    fallback = resolve(project, env={"GENESIS_AGENT_CMD": "claude -p --allowedTools Bash",
                                     "GENESIS_FALLBACK_AGENT_CMD": "claude -p --dangerously-skip-permissions"})
    assert "--dangerously-skip-permissions" in root_problem(fallback, euid=0, env={})
