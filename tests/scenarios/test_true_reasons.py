"""What made auto-commits fail all night, or ended it, said as it is: a stale index.lock is
removed and recorded; signing that would wait on a prompt is found at the start and Genesis's
commits are made unsigned, saying so; auto-commits failing in a row are events, abnormal in
the report, and an alert; a corrupt index or a FIFO at TASKS.md ends the night with git's own
words, never "overran its time bound", and no process is left behind. Git-level faults: the
box changes nothing here, so these run without it (GENESIS_SANDBOX=off)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner
from helpers.agent import script
from helpers.git import git
from helpers.loop import loop_env, run_loop
from helpers.procs import alive
from helpers.state import events_of
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.cli import cli


def night(project: Path, tmp_path: Path, body: str, phases: str = "Builder") -> tuple[str, ...]:
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    agent = script(tmp_path / "agent.sh", "#!/usr/bin/env bash\necho \"$GENESIS_AGENT $GENESIS_ITERATION\" "
                                          f">>notes.txt\n{body}\n")
    return ("--agent-cmd", f"bash {agent}", "--set", f"GENESIS_PHASES={phases}")


def subjects(project: Path) -> list[str]:
    return git(project, "log", "--format=%s%n%b%x00").split("\0")


@pytest.mark.fault(84)
def test_a_stale_index_lock_is_removed_and_signing_that_waits_on_a_prompt_is_found_and_the_work_committed(
        project, tmp_path):
    """A git killed mid-command leaves .git/index.lock, and a signing program waits on a prompt
    nobody answers: either made every auto-commit fail, or wait, all night."""
    waiter = script(tmp_path / "gpg-waits.sh", f"#!/usr/bin/env bash\necho $$ >>{tmp_path}/gpg-pids\n"
                                               "exec sleep 600  # a pinentry nobody answers\n")
    args = night(project, tmp_path, ": >.git/index.lock  # as a git killed mid-command leaves it")
    git(project, "config", "commit.gpgsign", "true")
    git(project, "config", "gpg.program", str(waiter))
    done = run_loop(project, *args, "--max-iterations", "2", env=loop_env(GENESIS_SANDBOX="off"), timeout=90)
    assert done.returncode == 0, done.stderr
    # The lock: removed before each commit, said and recorded.
    assert "index.lock (" in done.stderr and "no process held it or ran git here), left by a git that was " \
                                            "killed, was removed" in done.stderr
    removed = [e for e in events_of(project) if e["event"] == "index_lock_removed"]
    assert len(removed) == 2 and removed[0]["phase"] == "Builder"
    assert not [e for e in events_of(project) if e["event"] == "commit_failed"]
    # The signing: found at the start, and Genesis's own commits made unsigned, saying so.
    assert "commit.gpgsign is on, but signing with" in done.stderr and "waited over" in done.stderr
    assert "Genesis's own commits are made unsigned" in done.stderr
    made = [s for s in subjects(project) if "genesis: Builder" in s]
    assert len(made) == 2 and all("Genesis-Unsigned: commit.gpgsign is on, but signing with" in s for s in made)
    # The signing program was tried once, at the start, and is gone: no commit waited on it.
    pids = [int(p) for p in (tmp_path / "gpg-pids").read_text().split()]
    assert len(pids) == 1 and not alive(pids[0])
    assert [e for e in events_of(project) if e["event"] == "signing_off"]


@pytest.mark.fault(84)
def test_auto_commits_failing_in_a_row_are_events_abnormal_in_the_report_and_an_alert(project, tmp_path):
    """An empty user.name (the identity Genesis's commits take from the run's start; one the agent
    plants later changes nothing): every auto-commit fails, and the report said 0 commits."""
    tickets = tmp_path / "tickets"
    args = night(project, tmp_path, "true")
    git(project, "config", "user.name", "")
    env = loop_env(GENESIS_SANDBOX="off", GENESIS_NOTIFY_CMD=f"tee -a {tickets}")
    done = run_loop(project, *args, "--max-iterations", "3", env=env)
    assert done.returncode == 0, done.stderr
    failed = [e for e in events_of(project) if e["event"] == "commit_failed"]
    assert [e["in_a_row"] for e in failed] == [1, 2, 3]
    assert "empty ident name" in failed[0]["error"]
    assert "Builder: auto-commit failed (3 in a row): git commit failed" in done.stderr
    wait_for(lambda: tickets.exists() and "auto-commit failed 3 times in a row" in tickets.read_text(), 30,
             "the alert after three failed auto-commits")
    report = CliRunner().invoke(cli, ["--project", str(project), "report"], catch_exceptions=False)
    assert "3 failed auto-commits" in report.stdout
    assert "auto-commit troubles (3 failed, abnormal: the work was left uncommitted)" in report.stdout
    assert "empty ident name" in report.stdout


def _leftovers(project: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            if proc.info["cwd"] == str(project) and proc.info["cmdline"]:
                found.append(" ".join(proc.info["cmdline"]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.fault(84)
def test_a_corrupt_index_ends_the_night_with_gits_words_not_a_timeout(project, tmp_path):
    args = night(project, tmp_path, "printf 'garbage, not an index' >.git/index")
    done = run_loop(project, *args, "--max-iterations", "2", env=loop_env(GENESIS_SANDBOX="off"))
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "overran" not in done.stderr and "time bound" not in done.stderr
    assert "git cannot read the project, so progress cannot be measured" in done.stderr
    assert "index file" in done.stderr  # git's own words
    end = [e for e in events_of(project) if e["event"] == "loop_end"][-1]
    assert "git cannot read the project" in end["reason"] and end["exit_code"] == exitcodes.USAGE
    assert _leftovers(project) == []


@pytest.mark.fault(84)
def test_a_fifo_at_tasks_md_blocks_no_trigger_leaves_no_grep_and_the_night_ends_with_the_true_reason(project,
                                                                                                       tmp_path):
    (project / "TASKS.md").write_text("- [ ] build it\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "tasks")
    args = night(project, tmp_path, "if [[ -f TASKS.md ]]; then rm TASKS.md; mkfifo TASKS.md; fi",
                 phases="Builder Criticizer")
    # The trigger older versions shipped, as a user's settings may still hold it: grep waits on a FIFO.
    env = loop_env(GENESIS_SANDBOX="off", PHASE_Criticizer_TRIGGER="when:grep -qs '^- \\[?\\]' TASKS.md")
    done = run_loop(project, *args, "--max-iterations", "2", env=env, timeout=50)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "Criticizer: skipped (its condition was not run: TASKS.md is a FIFO, not a regular file)" in done.stderr
    assert "overran" not in done.stderr and "time bound" not in done.stderr
    assert "cannot hash TASKS.md" in done.stderr
    assert _leftovers(project) == []
