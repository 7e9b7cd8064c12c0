"""The start gate (the account's limit, the fleet's pause) is asked last, right before a loop
would launch, after the worktree, leftovers and hook are ready; never for a loop being adopted
(it already runs: refusing would leave it unsupervised)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import kill_under, loops_under, printing_agent, pushed_project, trusting  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal import activities  # noqa: E402
from genesis.temporal.records import USAGE_LIMIT, AttemptInput, TaskSpec  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXT = "write the alpha note"
HELD = printing_agent(300)   # prints while $HOLD exists (at most 60 s), then does its task


class Gated(activities.MachineActivities):
    """A machine whose account says a limit is in force, recording when it was asked."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.calls: list[str] = []

    async def _ask(self, workflow_id: str) -> dict:
        self.calls.append(f"ask {workflow_id}")
        return {"until": time.time() + 3600} if workflow_id == "tacct" else {}

    def _prepare(self, *args) -> None:
        super()._prepare(*args)
        self.calls.append("prepared")


@pytest.fixture
def world(tmp_path):
    project, remote = pushed_project(tmp_path, [TEXT])
    (tmp_path / "home").mkdir(exist_ok=True)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    tid = task_id(TEXT)
    agent = task_agent(tmp_path / "agent.sh", HELD)
    inp = AttemptInput("tfleet", "tfleet/t", TaskSpec(tid, TEXT, branch_for(tid)), 1, "start", 0, str(remote), target,
                       "tacct", ("Builder",), 1,
                       (("GENESIS_AGENT_CMD", f"bash {agent}"), ("GENESIS_PHASES", "Builder")), 1.0)
    env = fleet_env(**trusting(tmp_path), HOME=str(tmp_path / "home"), GENESIS_SHARED_STATE_DIR=str(tmp_path / "state"),
                    AGENT_PIDS=str(tmp_path / "agents"), HOLD=str(tmp_path / "hold"), HEARTBEAT_STALE="120s")
    root = tmp_path / "root"
    yield inp, env, root
    kill_under(root)


def test_a_limit_is_asked_after_the_preparation_and_launches_nothing(world):
    inp, env, root = world
    gated = Gated(None, root, "A", env)
    with pytest.raises(ApplicationError) as held:
        asyncio.run(ActivityEnvironment().run(gated.run_attempt, inp))
    assert held.value.type == USAGE_LIMIT
    assert gated.calls == ["prepared", "ask tacct"]
    assert not loops_under(root)


def test_a_running_loop_is_adopted_whatever_the_gate_says(world, tmp_path, monkeypatch):
    inp, env, root = world
    (tmp_path / "hold").touch()
    plain = activities.MachineActivities(None, root, "A", env)
    plain._ask = lambda workflow_id: asyncio.sleep(0, {})

    async def lose_the_worker():   # the first try's worker dies: its loop runs on, unwatched
        monkeypatch.setattr(activities, "_stopping", lambda child, fleet_dir, wait=0.0: None)
        first = ActivityEnvironment()
        running = asyncio.create_task(first.run(plain.run_attempt, inp))
        deadline = time.monotonic() + 120
        while not ((tmp_path / "agents").exists() and loops_under(root)):
            assert time.monotonic() < deadline, "no agent started"
            await asyncio.sleep(0.1)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        monkeypatch.undo()

    asyncio.run(lose_the_worker())
    assert loops_under(root)
    gated = Gated(None, root, "A", env)
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2)

    async def adopt():
        going = asyncio.create_task(retry.run(gated.run_attempt, inp))
        await asyncio.sleep(2)
        (tmp_path / "hold").unlink()
        return await going

    result = asyncio.run(adopt())
    assert result.adopted and result.outcome == "verified", result
    # The gate was not asked before adopting (only the account's hold, while the loop ran).
    assert "prepared" not in gated.calls and set(gated.calls) <= {"ask tacct"}, gated.calls


def test_a_loop_its_cancelled_attempt_is_stopping_is_never_adopted(world, tmp_path, monkeypatch):
    inp, env, root = world
    (tmp_path / "hold").touch()
    plain = activities.MachineActivities(None, root, "A", env, stop_wait=5.0)
    plain._ask = lambda workflow_id: asyncio.sleep(0, {})

    async def cancel_slowly():   # cancelled (a server outage timed it out): its loop is still being stopped
        monkeypatch.setattr(activities, "_stop_child", lambda child, wait=0.0: None)
        first = ActivityEnvironment()
        running = asyncio.create_task(first.run(plain.run_attempt, inp))
        deadline = time.monotonic() + 120
        while not ((tmp_path / "agents").exists() and loops_under(root)):
            assert time.monotonic() < deadline, "no agent started"
            await asyncio.sleep(0.1)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        monkeypatch.undo()

    asyncio.run(cancel_slowly())
    stopping = {p.pid for p in loops_under(root)}
    assert stopping
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2)

    async def retry_it():
        going = asyncio.create_task(retry.run(plain.run_attempt, inp))
        deadline = time.monotonic() + 120
        while stopping & {p.pid for p in loops_under(root)}:
            assert time.monotonic() < deadline, "the loop being stopped still runs"
            await asyncio.sleep(0.2)
        (tmp_path / "hold").unlink()
        return await going

    result = asyncio.run(retry_it())
    assert not result.adopted and result.outcome == "verified", result
    assert len((tmp_path / "agents").read_text().split()) == 2   # a fresh loop's agent, not the stopped one's
