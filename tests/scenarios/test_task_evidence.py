"""No `[x]` without the evidence, through the real loop: a Builder that ticks its own task done.

The task carries its check (`check:` in TASKS.md). The hostile Builder ticks the task `[x]`
without doing it: Genesis runs the check itself, in the agent's box, sees it fail, reopens
the task in its own commit and tells the next attempt the check's tail; the loop does not end
"done". The next attempt, told why, does the work: the check passes and the loop ends done, the
evidence in `genesis report --json`. With a Criticizer among the phases, the Builder's own
`[x]` goes back for review even though its check passes. Real git, real processes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.fleet import fleet_env, fleet_ledger, fleet_project, start_fleet, task_agent, tasks_on
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.state import events_of

from genesis import exitcodes
from genesis.fleet.taskref import task_id
from genesis.ledger.store import Ledger
from genesis.store.layout import state_dir_of

TASKS = ("# Tasks\n\n- [ ] Add a health file\n"
         "  check: `grep -q ok health.txt || { echo 'health.txt does not say ok'; exit 3; }`\n")

# A Builder that ticks its task `[x]` and commits, doing the work only once told its check
# failed; a Criticizer (the same script) that ticks every `[?]` task `[x]`. Each keeps its prompt.
AGENT = r"""#!/usr/bin/env bash
set -eu
prompt="${*: -1}"
mkdir -p .prompts
printf '%s' "$prompt" >".prompts/$GENESIS_ITERATION-$GENESIS_AGENT.txt"
if [ "$GENESIS_AGENT" = Criticizer ]; then
  from='- [?]'
else
  from='- [ ]'
  if printf '%s' "$prompt" | grep -q "its check failed"; then echo ok >health.txt; fi
fi
python3 -c "import pathlib, sys; p = pathlib.Path('TASKS.md'); p.write_text(p.read_text().replace(sys.argv[1], '- [x]'))" \
  "$from"
