"""A fleet's alerts, counted at a local webhook: the fleet tells, not each child. Three tasks
at --parallel 2 with real child loops: one comes home at once; one whose first attempt's
Builder gets stuck (the phase gives up) and whose second attempt does it; one whose agent always
fails. The user gets one push per event that needs them, the stuck phase's follow-up once the
task came home, and one push at the fleet's end: no child's own "night over"."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from helpers.fleet import TASK_AGENT, fleet_dir, fleet_env, fleet_project, start_fleet, task_agent
from helpers.receiver import Receiver
from helpers.state import events_of
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.fleet.taskref import task_id

TASKS = ["add the parser", "flaky task", "never works"]
AGENT = r"""#!/usr/bin/env bash
set -euo pipefail
if [[ ${GENESIS_TASK} == "never works" ]]; then echo "cannot"; exit 1; fi
if [[ ${GENESIS_TASK} == "flaky task" && ! -e ${FIRST}/tried ]]; then
  touch "${FIRST}/tried"
  exec sleep 300
fi
""" + TASK_AGENT.split("\n", 2)[2]


def test_a_fleet_tells_once_per_event_resolves_what_came_home_and_sums_up_its_end(project, tmp_path):
    fleet_project(project, TASKS)
    first = tmp_path / "first"
    first.mkdir()
    with Receiver() as rx:
        env = fleet_env(FIRST=str(first), GENESIS_NOTIFY_DESKTOP="false", GENESIS_NOTIFY_WEBHOOK=f"{rx.url}/hook",
                        GENESIS_NOTIFY_WEBHOOK_MIN_SEVERITY="low", GENESIS_NOTIFY_RETRIES="0",
                        GENESIS_FLEET_CHILD_ITERATIONS="1", GENESIS_FLEET_MAX_TASK_RESTARTS="1",
                        GENESIS_FLEET_MAX_FAILED_TASKS="0", GENESIS_FLEET_CASCADE_PERCENT="0", HEARTBEAT_STALE="2s",
                        HEARTBEAT_COUNT_OUTPUT="true", PHASE_RETRIES="0")
        proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", AGENT), env=env,
                           log=tmp_path / "fleet.log")
        try:
            assert proc.wait(timeout=300) == exitcodes.FLEET_TASKS_FAILED, (tmp_path / "fleet.log").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)
        # Every deliverer recorded what it did in the project's ledger: the fleet's end is the last.
        wait_for(lambda: any(a["ticket"]["kind"] == "fleet_end" for a in events_of(project, kind="alert")), 60,
                 "the fleet end's alert")
        told = events_of(project, kind="alert")
        wait_for(lambda: len(rx.requests) >= sum(1 for a in told if a.get("delivered")), 30, "every push")
        got = [r.json for r in rx.requests]
    kinds = Counter(g["genesis"]["kind"] for g in got)
    titles = [g["text"].splitlines()[0] for g in got]
    # One push per event: the stuck phase, the task that failed for good, its resolution, the end.
    assert kinds == Counter({"phase_failed": 1, "fleet": 1, "resolved": 1, "fleet_end": 1}), titles
    assert not any("night over" in t for t in titles), titles
    name = project.name
    assert all(t.startswith(f"{name}: ") for t in titles), titles  # the project's name, never a task's slug
    stuck = next(g for g in got if g["genesis"]["kind"] == "phase_failed")
    assert stuck["text"].splitlines()[0].startswith(f"{name}: flaky task: Builder")
    assert "Task: flaky task" in stuck["text"]
    failed = next(g for g in got if g["genesis"]["kind"] == "fleet")
    assert failed["genesis"]["severity"] == "critical" and "never works" in failed["text"]
    fixed = next(g for g in got if g["genesis"]["kind"] == "resolved")
    assert fixed["genesis"]["resolves"] == stuck["genesis"]["ticket_id"]
    assert fixed["text"].splitlines()[0] == f"{name}: resolved: flaky task came home"
    end = next(g for g in got if g["genesis"]["kind"] == "fleet_end")
    lines = end["text"].splitlines()
    assert lines[0] == f"{name}: fleet over: 2/3 home, 1 failed", lines
    assert "Came home: add the parser, flaky task." in lines or "Came home: flaky task, add the parser." in lines
    assert any(line.startswith("Failed: never works (") for line in lines), lines
    assert any(line.startswith("Cost ") and "duration" in line for line in lines), lines
    assert lines[-1].startswith("Act: ")
    assert end["genesis"]["final"] is True  # one end (the count above); each push has its own deliverer, so not always last
    # Nothing the children raised is kept from the fleet's list: every alert is in the project's ledger.
    assert {a["ticket"]["kind"] for a in told} >= {"phase_failed", "fleet", "resolved", "fleet_end"}
    assert task_id("flaky task") in next(a for a in told if a["ticket"]["kind"] == "phase_failed")["ticket"]["cause"]
    # Each child's own end report says its fleet tells its end (not "no channel set").
    said = [line for log in (fleet_dir(project) / "children").glob("*.log")
            for line in log.read_text(errors="replace").splitlines() if "final alert:" in line]
    assert said and all("final alert: none of its own (a fleet's child: the fleet tells its end)" in line
                        for line in said), said
