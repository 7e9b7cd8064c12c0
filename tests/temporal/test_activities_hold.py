"""The account's hold reaches a loop already running on a machine: a limit met elsewhere (the
account's workflow told) while this machine's loop is in a phase, and the loop starts no
further phase; its attempt ends as a limit, not spent, with the account's reset."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.agent import script  # noqa: E402
from helpers.fleet import fleet_env  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import kill_under, pushed_project, trusting  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal.activities import MachineActivities  # noqa: E402
from genesis.temporal.records import USAGE_LIMIT, AttemptInput, TaskSpec  # noqa: E402
from genesis.temporal.workflows import WORKFLOWS, AccountWorkflow  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXT = "write the held note"
HOLD_FOR = 900
# Each phase: its call counted, then a new file (progress) once $HOLD is gone; the task never ticked.
AGENT = r"""#!/usr/bin/env bash
set -euo pipefail
echo "$$" >>"${AGENT_PIDS}"
while [[ -e ${HOLD} ]]; do sleep 0.1; done
date +%s%N >"note-$$.txt"
"""


def calls(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def until_true(check, within: float, what: str) -> None:
    deadline = time.time() + within
    while not check():
        assert time.time() < deadline, f"not within {within:g}s: {what}"
        time.sleep(0.2)


def test_a_hold_told_while_a_loop_is_in_a_phase_starts_no_next_phase(dev_server, tmp_path):
    project, remote = pushed_project(tmp_path, [TEXT])
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    agent = script(tmp_path / "agent.sh", AGENT)
    pids, hold = tmp_path / "agents", tmp_path / "hold"
    hold.touch()
    (tmp_path / "home").mkdir(exist_ok=True)
    env = fleet_env(**trusting(tmp_path), HOME=str(tmp_path / "home"),
                    GENESIS_SHARED_STATE_DIR=str(tmp_path / "state"), AGENT_PIDS=str(pids), HOLD=str(hold),
                    HEARTBEAT_STALE="120s")
    root = tmp_path / "root"
    prefix = f"h{uuid.uuid4().hex[:8]}"
    account = f"{prefix}-account"
    tid = task_id(TEXT)
    inp = AttemptInput(f"{prefix}-fleet", f"{prefix}-fleet/{tid}", TaskSpec(tid, TEXT, branch_for(tid)), 1,
                       "start", 0, str(remote), target, account, ("Builder",), 4,
                       (("GENESIS_AGENT_CMD", f"bash {agent}"), ("GENESIS_PHASES", "Builder")), 1.0)

    async def run():
        client = await Client.connect(dev_server.address)
        async with Worker(client, task_queue=prefix, workflows=WORKFLOWS):
            handle = await client.start_workflow(AccountWorkflow.run, id=account, task_queue=prefix)
            try:
                machine = MachineActivities(client, root, "B", env, stop_wait=5.0)
                attempt = asyncio.create_task(ActivityEnvironment().run(machine.run_attempt, inp))
                await asyncio.to_thread(until_true, lambda: calls(pids) == 1, 120, "the first phase started")
                until = time.time() + HOLD_FOR
                await handle.signal("limit_met", until)   # a limit met on machine A
                store = tmp_path / "state" / "accounts" / "limits.json"
                await asyncio.to_thread(until_true, store.exists, 30, "the hold reached this machine's store")
                hold.unlink()   # the phase under way ends well
                with pytest.raises(ApplicationError) as ended:
                    await asyncio.wait_for(attempt, 180)
                return ended.value, until
            finally:
                await handle.terminate("the test ended")

    try:
        ended, until = asyncio.run(run())
    finally:
        kill_under(root)
    assert ended.type == USAGE_LIMIT, ended
    assert ended.details[0]["resets_at"] == pytest.approx(until, abs=1.0), ended.details
    assert calls(pids) == 1, "a phase started inside the account's hold"
    # The phase under way finished its work: committed and pushed with the attempt's end.
    pushed = git(remote, "ls-tree", "--name-only", branch_for(tid))
    assert "note-" in pushed, pushed
