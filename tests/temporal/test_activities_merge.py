"""The home's merge never overwrites the user's work on a task's branch: a worktree of it with
uncommitted changes, or local commits the pushed tip lacks, hold the merge (HELD, saying why) and
leave everything as it was; the fetched ref is deleted afterwards either way."""

from __future__ import annotations

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_project  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import origin_for  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis.config import resolve  # noqa: E402
from genesis.fleet.ledger import FleetLedger  # noqa: E402
from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.repo import branchguard  # noqa: E402
from genesis.temporal.activities import HomeActivities  # noqa: E402
from genesis.temporal.records import HELD, MergeInput, TaskSpec  # noqa: E402

pytestmark = [pytest.mark.temporal]

TEXT = "write the alpha note"
TID = task_id(TEXT)
BRANCH = branch_for(TID)


@pytest.fixture
def home(tmp_path):
    """The user's checkout, its origin holding the task's branch one commit ahead of the target."""
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    fleet_project(project, [TEXT])
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    remote = origin_for(project, tmp_path)
    git(project, "push", "-q", "origin", target)
    git(project, "branch", BRANCH)
    other = tmp_path / "machine"
    git(tmp_path, "clone", "-q", str(remote), str(other))
    git(other, "config", "user.name", "Agent")
    git(other, "config", "user.email", "agent@example.invalid")
    git(other, "checkout", "-q", "-b", BRANCH)
    (other / "work.txt").write_text("the agent's work\n")
    git(other, "add", "work.txt")
    git(other, "commit", "-qm", "work")
    git(other, "push", "-q", "origin", BRANCH)
    return project, target, remote


def merge(project, target, remote, beats: list | None = None, **env: str):
    acts = HomeActivities(project, resolve(project, env=env) if env else resolve(project), "origin")
    inp = MergeInput("genesis-fleet-0123456789ab", TaskSpec(TID, TEXT, BRANCH), target, str(remote))
    activity_env = ActivityEnvironment()
    if beats is not None:
        activity_env.on_heartbeat = lambda *details: beats.append(details)
    return activity_env.run(acts.merge, inp)


def fetched_refs(project) -> str:
    return git(project, "for-each-ref", "refs/genesis/fetched/")


@pytest.mark.fault(112)
def test_a_dirty_worktree_of_the_tasks_branch_holds_the_merge(home, tmp_path):
    project, target, remote = home
    wt = tmp_path / "mine"
    git(project, "worktree", "add", "-q", str(wt), BRANCH)
    (wt / "TASKS.md").write_text("my own edit, not committed\n")
    before = git(wt, "rev-parse", "HEAD")
    with pytest.raises(ApplicationError) as held:
        merge(project, target, remote)
    assert held.value.type == HELD and "uncommitted changes" in str(held.value)
    assert (wt / "TASKS.md").read_text() == "my own edit, not committed\n"
    assert git(wt, "rev-parse", "HEAD") == before
    assert fetched_refs(project) == ""


@pytest.mark.fault(112)
def test_local_commits_the_pushed_tip_lacks_hold_the_merge(home):
    project, target, remote = home
    git(project, "checkout", "-q", BRANCH)
    (project / "mine.txt").write_text("my commit\n")
    git(project, "add", "mine.txt")
    git(project, "commit", "-qm", "mine")
    mine = git(project, "rev-parse", "HEAD")
    git(project, "checkout", "-q", target)
    with pytest.raises(ApplicationError) as held:
        merge(project, target, remote)
    assert held.value.type == HELD and "not an ancestor" in str(held.value)
    assert git(project, "rev-parse", BRANCH) == mine
    assert fetched_refs(project) == ""


def test_a_clean_branch_behind_the_pushed_tip_is_merged_and_the_fetched_ref_goes(home):
    project, target, remote = home
    done = merge(project, target, remote)
    assert done.outcome == "merged", done
    assert (project / "work.txt").read_text() == "the agent's work\n"
    assert fetched_refs(project) == ""
    # Cleaned by default, and said: the remote's task branch, the merge worktree and the home's branch.
    branch = branch_for(TID)
    assert "deleted from" in done.detail and "removed here" in done.detail, done.detail
    assert git(remote, "for-each-ref", f"refs/heads/{branch}") == ""
    assert git(project, "branch", "--list", branch) == ""