git add -A
git commit -qm "$GENESIS_AGENT: done, it says" || true
"""


@pytest.fixture
def hostile(project: Path, tmp_path: Path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    (project / ".gitignore").write_text(".prompts/\n")
    (project / "TASKS.md").write_text(TASKS)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "tasks")
    return project, script(tmp_path / "agent.sh", AGENT)


def evidence(project: Path) -> list[dict]:
    return events_of(project, kind="task_evidence")


def child_evidence(worktree: Path) -> list[dict]:
    """The task_evidence events of a fleet child's own ledger, in its worktree's state folder."""
    with Ledger.open(state_dir_of(worktree) / "ledger.sqlite3", readonly=True) as led:
        return led.events(kinds=["task_evidence"])


def test_a_builder_that_ticks_its_task_without_the_work_is_reopened_then_done_on_evidence(hostile):
    project, agent = hostile
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "4",
                    env=loop_env(GENESIS_PHASES="Builder", HEARTBEAT_COUNT_OUTPUT="false"))
    assert done.returncode == 0, done.stderr

    # Iteration 1: ticked without the work; the check fails; the task is reopened, not done.
    first, second = evidence(project)
    assert (first["iteration"], first["phase"], first["outcome"], first["back_to"]) == (1, "Builder", "failed", "open")
    assert first["checks"][0]["command"] == "grep -q ok health.txt || { echo 'health.txt does not say ok'; exit 3; }"
    assert first["checks"][0]["exit_code"] == 3
    assert first["tail"] == ["grep: health.txt: No such file or directory", "health.txt does not say ok"]
    reopened = events_of(project, kind="task_reopened")
    assert [(e["task"], e["to"], e["count"]) for e in reopened] == [("Add a health file", "open", 1)]
    assert "iteration 1: done" not in done.stderr
    assert "Builder: task 'Add a health file': check failed, reopened: `grep -q ok health.txt" in done.stderr
    log = git(project, "log", "--format=%s", "--", "TASKS.md").splitlines()
    assert any(s.startswith("genesis: reopen what Builder ticked without evidence (iteration 1)") for s in log), log

    # Iteration 2: the prompt gave the failure's tail; the work is done, the check passes.
    told = (project / ".prompts" / "2-Builder.txt").read_text()
    assert "Add a health file" in told and "its check failed" in told and "health.txt does not say ok" in told
    assert "its check failed" not in (project / ".prompts" / "1-Builder.txt").read_text()
    assert (second["iteration"], second["outcome"], second["back_to"]) == (2, "passed", None)
    assert second["checks"][0]["exit_code"] == 0
    assert "iteration 2: done: every task in TASKS.md is done" in done.stderr
    text = (project / "TASKS.md").read_text()
    assert text.startswith("# Tasks\n\n- [x] Add a health file\n"), text
    assert "Genesis: reopened" in text  # the note of the reopening stays under the task, for the reader

    # The evidence, beside the task's commits, in the report.
    report = subprocess.run(GENESIS + ["--project", str(project), "report", "--json"], capture_output=True,
                            text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    run = json.loads(report.stdout)["runs"][0]
    rows = {row["task"]: row for row in run["evidence"]}
    row = rows["Add a health file"]
    assert (row["outcome"], row["exit_code"], row["reopened"], row["iteration"]) == ("passed", 0, 1, 2)
    assert row["command"].startswith("grep -q ok health.txt")
    text_report = subprocess.run(GENESIS + ["--project", str(project), "report"], capture_output=True, text=True,
                                 timeout=60)
    assert "Add a health file: check passed" in text_report.stdout, text_report.stdout
    status = subprocess.run(GENESIS + ["--project", str(project), "status"], capture_output=True, text=True,
                            timeout=60)
    assert " · 1 task done · " in status.stdout, status.stdout  # the refuted tick is not counted
    page = project.parent / "night.html"
    html = subprocess.run(GENESIS + ["--project", str(project), "report", "--html", str(page)], capture_output=True,
                          text=True, timeout=60)
    assert html.returncode == 0, html.stderr
    shown = page.read_text()
    assert "Task evidence (1)" in shown and "check passed" in shown and "grep -q ok health.txt" in shown


def test_a_builders_own_tick_goes_back_for_review_where_a_criticizer_runs(hostile):
    project, agent = hostile
    (project / "health.txt").write_text("ok\n")  # the check passes from the start
    git(project, "add", "health.txt")
    git(project, "commit", "-qm", "health")
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "2",
                    env=loop_env(GENESIS_PHASES="Builder,Criticizer", HEARTBEAT_COUNT_OUTPUT="false"))
    assert done.returncode == 0, done.stderr
    outcomes = [(e["iteration"], e["phase"], e["outcome"], e["back_to"]) for e in evidence(project)]
    assert outcomes == [(1, "Builder", "unreviewed", "review"), (1, "Criticizer", "passed", None)]
    assert "iteration 1: done: every task in TASKS.md is done" in done.stderr


def test_a_task_without_a_check_is_done_on_the_agents_word_and_the_report_and_status_say_so(hostile):
    project, agent = hostile
    (project / "TASKS.md").write_text("# Tasks\n\n- [ ] Add a health file\n")
    git(project, "commit", "-qam", "no check")
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "2",
                    env=loop_env(GENESIS_PHASES="Builder", HEARTBEAT_COUNT_OUTPUT="false"))
    assert done.returncode == 0, done.stderr
    assert [(e["outcome"], e["checks"]) for e in evidence(project)] == [("agent's word", [])]
    assert "iteration 1: done: every task in TASKS.md is done" in done.stderr
    report = subprocess.run(GENESIS + ["--project", str(project), "report"], capture_output=True, text=True,
                            timeout=60)
    assert "Add a health file: done on the agent's word (iteration 1 Builder" in report.stdout, report.stdout
    status = subprocess.run(GENESIS + ["--project", str(project), "status"], capture_output=True, text=True,
                            timeout=60)
    assert "1 task done (1 on the agent's word: no check)" in status.stdout, status.stdout


def test_a_fleet_child_whose_builder_ticks_its_own_task_is_not_verified_and_its_work_stays_out(project, tmp_path):
    """The hostile Builder as a fleet's child: its task `[x]` on its branch is refuted by its
    check, so the child is not "verified" and nothing of its branch comes home."""
    fleet_project(project, [])
    (project / "TASKS.md").write_text("# Tasks\n\n- [ ] add the probe\n  check: test -f probe.txt\n")
    git(project, "commit", "-qam", "the task and its check")
    env = fleet_env(GENESIS_FLEET_CHILD_ITERATIONS="1", GENESIS_FLEET_MAX_TASK_RESTARTS="0",
                    GENESIS_FLEET_MAX_FAILED_TASKS="0", HEARTBEAT_COUNT_OUTPUT="false")
    proc = start_fleet(project, "1", task_agent(tmp_path / "agent.sh"), env=env, log=tmp_path / "fleet.log")
    assert proc.wait(timeout=240) == exitcodes.FLEET_TASKS_FAILED, (tmp_path / "fleet.log").read_text()[-3000:]

    ident = task_id("add the probe")
    with fleet_ledger(project) as led:
        outcomes = [a.outcome for a in led.attempts(ident) if a.outcome]
        (row,) = led.tasks()
    assert outcomes == ["failed"] and row.state == "failed"
    # The child's own ledger holds the refuting evidence; its branch has the task reopened.
    worktree = Path(row.worktree)
    (proof,) = child_evidence(worktree)
    assert (proof["task"], proof["outcome"], proof["checks"][0]["exit_code"]) == ("add the probe", "failed", 1)
    assert "- [ ] add the probe" in tasks_on(project, row.branch)
    # Nothing of the branch came home: the project branch has neither its file nor its tick.
    assert "- [!] add the probe" in tasks_on(project)
    assert f"work-{ident}.txt" not in git(project, "ls-tree", "--name-only", "HEAD").split()
