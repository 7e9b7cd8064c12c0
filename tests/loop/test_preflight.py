"""The start refuses what would put the night's commits in the wrong place, and tells the
agent's leftovers from the user's changes: the real preflight step against real git
repositories left in each state (a half-done operation, conflicts, a detached HEAD, what
an earlier run left uncommitted)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from helpers.git import git
from helpers.gitstates import STATES, conflicted_merge, detached, stash_pop_conflict

from genesis import exitcodes
from genesis.config import layout_for, resolve
from genesis.loop.step import StepFailed
from genesis.repo import indexlock
from genesis.repo.ownership import recall, remember, user_files
from genesis.repo.state import OPERATION_NAMES, way_out

RUN = "run-2"


def subjects(project: Path) -> list[str]:
    return git(project, "log", "--format=%s").splitlines()


def refusal(start, **flags) -> str:
    with pytest.raises(StepFailed) as refused:
        start(**flags)
    assert refused.value.code == exitcodes.USAGE
    return str(refused.value)


@pytest.mark.fault(59)
@pytest.mark.parametrize("name", list(STATES))
@pytest.mark.parametrize("allow_dirty", [False, True])
def test_an_operation_in_progress_is_refused_by_name_with_the_way_out(project, start, name, allow_dirty):
    make, operation = STATES[name]
    make(project)
    head, status = git(project, "rev-parse", "HEAD"), git(project, "status", "--porcelain")
    why = refusal(start, allow_dirty=allow_dirty)
    assert why.startswith(f"{OPERATION_NAMES[operation]} is in progress in {project}: the night's commits would "
                          f"land in the middle of it. Finish it or give it up first ({operation}: ")
    assert way_out(operation, project) in why and "--allow-dirty does not change this" in why
    assert git(project, "rev-parse", "HEAD") == head and git(project, "status", "--porcelain") == status


@pytest.mark.fault(58)
def test_conflicts_left_by_a_stash_pop_are_refused_even_with_allow_dirty(project, start):
    stash_pop_conflict(project)
    head = git(project, "rev-parse", "HEAD")
    why = refusal(start, allow_dirty=True)
    assert why.startswith("the project has files with unresolved conflicts: f.txt. Committing them would record "
                          "the conflict markers, so Genesis never does, even with --allow-dirty.")
    assert why.endswith(f"Resolve them and `git add` them (`git -C {shlex.quote(str(project))} status` lists "
                        f"them), then start again")
    assert git(project, "rev-parse", "HEAD") == head and "UU f.txt" in git(project, "status", "--porcelain")


@pytest.mark.fault(58)
def test_a_conflicted_merge_is_named_before_its_conflicts(project, start):
    conflicted_merge(project)
    assert refusal(start, allow_dirty=True).startswith("a merge is in progress")


@pytest.mark.fault(60)
def test_a_detached_head_is_refused_with_the_way_out_then_allowed_when_asked(project, start, said):
    sha = detached(project)
    why = refusal(start)
    quoted = shlex.quote(str(project))
    assert why == (f"HEAD is detached (at {sha}, on no branch): the night's commits would belong to no branch and "
                   f"be easy to lose. Put it on a branch first (git -C {quoted} switch -c genesis-night, or "
                   f"`git switch` to an existing one), or start with --allow-detached to commit on the detached "
                   f"HEAD anyway")
    step = start(allow_detached=True)
    assert ("warn", f"HEAD is detached (at {sha}, on no branch) and --allow-detached was given: the night's commits "
                    f"belong to no branch; keep them afterwards with git -C {quoted} switch -c genesis-night") in said
    assert [e["head"] for e in step.events(kinds=("detached_head",))] == [sha]


def an_earlier_run_left_work(project: Path, start) -> None:
    """Run `run-1` ended with the agent's work uncommitted: an edit, a new file, a deletion."""
    (project / "old.txt").write_text("old\n")
    git(project, "add", "old.txt")
    git(project, "commit", "-qm", "a file the agent deletes")
    (project / "scratch.txt").write_text("the user's notes\n")
    step = start()  # a start that takes scratch.txt as the user's
    (project / "README.md").write_text("hello\nthe agent's edit\n")
    (project / "agent.py").write_text("x = 1\n")
    (project / "old.txt").unlink()
    lay = step.layout
    assert remember(project, lay.leftovers_file, "run-1", "at its end: interrupted by SIGINT",
                    user_files(lay.user_files), 1.0) is None


