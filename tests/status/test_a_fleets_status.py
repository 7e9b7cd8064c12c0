"""`genesis status` (and `--watch`) on a project where a fleet runs shows the fleet: its
monitor and its tasks one line each, not a loop "between phases" with "no breaker file yet"."""

from __future__ import annotations

import io
import os
import time

from helpers.dashboard import fleet_running, task

from genesis import exitcodes
from genesis.config import default_layout
from genesis.status.screen import run_status
from genesis.store.looplock import FLEET_RUN, hold


def test_a_project_whose_fleet_runs_shows_the_fleet(project, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    now = time.time()
    lay = default_layout(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    lock = hold(lay.loop_lock, lay.loop_record, FLEET_RUN + "20261128T010000Z-1")  # as the monitor holds it
    monitor = fleet_running(project, now, [task("add-parser-aaaaaa", "queued", now, text="add the parser"),
                                           task("never-works-bbbbbb", "failed", now, text="never works",
                                                reason="the ladder is spent")])
    try:
        out = io.StringIO()
        code = run_status(project, out=out, clock=lambda: now)
    finally:
        os.close(lock)
        os.close(monitor)
    text = out.getvalue()
    assert code == exitcodes.OK
    assert "fleet RUNNING" in text and "between phases" not in text and "no breaker file" not in text, text
    assert sum(1 for line in text.splitlines() if line.startswith("never-works-bbbbbb")) == 1, text
    assert "the ladder is spent" in text
    rows = [line for line in text.splitlines() if line.startswith(("task ", "add-parser", "never-works"))]
    assert len(rows) == 3 and max(len(line) for line in rows) <= 80, text
