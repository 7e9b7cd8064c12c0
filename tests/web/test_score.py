"""The health score (genesis/web/score.py) of real documents: `status --json` of loops written as
the loop writes them (ledger, lock, health and heartbeat files, breaker), and `fleet status --json`
built by the fleet's own document function; each cause takes its points, capped causes stop at
their cap, the score stops at 0, and the machine is as healthy as its worst project."""

from __future__ import annotations

import calendar
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers.git import new_repo
from helpers.waits import wait_for

from genesis.clock import iso
from genesis.fleet.ledger import TaskRow
from genesis.fleet.status import ChildView, FleetStatus, Hold, Monitor, TaskView, document
from genesis.ledger.store import Ledger
from genesis.loop.breaker import BreakerState
from genesis.status.screen import run_status
from genesis.status.view import layout_of
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold
from genesis.web.score import COSTS, Reason, Score, machine_score, score

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
RUN = "20251121T003000Z-4242"
TABLE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "dashboard.md"  # the score's table

pytestmark = pytest.mark.usefixtures("utc")


@pytest.fixture
def utc(monkeypatch):
    """The reader's zone is UTC, so the clock times said are known."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def status_doc(project: Path, now: float = T0) -> dict:
    out = io.StringIO()
    run_status(project, out=out, clock=lambda: now, as_json=True)
    return json.loads(out.getvalue())


def loop(project: Path, *, health: str = "healthy", beat_age: float = 4.0, attempt: int = 0, incidents: int = 0,
         breaker: str = "CLOSED", end: tuple[int, str] | None = None, held: bool = True) -> int | None:
    """A loop of one run, in iteration 1's Builder (attempt `attempt`), as its files say; the
    lock's descriptor when it holds it (the caller closes it)."""
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    fd = hold(lay.loop_lock, lay.loop_record, RUN) if held else None
    with Ledger.open(lay.ledger_file) as led:
        led.record(RUN, "loop_start", at=T0 - 3600, project=str(project), pid=os.getpid(), agent=["claude"])
        led.record(RUN, "iteration_start", at=T0 - 3000, iteration=1)
        for i in range(incidents):
            led.record(RUN, "incident", at=T0 - 2000 + i, iteration=1, phase="Builder", id=f"inc-{i}", kind="stuck")
        led.record(RUN, "phase_start", at=T0 - 1800, iteration=1, phase="Builder", epoch=T0 - 1800, attempt=attempt,
                   log="b.log")
        if end is not None:
            led.record(RUN, "loop_end", at=T0 - 60, exit_code=end[0], reason=end[1])
    lay.heartbeat_dir.mkdir(parents=True, exist_ok=True)
    write_json(lay.heartbeat_file("Builder"), {"epoch": T0 - beat_age, "tool": "Bash", "event": "PreToolUse",
                                               "run_id": RUN})
    write_json(lay.health_file("Builder"), {"run_id": RUN, "phase": "Builder", "iteration": 1, "at": iso(T0 - 2),
                                            "classification": health, "stall_score": 0.5, "reason": "judged"})
    if breaker != "CLOSED":
        lay.orchestrator.mkdir(exist_ok=True)
        state = BreakerState(state=breaker, no_progress_count=3, last_iteration=1, updated_at=iso(T0 - 100),
                             opened_at=iso(T0 - 100), retry_at=iso(T0 + 900))
        lay.breaker_file.write_text(json.dumps(state.to_json()))
    return fd


def scored(project: Path, **kw) -> tuple[dict, Score]:
    fd = loop(project, **kw)
    try:
        doc = status_doc(project)
    finally:
        if fd is not None:
            os.close(fd)
    return doc, score(doc, None, T0)


def whys(s: Score) -> list[str]:
    return [r.why for r in s.reasons]


def test_a_healthy_running_loop_scores_100(project):
    doc, s = scored(project)
    assert doc["state"] == "running" and doc["phase"]["health_class"] == "healthy"
    assert s == Score(100, ())


def test_a_stuck_retry_under_an_open_breaker_with_incidents_loses_each_causes_points(project):
    doc, s = scored(project, health="stuck", attempt=1, incidents=2, breaker="OPEN")
    assert (doc["breaker"]["state"], doc["totals"]["incidents"], doc["phase"]["attempt"]) == ("OPEN", 2, 1)
    assert s.reasons == (Reason(-30, "circuit breaker OPEN: the loop made no progress (-30)"),
                         Reason(-25, "Builder stuck (-25)"),
                         Reason(-10, "2 incidents this run (-10)"),
                         Reason(-5, "Builder is running again after a stall (retry 1) (-5)"))
    assert s.value == 100 - 30 - 25 - 10 - 5


