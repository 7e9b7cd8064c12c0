"""A fleet on the real dev server, two `genesis worker`s in two separate "machines" (each its own
root, HOME and shared state, one bare origin between them), the home's `genesis fleet run
--engine temporal` at the project's checkout, and the suite's stub task agent: a machine and
then the home lost mid-fleet, the Temporal server lost mid-fleet, a ladder that runs the fallback
agent, a stop at home. (Where an attempt runs: test_placement.py; the fleet's rules, by replay:
tests/fleet/test_decide.py and test_parity.py.) They run one after the other in one worker
(--dist loadfile), and xdist hands out the files with the most tests first: the longest
scenarios start first."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.dashboard import first_line  # noqa: E402
from helpers.fleet import fleet_env, fleet_project, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import GENESIS, Machines, loops_under, origin_for  # noqa: E402

from genesis import exitcodes  # noqa: E402
from genesis.fleet.ledger import FleetLedger  # noqa: E402
from genesis.fleet.taskref import task_id  # noqa: E402
from genesis.repo.tasks import DONE, parse  # noqa: E402
from genesis.store.layout import state_dir_of  # noqa: E402
from genesis.temporal import binary, reading  # noqa: E402
from genesis.temporal.records import fingerprint, fleet_workflow_id  # noqa: E402

from .conftest import dev_binary  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXTS = ["write the alpha note", "write the beta note", "write the gamma note", "write the delta note"]
FLEET_WAIT = 300.0
OUTAGE = 30.0             # seconds the Temporal server is down in the outage scenario


@pytest.fixture
def machines(dev_server, tmp_path):
    world = Machines(tmp_path, dev_server.address, f"t{uuid.uuid4().hex[:8]}",
                     # an agent held by SLOW_FILE (no heartbeat hook) is not stale for the tests' whole wait
                     fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS="3", GENESIS_TEMPORAL_HOST_WAIT_SECONDS="4",
                               HEARTBEAT_STALE="120s"))
    yield world
    world.stop_all()


def wait_for(what: str, check, world: Machines, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s\n{world.log('home')[-2000:]}\n" \
                                            f"{world.log('worker-A')[-2000:]}\n{world.log('worker-B')[-2000:]}"
        time.sleep(0.1)


def held_agent(world, tmp_path: Path) -> tuple[Path, Path]:
    """The task agent, and the file that holds each of its phases while it exists (SLOW_FILE)."""
    slow = tmp_path / "slow"
    slow.write_text("held\n")
    world.env["SLOW_FILE"] = str(slow)
    return task_agent(tmp_path / "agent.sh"), slow


def fleet_id(project, remote) -> str:
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    return fleet_workflow_id(fingerprint(str(remote), target))


async def read_fleet(address: str, fleet: str) -> tuple[dict, dict[str, list]]:
    from temporalio.client import Client

    client = await Client.connect(address)
    memos = await reading.task_memos(client, fleet)
    tries = {task: await reading.tries_of(client.get_workflow_handle(f"{fleet}/{task}")) for task in memos}
    return memos, tries


HISTORIES = Path(__file__).with_name("histories")


async def keep_histories(address: str, fleet: str, name: str) -> None:
    """With TEMPORAL_RECORD_HISTORIES=1 (tests/temporal/record_histories.sh), the fleet's and its
    tasks' histories become the golden set test_replay.py replays."""
    from temporalio.client import Client

    client = await Client.connect(address)
    HISTORIES.mkdir(exist_ok=True)
    for workflow_id in [fleet, *await reading.task_ids(client, fleet)]:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        (HISTORIES / f"{name}--{workflow_id.rpartition('/')[2]}.json").write_text(history.to_json())


def record_histories(machines: Machines, project, remote, name: str) -> None:
    if os.environ.get("TEMPORAL_RECORD_HISTORIES") == "1":
        asyncio.run(keep_histories(machines.address, fleet_id(project, remote), name))


def wait_end(proc, what: str, world: Machines, timeout: float = FLEET_WAIT) -> int:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is not None, f"{what} did not end within {timeout:g}s\n{world.log('home')[-3000:]}\n" \
                                    f"{world.log('worker-A')[-3000:]}\n{world.log('worker-B')[-3000:]}"
    return proc.returncode


