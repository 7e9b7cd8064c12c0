"""One machine's count of loops: attempts beyond --parallel (from either queue) wait, beating,
for a slot; none launches under the memory floor; a cancelled attempt (its worker stopping, or
Temporal's timeout) stops its loop and ends, and stops telling the loop its monitor lives."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import psutil
import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.procs import alive  # noqa: E402
from helpers.temporal import kill_under, loops_under, printing_agent, pushed_project, trusting  # noqa: E402
from helpers.waits import wait_for  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis.fleet.resources import fleet_settings  # noqa: E402
from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal.activities import MONITOR_FILE, MachineActivities  # noqa: E402
from genesis.temporal.records import AttemptInput, TaskSpec  # noqa: E402
from genesis.config import Setting  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXTS = ["write the alpha note", "write the beta note"]
# No heartbeat hook; prints while $HOLD exists (at most 6 s), then does its task.
PRINTING = printing_agent(30)
# The same for 2 s at most: two loops at once would overlap for seconds, sampled every 0.1 s.
BRIEF = printing_agent(10)


@pytest.fixture
def world(tmp_path):
    project, remote = pushed_project(tmp_path, TEXTS)
    agent = task_agent(tmp_path / "agent.sh", PRINTING)
    root = tmp_path / "root"
    (tmp_path / "home").mkdir(exist_ok=True)
    yield project, remote, agent, root
    kill_under(root)


def sessions(root) -> set[str]:
    """The worktrees under root a loop runs in (a loop's subshells and steps name the same one)."""
    found = set()
    for proc in loops_under(root):
        try:
            argv = proc.cmdline()
            found.add(argv[argv.index("--project") + 1])
        except (psutil.Error, ValueError, IndexError):
            pass
    return found


def attempt(project, remote, agent, text: str) -> AttemptInput:
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    tid = task_id(text)
    return AttemptInput("tfleet", f"tfleet/{tid}", TaskSpec(tid, text, branch_for(tid)), 1, "start", 0, str(remote),
                        target, "tacct", ("Builder",), 1,
                        (("GENESIS_AGENT_CMD", f"bash {agent}"), ("GENESIS_PHASES", "Builder")), 1.0)


def machine(client, root, tmp, running=None, floor_mb: str = "0") -> MachineActivities:
    env = fleet_env(**trusting(tmp), HOME=str(tmp / "home"), GENESIS_SHARED_STATE_DIR=str(tmp / "state"),
                    AGENT_PIDS=str(tmp / "agents"), HOLD=str(tmp / "hold"), HEARTBEAT_STALE="120s")
    fleet = fleet_settings({"GENESIS_FLEET_MEMORY_FLOOR_MB": Setting(floor_mb, "test")})
    return MachineActivities(client, root, "A", env, stop_wait=5.0, fleet=fleet, running=running)


def test_two_attempts_on_a_one_slot_machine_run_one_after_the_other(dev_server, world, tmp_path):
    project, remote, agent, root = world
    task_agent(agent, BRIEF)   # the machine's trusted agent, briefer
    (tmp_path / "hold").touch()
    most: list[int] = []
    done = threading.Event()

    def count():
        while not done.is_set():
            most.append(len(sessions(root)))
            time.sleep(0.1)

    async def run():
        client = await Client.connect(dev_server.address)
        acts = machine(client, root, tmp_path, running=asyncio.Semaphore(1))
        counter = threading.Thread(target=count)
        counter.start()
        try:
            return await asyncio.gather(*(ActivityEnvironment().run(acts.run_attempt, attempt(project, remote, agent, t))
                                          for t in TEXTS))
        finally:
            done.set()
            counter.join()

    results = asyncio.run(run())
    assert [r.outcome for r in results] == ["verified", "verified"], results
    assert max(most) == 1, most


def test_no_launch_under_the_memory_floor_and_a_cancelled_attempt_ends(dev_server, world, tmp_path):
    project, remote, agent, root = world
    beats: list = []

    async def run():
        client = await Client.connect(dev_server.address)
        acts = machine(client, root, tmp_path, floor_mb=str(1 << 23))   # 8 TB: never available
        env = ActivityEnvironment()
        env.on_heartbeat = lambda *details: beats.append(details[0] if details else None)
        running = asyncio.create_task(env.run(acts.run_attempt, attempt(project, remote, agent, TEXTS[0])))
        deadline = time.monotonic() + 60
        while not any("waiting for memory" in str((b or {}).get("stage")) for b in beats):
            assert time.monotonic() < deadline, beats[-3:]
            await asyncio.sleep(0.2)
        env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert not loops_under(root)

    asyncio.run(run())


def test_a_cancelled_attempt_stops_its_loop_and_its_monitor_file(dev_server, world, tmp_path):
    project, remote, agent, root = world
    (tmp_path / "hold").touch()

    async def run():
        client = await Client.connect(dev_server.address)
        acts = machine(client, root, tmp_path)
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, heartbeat_timeout=None)
        running = asyncio.create_task(env.run(acts.run_attempt, attempt(project, remote, agent, TEXTS[0])))
        deadline = time.monotonic() + 120
        while not ((tmp_path / "agents").exists() and loops_under(root)):
            assert time.monotonic() < deadline, "no agent started"
            await asyncio.sleep(0.1)
        loop = loops_under(root)[0]
        env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        # A loop deaf to SIGTERM within stop_wait is sent SIGKILL and not waited for: a signal is
        # acted on when the process next runs, so it may still show as running here.
        wait_for(lambda: not alive(loop.pid), timeout=10, what=f"the cancelled attempt's loop {loop.pid} ended")
        monitor = next(root.rglob(MONITOR_FILE))
        seen = monitor.stat().st_mtime
        await asyncio.sleep(2.5)
        assert monitor.stat().st_mtime == seen   # no follower left beating it

    asyncio.run(run())
