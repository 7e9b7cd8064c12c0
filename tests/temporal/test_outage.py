"""The home rides out an outage of the Temporal server: the dev server SIGKILLed while the
fleet's agents work, 30 s away, then started again on the same port and SQLite file. The home
says it is unreachable (console and status), keeps its fleet, and the fleet ends merged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, fleet_project, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import GENESIS, Machines, origin_for  # noqa: E402

from genesis.repo.tasks import DONE, parse  # noqa: E402
from genesis.store.layout import state_dir_of  # noqa: E402
from genesis.temporal import binary  # noqa: E402

from .conftest import dev_binary  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXTS = ["write the alpha note", "write the beta note"]
OUTAGE = 30.0
FLEET_WAIT = 300.0


def wait_for(what: str, check, world: Machines, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s\n{world.log('home')[-3000:]}\n" \
                                            f"{world.log('worker-A')[-2000:]}"
        time.sleep(0.2)


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
    server = own_server[0]
    port = int(server.address.rpartition(":")[2])
    world = Machines(tmp_path, server.address, f"t{uuid.uuid4().hex[:8]}",
                     fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS="3", GENESIS_TEMPORAL_HOST_WAIT_SECONDS="4",
                               HEARTBEAT_STALE="300s"))
    try:
        fleet_project(project, TEXTS)
        remote = origin_for(project, tmp_path)
        target = git(project, "symbolic-ref", "--short", "HEAD").strip()
        agent = task_agent(tmp_path / "agent.sh")
        slow = tmp_path / "slow"
        slow.write_text("held\n")
        world.env["SLOW_FILE"] = str(slow)
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
        deadline = time.monotonic() + FLEET_WAIT
        while home.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        said = world.log("home")
        assert home.returncode == 0, said[-4000:] + world.log("worker-A")[-3000:]
        assert "Traceback" not in said, said[-4000:]
        assert _since(monitor) is None
        on_origin = parse(git(remote, "show", f"{target}:TASKS.md"))
        assert {t.text: t.state for t in on_origin.items} == {text: DONE for text in TEXTS}
        ticks = git(remote, "log", "--format=%s", target).splitlines()
        for text in TEXTS:   # each came home once
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
