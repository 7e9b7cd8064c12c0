"""A task's next attempt on a machine starts with a fair circuit breaker: the one its last
attempt left OPEN in the same worktree (its agent made no progress) is kept aside, not reused,
so the new attempt runs its agent instead of being refused at once (exit 3)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import TASK_AGENT, fleet_env, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import kill_under, pushed_project, trusting  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis import exitcodes  # noqa: E402
from genesis.fleet.leftovers import BREAKER_FILE  # noqa: E402
from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal import activities  # noqa: E402
from genesis.temporal.records import AGENT_FAILED, AttemptInput, TaskSpec  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXT = "write the alpha note"
# The first attempt's agent makes no progress (its breaker opens); the next one does the task.
IDLE_FIRST = """#!/usr/bin/env bash
set -euo pipefail
echo "${GENESIS_TASK_ID}" >>"${RAN}"
if [[ ! -e ${FIRST}/tried ]]; then
  touch "${FIRST}/tried"
  exit 0
fi
""" + TASK_AGENT.split("\n", 2)[2]


def test_the_next_attempt_after_an_open_breaker_runs_its_agent(tmp_path):
    project, remote = pushed_project(tmp_path, [TEXT])
    (tmp_path / "first").mkdir()
    tid = task_id(TEXT)
    agent = task_agent(tmp_path / "agent.sh", IDLE_FIRST)
    first = AttemptInput("tfleet", "tfleet/t", TaskSpec(tid, TEXT, branch_for(tid)), 1, "start", 0, str(remote),
                         git(project, "symbolic-ref", "--short", "HEAD").strip(), "tacct", ("Builder",), 2,
                         (("GENESIS_AGENT_CMD", f"bash {agent}"), ("GENESIS_PHASES", "Builder"),
                          ("CB_WARNING_THRESHOLD", "1"), ("CB_STOP_THRESHOLD", "1")), 1.0)
    env = fleet_env(**trusting(tmp_path), HOME=str(tmp_path / "home"), GENESIS_SHARED_STATE_DIR=str(tmp_path / "state"),
                    RAN=str(tmp_path / "ran"), FIRST=str(tmp_path / "first"), HEARTBEAT_STALE_SECONDS="120")
    root = tmp_path / "root"
    machine = activities.MachineActivities(None, root, "A", env)
    machine._ask = lambda workflow_id: asyncio.sleep(0, {})
    try:
        with pytest.raises(ApplicationError) as failed:
            asyncio.run(ActivityEnvironment().run(machine.run_attempt, first))
        assert failed.value.type == AGENT_FAILED and failed.value.details[0]["exit_code"] == exitcodes.BREAKER_OPEN
        (wt,) = root.glob(f"tfleet/*/{tid}")
        assert (wt / BREAKER_FILE).is_file()   # OPEN, as the first attempt left it
        second = dataclasses.replace(first, number=2, kind="restart", previous_end="exit 3")
        done = asyncio.run(ActivityEnvironment().run(machine.run_attempt, second))
    finally:
        kill_under(root)
    assert (done.outcome, done.exit_code) == ("verified", exitcodes.OK)
    assert (tmp_path / "ran").read_text().splitlines() == [tid, tid]   # the second attempt's agent ran
    assert (wt / BREAKER_FILE.with_name(BREAKER_FILE.name + ".attempt-2")).is_file()   # the evidence, kept

