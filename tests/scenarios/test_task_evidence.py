"""No `[x]` without the evidence, through the real loop: a Builder that ticks its tasks done.

One task carries its check (`check:` in TASKS.md), the other none. The hostile Builder ticks
both `[x]` without doing either: Genesis runs the check itself, in the agent's box, sees it
fail, reopens that task in its own commit and tells the next attempt the check's tail; the
loop does not end "done". The task without a check is done on the agent's word, and said so.
The next attempt, told why, does the work: the check passes and the loop ends done, the
evidence in `genesis report` (text, JSON, HTML) and `genesis status`. Real git, real processes.

The same rules by replay: a Builder's own tick sent back for review where a Criticizer runs
(tests/loop/test_taskcheck.py, tests/loop/test_claims.py), and a fleet's child whose tick its
evidence refutes never verified (tests/fleet/test_monitor.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.state import events_of

TASKS = ("# Tasks\n\n- [ ] Add a health file\n"
         "  check: `grep -q ok health.txt || { echo 'health.txt does not say ok'; exit 3; }`\n"
         "- [ ] Add a readme\n")

# A Builder that ticks every open task `[x]` and commits, doing the work only once told a check
# failed. It keeps each prompt.
AGENT = r"""#!/usr/bin/env bash
set -eu
prompt="${*: -1}"
mkdir -p .prompts
printf '%s' "$prompt" >".prompts/$GENESIS_ITERATION-$GENESIS_AGENT.txt"
if printf '%s' "$prompt" | grep -q "its check failed"; then echo ok >health.txt; fi
python3 -c "import pathlib; p = pathlib.Path('TASKS.md'); p.write_text(p.read_text().replace('- [ ]', '- [x]'))"
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


def test_a_tick_without_the_work_is_reopened_then_done_on_evidence_and_one_without_a_check_on_the_agents_word(
        hostile):
    project, agent = hostile
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "4",
                    env=loop_env(GENESIS_PHASES="Builder", HEARTBEAT_COUNT_OUTPUT="false"))
    assert done.returncode == 0, done.stderr

    # Iteration 1: both ticked, the checked one without the work: its check fails; it is reopened, not done.
    first, second = [e for e in evidence(project) if e["task"] == "Add a health file"]
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
    # The task without a check is done on the agent's word.
    (word,) = [e for e in evidence(project) if e["task"] == "Add a readme"]
    assert (word["iteration"], word["outcome"], word["checks"]) == (1, "agent's word", [])

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
    assert rows["Add a readme"]["outcome"] == "agent's word"
    text_report = subprocess.run(GENESIS + ["--project", str(project), "report"], capture_output=True, text=True,
                                 timeout=60)
    assert "Add a health file: check passed" in text_report.stdout, text_report.stdout
    assert "Add a readme: done on the agent's word (iteration 1 Builder" in text_report.stdout, text_report.stdout
    status = subprocess.run(GENESIS + ["--project", str(project), "status"], capture_output=True, text=True,
                            timeout=60)
    # The refuted tick is not counted; the one without a check is, and said to be on the agent's word.
    assert " · 2 tasks done (1 on the agent's word: no check)" in status.stdout, status.stdout
    page = project.parent / "night.html"
    html = subprocess.run(GENESIS + ["--project", str(project), "report", "--html", str(page)], capture_output=True,
                          text=True, timeout=60)
    assert html.returncode == 0, html.stderr
    shown = page.read_text()
    assert "Task evidence (2)" in shown and "check passed" in shown and "grep -q ok health.txt" in shown
