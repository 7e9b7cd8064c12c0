"""The repository's state, read from real repositories left in each state a user can leave
them in: every half-done operation is named, a detached HEAD is seen, in a linked worktree
too (its git directory is not .git)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest
from helpers.git import git
from helpers.gitstates import STATES, bisecting, branch_of, conflicted_merge, detached, paused_rebase

from genesis.repo.state import OPERATIONS, repo_state, way_out


def test_a_plain_branch_has_nothing_in_progress(project):
    state = repo_state(project)
    assert state.operations == () and not state.detached
    assert state.branch == branch_of(project) and state.head is None


def test_a_repository_without_a_commit_is_on_its_branch(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q", "-b", "trunk")
    state = repo_state(fresh)
    assert (state.operations, state.branch, state.detached) == ((), "trunk", False)


@pytest.mark.fault(59)
@pytest.mark.parametrize("name", list(STATES))
def test_every_operation_in_progress_is_named_and_only_it(project, name):
    make, operation = STATES[name]
    make(project)
    assert repo_state(project).operations == (operation,)


@pytest.mark.fault(59)
def test_a_bisect_during_a_paused_rebase_names_both(project):
    paused_rebase(project)
    bisecting(project)
    assert repo_state(project).operations == ("rebase", "bisect")


@pytest.mark.fault(60)
def test_a_detached_head_is_seen_with_its_commit(project):
    sha = detached(project)
    state = repo_state(project)
    assert state.detached and state.branch is None and state.head == sha and state.operations == ()


@pytest.mark.fault(59)
def test_in_a_linked_worktree_its_own_state_is_read(project, tmp_path):
    tree = tmp_path / "linked tree"
    git(project, "worktree", "add", "-q", "-b", "side", str(tree))
    conflicted_merge(tree)
    assert not (tree / ".git").is_dir()  # a file pointing at the worktree's own git dir
    assert repo_state(tree).operations == ("merge",) and repo_state(tree).branch == "side"
    assert repo_state(project).operations == ()


def test_the_way_out_is_runnable_from_anywhere(tmp_path):
    where = tmp_path / "my project"
    quoted = shlex.quote(str(where))
    assert f"git -C {quoted} merge --continue" in way_out("merge", where)
    assert f"git -C {quoted} merge --abort" in way_out("merge", where)
    assert f"git -C {quoted} rebase --abort" in way_out("rebase", where)
    assert f"git -C {quoted} cherry-pick --abort" in way_out("cherry-pick", where)
    assert f"git -C {quoted} revert --abort" in way_out("revert", where)
    assert f"git -C {quoted} am --abort" in way_out("am", where)
    assert way_out("bisect", where).endswith(f"git -C {quoted} bisect reset")
    assert set(OPERATIONS) == {"rebase", "am", "merge", "cherry-pick", "revert", "bisect"}


@pytest.mark.fault(59)
@pytest.mark.parametrize("name", list(STATES))
def test_the_printed_way_to_give_it_up_ends_it(project, tmp_path, name):
    make, operation = STATES[name]
    make(project)
    printed = way_out(operation, project)
    command = re.search(r"git -C \S+ (?:\S+ --abort|bisect reset)$", printed).group(0)
    who = {f"GIT_{role}_{part}": value for role in ("AUTHOR", "COMMITTER")
           for part, value in (("NAME", "T"), ("EMAIL", "t@example.invalid"))}  # `git am --abort` asks for one
    done = subprocess.run(shlex.split(command), cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, **who})
    assert done.returncode == 0, done.stderr
    assert repo_state(project).operations == ()
