"""The fleet's queue as committed on a branch (never the work tree), and the done rule."""

from __future__ import annotations

import pytest
from helpers.git import git

from genesis.fleet.queue import done_at, project_branch, tasks_at
from genesis.repo.gitcmd import GitFailed


def commit_tasks(project, text: str) -> None:
    (project / "TASKS.md").write_text(text)
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", "tasks")


def test_tasks_are_read_at_the_branch_tip_not_from_the_work_tree(project):
    commit_tasks(project, "- [ ] one\n")
    (project / "TASKS.md").write_text("- [x] one\n")   # the user's uncommitted edit
    branch = project_branch(project)
    assert tasks_at(project, branch) == "- [ ] one\n"
    assert not done_at(project, branch, "one")
    assert tasks_at(project, "no-such-branch") is None


def test_done_means_ticked_and_no_line_of_it_left_open(project):
    commit_tasks(project, "- [x] one\n- [ ]  two\n- [x] two\n")
    branch = project_branch(project)
    assert done_at(project, branch, "one")
    assert not done_at(project, branch, "two")      # runs of spaces as one: still open once


def test_a_detached_head_has_no_project_branch(project):
    git(project, "checkout", "-q", "--detach")
    with pytest.raises(GitFailed, match="detached HEAD"):
        project_branch(project)
