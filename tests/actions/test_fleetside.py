"""The fleet's monitor heeding the requests: pause holds every launch until resume, a retry of
a running task stops its child loop (a real process) with the monitor's own signal, so that its
end counts as stopped (relaunched at once), a skip of a running task marks it and keeps it failed
once its child ended, and each request is recorded with what came of it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from actions.helpers_fleet import reviewed_fleet
from fleet.test_monitor import TASK, Clock, clocked, no_child, with_tasks
from helpers.git import git

from genesis.actions import inbox
from genesis.actions.fleetside import heed
from genesis.config import default_layout, resolve
from genesis.fleet import children as kids
from genesis.fleet.ledger import FleetLedger, TaskRow


def monitor(tmp_path: Path, ledger: FleetLedger, children: dict) -> SimpleNamespace:
    return SimpleNamespace(fleet_dir=tmp_path, ledger=ledger, children=children, paused=False, cfg=None)


def test_pause_then_resume_and_each_is_recorded(tmp_path):
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as ledger:
        m = monitor(tmp_path, ledger, {})
        inbox.submit(tmp_path / inbox.FOLDER, inbox.Request("pause", 1.0, "dashboard", "key k"))
        heed(m)
        assert m.paused is True
        inbox.submit(tmp_path / inbox.FOLDER, inbox.Request("resume", 2.0, "alert", "link n"))
        heed(m)
        assert m.paused is False
        done = [(e.detail["action"], e.detail["source"], e.detail["credential"]) for e in ledger.events("action_done")]
        assert done == [("pause", "dashboard", "key k"), ("resume", "alert", "link n")]
        assert not list((tmp_path / inbox.FOLDER).iterdir())


def test_a_retry_stops_the_running_child_with_the_monitors_signal(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        with FleetLedger.open(tmp_path / "ledger.sqlite3") as ledger:
            ledger.upsert_task(TaskRow("t1", "Do t1", "running", created=1.0, updated=1.0))
            child = kids.Child("t1", tmp_path, proc.pid, 0.0, time.time(), 1, popen=proc)
            m = monitor(tmp_path, ledger, {"t1": child})
            inbox.submit(tmp_path / inbox.FOLDER, inbox.Request("retry", 1.0, "terminal", task="t1"))
            heed(m)
            assert proc.wait(timeout=20) != 0
            assert child.signalled is not None
            [done] = ledger.events("action_done")
            assert done.task_id == "t1" and "starts again at once" in done.detail["said"]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_skipped_running_task_is_marked_stopped_and_stays_failed_once_its_child_ended(tmp_path):
    project, ids, _ = reviewed_fleet(tmp_path, {"add the parser": "running"})
    tid = ids["add the parser"]
    fleet = default_layout(project).state_dir / "fleet"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        with FleetLedger.open(fleet / "ledger.sqlite3") as ledger:
            child = kids.Child(tid, tmp_path, proc.pid, 0.0, time.time(), 1, popen=proc)
            m = SimpleNamespace(fleet_dir=fleet, ledger=ledger, children={tid: child}, paused=False,
                                cfg=resolve(project))
            inbox.submit(fleet / inbox.FOLDER, inbox.Request("skip", 1.0, "alert", task=tid))
            heed(m)
            assert proc.wait(timeout=20) != 0
            ledger.set_state(tid, "queued", "stopped by the monitor")   # what the monitor's ended() does
            heed(m)                                   # its child is still in the monitor's books: it waits
            assert ledger.task(tid).state == "queued"
            del m.children[tid]
            heed(m)
            assert ledger.task(tid).state == "failed"
            assert not list((fleet / inbox.FOLDER).iterdir())
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "- [!] add the parser (failed: skipped from the alert)" in git(project, "show", "HEAD:TASKS.md")


def test_the_real_monitor_launches_nothing_while_paused_and_again_once_resumed(project, tmp_path, monkeypatch):
    with_tasks(project, TASK)
    asked = no_child(monkeypatch)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, Clock())
        inbox.submit(monitor.fleet_dir / inbox.FOLDER, inbox.Request("pause", 1.0, "dashboard"))
        monitor.tick()
        assert monitor.paused and asked == []
        monitor.tick()
        assert asked == []                                           # still paused at the next check
        inbox.submit(monitor.fleet_dir / inbox.FOLDER, inbox.Request("resume", 2.0, "alert"))
        monitor.tick()
        assert not monitor.paused and [s.text for s in asked] == [TASK]
        assert [e.detail["action"] for e in led.events("action_done")] == ["pause", "resume"]