def test_a_slow_agent_silent_past_the_default_stale_window_and_a_half_open_breaker(project):
    _doc, s = scored(project, health="slow", beat_age=20 * 60, breaker="HALF_OPEN")
    assert whys(s) == ["Builder: no heartbeat for 20m00s (-15)",
                       "circuit breaker HALF_OPEN: progress is stalling (-10)", "Builder slow (-10)"]
    assert s.value == 65


def test_incidents_are_capped_so_that_one_noisy_cause_cannot_hide_the_others(project):
    _doc, s = scored(project, incidents=7)
    assert s == Score(80, (Reason(-20, "7 incidents this run (-20)"),))


def test_a_loop_that_ended_abnormally_and_one_that_ended_well(tmp_path):
    broken, done = new_repo(tmp_path / "broken"), new_repo(tmp_path / "done")
    doc, s = scored(broken, end=(3, "circuit breaker OPEN"), breaker="OPEN", held=False)
    assert doc["state"] == "not_running" and doc["run"]["exit_code"] == 3
    assert whys(s) == ["the loop ended abnormally: circuit breaker OPEN (-30)"] and s.value == 70  # said once
    doc, s = scored(done, end=(0, "max iterations reached"), health="stuck", held=False)
    assert doc["state"] == "not_running" and s == Score(100, ())  # an old health file of an ended run is no news


def test_a_killed_loop_is_an_abnormal_end(tmp_path):
    doc, s = scored(new_repo(tmp_path / "silent"), held=False)  # its run has no end, no process holds its lock
    assert doc["state"] == "stopped"
    assert s == Score(70, (Reason(-30, "the loop was killed: its run has no end (-30)"),))
    told = "the loop was killed (SIGKILL?): its companion recorded the end"  # as loop/lostloop.py words it
    doc, s = scored(new_repo(tmp_path / "told"), end=(137, told), held=False)
    assert doc["state"] == "stopped" and s == Score(70, (Reason(-30, f"{told} (-30)"),))


