"""The edges of a night in the repository, through the real loop script: a terminal closed
while a phase's interrupted work is being committed does not cut the commit short (Ctrl-C,
a closed terminal and a signal to the loop mid-phase: test_terminal.py); what a run could not
commit is the agent's at the next start, never the user's; and a half-done merge, a paused
rebase or a detached HEAD is refused by name."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from helpers.agent import script
from helpers.git import git
from helpers.gitstates import conflicted_merge, detached, paused_rebase
from helpers.loop import LOOP, loop_env, run_loop
from helpers.state import events_of
from helpers.tmux import Terminal
from helpers.waits import wait_for

# Edits a tracked file, deletes one, adds one, then works on (sleeps) until it is stopped.
INTERRUPTED = r"""#!/usr/bin/env bash
echo "the agent's edit" >>README.md
rm -f old.txt
echo "half done" >agent-work.txt
echo $$ >"$AGENT_MARK"
exec sleep 300
"""
QUICK = "#!/bin/sh\necho \"work of $GENESIS_RUN_ID\" >>quick.txt\n"
FAST = dict(GENESIS_PHASES="Builder", HEARTBEAT_STALE="120s", HEARTBEAT_COUNT_OUTPUT="true")
INTERRUPTED_SUBJECT = "genesis: Builder, iteration 1 (ended: interrupted, killed; partial work) [run "


@pytest.fixture
def night(project: Path, tmp_path: Path):
    """The project with a file the agent deletes and a note of the user's; the agents' scripts."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    (project / "old.txt").write_text("old\n")
    git(project, "add", "old.txt")
    git(project, "commit", "-qm", "a file the agent deletes")
    (project / "notes.txt").write_text("the user's own notes, never committed\n")
    return {"interrupted": script(tmp_path / "interrupted.sh", INTERRUPTED),
            "quick": script(tmp_path / "quick.sh", QUICK), "mark": tmp_path / "agent.pid"}


def subjects(project: Path) -> list[str]:
    return git(project, "log", "--format=%s").splitlines()


def files_of(project: Path, rev: str = "HEAD") -> list[str]:
    return sorted(git(project, "show", "--format=", "--name-only", rev).split())


def loop_end(project: Path) -> dict | None:
    return next((e for e in events_of(project) if e["event"] == "loop_end"), None)


def assert_interrupted_work_committed(project: Path) -> None:
    assert subjects(project)[0].startswith(INTERRUPTED_SUBJECT)
    assert files_of(project) == ["README.md", "agent-work.txt", "old.txt"]
    assert git(project, "status", "--porcelain", "--untracked-files=all").strip() == "?? notes.txt"


def in_terminal(terminal, project: Path, night: dict, tmp_path: Path, **extra: str) -> Terminal:
    """The loop started in a real terminal, its output to night.log, once its agent is at work."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    env = loop_env(AGENT_MARK=str(night["mark"]), **FAST, **extra)
    line = shlex.join(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(night["interrupted"]),
                       "--max-iterations", "1"])
    term = terminal(env, f"{line} >{shlex.quote(str(tmp_path / 'night.log'))} 2>&1")
    wait_for(lambda: night["mark"].exists() and night["mark"].read_text().strip(), timeout=60,
             what="the agent to start its work")
    return term


@pytest.mark.fault(56)
def test_the_terminal_closed_while_the_interrupted_work_is_being_committed_does_not_cut_it_short(
        project, night, terminal, tmp_path):
    committing = tmp_path / "committing"
    # A slow commit: the repository's own pre-commit hook, run because asked.
    script(project / ".git" / "hooks" / "pre-commit", f"#!/bin/sh\ntouch {shlex.quote(str(committing))}\nsleep 2\n")
    term = in_terminal(terminal, project, night, tmp_path, GENESIS_GIT_HOOKS="true")
    term("send-keys", "-t", "w", "C-c")
    wait_for(committing.exists, timeout=60, what="the commit to be under way")
    term("kill-server")  # and then the terminal goes: SIGHUP to the loop and its step
    wait_for(lambda: loop_end(project) is not None, timeout=60, what="the loop to record its end")
    assert loop_end(project)["exit_code"] == 130
    assert_interrupted_work_committed(project)
    work = [e for e in events_of(project) if e["event"] == "phase_work"]
    assert [c["subject"] for c in work[0]["commits"]] == [subjects(project)[0]]
    log = (tmp_path / "night.log").read_text()
    assert "Builder: committed " in log and "could not record" not in log


@pytest.mark.fault(57)
def test_work_a_night_left_uncommitted_is_the_agents_at_the_next_start(project, night):
    """Whatever left it uncommitted (here a commit that failed; AUTO_COMMIT=false leaves it the
    same way, as tests/loop/test_preflight.py replays), the run's end records it as the agent's."""
    # The repository's own pre-commit hook, run because asked, refuses every commit.
    script(project / ".git" / "hooks" / "pre-commit", "#!/bin/sh\necho 'lint failed' >&2\nexit 1\n")
    done = run_loop(project, "--agent-cmd", str(night["quick"]), "--max-iterations", "1",
                    env=loop_env(GENESIS_GIT_HOOKS="true", **FAST))
    assert done.returncode == 0, done.stderr
    assert "Builder: auto-commit failed (1 in a row)" in done.stderr and "lint failed" in done.stderr
    assert subjects(project)[0] == "a file the agent deletes"
    (project / "mine.txt").write_text("the user's, made in the morning\n")
    done = run_loop(project, "--agent-cmd", str(night["quick"]), "--max-iterations", "1", env=loop_env(**FAST))
    assert done.returncode == 0, done.stderr
    first = subjects(project)[1]
    assert first.startswith("genesis: work left uncommitted by run ")
    assert "(at its end: reached GENESIS_MAX_ITERATIONS=1) [run " in first
    assert files_of(project, "HEAD~1") == ["quick.txt"]
    assert "untracked file(s) of yours are left out of every auto-commit: mine.txt, notes.txt" in done.stderr
    assert not [line for line in done.stderr.splitlines() if "of yours" in line and "quick.txt" in line]


@pytest.mark.fault(57)
def test_work_of_a_loop_killed_with_its_watcher_is_the_agents_at_the_next_start(project, night, procs):
    both = script(night["quick"].parent / "two.sh", r"""#!/usr/bin/env bash
