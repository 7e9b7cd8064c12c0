"""The real loop on task lists in the forms people write: a `* [?]` task is reviewed and the
Planner waits its turn; a numbered list does not end the night at once; the report and
`genesis status` count the same tasks. The shipped phases and triggers; the agent is the
simulated Claude Code, which builds the first open task and reviews what awaits review."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.git import git
from helpers.loop import GENESIS, run_loop
from helpers.state import events_of

SIM = f"{sys.executable} -m genesis.demo.simagent --script *:Builder=build,*:Criticizer=review,*:*=idle"


@pytest.fixture
def listed(project: Path):
    """A project whose TASKS.md (committed) is the given text."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")

    def write(text: str) -> Path:
        (project / "TASKS.md").write_text(text)
        git(project, "add", "TASKS.md")
        git(project, "commit", "-qm", "tasks")
        return project
    return write


def phases_run(project: Path) -> list[tuple[int, str, str]]:
    return [(e["iteration"], e["phase"], "ran" if e["event"] == "phase_end" else "skipped")
            for e in events_of(project) if e["event"] in ("phase_end", "phase_skip")]


def loop_end(project: Path) -> dict:
    return [e for e in events_of(project) if e["event"] == "loop_end"][-1]


@pytest.mark.fault(69)
def test_a_starred_task_awaiting_review_is_reviewed_and_the_planner_waits_its_turn(listed):
    project = listed("# Tasks\n\n* [?] Add a greeting\n* [ ] Serve it over HTTP\n* [ ] Log each request\n"
                     "* [ ] Add a health check\n")
    done = run_loop(project, "--agent-cmd", SIM, "--max-iterations", "2")
    assert done.returncode == 0, done.stderr
    assert phases_run(project) == [(1, "Builder", "ran"), (1, "Criticizer", "ran"), (1, "Planner", "skipped"),
                                   (2, "Builder", "ran"), (2, "Criticizer", "ran"), (2, "Planner", "skipped")]
    assert "Planner: skipped (every 5 iterations; 2 task(s) open in TASKS.md)" in done.stderr
    assert (project / "TASKS.md").read_text() == ("# Tasks\n\n* [x] Add a greeting\n* [x] Serve it over HTTP\n"
                                                  "* [x] Log each request\n* [ ] Add a health check\n")
    assert loop_end(project)["reason"] == "reached GENESIS_MAX_ITERATIONS=2"


@pytest.mark.fault(69)
def test_a_numbered_list_does_not_end_the_night_until_its_tasks_are_done(listed):
    project = listed("# Tasks\n\n- [X] Set up the project\n1. [ ] Add a greeting\n2) [ ] Serve it over HTTP\n"
                     "   + [ ] with a test\n")
    done = run_loop(project, "--agent-cmd", SIM, "--max-iterations", "6")
    assert done.returncode == 0, done.stderr
    expected = []
    for it in (1, 2, 3):
        expected += [(it, "Builder", "ran"), (it, "Criticizer", "ran"),
                     (it, "Planner", "ran" if it == 3 else "skipped")]
    assert phases_run(project) == expected
    assert "iteration 3: done: every task in TASKS.md is done" in done.stderr
    assert loop_end(project)["reason"].startswith("done")
    assert (project / "TASKS.md").read_text() == ("# Tasks\n\n- [X] Set up the project\n1. [x] Add a greeting\n"
                                                  "2) [x] Serve it over HTTP\n   + [x] with a test\n")
    # The report and the live status count the same tasks, in the same grammar.
    ticked = [t for e in events_of(project) if e["event"] == "phase_work" for t in e["tasks_done"]]
    assert ticked == ["Add a greeting", "Serve it over HTTP", "with a test"]
    report = subprocess.run(GENESIS + ["--project", str(project), "report"], capture_output=True, text=True,
                            timeout=60)
    assert "3 tasks done" in report.stdout and "tasks done (3)" in report.stdout, report.stdout
    status = subprocess.run(GENESIS + ["--project", str(project), "status"], capture_output=True, text=True,
                            timeout=60)
    assert "0 open, 0 awaiting review, 4 done (TASKS.md)" in status.stdout, status.stdout
