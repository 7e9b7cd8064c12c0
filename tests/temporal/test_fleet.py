"""A fleet on the real dev server, two `genesis worker`s in two separate "machines" (each its own
root, HOME and shared state, one bare origin between them), the home's `genesis fleet run
--engine temporal` at the project's checkout, and the suite's stub task agent."""

from __future__ import annotations

import time
import uuid

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, fleet_project, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import Machines, origin_for  # noqa: E402

from genesis.repo.tasks import DONE, parse  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXTS = ["write the alpha note", "write the beta note", "write the gamma note", "write the delta note"]
FLEET_WAIT = 300.0


@pytest.fixture
def machines(dev_server, tmp_path):
    world = Machines(tmp_path, dev_server.address, f"t{uuid.uuid4().hex[:8]}",
                     fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS="3", GENESIS_TEMPORAL_HOST_WAIT_SECONDS="4"))
    yield world
    world.stop_all()


def wait_end(proc, what: str, world: Machines, timeout: float = FLEET_WAIT) -> int:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is not None, f"{what} did not end within {timeout:g}s\n{world.log('home')[-3000:]}\n" \
                                    f"{world.log('worker-A')[-3000:]}\n{world.log('worker-B')[-3000:]}"
    return proc.returncode


def test_four_tasks_on_two_machines_are_all_merged_once(machines, project, tmp_path):
    fleet_project(project, TEXTS)
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    agent = task_agent(tmp_path / "agent.sh")
    machines.worker("A")
    machines.worker("B")
    home = machines.home(project, 4, "--set", f"GENESIS_AGENT_CMD=bash {agent}", "--set", "GENESIS_PHASES=Builder")
    code = wait_end(home, "the fleet", machines)
    assert code == 0, machines.log("home")[-4000:]
    on_origin = parse(git(remote, "show", f"{target}:TASKS.md"))
    assert {t.text: t.state for t in on_origin.items} == {text: DONE for text in TEXTS}
    assert git(project, "rev-parse", target) == git(remote, "rev-parse", target)
    ticks = git(remote, "log", "--format=%s", target).splitlines()
    for text in TEXTS:  # each task came home once: one tick commit each
        assert sum(1 for s in ticks if text in s) == 1, ticks
    for host in ("A", "B"):  # both machines ran tasks, each in a clone of its own
        ran = list(machines.roots[host].glob("*/fleet/children/*.log"))
        assert ran, f"machine {host} ran no attempt\n{machines.log(f'worker-{host}')[-2000:]}"
        assert list(machines.roots[host].glob("*/repo/.git"))
