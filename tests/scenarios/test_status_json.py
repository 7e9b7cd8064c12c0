"""`genesis status` of a real loop, asked mid-phase by another process as a probe would: the
JSON document parsed, and a night that crosses midnight totalled as its run, not as a day.

The agent is the simulated Claude Code, with the heartbeat hook installed: iteration 1's
Builder fails (exit 1), the Criticizer is skipped (no TASKS.md), and the Planner is held in
a Bash call (helpers/gate.py) while the test asks. Local midnight is put between the failed
Builder and the question by the reader's TZ (a POSIX zone whose offset makes that second
00:00:00), the way a night run at 22:00 is read at 03:00.
"""

from __future__ import annotations

import json
import math
import subprocess
import time

import pytest
from helpers.gate import gate, simagent
from helpers.loop import GENESIS, LOOP, loop_env
from helpers.state import events_of
from helpers.waits import wait_for
from helpers.zones import zone_with_midnight_at

from genesis import exitcodes


def status(project, *args: str, tz: str) -> subprocess.CompletedProcess:
    return subprocess.run(GENESIS + ["--project", str(project), "status", *args], capture_output=True, text=True,
                          timeout=60, env={**loop_env(), "TZ": tz, "COLUMNS": "250"})


def held_loop(project, tmp_path, procs):
    """The loop in iteration 1's Planner, held, after a failed Builder; (loop, go, Builder's end)."""
    subprocess.run(GENESIS + ["--project", str(project), "hook", "install", "--scope", "local"], check=True,
                   capture_output=True, timeout=60)
    action, ready, go = gate(tmp_path)
    env = loop_env(GENESIS_AGENT_CMD=simagent(f"1:Builder=exit:1,1:Planner={action},*:*=idle"),
                   HEARTBEAT_STALE="120s", TOOL_SILENT="0")
    loop = procs(["bash", str(LOOP), "--project", str(project), "--max-iterations", "1"], env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(ready.exists, 60, "the Planner to be running")
    (builder,) = [e for e in events_of(project) if e["event"] == "phase_end" and e.get("phase") == "Builder"]
    return loop, go, builder["epoch"]


@pytest.mark.fault(87)
def test_fault_87_a_night_across_midnight_is_totalled_as_its_run_and_status_json_is_read_mid_phase(
        project, tmp_path, procs):
    loop, go, builder_end = held_loop(project, tmp_path, procs)
    try:
        midnight = math.ceil(builder_end)  # the failed Builder ended "yesterday"
        wait_for(lambda: time.time() > midnight, 5, "local midnight to pass")
        tz = zone_with_midnight_at(midnight)
        asked = status(project, "--json", tz=tz)
        shown = status(project, tz=tz)
    finally:
        go.touch()
    _out, err = loop.communicate(timeout=120)
    assert loop.returncode == exitcodes.OK, err

    # The screen, read after the midnight: the Builder that failed before it is the run's.
    assert shown.returncode == exitcodes.OK, shown.stderr
    (line,) = [ln for ln in shown.stdout.splitlines() if ln.startswith(("Totals", "Today"))]
    assert " this run, since " in line and " GEN: 1 iteration · 2 phases run: 0 finished, 1 abnormal" in line, line

    assert asked.returncode == exitcodes.OK, asked.stderr
    doc = json.loads(asked.stdout)
    (run_id,) = {e["run_id"] for e in events_of(project) if e["event"] == "loop_start"}
    assert doc["schema"] == 1 and doc["state"] == "running" and doc["exit_code"] == exitcodes.OK
    assert doc["error"] is None and doc["project"] == str(project.resolve())
    assert doc["run"]["id"] == run_id and doc["run"]["iteration"] == 1 and doc["run"]["max_iterations"] == 1
    phase = doc["phase"]
    assert (phase["name"], phase["iteration"], phase["attempt"]) == ("Planner", 1, 0)
    assert isinstance(phase["heartbeat_age_seconds"], float) and 0 <= phase["heartbeat_age_seconds"] < 60
    assert phase["tool_in_flight"]["name"] == "Bash" and isinstance(phase["tool_in_flight"]["seconds"], float)
    assert phase["started"].endswith("Z") and isinstance(phase["started_epoch"], float)
    # The run's totals, across the midnight: the Builder that failed before it is counted.
    totals = doc["totals"]
    assert (totals["scope"], totals["run_id"]) == ("this_run", run_id)
    assert totals["since_epoch"] < midnight <= doc["generated_at_epoch"]
    assert (totals["phases"], totals["abnormal_phases"], totals["phases_by_ending"]) == (2, 1, {"failed": 1})
    assert [e["kind"] for e in doc["events"]][-1] == "phase_start"

