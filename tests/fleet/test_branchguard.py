"""The project branch a child moves behind the merge queue's back, with real git, a child's real
linked worktree and the monitor's own check: put back at once and named (never blamed on the
user's uncommitted changes), what it was moved to kept; the user's own commit is taken as theirs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.git import commit_file, git

from genesis.config import resolve
from genesis.fleet import monitor as mon
from genesis.fleet.ledger import FleetLedger
from genesis.fleet.merging import merge_home
from genesis.fleet.resources import fleet_settings
from genesis.fleet.taskref import TaskRef, task_id
from genesis.fleet.worktrees import create
from genesis.repo import branchguard, refstore
from genesis.store.layout import private_dir, state_dir_of

TASK = "Add alpha"


@pytest.fixture
def fleet(project: Path) -> str:
    commit_file(project, "TASKS.md", f"# Tasks\n\n- [ ] {TASK}\n")
    return git(project, "symbolic-ref", "--short", "HEAD").strip()


def child(project: Path, target: str) -> tuple[TaskRef, Path]:
    ref = TaskRef(task_id(TASK), TASK, 3)
    wt = create(project, project.parent / "trees", ref.id, ref.branch, target)
    (wt / "alpha.txt").write_text("a\n")
    (wt / "TASKS.md").write_text((wt / "TASKS.md").read_text().replace("- [ ]", "- [x]"))
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", TASK)
    return ref, wt


def forge(wt: Path, target: str) -> str:
    """What a hostile child does from its own worktree: a commit on the project branch's tip,
    made with plumbing, and the branch moved onto it."""
    tree = git(wt, "write-tree").strip()
    parent = git(wt, "rev-parse", f"refs/heads/{target}").strip()
    forged = git(wt, "commit-tree", tree, "-p", parent, "-m", "forged").strip()
    git(wt, "update-ref", f"refs/heads/{target}", forged)
    return forged


def ancestor(project: Path, old: str, new: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=project).returncode == 0


def tip(project: Path, branch: str) -> str:
    return git(project, "rev-parse", f"refs/heads/{branch}").strip()


@pytest.mark.fault(201)
def test_a_child_that_moves_the_project_branch_is_put_back_and_named(project, fleet):
    start = branchguard.remember(project, fleet)
    _, wt = child(project, fleet)
    forged = forge(wt, fleet)
    assert git(project, "status", "--porcelain", "--untracked-files=no").strip()  # looks like the user's edits
    moved = branchguard.guard(project, fleet)
    assert moved is not None and moved.put_back and (moved.known, moved.found) == (start, forged)
    assert tip(project, fleet) == start
    assert not git(project, "status", "--porcelain", "--untracked-files=no").strip()  # the user's tree: clean again
    assert git(project, "rev-parse", moved.kept).strip() == forged
    assert refstore.holds(project, branchguard.MOVED_PREFIX)  # kept where the agent cannot delete it too
    assert f"a child moved {fleet} from {start[:10]} to {forged[:10]}" in moved.words()
    assert branchguard.guard(project, fleet) is None  # said once


def test_the_users_own_commit_on_the_project_branch_is_theirs(project, fleet):
    branchguard.remember(project, fleet)
    mine = commit_file(project, "mine.txt")
    assert branchguard.guard(project, fleet) is None
    assert tip(project, fleet) == mine and branchguard.known(project, fleet) == mine
    git(project, "commit", "-q", "--allow-empty", "-m", "a note")
    empty = tip(project, fleet)
    assert branchguard.guard(project, fleet) is None and tip(project, fleet) == empty != mine


def test_a_branch_checked_out_nowhere_that_moved_is_put_back(project, fleet):
    git(project, "branch", "release")
    start = branchguard.remember(project, "release")
    _, wt = child(project, fleet)
    git(wt, "update-ref", "refs/heads/release", git(wt, "rev-parse", "HEAD").strip())
    moved = branchguard.guard(project, "release")
    assert moved is not None and moved.put_back and tip(project, "release") == start


def test_the_known_tip_survives_its_ref_deleted_and_a_gc(project, fleet):
    start = branchguard.remember(project, fleet)
    _, wt = child(project, fleet)
    git(wt, "update-ref", "-d", f"{branchguard.KNOWN_PREFIX}/{fleet}")
    git(project, "reset", "-q", "--soft", "HEAD~1")  # the start's commit left reachable from nothing
    git(project, "reflog", "expire", "--expire=now", "--all")
    git(project, "gc", "-q", "--prune=now")
    moved = branchguard.guard(project, fleet)
    assert moved is not None and tip(project, fleet) == start


@pytest.mark.fault(201)
def test_the_monitor_puts_the_branch_back_and_the_merge_is_not_held_on_the_users_account(project, fleet, tmp_path):
    cfg = resolve(project, flags={"GENESIS_FLEET_MEMORY_FLOOR_MB": "0", "GENESIS_FLEET_STAGGER_SECONDS": "0"})
    fleet_dir = private_dir(private_dir(state_dir_of(project)) / "fleet")
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = mon.Monitor(project, cfg, fleet_settings(cfg.settings), 3, led, fleet_dir, "fleet-test", fleet, {})
        mon._begin(monitor)
        start = tip(project, fleet)
        ref, wt = child(project, fleet)
        forged = forge(wt, fleet)
        monitor.guard_branch()
        (event,) = led.events("branch_moved")
        assert event.detail["found"] == forged and event.detail["put_back"] is True
        assert [e.detail["cause"] for e in led.events("alert")] == [f"a child moved {fleet} behind the merge queue"]
        result = merge_home(project, wt, ref.branch, fleet, ref, cfg, resolve=None)
        assert result.outcome == "merged", result.detail
        assert ancestor(project, start, tip(project, fleet)) and not ancestor(project, forged, tip(project, fleet))
        assert branchguard.known(project, fleet) == tip(project, fleet)  # our merge is the new known tip
        monitor.guard_branch()
        assert len(led.events("branch_moved")) == 1
