"""A killed attempt's worktree made startable again, with real git: its leftovers kept as a commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.git import commit_file, git

from genesis.config import default_layout
from genesis.fleet.leftovers import BREAKER_FILE, SNAPSHOTS, make_startable, unfair
from genesis.loop import breaker
from genesis.loop.breaker import BreakerState, BreakerStore
from genesis.repo.autocommit import user_changes
from genesis.store.layout import add_git_excludes

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


@pytest.mark.parametrize("state, against", [
    (BreakerState(), False),                                           # fresh: nothing to set aside
    (BreakerState(no_progress_count=2), True),                         # CLOSED, but counting
    (BreakerState(state=breaker.HALF_OPEN, no_progress_count=3), True),
    (BreakerState(state=breaker.OPEN, no_progress_count=5), True),
])
def test_a_breaker_counts_against_the_next_attempt_when_it_holds_anything(state, against):
    assert unfair(state) is against


def opened(now: float = 1_000_000.0) -> BreakerState:
    """The breaker an attempt whose agent made no progress leaves (two iterations, thresholds 1)."""
    state = breaker.record(BreakerState(), 1, False, now, warn_at=1, stop_at=1)
    return breaker.record(state, 2, False, now, warn_at=1, stop_at=1)


def breaker_worktree(project: Path, tmp_path: Path) -> Path:
    """A task's worktree as its child's loop leaves it: Genesis's files kept out of git."""
    wt = task_worktree(project, tmp_path)
    assert default_layout(wt).breaker_file == wt / BREAKER_FILE   # where the child's loop keeps it
    add_git_excludes(wt, default_layout(wt).ignored())
    return wt


def test_an_open_breaker_left_by_an_attempt_is_set_aside_and_the_next_starts_closed(project, tmp_path):
    wt = breaker_worktree(project, tmp_path)
    path = wt / BREAKER_FILE
    path.parent.mkdir()
    state = opened()
    assert state.state == breaker.OPEN
    BreakerStore(path).update(lambda _old: state)
    tip = git(wt, "rev-parse", "HEAD")

    done = make_startable(wt, BRANCH, 1, "exit 3")

    assert done == ["set aside the circuit breaker attempt 1 left (OPEN, 2 iteration(s) without progress; kept as "
                    ".circuit_breaker.json.attempt-1): the next attempt starts with a fair breaker"]
    assert BreakerStore(path).load() == (BreakerState(updated_at=BreakerStore(path).load()[0].updated_at), None)
    kept = BreakerStore(path.with_name(".circuit_breaker.json.attempt-1")).load()[0]
    assert kept == state                                                # the evidence, as it was
    assert git(wt, "rev-parse", "HEAD") == tip and clean(wt)            # nothing committed: Genesis's own file


def test_a_closed_breaker_and_an_unreadable_one_stay_where_they_are(project, tmp_path):
    wt = breaker_worktree(project, tmp_path)
    path = wt / BREAKER_FILE
    path.parent.mkdir()
    BreakerStore(path).update(lambda old: old)
    assert make_startable(wt, BRANCH, 1, "exit 1") == [] and path.is_file()
    path.write_text("{not json")                                        # the loop's preflight quarantines it
    assert make_startable(wt, BRANCH, 2, "exit 1") == [] and path.read_text() == "{not json"
