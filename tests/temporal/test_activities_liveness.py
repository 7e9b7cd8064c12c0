"""run_attempt judges the loop by the loop itself (its process, its lock, its traces), not by its
agent's heartbeat files: a hookless agent that keeps printing is alive past a compressed bound;
a loop frozen by SIGSTOP is killed and its try fails retryable, and the retry starts a new loop.
The activity runs in the SDK's ActivityEnvironment with a client of the real dev server."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import (kill_under, loops_under, printing_agent, procs_under, pushed_project,  # noqa: E402
                              trusting)
from temporalio.client import Client  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal.activities import FROZEN, MachineActivities  # noqa: E402
from genesis.temporal.records import AttemptInput, TaskSpec  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXT = "write the alpha note"
# No heartbeat hook; prints a line every 0.2 s while $HOLD exists (at most 8 s), then does its task.
PRINTING = printing_agent(40)


@pytest.fixture
def world(tmp_path):
    project, remote = pushed_project(tmp_path, [TEXT])
    agent = task_agent(tmp_path / "agent.sh", PRINTING)
    root = tmp_path / "root"
    yield project, remote, agent, root
    kill_under(root)


def attempt(project: Path, remote: Path, agent: Path) -> AttemptInput:
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    tid = task_id(TEXT)
    return AttemptInput("tfleet", "tfleet/task", TaskSpec(tid, TEXT, branch_for(tid)), 1, "start", 0, str(remote),
                        target, "tacct", ("Builder",), 1,
                        (("GENESIS_AGENT_CMD", f"bash {agent}"), ("GENESIS_PHASES", "Builder")), 1.0)


def machine(client: Client, root: Path, tmp: Path, hold: Path) -> MachineActivities:
    env = fleet_env(**trusting(tmp), HOME=str(tmp / "home"), GENESIS_SHARED_STATE_DIR=str(tmp / "state"),
                    AGENT_PIDS=str(tmp / "agents"), HOLD=str(hold), HEARTBEAT_STALE="120s")
    (tmp / "home").mkdir(exist_ok=True)
    return MachineActivities(client, root, "A", env, frozen_after=2.0, stop_wait=5.0)


@pytest.mark.fault(110)
def test_a_hookless_agent_that_prints_is_not_frozen(dev_server, world, tmp_path):
    project, remote, agent, root = world
    hold = tmp_path / "hold"
    hold.touch()

    async def run():
        client = await Client.connect(dev_server.address)
        return await ActivityEnvironment().run(machine(client, root, tmp_path, hold).run_attempt,
                                               attempt(project, remote, agent))

    result = asyncio.run(run())
    assert result.outcome == "verified", result
    assert result.seconds > 4.0   # printed for 8 s, past twice its 2 s bound, with no heartbeat file


@pytest.mark.fault(110)
def test_a_stopped_loop_is_killed_and_its_retry_starts_anew(dev_server, world, tmp_path):
    project, remote, agent, root = world
    hold = tmp_path / "hold"
    hold.touch()
    agents = tmp_path / "agents"
    frozen: list[int] = []

    def freeze_when_working():
        deadline = time.monotonic() + 120
        while not (agents.exists() and agents.read_text().strip()):
            assert time.monotonic() < deadline, "no agent started"
            time.sleep(0.1)
        loops = loops_under(root)
        pids = {proc.pid for proc in loops}
        loop = next(proc for proc in loops if proc.ppid() not in pids)   # the loop, not one of its subshells
        frozen.append(loop.pid)
        for proc in [loop, *loop.children(recursive=True)]:
            try:
                proc.send_signal(signal.SIGSTOP)
            except psutil.Error:   # a step that ended meanwhile
                pass

    async def run():
        client = await Client.connect(dev_server.address)
        acts = machine(client, root, tmp_path, hold)
        inp = attempt(project, remote, agent)
        first = ActivityEnvironment()
        freezer = asyncio.create_task(asyncio.to_thread(freeze_when_working))
        with pytest.raises(ApplicationError) as failed:
            await first.run(acts.run_attempt, inp)
        await freezer
        # the stopped agent (a group of its own) is the test's to end; the loop was the activity's
        for proc in procs_under(root):
            try:
                proc.kill()
            except psutil.Error:   # ended meanwhile
                pass
        hold.unlink()
        second = ActivityEnvironment()
        second.info = dataclasses.replace(second.info, attempt=2)
        return failed.value, await second.run(acts.run_attempt, inp)

    error, result = asyncio.run(run())
    assert error.type == FROZEN and not error.non_retryable, error
    assert "frozen" in str(error)
    assert not psutil.pid_exists(frozen[0]) or psutil.Process(frozen[0]).status() == psutil.STATUS_ZOMBIE
    assert result.outcome == "verified" and not result.adopted and result.activity_attempt == 2, result
    assert os.path.exists(tmp_path / "agents")