if [ "$GENESIS_AGENT" = Builder ]; then echo "built" >built.txt; exit 0; fi
echo $$ >"$AGENT_MARK"
exec sleep 300
""")
    # GENESIS_SANDBOX=off: the test kills the agent by the pid it tells ($$), its namespace's in a box.
    env = loop_env(AGENT_MARK=str(night["mark"]), AUTO_COMMIT="false", GENESIS_PHASES="Builder Planner",
                   PHASE_Planner_TRIGGER="always", HEARTBEAT_STALE="120s", HEARTBEAT_COUNT_OUTPUT="true",
                   GENESIS_SANDBOX="off")
    loop = procs(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(both), "--max-iterations", "1"],
                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: night["mark"].exists() and night["mark"].read_text().strip(), timeout=60, what="the Planner")
    companion = [p for p in psutil.Process(loop.pid).children() if "companion" in p.cmdline()]
    os.killpg(loop.pid, signal.SIGKILL)  # the loop and its watcher, with no chance to clean up
    for proc in companion:  # nor its companion (in a session of its own): as a crash or the OOM killer would
        proc.kill()
    os.kill(int(night["mark"].read_text()), signal.SIGKILL)  # the agent, in a session of its own
    loop.wait(timeout=10)
    assert loop_end(project) is None
    done = run_loop(project, "--agent-cmd", str(night["quick"]), "--max-iterations", "1", env=loop_env(**FAST))
    assert done.returncode == 0, done.stderr
    assert "(when Planner started, iteration 1) [run " in subjects(project)[1]
    assert files_of(project, "HEAD~1") == ["built.txt"]


@pytest.mark.fault(58)
def test_a_merge_with_conflicts_is_refused_even_with_allow_dirty_and_nothing_is_committed(project, night):
    conflicted_merge(project)
    head = git(project, "rev-parse", "HEAD")
    done = run_loop(project, "--agent-cmd", str(night["quick"]), "--max-iterations", "1", "--allow-dirty",
                    env=loop_env(**FAST))
    assert done.returncode == 2
    assert f"a merge is in progress in {project}" in done.stderr
    assert f"git -C {shlex.quote(str(project))} merge --abort" in done.stderr
    assert git(project, "rev-parse", "HEAD") == head
    assert (project / ".git" / "MERGE_HEAD").exists() and "UU f.txt" in git(project, "status", "--porcelain")
    assert not (project / "quick.txt").exists()


@pytest.mark.fault(59)
def test_a_paused_rebase_is_refused_and_nothing_lands_in_it(project, night):
    paused_rebase(project)
    head = git(project, "rev-parse", "HEAD")
    done = run_loop(project, "--agent-cmd", str(night["quick"]), "--max-iterations", "1", env=loop_env(**FAST))
    assert done.returncode == 2
    assert f"a rebase is in progress in {project}" in done.stderr
    assert f"git -C {shlex.quote(str(project))} rebase --continue" in done.stderr
    assert git(project, "rev-parse", "HEAD") == head and not (project / "quick.txt").exists()


@pytest.mark.fault(60)
def test_a_detached_head_is_refused_then_allowed_with_allow_detached(project, night):
    sha = detached(project)
    done = run_loop(project, "--agent-cmd", str(night["quick"]), "--max-iterations", "1", env=loop_env(**FAST))
    assert done.returncode == 2
    assert f"HEAD is detached (at {sha}, on no branch)" in done.stderr
    assert "switch -c genesis-night" in done.stderr and "--allow-detached" in done.stderr
    assert git(project, "rev-parse", "--short", "HEAD").strip() == sha
    done = run_loop(project, "--agent-cmd", str(night["quick"]), "--max-iterations", "1", "--allow-detached",
                    env=loop_env(**FAST))
    assert done.returncode == 0, done.stderr
    assert "--allow-detached was given: the night's commits belong to no branch" in done.stderr
    assert subjects(project)[0].startswith("genesis: Builder, iteration 1 (finished)")
    assert git(project, "rev-parse", "--short", "HEAD~1").strip() == sha