@pytest.mark.fault(105)
@pytest.mark.fault(109)
@pytest.mark.fault(201)
def test_a_machine_killed_mid_phase_then_the_home_killed_lose_nothing_each_task_comes_home_once(
        machines, project, tmp_path):
    """Four tasks on two machines. B's power cut (its worker, loops and agents SIGKILLed) while
    its two tasks' agents work: each attempt's heartbeat times out, and Temporal's next try runs
    on A, on a fresh clone of the task's branch. Then the home dies (SIGKILL): the fleet runs on
    in Temporal, and the next start at home takes it over: its merges, its end and its exit code.
    The project branch moved meanwhile (a hostile child's `git update-ref`) is put back by the
    next home, named and recorded as the local monitor does, and no merge builds on it. All four
    come home once, each said at home as the local monitor says it, and read back the same by
    the report, the status, the dashboard and a third clone reading Temporal."""
    fleet_project(project, TEXTS)
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    agent, slow = held_agent(machines, tmp_path)
    machines.worker("B", parallel=2)
    sets = ("--set", f"GENESIS_AGENT_CMD=bash {agent}", "--set", "GENESIS_PHASES=Builder")
    first = machines.home(project, 4, *sets)
    wait_for("two agents working on B", lambda: len(machines.agents("B")) == 2, machines)
    machines.worker("A", parallel=4)
    wait_for("two agents working on A", lambda: len(machines.agents("A")) == 2, machines)
    live, code = live_status(project, machines)      # the home's checkout, read from Temporal
    assert (code, live["state"], live["monitor"]["alive"], len(live["tasks"])) == (0, "running", True, 4), live
    on_b = {line.split()[1] for line in machines.agents("B")}
    killed_at = machines.kill("B")
    wait_for("B's two tasks started again on A", lambda: len(machines.agents("A")) == 4, machines, timeout=60)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    hostile = tmp_path / "hostile"
    git(project, "worktree", "add", "-q", "--detach", str(hostile), target)
    (hostile / "forged.txt").write_text("never the user's\n")
    git(hostile, "add", "forged.txt")
    forged = git(hostile, "commit-tree", git(hostile, "write-tree").strip(), "-p", target, "-m", "forged").strip()
    git(hostile, "update-ref", f"refs/heads/{target}", forged)
    second = machines.home(project, 4, *sets)
    wait_for("the second home took the fleet over", lambda: "takes it over" in machines.log("home"), machines)
    slow.unlink()
    assert wait_end(second, "the fleet", machines) == 0, machines.log("home")[-4000:]

    on_origin = parse(git(remote, "show", f"{target}:TASKS.md"))
    assert {t.text: t.state for t in on_origin.items} == {text: DONE for text in TEXTS}
    assert git(project, "rev-parse", target) == git(remote, "rev-parse", target)
    ticks = git(remote, "log", "--format=%s", target).splitlines()
    for text in TEXTS:  # each task came home once: one tick commit each
        assert sum(1 for s in ticks if text in s) == 1, ticks
    assert len(machines.agents("A") + machines.agents("B")) == 6   # the home's death started no attempt again
    # Cleaned by default: no merged task's branch is left on the remote, nor at home.
    assert git(remote, "for-each-ref", "refs/heads/genesis/task/") == ""
    assert git(project, "for-each-ref", "refs/heads/genesis/task/") == ""
    for host in ("A", "B"):  # both machines ran tasks, each in a clone of its own
        ran = list(machines.roots[host].glob("*/fleet/children/*.log"))
        assert ran, f"machine {host} ran no attempt\n{machines.log(f'worker-{host}')[-2000:]}"
        assert list(machines.roots[host].glob("*/repo/.git"))
    said = machines.log("home")
    for text in TEXTS:   # the homes' console says each start, end and merge, as the local monitor does
        assert re.search(rf"\] started {re.escape(repr(text))} \(start, attempt 1, configured\)", said), said[-3000:]
        assert f"] {text!r} ended: exit 0, verified (" in said, said[-3000:]
        assert re.search(rf"\] {re.escape(repr(text))} came home: [0-9a-f]{{12}}\n", said), said[-3000:]
    assert f"a child moved {target} from " in said and f"to {forged[:10]}" in said, said[-3000:]
    assert forged not in git(remote, "rev-list", target).split()
    with FleetLedger.open(state_dir_of(project) / "fleet" / "ledger.sqlite3", readonly=True) as led:
        (moved,) = led.events("branch_moved")
    assert moved.detail["found"] == forged and moved.detail["put_back"] is True

    memos, tries = asyncio.run(read_fleet(machines.address, fleet_id(project, remote)))
    resumed = []
    for task in on_b:
        (attempt,) = memos[task]["attempts"]   # one Genesis attempt: a lost worker spends no restart
        assert (attempt["outcome"], attempt["host"], attempt["tries"]) == ("verified", "A", 2), attempt
        assert attempt["lost"].startswith("B:") and attempt["fresh_clone"], attempt
        (run,) = [t for t in tries[task] if t.activity == "run_attempt"]
        assert run.attempt == 2 and run.host == "A" and "heartbeat" in run.last_failure.lower(), run
        resumed.append(run.started_at - killed_at)
    for task in set(memos) - on_b:
        (attempt,) = memos[task]["attempts"]
        assert (attempt["host"], attempt["tries"]) == ("A", 1), attempt
    print(f"\nfrom B's death to its phases started again on A: {', '.join(f'{s:.1f}s' for s in resumed)} "
          f"(heartbeat timeout 3s)")
    # Genesis's own report and status at home, from the fleet's copy in the project's ledger.
    report = subprocess.run([*GENESIS, "--project", str(project), "report"], env=machines.env, capture_output=True,
                            text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    attempts = report.stdout.split("timeline ─")[0]
    assert attempts.count("its worker was lost (B: running") == 2, report.stdout
    assert "merged" in report.stdout and "exit 0" in report.stdout, report.stdout
    status = subprocess.run([*GENESIS, "--project", str(project), "fleet", "status", "--json"], env=machines.env,
                            capture_output=True, text=True, timeout=60)
    doc = json.loads(status.stdout)
    assert sorted(t["state"] for t in doc["tasks"]) == ["merged"] * 4, doc
    # And the dashboard at home: the fleet's tasks as tiles; a try lost with B is an attempt of its own.
    tiles = {t["key"].rsplit("--", 1)[1]: t for t in served_tiles(project, machines.env) if t["kind"] == "task"}
    assert {task: (t["state"], t["attempts"]) for task, t in tiles.items()} == {
        task: ("merged", 2 if task in on_b else 1) for task in memos}, tiles
    # From a third machine's clone, the fleet read straight from Temporal says the same.
    laptop = tmp_path / "laptop"
    git(tmp_path, "clone", "-q", "-b", target, str(remote), str(laptop))
    live, code = live_status(laptop, machines)
    assert (code, live["state"], live["fleet"]["exit_code"]) == (0, "ended", 0), live
    assert fleet_id(project, remote) in live["source"], live
    assert {t["id"]: (t["state"], t["attempts"]) for t in live["tasks"]} == {
        task: ("merged", 2 if task in on_b else 1) for task in memos}, live
    screen = subprocess.run([*GENESIS, "--project", str(laptop), "fleet", "status", "--engine", "temporal",
                             *machines.flags()], env={**machines.env, "COLUMNS": "200"}, capture_output=True,
                            text=True, timeout=90)
    assert screen.returncode == 0 and "fleet ENDED" in screen.stdout and "tasks: 4 merged" in screen.stdout, screen
    assert f"read from Temporal at {machines.address}" in screen.stdout, screen.stdout
    record_histories(machines, project, remote, "machine-lost")


def live_status(clone: Path, machines: Machines) -> tuple[dict, int]:
    """`genesis fleet status --engine temporal --json` in a clone of the project: its document and exit code."""
    began = time.monotonic()
    done = subprocess.run([*GENESIS, "--project", str(clone), "fleet", "status", "--engine", "temporal", "--json",
                           *machines.flags()], env=machines.env, capture_output=True, text=True, timeout=90)
    print(f"\nfleet status --engine temporal in {clone.name}: {time.monotonic() - began:.2f}s")
    assert done.stdout.startswith("{"), done.stderr
    return json.loads(done.stdout), done.returncode


def served_tiles(project: Path, env: dict[str, str]) -> list[dict]:
    """The project's tiles as `genesis serve` gives them (/api/state)."""
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        first = first_line(server)
        assert first.startswith("genesis serve: http://127.0.0.1:"), first
        state = httpx.get(first.split(": ", 1)[1].strip() + "api/state", timeout=30).json()
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    (mine,) = [p for p in state["projects"] if Path(p["path"]).resolve() == project.resolve()]
    return mine["tiles"]


FAILING = """#!/usr/bin/env bash
echo "$(basename "$0") ${GENESIS_TASK_ID} ${HOSTNAME_OF_MACHINE:-}" >>"${RAN}"
exit 1
"""


@pytest.mark.fault(106)
def test_a_task_that_always_fails_climbs_the_ladder_to_a_permanent_failure(machines, project, tmp_path):
    fleet_project(project, ["never works"])
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    ran = tmp_path / "ran"
    fallback = task_agent(tmp_path / "fallback.sh", FAILING)
    machines.env.update(RAN=str(ran), GENESIS_FLEET_CHILD_ITERATIONS="1")
    machines.worker("A")
    machines.worker("B")
    home = machines.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp_path / 'agent.sh', FAILING)}",
                         "--set", "GENESIS_PHASES=Builder", "--set", "GENESIS_FLEET_ESCALATION=fallback",
                         "--set", f"GENESIS_FALLBACK_AGENT_CMD=bash {fallback}",
                         "--set", "GENESIS_FLEET_CHILD_ITERATIONS=1", "--set", "GENESIS_FLEET_MAX_TASK_RESTARTS=1")
    assert wait_end(home, "the fleet", machines) == exitcodes.FLEET_TASKS_FAILED, machines.log("home")[-4000:]

    memos, tries = asyncio.run(read_fleet(machines.address, fleet_id(project, remote)))
    memo = memos[task_id("never works")]
    history = [(a["kind"], a["agent"], a["outcome"]) for a in memo["attempts"]]
    # The local fleet's ladder (its counts are replays': tests/fleet/test_decide.py), here with one
    # restart a strategy: the first attempt and its restart, then the fallback and its restart.
    assert history == ([("start", "configured", "failed"), ("restart", "configured", "failed"),
                        ("escalate", "fallback", "failed"), ("restart", "fallback", "failed")])
    assert [line.split()[0] for line in ran.read_text().splitlines()] == ["agent.sh"] * 2 + ["fallback.sh"] * 2
    assert memo["row"]["state"] == "failed"
    assert memo["row"]["reason"].startswith("reached GENESIS_MAX_ITERATIONS=1; attempt 4 failed")   # its cause first
    runs = [t for t in tries[task_id("never works")] if t.activity == "run_attempt"]
    assert len(runs) == 4 and all(t.closed == "failed" and t.attempt == 1 for t in runs)   # never Temporal's retry
    assert "- [!] never works (failed: " in git(remote, "show", f"{target}:TASKS.md")
    assert "- [!] never works (failed: " in git(project, "show", f"{target}:TASKS.md")
    record_histories(machines, project, remote, "ladder")


