"""What a phase did to history, told from real safety refs: a reset, an amend of an earlier
commit, a deleted branch, a switch, a detached HEAD; and nothing when it only added commits."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.git import commit_file, git
from helpers.gitstates import branch_of

from genesis.repo import safety
from genesis.repo.history import Change, changes, describe


def work(project: Path, name: str) -> str:
    return git(project, "rev-parse", "--short", commit_file(project, name)).strip()


@pytest.fixture
def started(project: Path) -> dict:
    """Branch `other`, two more commits on the main branch; the run's and phase 1's refs kept."""
    main = branch_of(project)
    git(project, "branch", "other")
    shas = [work(project, "a.txt"), work(project, "b.txt")]
    safety.keep_run(project, "R")
    safety.keep_phase(project, "R", 1, "Builder")
    return {"main": main, "shas": shas}


def found(project: Path) -> list[Change]:
    return changes(project, safety.kept(project, safety.run_prefix("R")),
                   safety.kept(project, safety.phase_prefix("R", 1, "Builder")), safety.read_tips(project),
                   safety.run_prefix("R"), safety.phase_prefix("R", 1, "Builder"))


def test_new_commits_alone_change_nothing(project, started):
    work(project, "c.txt")
    assert found(project) == []


def test_a_reset_names_the_commits_off_the_branch_and_the_ref_that_keeps_them(project, started):
    git(project, "reset", "-q", "--hard", "HEAD~2")
    (change,) = found(project)
    assert (change.kind, change.branch, change.lost_count) == ("rewritten", started["main"], 2)
    assert set(change.lost) == set(started["shas"])
    assert change.ref == f"refs/genesis/phases/R/0001-Builder/heads/{started['main']}"
    assert change.ref in describe(change) and "2 commit(s) no longer on it" in describe(change)


def test_an_amend_of_an_earlier_commit_is_a_rewrite(project, started):
    git(project, "commit", "-q", "--amend", "-m", "b, reworded")
    (change,) = found(project)
    assert change.kind == "rewritten" and change.lost == (started["shas"][1],)


def test_a_deleted_branch_a_switch_and_a_detached_head(project, started):
    git(project, "branch", "-D", "other")
    git(project, "switch", "-qc", "elsewhere")
    kinds = {(c.kind, c.branch, c.now) for c in found(project)}
    assert kinds == {("deleted", "other", ""), ("switched", started["main"], "elsewhere")}
    git(project, "switch", "-q", "--detach")
    assert ("detached", started["main"]) in {(c.kind, c.branch) for c in found(project)}


def test_a_change_survives_the_ledger(project, started):
    git(project, "reset", "-q", "--hard", "HEAD~1")
    (change,) = found(project)
    assert Change.from_json(change.to_json()) == change
    assert Change.from_json({"kind": "bogus"}) is None
