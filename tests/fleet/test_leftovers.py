"""A killed attempt's worktree made startable again, with real git: its leftovers kept as a commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.git import commit_file, git

from genesis.fleet.leftovers import SNAPSHOTS, make_startable
from genesis.repo.autocommit import user_changes

BRANCH = "genesis/task/the-task-abc123"


def task_worktree(project: Path, tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    git(project, "worktree", "add", "-q", "-b", BRANCH, str(wt))
    return wt


def clean(wt: Path) -> bool:
    found = user_changes(wt)
    return not (found.changed or found.untracked or found.unmerged)


def test_a_killed_attempts_uncommitted_work_and_its_rebase_are_put_right_and_kept(project, tmp_path):
    wt = task_worktree(project, tmp_path)
    commit_file(wt, "a.txt", "one\n", "the agent's first")
    git(wt, "checkout", "-q", "-b", "side", "HEAD~1")
    commit_file(wt, "a.txt", "two\n", "a clash")
    git(wt, "checkout", "-q", BRANCH)
    rebase = subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", "rebase", "side"],
                            cwd=wt, capture_output=True)
    assert rebase.returncode != 0  # a conflict: the agent was killed mid-rebase
    (wt / "README.md").write_text("the agent's edit\n")
    (wt / "new.txt").write_text("a file the agent made\n")

    done = make_startable(wt, BRANCH, 2, "killed by SIGKILL")

    assert any(d.startswith("abandoned the rebase under way") for d in done)
    assert git(wt, "symbolic-ref", "--short", "HEAD").strip() == BRANCH
    assert not (Path(git(wt, "rev-parse", "--absolute-git-dir").strip()) / "rebase-merge").exists()
    assert clean(wt)
    assert git(wt, "log", "-1", "--format=%s").strip() == "Genesis: work left by attempt 2, which ended: " \
                                                          "killed by SIGKILL"
    assert (wt / "a.txt").read_text() == "one\n" and (wt / "new.txt").exists()  # the branch's own, and the new file
    kept = f"{SNAPSHOTS}/the-task-abc123/attempt-2"  # the files as the killed rebase left them
    assert git(wt, "show", f"{kept}:README.md") == "the agent's edit\n"
    assert "new.txt" in git(wt, "show", "--name-only", "--format=", "HEAD")


def test_a_detached_head_goes_back_on_the_branch_with_its_work(project, tmp_path):
    wt = task_worktree(project, tmp_path)
    git(wt, "checkout", "-q", "--detach")
    commit_file(wt, "b.txt", "made on a detached HEAD\n", "detached work")
    done = make_startable(wt, BRANCH, 1, "exit 137")
    assert any("put HEAD back on" in d for d in done)
    assert git(wt, "symbolic-ref", "--short", "HEAD").strip() == BRANCH and clean(wt)
    assert git(wt, "show", f"{BRANCH}:b.txt") == "made on a detached HEAD\n"


def test_a_clean_worktree_is_left_as_it_is(project, tmp_path):
    wt = task_worktree(project, tmp_path)
    tip = git(wt, "rev-parse", "HEAD")
    assert make_startable(wt, BRANCH, 1, "exit 1") == [] and git(wt, "rev-parse", "HEAD") == tip
