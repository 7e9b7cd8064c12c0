"""A red merge goes back to its task by the ladder's rules: the decision replayed, the reopening
on the task's branch with real git, the evidence in a real fleet ledger."""

from __future__ import annotations

import math

import pytest
from helpers.git import commit_file, git

from genesis.fleet.ladder import LadderPolicy
from genesis.fleet.ledger import Attempt, FleetLedger, TaskRow
from genesis.fleet.merging import TESTS_FAILED, MergeResult
from genesis.fleet.redmerge import NOTE_CHARS, RED_EVENT, decide, note_of, send_back
from genesis.fleet.taskref import task_id
from genesis.fleet.worktrees import create
from genesis.repo.tasks import OPEN, parse

POLICY = LadderPolicy(max_task_restarts=1, max_failed_tasks=1, backoff_first=10, strategies=2)
ROW = TaskRow("t-1", "add login", "merging", attempts=1)


def _attempt(n: int, outcome: str, kind: str = "restart", strategy: int = 0) -> Attempt:
    return Attempt("t-1", n, kind, "", "configured", 100.0 * n, 100.0 * n + 50, 0, outcome, f"run-{n}", strategy)


def test_a_verified_attempt_that_merged_red_climbs_the_ladder_as_a_failure():
    first = [_attempt(1, "verified", "start")]
    rung = decide(ROW, first, 1, POLICY, 200.0)
    assert (rung.action, rung.restarts, rung.not_before) == ("restart", 1, 150.0 + 10)
    # Already refuted in the ledger (a monitor that died after writing it): the same step.
    assert decide(ROW, [_attempt(1, "failed", "start")], 1, POLICY, 200.0) == rung
    # The restart merged red too: restarts spent, the next strategy.
    again = [_attempt(1, "failed", "start"), _attempt(2, "verified")]
    assert decide(TaskRow("t-1", "add login", "merging", attempts=2), again, 2, POLICY, 300.0).action == "escalate"
    # And at the last strategy, with escalations spent: the ladder says fail (the caller sends it to review).
    spent = [*again[:1], _attempt(2, "failed"), _attempt(3, "failed", "escalate", 1), _attempt(4, "verified",
                                                                                             strategy=1)]
    row = TaskRow("t-1", "add login", "merging", strategy=1, attempts=4, escalations=1)
    assert decide(row, spent, 4, POLICY, 600.0).action == "fail"


def test_a_task_opened_again_counts_its_attempts_from_its_new_start():
    history = [_attempt(1, "failed", "start"), _attempt(2, "failed"), _attempt(3, "verified", "start")]
    assert decide(TaskRow("t-1", "add login", "merging", attempts=3), history, 3, POLICY, 400.0).action == "restart"
    assert decide(ROW, history, 9, POLICY, 400.0).action == "none"


def test_the_note_says_what_failed_with_the_tail_in_one_line_within_its_bound():
    note = note_of("main", "the project's check `make test` exited 2 (after 3s)", ["FAILED a", "  FAILED b"], 0.0)
    assert note.startswith("reopened ") and "its merge onto main was red: the project's check `make test` exited 2" \
        in note and note.endswith("The output ends: FAILED a | FAILED b")
    assert len(note_of("main", "x", ["y" * 400] * 5, 0.0)) == NOTE_CHARS


TASKS = "# Tasks\n\n- [ ] add login\n  check: make login-test\n- [ ] add logout\n"


@pytest.fixture
def red(project, tmp_path):
    """A task's worktree after its verified attempt (its task [x] on its branch), its row and a ledger."""
    commit_file(project, "TASKS.md", TASKS)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    ident = task_id("add login")
    branch = f"genesis/task/{ident}"
    wt = create(project, tmp_path / "trees", ident, branch, target)
    (wt / "TASKS.md").write_text(TASKS.replace("- [ ] add login", "- [x] add login"))
    (wt / "login.txt").write_text("login\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "add login")
    with FleetLedger.open(tmp_path / "fleet" / "ledger.sqlite3", clock=lambda: 1000.0) as led:
        led.upsert_task(TaskRow(ident, "add login", "merging", branch=branch, worktree=str(wt), created=1000.0))
        attempt = led.begin_attempt(ident, "start", "", "configured", "run-1", 1000.0)
        led.end_attempt(ident, attempt.attempt, 0, "verified", 1010.0)
        yield led, led.task(ident), wt, target


def _result(tail=("FAILED test_login: expected 200, got 500",)) -> MergeResult:
    return MergeResult(TESTS_FAILED, "", "the project's check `make test` exited 2 (after 1s), on a replayed "
                                         "onto main; it is not landed\nIts output ends:\nFAILED test_login",
                       checks=({"kind": "project", "command": "make test", "exit_code": 2, "tail": list(tail)},),
                       tail=tail)


def test_sent_back_the_task_is_reopened_on_its_branch_told_the_tail_and_its_attempt_failed(red):
    led, row, wt, target = red
    said = send_back(led, row, _result(), POLICY, target, False, 1020.0)
    assert said == "its merge onto " + target + " was red: the project's check `make test` exited 2 (after 1s), " \
                                                "on a replayed onto main; it is not landed"
    text = git(wt, "show", f"{row.branch}:TASKS.md")
    (login,) = [t for t in parse(text).items if t.text == "add login"]
    assert login.state == OPEN and login.check == "make login-test"
    assert "Genesis: reopened " in text and "The output ends: FAILED test_login: expected 200, got 500" in text
    assert git(wt, "log", "-1", "--format=%s").strip() == "Genesis: reopen add login: its merge was red"
    assert git(wt, "status", "--porcelain") == ""
    (event,) = led.events(RED_EVENT)
    assert event.detail["to"] == "task" and event.detail["tail"] == ["FAILED test_login: expected 200, got 500"]
    assert event.detail["checks"][0]["exit_code"] == 2 and event.detail["sha"] == git(wt, "rev-parse", "HEAD").strip()
    assert [a.outcome for a in led.attempts(row.id)] == ["failed"]


def test_with_the_ladder_spent_it_goes_to_review_and_the_branch_is_not_touched(red):
    led, row, wt, target = red
    before = git(wt, "rev-parse", "HEAD").strip()
    spent = LadderPolicy(max_task_restarts=0, max_failed_tasks=0, backoff_first=10, strategies=1)
    assert send_back(led, row, _result(), spent, target, False, 1020.0) == ""
    assert git(wt, "rev-parse", "HEAD").strip() == before
    (event,) = led.events(RED_EVENT)
    assert event.detail["to"] == "review" and event.detail["sha"] == ""
    assert [a.outcome for a in led.attempts(row.id)] == ["verified"]
    assert math.isinf(decide(row, [], 1, spent, 0.0).not_before)
