"""A stale worktree does not poison its task: machine A died mid-phase leaving a file in the
task's worktree, machine B took the task over and pushed that same file further; back on A,
the catch-up keeps A's leftovers under a safety ref and fast-forwards to B's push. A failure of
a machine's git before any agent ran is an Infrastructure error, never the agent's ladder."""

from __future__ import annotations

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_project  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import origin_for  # noqa: E402

from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal.activities import MachineActivities, _infra  # noqa: E402
from genesis.temporal.records import INFRA, AttemptInput, TaskSpec  # noqa: E402

pytestmark = [pytest.mark.temporal]

TEXT = "write the alpha note"
TID = task_id(TEXT)
BRANCH = branch_for(TID)
FLEET = "genesis-fleet-0123456789ab"


def attempt(remote, target: str, number: int = 1) -> AttemptInput:
    return AttemptInput(FLEET, f"{FLEET}/{TID}", TaskSpec(TID, TEXT, BRANCH), number, "start", 0, str(remote),
                        target, "acct", ("Builder",), 1, (), 1.0)


def test_a_stale_worktree_with_leftovers_catches_up_with_the_pushed_branch(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    fleet_project(project, [TEXT])
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    remote = origin_for(project, tmp_path)
    git(project, "push", "-q", "origin", target)
    machine = MachineActivities(None, tmp_path / "A", "A", {})
    folder = tmp_path / "A" / FLEET
    folder.mkdir(parents=True)
    wt, fresh = machine._worktree(folder, attempt(remote, target))
    assert fresh and git(wt, "rev-parse", "HEAD") == git(project, "rev-parse", target)
    (wt / "note.txt").write_text("A's half-written note\n")   # A dies mid-phase: uncommitted

    other = tmp_path / "B"
    git(tmp_path, "clone", "-q", "-b", target, str(remote), str(other))
    git(other, "config", "user.name", "Agent")
    git(other, "config", "user.email", "agent@example.invalid")
    git(other, "checkout", "-q", "-b", BRANCH)
    (other / "note.txt").write_text("B's finished note\n")
    git(other, "add", "note.txt")
    git(other, "commit", "-qm", "the note, on B")
    git(other, "push", "-q", "origin", BRANCH)
    pushed = git(other, "rev-parse", "HEAD")

    again, fresh = machine._worktree(folder, attempt(remote, target, 2))   # the task back on A
    assert again == wt and not fresh
    assert git(wt, "rev-parse", "HEAD") == pushed
    assert (wt / "note.txt").read_text() == "B's finished note\n"
    assert git(wt, "status", "--porcelain") == ""
    (kept,) = git(wt, "for-each-ref", "--format=%(refname)", f"refs/genesis/leftovers/{TID}/").split()
    assert git(wt, "show", f"{kept}:note.txt") == "A's half-written note\n"


def test_a_machines_git_failure_is_an_infrastructure_error_temporal_does_not_retry_in_place():
    error = _infra("A", "no worktree for genesis/task/x: fetch failed", 1)
    assert (error.type, error.non_retryable) == (INFRA, True)
    assert error.details[0] == {"host": "A", "activity_attempt": 1}