@pytest.mark.fault(57)
def test_what_the_last_run_left_is_committed_as_its_agents_work_never_as_the_users(project, start, said):
    an_earlier_run_left_work(project, start)
    start()
    assert subjects(project)[0] == ("genesis: work left uncommitted by run run-1 (at its end: interrupted by "
                                    "SIGINT) [run run-2]")
    assert sorted(git(project, "show", "--format=", "--name-only", "HEAD").split()) == \
        ["README.md", "agent.py", "old.txt"]
    assert git(project, "status", "--porcelain", "--untracked-files=all").strip() == "?? scratch.txt"
    told = [msg for kind, msg in said if "left uncommitted" in msg]
    assert told[-1].startswith("committed the agent's work that Genesis run run-1 left uncommitted (at its end: "
                               "interrupted by SIGINT) as ")
    assert not any("of yours" in msg and "agent.py" in msg for _, msg in said)
    assert user_files(layout_for(resolve(project, env={})).user_files) == ["scratch.txt"]


@pytest.mark.fault(57)
def test_a_file_the_user_changed_since_stays_the_users(project, start, said):
    an_earlier_run_left_work(project, start)
    (project / "README.md").write_text("hello\nthe agent's edit\nand the user's\n")
    (project / "mine.py").write_text("the user's new file\n")
    before = subjects(project)
    why = refusal(start)
    assert why.startswith("the project has uncommitted changes of yours: README.md (2 other uncommitted file(s) "
                          "are the agent's work left by Genesis run run-1, not yours: they are not in the way).")
    assert subjects(project) == before  # a refusal changes nothing, the record included
    assert recall(layout_for(resolve(project, env={})).leftovers_file).run_id == "run-1"
    said.clear()
    start(allow_dirty=True)
    agents, users = subjects(project)[1], subjects(project)[0]
    assert agents.startswith("genesis: work left uncommitted by run run-1 (")
    assert git(project, "show", "--format=", "--name-only", "HEAD~1").split() == ["agent.py", "old.txt"]
    assert users == ("Uncommitted changes present before Genesis run run-2 (committed on the user's behalf by "
                     "--allow-dirty)")
    assert git(project, "show", "--format=", "--name-only", "HEAD").split() == ["README.md"]
    assert ("info", "2 untracked file(s) of yours are left out of every auto-commit: mine.py, scratch.txt") in said


@pytest.mark.fault(57)
def test_with_auto_commit_off_the_leftovers_stay_uncommitted_and_are_not_listed_as_yours(project, start, said):
    an_earlier_run_left_work(project, start)
    before = subjects(project)
    start(auto_commit=False)
    assert subjects(project) == before
    assert ("info", "3 uncommitted file(s) are the agent's work that Genesis run run-1 left uncommitted (at its end: "
                    "interrupted by SIGINT), not yours: README.md, old.txt, agent.py; AUTO_COMMIT is off, so they "
                    "stay uncommitted") in said
    assert user_files(layout_for(resolve(project, env={})).user_files) == ["scratch.txt"]


@pytest.mark.fault(57)
def test_leftovers_a_commit_cannot_take_now_are_left_to_the_first_auto_commit(project, start, said, monkeypatch):
    an_earlier_run_left_work(project, start)
    lock = project / ".git" / "index.lock"
    monkeypatch.setattr(indexlock, "HOLD_WAIT", 0.5)
    # Another git command at work, holding its lock open: git refuses to commit (a lock nobody
    # holds is stale, and removed).
    holder = subprocess.Popen(["sleep", "60"], stdout=lock.open("w"))
    try:
        start()
    finally:
        holder.kill()
        holder.wait()
        lock.unlink()
    warned = [msg for kind, msg in said if kind == "warn" and "could not be committed now" in msg]
    assert warned and warned[0].endswith("so the first auto-commit takes them")
    assert user_files(layout_for(resolve(project, env={})).user_files) == ["scratch.txt"]
