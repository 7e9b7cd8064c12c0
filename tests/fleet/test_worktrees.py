"""Each task's worktree and branch, with real git: outside the work tree, made once, found again,
and removed only when everything on its branch is in the project branch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.git import commit_file, git

from genesis.config import ConfigError, resolve
from genesis.fleet.worktrees import ROOT_NAME, WorktreeError, create, listed, merged_into, prune, worktree_root


def _branch(project: Path) -> str:
    return git(project, "symbolic-ref", "--short", "HEAD").strip()


def _heads(project: Path) -> set[str]:
    return set(git(project, "for-each-ref", "--format=%(refname:short)", "refs/heads").split())


def test_the_worktrees_live_in_the_git_dir_outside_the_work_tree(project):
    root = worktree_root(project, resolve(project, env={}))
    assert root == project / ".git" / ROOT_NAME and root.is_dir() and (root.stat().st_mode & 0o777) == 0o700
    path = create(project, root, "add-x-123abc", "genesis/task/add-x-123abc", _branch(project))
    assert path == root / "add-x-123abc" and (path / "README.md").is_file()
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""  # git never sees them
    git(project, "clean", "-fdxq")
    assert (path / "README.md").is_file()


def test_a_configured_folder_is_used_and_one_inside_the_work_tree_refused(project, tmp_path):
    cfg = resolve(project, env={"GENESIS_FLEET_WORKTREE_DIR": str(tmp_path / "trees")})
    assert worktree_root(project, cfg) == tmp_path / "trees"
    with pytest.raises(ConfigError, match="inside the project's work tree"):
        resolve(project, env={"GENESIS_FLEET_WORKTREE_DIR": "worktrees"})


def test_create_is_idempotent_and_reuses_the_branchs_worktree_wherever_it_is(project, tmp_path):
    base = _branch(project)
    first = create(project, tmp_path / "a", "t-1", "genesis/task/t-1", base)
    commit_file(first, "work.txt", "the child's work\n")
    again = create(project, tmp_path / "a", "t-1", "genesis/task/t-1", base)
    elsewhere = create(project, tmp_path / "b", "t-1", "genesis/task/t-1", base)  # a monitor with another root
    assert again == first and elsewhere == first
    assert [w.path for w in listed(project) if w.branch == "genesis/task/t-1"] == [first]
    assert len(listed(project)) == 2 and (first / "work.txt").read_text() == "the child's work\n"


def test_a_gone_worktree_folder_is_made_again_on_its_branch_with_its_commits(project, tmp_path):
    path = create(project, tmp_path / "a", "t-1", "genesis/task/t-1", _branch(project))
    sha = commit_file(path, "work.txt")
    shutil.rmtree(path)
    assert [w.prunable for w in listed(project) if w.branch == "genesis/task/t-1"] == [True]
    made = create(project, tmp_path / "a", "t-1", "genesis/task/t-1", _branch(project))
    assert git(made, "rev-parse", "HEAD").strip() == sha and (made / "work.txt").is_file()


def test_listed_parses_git_worktree_list(project, tmp_path):
    locked = create(project, tmp_path / "w", "t-1", "genesis/task/t-1", _branch(project))
    gone = create(project, tmp_path / "w", "t-2", "genesis/task/t-2", _branch(project))
    git(project, "worktree", "lock", str(locked))
    shutil.rmtree(gone)
    by_branch = {w.branch: w for w in listed(project)}
    main = listed(project)[0]
    assert main.path == project and main.branch == _branch(project)
    assert main.head == git(project, "rev-parse", "HEAD").strip()
    assert by_branch["genesis/task/t-1"].locked and not by_branch["genesis/task/t-1"].prunable
    assert by_branch["genesis/task/t-2"].prunable and not by_branch["genesis/task/t-2"].locked


def test_prune_keeps_a_branch_with_unmerged_commits_and_removes_a_merged_one(project, tmp_path):
    base = _branch(project)
    kept = create(project, tmp_path / "w", "kept", "genesis/task/kept", base)
    commit_file(kept, "unmerged.txt")
    done = create(project, tmp_path / "w", "done", "genesis/task/done", base)
    commit_file(done, "merged.txt")
    git(project, "merge", "-q", "--ff-only", "genesis/task/done")
    assert not merged_into(project, "genesis/task/kept", base) and merged_into(project, "genesis/task/done", base)

    assert prune(project, kept, "genesis/task/kept", base) is False
    assert (kept / "unmerged.txt").is_file() and "genesis/task/kept" in _heads(project)
    assert prune(project, done, "genesis/task/done", base) is True
    assert not done.exists() and "genesis/task/done" not in _heads(project)
    assert [w.branch for w in listed(project)] == [base, "genesis/task/kept"]


def test_prune_keeps_a_merged_worktree_holding_files_nobody_committed(project, tmp_path):
    base = _branch(project)
    path = create(project, tmp_path / "w", "t", "genesis/task/t", base)
    (path / "notes.txt").write_text("left by the agent\n")
    assert merged_into(project, "genesis/task/t", base)
    assert prune(project, path, "genesis/task/t", base) is False
    assert (path / "notes.txt").read_text() == "left by the agent\n" and "genesis/task/t" in _heads(project)
    os.unlink(path / "notes.txt")
    assert prune(project, path, "genesis/task/t", base) is True


def test_a_task_branch_checked_out_in_the_users_own_work_tree_is_never_a_childs_worktree(project, tmp_path):
    git(project, "branch", "genesis/task/t")
    git(project, "checkout", "-q", "genesis/task/t")  # the user looks at the task's work
    with pytest.raises(WorktreeError, match="checked out in the project's work tree"):
        create(project, tmp_path / "w", "t", "genesis/task/t", "HEAD")
    assert len(listed(project)) == 1


def test_something_already_at_the_worktrees_place_is_left_alone(project, tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "t").symlink_to(project)
    with pytest.raises(WorktreeError, match="exists and is no worktree"):
        create(project, tmp_path / "w", "t", "genesis/task/t", _branch(project))
    assert (tmp_path / "w" / "t").is_symlink() and len(listed(project)) == 1
