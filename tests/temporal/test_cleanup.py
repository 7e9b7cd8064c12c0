"""A merged task's leftovers go by default: its branch on the remote (only while it is the tip
merged), the home's merge worktree and branch, and each machine's worktree and branch once the
remote has dropped it; anything with work the remote never had stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.git import commit_file, git, new_repo

from genesis.fleet import worktrees
from genesis.temporal import cleanup

BRANCH = "genesis/task/write-the-note-abc123"


@pytest.fixture
def world(tmp_path):
    """A project, its bare remote, and a machine's clone with a worktree of the task whose work is pushed."""
    project = new_repo(tmp_path / "project")
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "origin", target)
    base = tmp_path / "machine" / "repo"
    git(tmp_path, "clone", "-q", str(remote), str(base))
    wt = worktrees.create(base, tmp_path / "machine" / "worktrees", "write-the-note-abc123", BRANCH, f"origin/{target}")
    commit_file(wt, "note.txt")
    git(wt, "push", "-q", "origin", f"{BRANCH}:{BRANCH}")
    return project, target, remote, base, wt


def merged_at_home(project: Path, target: str) -> tuple[Path, str]:
    """The home takes the pushed branch into a merge worktree and the project branch, pushed."""
    git(project, "fetch", "-q", "origin", f"{BRANCH}:{BRANCH}")
    tip = git(project, "rev-parse", BRANCH).strip()
    wt = worktrees.create(project, project.parent / "merge", "write-the-note-abc123", BRANCH, target)
    git(project, "merge", "-q", "--ff-only", BRANCH)
    git(project, "push", "-q", "origin", target)
    return wt, tip


def on_remote(remote: Path, branch: str) -> bool:
    return bool(git(remote, "for-each-ref", f"refs/heads/{branch}").strip())


def fetch(base: Path) -> dict[str, str]:
    g = worktrees.Git(base)
    before = cleanup.remote_tips(g, "origin")
    g.out("fetch", "-q", "--prune", "origin")
    return cleanup.gone(before, cleanup.remote_tips(g, "origin"))


def test_after_a_merge_the_home_removes_the_remote_branch_its_worktree_and_branch(world):
    project, target, remote, base, wt = world
    merge_wt, tip = merged_at_home(project, target)
    said = cleanup.clean_home(project, "origin", merge_wt, BRANCH, target, tip)
    assert f"{BRANCH} deleted from origin" in said and "removed here" in said, said
    assert not on_remote(remote, BRANCH) and not merge_wt.exists()
    assert not git(project, "branch", "--list", BRANCH).strip()


def test_a_remote_branch_that_moved_since_the_merge_is_kept(world):
    project, target, remote, base, wt = world
    merge_wt, tip = merged_at_home(project, target)
    commit_file(wt, "late.txt")   # a straggler's push after the merge took the branch
    git(wt, "push", "-q", "origin", f"{BRANCH}:{BRANCH}")
    said = cleanup.clean_home(project, "origin", merge_wt, BRANCH, target, tip)
    assert "kept on origin" in said and on_remote(remote, BRANCH), said


def test_a_machine_removes_a_merged_tasks_worktree_once_the_remote_dropped_its_branch(world):
    project, target, remote, base, wt = world
    merge_wt, tip = merged_at_home(project, target)
    cleanup.clean_home(project, "origin", merge_wt, BRANCH, target, tip)
    vanished = fetch(base)
    assert vanished == {BRANCH: tip}
    assert cleanup.clean_machine(base, vanished, lambda path: False) == [BRANCH]
    assert not wt.exists() and not git(base, "branch", "--list", BRANCH).strip()


@pytest.mark.parametrize("leftover", ["a commit never pushed", "uncommitted work", "a loop running"])
def test_a_machine_keeps_what_the_remote_never_had_or_a_loop_still_uses(world, leftover):
    project, target, remote, base, wt = world
    merge_wt, tip = merged_at_home(project, target)
    cleanup.clean_home(project, "origin", merge_wt, BRANCH, target, tip)
    if leftover == "a commit never pushed":
        commit_file(wt, "unpushed.txt")
    elif leftover == "uncommitted work":
        (wt / "draft.txt").write_text("draft\n")
    vanished = fetch(base)
    assert cleanup.clean_machine(base, vanished, lambda path: leftover == "a loop running") == []
    assert wt.exists() and git(base, "branch", "--list", BRANCH).strip()


def test_nothing_vanished_nothing_touched(world):
    project, target, remote, base, wt = world
    assert fetch(base) == {}
    assert cleanup.clean_machine(base, {}, lambda path: False) == []
    assert wt.exists()