def test_genesis_stop_at_home_stops_every_machines_loops_and_the_fleet(machines, project, tmp_path):
    """`genesis stop` on the project (its stop flag, as for a local fleet): the home stops the
    fleet's workflow, each running attempt stops its loop where it runs, nothing more starts."""
    fleet_project(project, TEXTS[:2])
    origin_for(project, tmp_path)
    agent, _held = held_agent(machines, tmp_path)
    machines.worker("A", parallel=1)
    machines.worker("B", parallel=1)
    home = machines.home(project, 2, "--set", f"GENESIS_AGENT_CMD=bash {agent}",
                         "--set", "GENESIS_PHASES=Builder")
    wait_for("an agent on each machine", lambda: machines.agents("A") and machines.agents("B"), machines)
    stop = subprocess.run([*GENESIS, "--project", str(project), "stop"], env=machines.env, capture_output=True,
                          text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert wait_end(home, "the stopped fleet", machines, timeout=180) == 0, machines.log("home")[-3000:]
    for host in ("A", "B"):
        assert loops_under(machines.roots[host]) == [], host
    status = subprocess.run([*GENESIS, "--project", str(project), "fleet", "status", "--json"], env=machines.env,
                            capture_output=True, text=True, timeout=60)
    doc = json.loads(status.stdout)
    assert sorted(t["state"] for t in doc["tasks"]) == ["queued", "queued"], doc
    assert len(machines.agents("A") + machines.agents("B")) == 2   # nothing started after the stop


def kill_server(server: binary.DevServer) -> None:
    """The server's power cut: SIGKILL to its process group, nothing flushed on the way out."""
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait()


@pytest.fixture
def own_server(tmp_path):
    """A dev server of this test alone (it is killed and started again), on a fixed port and file."""
    dev_binary()
    db = tmp_path / "temporal.sqlite"
    servers = [binary.start_dev(db, log=tmp_path / "server.log")]
    yield servers
    servers[-1].stop()


def test_a_server_outage_mid_fleet_is_ridden_out_by_the_home(own_server, project, tmp_path):
    """The dev server SIGKILLed while the fleet's agents work, 30 s away, then started again on
    the same port and SQLite file: the home says it is unreachable (console and status), keeps
    its fleet, and the fleet ends merged."""
    server = own_server[0]
    port = int(server.address.rpartition(":")[2])
    world = Machines(tmp_path, server.address, f"t{uuid.uuid4().hex[:8]}",
                     fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS="3", GENESIS_TEMPORAL_HOST_WAIT_SECONDS="4",
                               HEARTBEAT_STALE="300s"))
    try:
        fleet_project(project, TEXTS[:2])
        remote = origin_for(project, tmp_path)
        target = git(project, "symbolic-ref", "--short", "HEAD").strip()
        agent, slow = held_agent(world, tmp_path)
        world.worker("A", parallel=2)
        home = world.home(project, 2, "--set", f"GENESIS_AGENT_CMD=bash {agent}", "--set", "GENESIS_PHASES=Builder")
        wait_for("two agents working on A", lambda: len(world.agents("A")) == 2, world)
        read: list = []

        def running_on_a() -> bool:   # read from Temporal: the running attempt, where it runs, once its
            live = subprocess.run([*GENESIS, "--project", str(project), "fleet", "status", "--engine", "temporal",
                                   "--json", *world.flags()], env=world.env, capture_output=True, text=True,
                                  timeout=90)   # activity's heartbeat (every few seconds) has told its pid
            read[:] = json.loads(live.stdout)["tasks"]
            return all(t["reason"].startswith("attempt 1 on A: running, pid ") for t in read)

        wait_for("the status saying each attempt runs on A, with its pid", running_on_a, world, timeout=30)
        assert [(t["state"], t["attempts"]) for t in read] == [("running", 1)] * 2, read
        assert all(t["run_id"] for t in read), read

        kill_server(server)
        down_at = time.time()
        monitor = _monitor_file(project)
        wait_for("the home saying Temporal is unreachable", lambda: "Temporal unreachable at" in world.log("home"),
                 world, timeout=60)
        wait_for("monitor.json saying since when", lambda: _since(monitor) is not None, world, timeout=30)
        status = subprocess.run([*GENESIS, "--project", str(project), "fleet", "status"], env=world.env,
                                capture_output=True, text=True, timeout=60)
        assert "Temporal unreachable since" in status.stdout and "retrying" in status.stdout, status.stdout
        time.sleep(max(0.0, down_at + OUTAGE - time.time()))
        assert home.poll() is None, world.log("home")[-3000:]

        own_server.append(binary.start_dev(server.db, port=port, log=tmp_path / "server.log"))
        wait_for("the home saying Temporal answers again", lambda: "Temporal answers again" in world.log("home"),
                 world, timeout=90)
        slow.unlink()
        assert wait_end(home, "the fleet", world) == 0, world.log("home")[-4000:] + world.log("worker-A")[-3000:]
        said = world.log("home")
        assert "Traceback" not in said, said[-4000:]
        assert _since(monitor) is None
        on_origin = parse(git(remote, "show", f"{target}:TASKS.md"))
        assert {t.text: t.state for t in on_origin.items} == {text: DONE for text in TEXTS[:2]}
        ticks = git(remote, "log", "--format=%s", target).splitlines()
        for text in TEXTS[:2]:   # each came home once
            assert sum(1 for s in ticks if text in s) == 1, ticks
    finally:
        world.stop_all()


def _monitor_file(project):
    """The home's monitor.json, in the project's state folder."""
    return state_dir_of(project) / "fleet" / "monitor.json"


def _since(monitor) -> float | None:
    try:
        return json.loads(monitor.read_text()).get("temporal_unreachable_since")
    except (OSError, ValueError):
        return None
