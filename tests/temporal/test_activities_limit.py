"""A usage limit met by a machine's loop reaches the account's workflow from that machine at
once (a signal from the activity), not only later through the task's workflow: an attempt
about to start on another machine meanwhile asks the account, and must hear of it."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.agent import script  # noqa: E402
from helpers.fakeclaude import FIXTURES  # noqa: E402
from helpers.fleet import fleet_env  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import kill_under, pushed_project  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal.activities import MachineActivities  # noqa: E402
from genesis.temporal.records import USAGE_LIMIT, AttemptInput, TaskSpec  # noqa: E402
from genesis.temporal.workflows import WORKFLOWS, AccountWorkflow  # noqa: E402

pytestmark = [pytest.mark.temporal]

TEXT = "write the limit note"
RESET_IN = 600
# A stand-in `claude` that meets a 5-hour limit resetting RESET_IN seconds from now.
CLAUDE = r'''#!{python}
import re, sys, time
text = {text!r}
sys.stdout.write(re.sub(r'"resetsAt":\d+', '"resetsAt":%d' % int(time.time() + {reset_in}), text))
sys.exit(1)
'''


def test_a_limit_met_on_a_machine_reaches_the_account_from_that_machine(dev_server, tmp_path):
    project, remote = pushed_project(tmp_path, [TEXT])
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The fixture's text is in the script: the agent runs in its box, whose /tmp and HOME (here the
    # test's folder) are its own, so neither a checkout under /tmp nor this folder is in its sight.
    text = (FIXTURES / "limit_five_hour.jsonl").read_text()
    script(bin_dir / "claude", CLAUDE.format(python=sys.executable, text=text, reset_in=RESET_IN))
    env = fleet_env(HOME=str(tmp_path), GENESIS_SHARED_STATE_DIR=str(tmp_path / "state"),
                    PATH=f"{bin_dir}:{fleet_env()['PATH']}")
    root = tmp_path / "root"
    prefix = f"l{uuid.uuid4().hex[:8]}"
    account = f"{prefix}-account"
    inp = AttemptInput(f"{prefix}-fleet", f"{prefix}-fleet/task", TaskSpec(task_id(TEXT), TEXT,
                                                                           branch_for(task_id(TEXT))),
                       1, "start", 0, str(remote), target, account, ("Builder",), 1,
                       (("GENESIS_PHASES", "Builder"),), 1.0)

    async def run():
        client = await Client.connect(dev_server.address)
        async with Worker(client, task_queue=prefix, workflows=WORKFLOWS):
            handle = await client.start_workflow(AccountWorkflow.run, id=account, task_queue=prefix)
            try:
                with pytest.raises(ApplicationError) as met:
                    await ActivityEnvironment().run(MachineActivities(client, root, "A", env).run_attempt, inp)
                return met.value, await handle.query("state")
            finally:
                await handle.terminate("the test ended")

    try:
        before = time.time()
        met, state = asyncio.run(run())
    finally:
        kill_under(root)
    assert met.type == USAGE_LIMIT, met
    resets_at = met.details[0]["resets_at"]
    assert resets_at > before + RESET_IN - 5, met.details
    # No task workflow exists here to pass the limit on: the account heard it from the machine.
    assert state["until"] == pytest.approx(resets_at), state
