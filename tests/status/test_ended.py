"""`genesis status --all` keeps the loops that ended in the last 24 hours, each with how it
ended, when and after how long: a run that ended 2 hours ago is listed, one 30 hours ago
is not; a loop seen running that ends stays listed with its end."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers.procs import LOCK_HOLDER
from rich.console import Console

from genesis import exitcodes
from genesis.ledger.store import Ledger
from genesis.status.loops import Scanner
from genesis.status.screen import _View, render, run_status
from genesis.status.view import layout_of

NOW = time.time()   # the ledger's times are around the real now: a real loop process is looked at too
H = 3600.0
RECENT, OLD, KILLED = "run-ended-2h-ago", "run-ended-30h-ago", "run-killed-10h-ago"

pytestmark = pytest.mark.usefixtures("utc")


def runs(led: Ledger) -> None:
    led.record(OLD, "loop_start", at=NOW - 36 * H, project="/p", pid=1)
    led.record(OLD, "loop_end", at=NOW - 30 * H, reason="reached GENESIS_MAX_ITERATIONS=3", exit_code=0)
    led.record(KILLED, "loop_start", at=NOW - 10 * H, project="/p", pid=2)
    led.record(RECENT, "loop_start", at=NOW - 7 * H, project="/p", pid=3)
    led.record(RECENT, "loop_end", at=NOW - 2 * H, reason="circuit breaker OPEN", exit_code=3)


def with_runs(project) -> None:
    """The project's ledger with three ended runs (see runs)."""
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True)
    with Ledger.open(lay.ledger_file) as led:
        runs(led)


def mine(doc: dict, project) -> list[dict]:
    """The document's loops of this project (other tests' loops may run on this machine too)."""
    return [lp for lp in doc["loops"] if lp["project"] == str(project.resolve())]


def test_a_loop_that_ended_2_hours_ago_is_kept_and_one_30_hours_ago_is_dropped(project):
    with_runs(project)
    out = io.StringIO()
    assert run_status(project, all_loops=True, out=out, clock=lambda: NOW) == exitcodes.NOT_RUNNING
    text = out.getvalue()
    assert "loops and fleets ended in the last 24 hours: " in text  # others of this machine's loops may be counted too
    (recent,) = [ln for ln in text.splitlines() if f"run {RECENT}  " in ln]
    assert f"run {RECENT}  ended {time.strftime('%Y-%m-%d %H:%M', time.gmtime(NOW - 2 * H))} UTC (2h00m ago) after " \
           "5h00m: circuit breaker OPEN (exit 3)" in recent
    (killed,) = [ln for ln in text.splitlines() if f"run {KILLED}  " in ln]
    assert "no end recorded (killed)" in killed
    assert OLD not in text
    assert text.index(f"run {RECENT}  ") < text.index(f"run {KILLED}  ")  # the latest end first

    out = io.StringIO()
    assert run_status(project, all_loops=True, out=out, clock=lambda: NOW, as_json=True) == exitcodes.NOT_RUNNING
    doc = json.loads(out.getvalue())
    ended, killed = mine(doc, project)
    assert (ended["run_id"], ended["state"], ended["exit_code"], ended["reason"]) == \
        (RECENT, "ended", 3, "circuit breaker OPEN")
    assert (ended["ended_epoch"], ended["duration_seconds"], ended["pid"]) == (round(NOW - 2 * H, 3), 5 * H, None)
    assert (killed["run_id"], killed["state"], killed["ended"], killed["exit_code"]) == (KILLED, "stopped", None, None)
    assert doc["exit_code"] == exitcodes.NOT_RUNNING and doc["project"] == str(project.resolve())


def test_without_all_no_ended_loop_is_listed_and_loops_is_null(project):
    with_runs(project)
    out = io.StringIO()
    run_status(project, out=out, clock=lambda: NOW)
    assert "ended in the last" not in out.getvalue()
    out = io.StringIO()
    run_status(project, out=out, clock=lambda: NOW, as_json=True)
    assert json.loads(out.getvalue())["loops"] is None


def test_all_from_inside_a_project_lists_its_ended_loops(project, monkeypatch):
    with_runs(project)
    monkeypatch.chdir(project)
    out = io.StringIO()
    run_status(None, all_loops=True, out=out, clock=lambda: NOW, as_json=True)
    doc = json.loads(out.getvalue())
    assert doc["project"] is None
    assert [lp["run_id"] for lp in mine(doc, project)] == [RECENT, KILLED]


def test_a_loop_seen_running_that_ends_stays_listed_with_its_end(project, procs):
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True)
    run = "run-seen-running"
    loop = procs([sys.executable, "-c", LOCK_HOLDER, str(lay.loop_lock), str(lay.loop_record), run],
                 env={"GENESIS_PROJECT_DIR": str(project)}, stdout=subprocess.PIPE, text=True)
    assert loop.stdout.readline() == "locked\n"
    with Ledger.open(lay.ledger_file) as led:
        led.record(run, "loop_start", at=time.time() - 60, project=str(project), pid=loop.pid)
    # A view of the machine's loops from elsewhere (not the project): it finds the loop by its process.
    view = _View(None, True, 0, time.time, ended=True, scanner=Scanner(budget=10.0))
    first = view.read()
    assert [lp.run_id for lp in first.loops if lp.project == project.resolve()] == [run]
    assert [e.run_id for e in first.ended if e.project == project.resolve()] == []
    os.kill(loop.pid, signal.SIGTERM)
    loop.wait(10)
    with Ledger.open(lay.ledger_file) as led:
        led.record(run, "loop_end", reason="stopped by SIGTERM", exit_code=143)
    later = view.read()
    assert [lp for lp in later.loops if lp.project == project.resolve()] == []
    (ended,) = [e for e in later.ended if e.project == project.resolve()]
    assert (ended.run_id, ended.exit_code, ended.reason) == (run, 143, "stopped by SIGTERM")
    out = io.StringIO()
    Console(file=out, width=250).print(render(later, time.time(), listing=True))
    assert f"run {run}  ended " in out.getvalue() and "stopped by SIGTERM (exit 143)" in out.getvalue()
