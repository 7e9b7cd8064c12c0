"""`genesis restore`'s core on real repositories: a deleted branch recreated, a moved one put
back (its tip before kept), a checked-out one moved with `reset --keep`, which refuses rather
than lose local changes; nothing kept is said as such."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.git import commit_file, git
from helpers.gitstates import branch_of

from genesis.cli import cli
from genesis.repo import restoring, safety
from genesis.repo.gitcmd import GitFailed


@pytest.fixture
def kept(project: Path) -> dict:
    main = branch_of(project)
    git(project, "switch", "-qc", "feature")
    feature = commit_file(project, "f.txt")
    git(project, "switch", "-q", main)
    tip = commit_file(project, "m.txt")
    safety.keep_run(project, "20260101T000000Z-1")
    return {"main": main, "feature": feature, "tip": tip}


def rev(project: Path, name: str) -> str:
    return git(project, "rev-parse", name).strip()


def test_a_deleted_branch_comes_back(project, kept):
    git(project, "branch", "-D", "feature")
    plan = restoring.plan_branch(project, "feature", None)
    assert plan.current is None and plan.commands == [f"git -C {project} branch -f feature {kept['feature']}"]
    restoring.apply(plan)
    assert rev(project, "feature") == kept["feature"]


def test_a_moved_branch_goes_back_and_its_tip_before_is_kept(project, kept):
    git(project, "branch", "-f", "feature", kept["tip"])
    plan = restoring.plan_branch(project, "feature", "20260101T000000Z-1")
    restoring.apply(plan)
    assert rev(project, "feature") == kept["feature"] and rev(project, plan.keep_as) == kept["tip"]


def test_the_checked_out_branch_moves_with_reset_keep_which_spares_local_changes(project, kept):
    git(project, "reset", "-q", "--hard", "HEAD~1")
    (project / "m.txt").write_text("a local change in the way\n")
    plan = restoring.plan_branch(project, kept["main"], None)
    assert plan.checked_out and plan.commands[-1].endswith(f"reset --keep {kept['tip']}")
    with pytest.raises(GitFailed):
        restoring.apply(plan)
    assert (project / "m.txt").read_text() == "a local change in the way\n"
    (project / "m.txt").unlink()
    restoring.apply(restoring.plan_branch(project, kept["main"], None))
    assert rev(project, "HEAD") == kept["tip"] and (project / "m.txt").read_text() == "m.txt\n"


def test_nothing_kept_is_said(project, kept, tmp_path):
    with pytest.raises(restoring.NothingKept):
        restoring.plan_branch(project, "never", None)
    with pytest.raises(restoring.NothingKept):
        restoring.latest_copy(tmp_path / "none", None)
    assert any("feature" in line for line in restoring.listing(project, tmp_path / "none"))


def test_the_command_says_when_nothing_is_kept_and_refuses_two_asks_at_once(project):
    runner = CliRunner()
    empty = runner.invoke(cli, ["--project", str(project), "restore"])
    assert empty.exit_code == 1 and "kept no safety ref" in empty.output
    both = runner.invoke(cli, ["--project", str(project), "restore", "--branch", "x", "--untracked"])
    assert both.exit_code == 2 and "give one of them" in both.output
