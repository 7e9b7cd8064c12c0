"""The loop's keeping of the user's data, on a real project: the start keeps every branch and
copies the user's files aside (a repository whose refs cannot be written refuses it); after a
phase, a rewrite is recorded once with its safety ref and stops the loop unless allowed."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest
from helpers.git import commit_file, git
from helpers.gitstates import branch_of
from helpers.procs import lock_held

from genesis import exitcodes
from genesis.loop import safekeeping
from genesis.loop.step import StepFailed
from genesis.repo import history, refstore, safety
from genesis.store.atomicio import write_json
from genesis.store.layout import Layout

RUN = "20260101T000000Z-safekeeping"


def test_the_start_keeps_every_branch_and_copies_the_users_files(project, step, said):
    git(project, "branch", "side")
    (project / "notes.txt").write_text("mine\n")
    write_json(step.layout.user_files, ["notes.txt"])
    safekeeping.keep_at_start(step)
    assert set(safety.kept(project, safety.run_prefix(RUN)).branches) == {branch_of(project), "side"}
    assert (step.layout.untracked_copies / RUN / "files" / "notes.txt").read_text() == "mine\n"
    assert any("1 untracked or ignored file(s) copied aside" in msg for _, msg in said)


def test_a_start_whose_safety_refs_cannot_be_written_is_refused(project, step):
    refs = project / ".git" / "refs" / "genesis"
    refs.write_text("not a folder\n")  # git cannot create refs under it
    with pytest.raises(StepFailed) as refused:
        safekeeping.keep_at_start(step)
    assert refused.value.code == exitcodes.USAGE and "safety refs" in str(refused.value)


def test_a_rewrite_stops_the_loop_and_is_told_once_when_allowed(project, step, said):
    commit_file(project, "a.txt")
    git(project, "branch", "side")
    safekeeping.keep_at_start(step)
    safekeeping.keep_at_phase(step, 1, "Builder")
    git(project, "reset", "-q", "--hard", "HEAD~1")
    found = safekeeping.history_of(step, 1, "Builder")
    assert [c.kind for c in found] == ["rewritten"]
    assert safekeeping.stop_for(step, 1, "Builder", found) == exitcodes.HISTORY_REWRITTEN
    assert any("GENESIS_ALLOW_HISTORY_REWRITE=false" in msg for kind, msg in said if kind == "error")
    allowed = dataclasses.replace(step, cfg=dataclasses.replace(step.cfg, allow_history_rewrite=True))
    git(project, "branch", "-D", "side")
    safekeeping.keep_at_phase(allowed, 1, "Planner")
    first = safekeeping.history_of(allowed, 1, "Planner")
    assert [(c.kind, c.branch) for c in first] == [("deleted", "side")]
    assert safekeeping.stop_for(allowed, 1, "Planner", first) is None
    safekeeping.keep_at_phase(allowed, 2, "Builder")
    assert safekeeping.history_of(allowed, 2, "Builder") == []  # told once, not at every phase after


def test_work_on_a_detached_head_is_kept_by_a_ref(project, step):
    safekeeping.keep_at_start(step)
    safekeeping.keep_at_phase(step, 1, "Builder")
    git(project, "switch", "-q", "--detach")
    commit_file(project, "orphan.txt")
    found = safekeeping.history_of(step, 1, "Builder")
    assert safekeeping.orphaning(found)
    safekeeping.kept_after(step, 1, "Builder")
    head = git(project, "rev-parse", "HEAD").strip()
    assert git(project, "rev-parse", f"{safety.phase_prefix(RUN, 1, 'Builder')}/after").strip() == head


def delete_safety_refs(project) -> None:
    for ref in git(project, "for-each-ref", "--format=%(refname)", "refs/genesis/").split():
        git(project, "update-ref", "-d", ref)


def test_safety_refs_the_agent_deletes_are_put_back_from_what_genesis_holds(project, step, said):
    commit_file(project, "a.txt")
    safekeeping.keep_at_start(step)
    at_start = safekeeping.keep_at_phase(step, 1, "Builder")
    delete_safety_refs(project)
    git(project, "reset", "-q", "--hard", "HEAD~1")
    found = safekeeping.history_of(step, 1, "Builder", at_start)
    assert [(c.kind, c.lost_count) for c in found] == [("rewritten", 1)]
    assert git(project, "for-each-ref", f"{safety.run_prefix(RUN)}/")  # put back
    assert any("put back" in msg for _, msg in said)


def agent_destroys_history(project) -> None:
    """In one phase: the safety refs deleted, the branch reset, the reflog expired and gc pruning now."""
    delete_safety_refs(project)
    git(project, "reset", "-q", "--hard", "HEAD~1")
    git(project, "reflog", "expire", "--expire=now", "--all")
    git(project, "gc", "-q", "--prune=now")


def exists(project, sha: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=project).returncode == 0


@pytest.mark.fault(200)
def test_deleted_refs_a_reset_and_gc_in_one_phase_lose_no_commit(project, step, said):
    mine = commit_file(project, "a.txt")
    safekeeping.keep_at_start(step)
    at_start = safekeeping.keep_at_phase(step, 1, "Builder")
    assert refstore.store_of(project).parent == step.layout.state_dir  # the store is in Genesis's state
    agent_destroys_history(project)
    assert not exists(project, mine)
    found = safekeeping.history_of(step, 1, "Builder", at_start)
    assert exists(project, mine)  # fetched back from Genesis's store, and kept by its ref again
    assert git(project, "rev-parse", f"{safety.run_prefix(RUN)}/HEAD").strip() == mine
    assert [(c.kind, c.lost) for c in found] == [("rewritten", (mine[:7],))]
    assert "now at " + git(project, "rev-parse", "--short", "HEAD").strip() in history.describe(found[0])
    assert any("put back" in msg for _, msg in said)


@pytest.mark.fault(200)
def test_a_commit_gone_from_the_store_too_is_named_as_lost(project, step):
    commit_file(project, "a.txt")
    lost = git(project, "rev-parse", "--short=7", "HEAD").strip()
    safekeeping.keep_at_start(step)
    at_start = safekeeping.keep_at_phase(step, 1, "Builder")
    shutil.rmtree(refstore.store_of(project))  # without a box the agent reaches Genesis's state too
    agent_destroys_history(project)
    found = safekeeping.history_of(step, 1, "Builder", at_start)
    assert found and all(c.kind == "lost" and c.lost == (lost,) for c in found)
    said = [history.describe(c) for c in found]
    assert all(f"pruned its commit {lost}" in line and "now at" not in line for line in said)
    assert safekeeping.stop_for(step, 1, "Builder", found) == exitcodes.HISTORY_REWRITTEN


def _old_runs(project, count: int) -> list[str]:
    """Safety refs of `count` earlier runs, oldest first (run ids begin with their start time)."""
    runs = [f"20250101T0000{n:02d}Z-{n}" for n in range(count)]
    head = git(project, "rev-parse", "HEAD").strip()
    for run in runs:
        git(project, "update-ref", f"{safety.run_prefix(run)}/HEAD", head)
    return runs


def test_a_start_never_prunes_the_refs_of_a_run_going_in_another_worktree(project, step, tmp_path):
    """The refs are the repository's, shared by its worktrees (a fleet's children): a run still
    going in a sibling worktree keeps its refs however many runs came since."""
    runs = _old_runs(project, 12)
    tree = tmp_path / "sibling"
    git(project, "worktree", "add", "-q", "-b", "genesis/task/sib", str(tree))
    sibling = Layout(tree, tree, tree, project / ".git" / "worktrees" / "sibling" / "genesis")
    with lock_held(sibling, runs[0]):
        safekeeping.keep_at_start(step)
    left = safety.runs_kept(project)
    assert runs[0] in left and RUN in left
    assert left == sorted([runs[0], *runs[3:], RUN])  # the oldest that are not going: pruned, ten others kept
    assert step.events(kinds=("safety_pruned",))[0]["runs"] == runs[1:3]


def test_a_prune_that_meets_a_siblings_lock_leaves_the_start_going(project, step, said):
    runs = _old_runs(project, 12)
    lock = project / ".git" / "refs" / "genesis" / "runs" / runs[0] / "HEAD.lock"
    lock.write_text("")  # another worktree's loop pruning the same run right now
    safekeeping.keep_at_start(step)  # no StepFailed: the run's own refs are written
    assert RUN in safety.runs_kept(project)
    assert any("older runs' safety refs were not pruned this time" in msg for kind, msg in said if kind == "warn")


def with_remote(project, tmp_path) -> str:
    """project with a bare remote `origin` its branch was pushed to; the branch's name."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    commit_file(project, "a.txt")
    main = branch_of(project)
    git(project, "push", "-q", "origin", main)
    return main


