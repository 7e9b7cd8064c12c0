"""Safety refs in real repositories: what they keep survives a reset, a deleted branch, an
expired reflog and `gc --prune=now`; they are never pushed, by Genesis's auto-push (whatever
the repository's config says) nor by a plain `git push`; older runs' refs are pruned."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.git import commit_file, git
from helpers.gitstates import branch_of

from genesis.repo import safety
from genesis.repo.autocommit import commit


def exists(project: Path, sha: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=project).returncode == 0


@pytest.fixture
def repo(project: Path) -> dict:
    main = branch_of(project)
    git(project, "switch", "-qc", "topic/x")
    topic = commit_file(project, "topic.txt")
    git(project, "switch", "-q", main)
    tips = [commit_file(project, f"u{i}.txt") for i in range(3)]
    return {"main": main, "topic": topic, "tips": tips}


def test_the_run_keeps_every_branch_and_head_and_gc_cannot_take_them(project, repo):
    refs = safety.keep_run(project, "R1")
    assert sorted(refs) == sorted(["refs/genesis/runs/R1/HEAD", f"refs/genesis/runs/R1/heads/{repo['main']}",
                                   "refs/genesis/runs/R1/heads/topic/x"])
    git(project, "reset", "-q", "--hard", "HEAD~3")
    git(project, "branch", "-D", "topic/x")
    git(project, "reflog", "expire", "--expire=now", "--all")
    git(project, "gc", "-q", "--prune=now")
    assert all(exists(project, sha) for sha in repo["tips"] + [repo["topic"]])
    kept = safety.kept(project, safety.run_prefix("R1"))
    assert kept.head == repo["tips"][-1] and kept.branches["topic/x"] == repo["topic"]


def test_a_phase_keeps_head_and_its_own_branch_only(project, repo):
    safety.keep_phase(project, "R1", 3, "Builder")
    kept = safety.kept(project, safety.phase_prefix("R1", 3, "Builder"))
    assert kept.branch == repo["main"] and list(kept.branches) == [repo["main"]] and kept.head == repo["tips"][-1]
    git(project, "switch", "-q", "--detach")
    safety.keep_phase(project, "R1", 4, "Builder")
    detached = safety.kept(project, safety.phase_prefix("R1", 4, "Builder"))
    assert detached.branch is None and detached.branches == {} and detached.head == repo["tips"][-1]


def test_only_the_newest_runs_are_kept_never_the_current_one(project, repo):
    for run in ("20260101T000000Z-1", "20260102T000000Z-1", "20260103T000000Z-1"):
        safety.keep_run(project, run)
        safety.keep_phase(project, run, 1, "Builder")
    assert safety.prune(project, "20260101T000000Z-1", keep=2) == ["20260102T000000Z-1"]
    assert safety.runs_kept(project) == ["20260101T000000Z-1", "20260103T000000Z-1"]


def test_never_pushed_by_auto_push_even_with_a_mirror_config_nor_by_a_plain_push(project, repo, tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "-u", "origin", repo["main"])
    safety.keep_run(project, "R1")
    git(project, "config", "remote.origin.mirror", "true")   # as an agent could leave it
    (project / "agent.txt").write_text("work\n")
    done = commit(project, "genesis: Builder, iteration 1 (finished)", [], push=True)
    assert done.committed and done.pushed, done.error
    git(project, "config", "remote.origin.mirror", "false")
    git(project, "push", "-q")
    git(project, "push", "-q", "--all")
    assert not [r for r in git(remote, "for-each-ref", "--format=%(refname)").split() if "genesis" in r]
    assert git(remote, "rev-parse", repo["main"]).strip() == git(project, "rev-parse", "HEAD").strip()


def test_auto_push_says_why_not_without_an_upstream_or_a_branch(project, repo):
    (project / "agent.txt").write_text("work\n")
    done = commit(project, "work", [], push=True)
    assert done.committed and done.pushed is False and "has no upstream" in done.error
    git(project, "switch", "-q", "--detach")
    (project / "more.txt").write_text("more\n")
    done = commit(project, "more", [], push=True)
    assert done.committed and done.pushed is False and "on no branch" in done.error