@pytest.mark.fault(112)
def test_a_merge_worktree_an_interrupted_try_left_is_reset_and_the_merge_goes_through(home):
    """The home killed mid-merge leaves its merge worktree detached mid-replay, with files of its
    own: the next try keeps them aside, starts from a fresh worktree and merges."""
    project, target, remote = home
    from genesis.fleet.worktrees import worktree_root

    root = worktree_root(project, resolve(project))
    left = root / TID
    git(project, "worktree", "add", "-q", "--detach", str(left), target)
    (left / "half-replayed.txt").write_text("what the killed try was doing\n")
    (left / "TASKS.md").write_text("a half-resolved conflict\n")
    beats: list = []
    done = merge(project, target, remote, beats)
    assert done.outcome == "merged", done
    assert beats and beats[0] == ("merging",)   # from its first moment: a dead home is known within a beat
    assert (project / "work.txt").read_text() == "the agent's work\n"
    assert git(remote, "rev-parse", target) == git(project, "rev-parse", target)
    (kept,) = git(project, "for-each-ref", "--format=%(refname)", f"refs/genesis/leftovers/{TID}/").split()
    assert git(project, "show", f"{kept}:half-replayed.txt") == "what the killed try was doing\n"
    again = merge(project, target, remote)   # a try whose success was lost: nothing merged twice
    assert again.outcome == "merged" and "already on" in again.detail, again


def test_the_home_s_merge_is_green_or_not_landed_the_project_s_check_run_on_the_merged_tree(home):
    """The home merges through the fleet's own merge: the project's check runs on the merged tree;
    red, nothing lands and nothing is pushed; green, it lands and is pushed."""
    project, target, remote = home
    before = git(project, "rev-parse", target)
    red = merge(project, target, remote,
                GENESIS_CHECK_CMD="test -f work.txt && echo 'FAILED: work breaks it' && exit 3")
    assert red.outcome == "tests_failed" and "exited 3" in red.detail and "FAILED: work breaks it" in red.detail
    assert git(project, "rev-parse", target) == before == git(remote, "rev-parse", target)
    green = merge(project, target, remote, GENESIS_CHECK_CMD="test -f work.txt")
    assert green.outcome == "merged" and "its checks passed (1)" in green.detail, green
    assert git(remote, "rev-parse", target) == git(project, "rev-parse", target) != before


def forge(project, target, tmp_path) -> str:
    """What a hostile child does where it can write the home's repository (a worktree of it): a
    commit of its own on the project branch's tip made with plumbing, the branch moved onto it."""
    wt = tmp_path / "hostile"
    git(project, "worktree", "add", "-q", "--detach", str(wt), target)
    (wt / "forged.txt").write_text("never the user's\n")
    git(wt, "add", "forged.txt")
    tree = git(wt, "write-tree").strip()
    forged = git(wt, "commit-tree", tree, "-p", f"refs/heads/{target}", "-m", "forged").strip()
    git(wt, "update-ref", f"refs/heads/{target}", forged)
    return forged


def guarded_home(project, tmp_path) -> tuple[HomeActivities, list]:
    """The home's activities as the home makes them (the fleet ledger named), its alerts caught."""
    acts = HomeActivities(project, resolve(project), "origin", "fleet-test", tmp_path / "ledger.sqlite3")
    sent: list = []
    acts.alert = sent.append
    return acts, sent


@pytest.mark.fault(201)
def test_the_home_puts_back_a_moved_project_branch_before_it_merges_and_names_it(home, tmp_path):
    project, target, remote = home
    acts, sent = guarded_home(project, tmp_path)
    acts.keep_start(target)
    start = git(project, "rev-parse", target).strip()
    forged = forge(project, target, tmp_path)
    inp = MergeInput("genesis-fleet-0123456789ab", TaskSpec(TID, TEXT, BRANCH), target, str(remote))
    done = ActivityEnvironment().run(acts.merge, inp)
    assert done.outcome == "merged", done
    tip = git(project, "rev-parse", target).strip()
    assert git(project, "rev-list", tip).split().count(start) == 1 and forged not in git(project, "rev-list", tip)
    assert git(remote, "rev-parse", target).strip() == tip   # what every machine starts from: never the forged one
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        (event,) = led.events("branch_moved")
    assert event.detail["known"] == start and event.detail["found"] == forged and event.detail["put_back"] is True
    assert git(project, "rev-parse", event.detail["kept"]).strip() == forged   # kept, as evidence
    (alert,) = sent
    assert alert.severity == "high" and alert.cause == f"a child moved {target} behind the merge queue"
    assert f"a child moved {target} from {start[:10]} to {forged[:10]}" in alert.what
    assert branchguard.known(project, target) == tip   # the merge's tip is the new known one
    acts.guard_branch(target)
    assert len(sent) == 1   # said once


@pytest.mark.fault(201)
def test_the_home_s_watch_puts_the_branch_back_but_never_while_a_merge_of_its_own_moves_it(home, tmp_path):
    project, target, _ = home
    acts, sent = guarded_home(project, tmp_path)
    acts.keep_start(target)
    start = git(project, "rev-parse", target).strip()
    forged = forge(project, target, tmp_path)
    acts.moving = 1   # a merge of ours under way: what it does to the branch is its own
    acts.guard_branch(target)
    assert git(project, "rev-parse", target).strip() == forged and sent == []
    acts.moving = 0
    acts.guard_branch(target)
    assert git(project, "rev-parse", target).strip() == start and len(sent) == 1