def test_a_frozen_loop_takes_its_points_and_its_phase_is_not_judged(project, procs):
    loop(project, health="stuck", held=False)
    lay = layout_of(project)
    holder = procs([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                    "from genesis.store.looplock import hold; hold(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]); "
                    "print('held', flush=True); time.sleep(120)", str(lay.loop_lock), str(lay.loop_record), RUN],
                   stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    os.kill(holder.pid, signal.SIGSTOP)  # as a user's Ctrl-Z, or a debugger
    wait_for(lambda: psutil.Process(holder.pid).status() == psutil.STATUS_STOPPED, 10, "the holder to be stopped")
    doc = status_doc(project)
    assert doc["state"] == "frozen"
    assert score(doc, None, T0) == \
        Score(75, (Reason(-25, "the loop's process is stopped (frozen): nothing moves (-25)"),))


def test_a_usage_limit_wait_takes_a_little_and_says_until_when(project):
    fd = loop(project)
    lay = layout_of(project)
    with Ledger.open(lay.ledger_file) as led:
        led.record(RUN, "phase_end", at=T0 - 60, iteration=1, phase="Builder", status="exited", ending="limit")
        led.record(RUN, "wait_start", at=T0 - 30, kind="limit", until=T0 + 1800, phase="Builder", iteration=1,
                   reason="usage limit")
    write_json(lay.wait_file, {"run_id": RUN, "kind": "limit", "until": T0 + 1800, "reason": "usage limit",
                               "phase": "Builder", "iteration": 1})
    try:
        doc = status_doc(project)
    finally:
        os.close(fd)
    assert doc["state"] == "waiting"
    assert score(doc, None, T0) == Score(95, (Reason(-5, "waiting: usage limit until 02:00 UTC (-5)"),))


# --- fleets: documents of the fleet's own document function ------------------------------------

def task(ident: str, state: str, health: str | None = None, beat_age: float = 3.0) -> TaskView:
    child = ChildView(True, "RUNNING", f"run-{ident}", "Builder", 1, health, 0.4, T0 - beat_age, None, None) \
        if state == "running" else None
    return TaskView(TaskRow(ident, f"Add {ident}", state, attempts=1, updated=T0 - 10, created=T0 - 900),
                    "configured", T0 - 800, child)


def fleet(tasks: tuple[TaskView, ...], *, alive: bool = True, beat_age: float = 2.0, cascade: bool = False,
          limit: bool = False, ended: tuple[int, str] | None = None) -> dict:
    monitor = Monitor(alive, 4242 if alive else None, "fleet-run", T0 - 1000, T0 - beat_age)
    fs = FleetStatus(Path("/srv/api"), T0, True, "fleet-run", 4, T0 - 1000, T0 - 5 if ended else None,
                     ended[0] if ended else None, ended[1] if ended else "", monitor,
                     Hold("limit", "held", T0 - 60, T0 + 600, "usage limit", "a") if limit else None,
                     Hold("cascade", "paused", T0 - 30, None, "3 of 4 children failed", None) if cascade else None,
                     tasks)
    return document(fs)


def test_a_fleet_loses_points_for_each_task_in_trouble_and_for_its_cascade_pause():
    doc = fleet((task("stuckone", "running", "stuck"), task("slowone", "running", "slow"),
                 task("fine", "running", "healthy"), task("broken", "failed"), task("conflict", "needs-review"),
                 task("again", "restarting"), task("merged", "merged")), cascade=True)
    assert doc["state"] == "running" and doc["cascade"]["state"] == "paused"
    s = score(None, doc, T0)
    assert whys(s) == ["task failed permanently: Add broken (-30)",
                       "cascade pause: too many children failed, restarts are held (-25)", "Add stuckone stuck (-25)",
                       "Add slowone slow (-10)",
                       "task needs review: Add conflict (-10)", "task restarting: Add again (-5)"]
    assert s.value == max(0, 100 - 30 - 25 - 25 - 10 - 10 - 5)


def test_restarts_are_capped_the_score_stops_at_zero_and_a_silent_monitor_counts():
    restarting = tuple(task(f"r{i}", "restarting" if i % 2 else "escalated") for i in range(5))
    assert score(None, fleet(restarting), T0) == Score(85, (Reason(-5, "task escalated: Add r0 (-5)"),
                                                            Reason(-5, "task restarting: Add r1 (-5)"),
                                                            Reason(-5, "task escalated: Add r2 (-5)")))
    failed = score(None, fleet(tuple(task(f"f{i}", "failed") for i in range(6))), T0)
    assert failed.value == 0 and len(failed.reasons) == 6
    quiet = score(None, fleet((task("a", "running", "healthy"),), beat_age=300, limit=True), T0)
    assert whys(quiet) == ["the fleet's monitor has not beaten for 5m00s (-15)",
                           "the fleet waits for a usage limit until 01:40 UTC (-5)"]


def test_a_fleet_whose_monitor_was_killed_or_that_ended_badly_and_one_that_ended_well():
    killed = fleet((task("a", "queued"),), alive=False)
    assert killed["state"] == "stopped"
    assert whys(score(None, killed, T0)) == ["the fleet's monitor was killed: no end recorded (-30)"]
    bad = score(None, fleet((), alive=False, ended=(26, "its state was taken")), T0)
    assert bad == Score(70, (Reason(-30, "the fleet ended abnormally: its state was taken (-30)"),))
    # Its failed task is counted once, by itself: exit 31 says the same.
    well = score(None, fleet((task("b", "failed"),), alive=False, ended=(31, "1 failed")), T0)
    assert whys(well) == ["task failed permanently: Add b (-30)"]
    assert score(None, fleet((task("b", "failed"),), alive=False, ended=(31, "1 failed")), T0).value < 80  # not green


def test_a_project_that_cannot_be_read_and_one_read_in_part(project):
    assert score(None, None, T0, error="the ledger is locked") == \
        Score(50, (Reason(-50, "cannot be read: the ledger is locked (-50)"),))
    assert score(None, None, T0).value == 50
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True)
    lay.ledger_file.write_bytes(b"this is not a database" * 100)
    doc = status_doc(project)
    assert doc["error"].startswith("the ledger cannot be read")
    (reason,) = score(doc, None, T0).reasons
    assert reason.points == -10 and reason.why.startswith("part of the loop's state cannot be read: the ledger")


def test_the_machine_is_as_healthy_as_its_worst_project_with_its_reasons_named():
    good, bad = Score(95, (Reason(-5, "waiting: usage limit (-5)"),)), Score(70, (Reason(-30, "x (-30)"),))
    assert machine_score([good, bad], ["web", "api"]) == Score(70, (Reason(-30, "api: x (-30)"),))
    assert machine_score([good, bad]) == bad
    assert machine_score([]) == Score(100, ())


def test_the_dashboard_guide_tables_every_cost_with_its_points():
    text = TABLE.read_text()
    table = {m.group(2): int(m.group(1)) for m in re.finditer(r"^\| (-\d+) \| (.+?) \|$", text, re.M)}
    assert {c.what: c.points for c in COSTS.values()} == \
        {what: points for what, points in table.items() if what in {c.what for c in COSTS.values()}}
    assert len([w for w in table if w in {c.what for c in COSTS.values()}]) == len(COSTS)
