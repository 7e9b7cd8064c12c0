"""A fleet as a user runs one: a project with open tasks, a scripted agent, `--parallel N`.

  fleet_project(project, texts)      TASKS.md with these open tasks, committed on the branch
  task_agent(path, ...)              an agent that works on $GENESIS_TASK: writes its file, ticks
                                     its task in the worktree's TASKS.md (as the prompts ask)
  fleet_env(**extra)                 loop_env() with the fleet's time knobs compressed
  start_fleet(project, n, agent)     the loop script with --parallel, in the background
  fleet_ledger(project)              the fleet ledger, read-only
  tasks_on(project, branch)          TASKS.md as committed on the branch
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.agent import script
from helpers.git import git
from helpers.loop import LOOP, loop_env

from genesis.fleet.ledger import FleetLedger
from genesis.store.layout import state_dir_of

__all__ = ["fleet_project", "task_agent", "fleet_env", "start_fleet", "fleet_ledger", "tasks_on", "fleet_dir",
           "TASK_AGENT"]

# Works on its one task: a file named after the task id, then the task ticked in TASKS.md. With
# $SLOW_FILE present it sleeps there first (a phase that lasts until the test lets it go); with
# $HANG set it records its pid and sleeps long (a phase the test interrupts).
TASK_AGENT = r"""#!/usr/bin/env bash
set -euo pipefail
: "${GENESIS_TASK:?no task given}"
if [[ -n ${AGENT_PIDS:-} ]]; then echo "$$ ${GENESIS_TASK_ID}" >>"${AGENT_PIDS}"; fi
if [[ -n ${HANG:-} ]]; then sleep 300; fi
while [[ -n ${SLOW_FILE:-} && -e ${SLOW_FILE} ]]; do sleep 0.1; done
printf '%s\n' "${GENESIS_TASK}" >"work-${GENESIS_TASK_ID}.txt"
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""


def fleet_project(project: Path, texts: list[str]) -> Path:
    """The project with TASKS.md listing `texts` open, committed, and an identity for its commits."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    (project / "TASKS.md").write_text("# Tasks\n\n" + "".join(f"- [ ] {t}\n" for t in texts))
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", "tasks")
    return project


def task_agent(path: Path, text: str = TASK_AGENT) -> Path:
    return script(path, text)


def fleet_env(**extra: str) -> dict[str, str]:
    """The loop's test environment with the fleet's knobs compressed (stagger, checks); the
    memory floor off unless a test sets it. $PY is this Python, for the task agent."""
    return loop_env(**{"GENESIS_FLEET_STAGGER_SECONDS": "0.2", "GENESIS_FLEET_CHECK_SECONDS": "0.2",
                       "GENESIS_FLEET_MEMORY_FLOOR_MB": "0", "GENESIS_FLEET_RESTART_BACKOFF_SECONDS": "0.5",
                       "GENESIS_FLEET_RESTART_EVERY_SECONDS": "0", "PY": sys.executable, **extra})


def start_fleet(project: Path, parallel: str, agent: Path, *args: str, env: dict | None = None,
                log: Path | None = None) -> subprocess.Popen:
    """`start-multi-agent-loop.sh --project P --parallel N --agent-cmd 'bash AGENT' --set GENESIS_PHASES=Builder`
    in the background (its own session: a test's signal reaches it alone), output to `log`."""
    out = open(log or project.parent / "fleet.log", "ab")
    try:
        return subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--parallel", parallel,
                                 "--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder", *args],
                                env=env or fleet_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)
    finally:
        out.close()


def fleet_dir(project: Path) -> Path:
    return state_dir_of(project) / "fleet"


def fleet_ledger(project: Path) -> FleetLedger:
    return FleetLedger.open(fleet_dir(project) / "ledger.sqlite3", readonly=True)


def tasks_on(project: Path, branch: str = "") -> str:
    branch = branch or git(project, "symbolic-ref", "--short", "HEAD").strip()
    return git(project, "show", f"{branch}:TASKS.md")