@pytest.mark.fault(202)
def test_a_remote_branch_the_agents_force_push_rewrote_is_named(project, step, tmp_path):
    main = with_remote(project, tmp_path)
    pushed = git(project, "rev-parse", "--short=7", "HEAD").strip()
    safekeeping.keep_at_start(step)
    at_start = safekeeping.keep_at_phase(step, 1, "Builder")
    git(project, "push", "-q", "--force", "origin", f"HEAD~1:{main}")  # the local branch is left as it was
    found = safekeeping.history_of(step, 1, "Builder", at_start)
    assert [(c.kind, c.branch, c.lost) for c in found] == [("forced", f"origin/{main}", (pushed,))]
    line = history.describe(found[0])
    assert f"the remote branch origin/{main} was rewritten by a push of the phase" in line and pushed in line
    assert git(project, "rev-parse", "--short=7", found[0].ref).strip() == pushed  # kept
    assert safekeeping.stop_for(step, 1, "Builder", found) == exitcodes.HISTORY_REWRITTEN


def test_a_rewrite_of_the_remote_by_someone_else_fetched_in_a_phase_is_not_the_agents(project, step, tmp_path):
    main = with_remote(project, tmp_path)
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(tmp_path / "remote.git"), str(other))
    git(other, "reset", "-q", "--hard", "HEAD~1")
    git(other, "push", "-q", "--force", "origin", main)
    safekeeping.keep_at_start(step)
    at_start = safekeeping.keep_at_phase(step, 1, "Builder")
    git(project, "fetch", "-q", "origin")
    assert safekeeping.history_of(step, 1, "Builder", at_start) == []
