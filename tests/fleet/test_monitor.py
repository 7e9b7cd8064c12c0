"""The monitor's own refusals and its re-adoption, with real locks, real git and stand-in loops
(the whole fleet runs in tests/scenarios/test_fleet.py)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from helpers.git import git
from helpers.procs import lock_held
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.config import default_layout, resolve
from genesis.fleet import monitor as mon
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.resources import fleet_settings
from genesis.fleet.taskref import branch_for, task_id
from genesis.ledger.store import Ledger
from genesis.store.atomicio import write_json
from genesis.store.layout import private_dir, state_dir_of
from genesis.trust import approve

TASK = "add the widget"


def with_tasks(project: Path, *texts: str) -> Path:
    (project / "TASKS.md").write_text("".join(f"- [ ] {t}\n" for t in texts))
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", "tasks")
    return project


def test_a_fleet_is_refused_while_a_single_loop_runs_on_the_project(project, capsys):
    with_tasks(project, TASK)
    with lock_held(default_layout(project), "single-run") as holder:
        assert mon.run_fleet(project, {}, "2") == exitcodes.LOCKED
    said = capsys.readouterr().err
    assert f"a single Genesis loop runs on {project} (pid {holder.pid}, run single-run)" in said
    assert not (state_dir_of(project) / "fleet" / "ledger.sqlite3").exists()  # nothing started


def test_a_second_monitor_is_refused_naming_the_running_one(project, capsys):
    with_tasks(project, TASK)
    fleet = private_dir(private_dir(state_dir_of(project)) / "fleet")
    write_json(fleet / "monitor.json", {"pid": 4242, "run_id": "fleet-x", "started": 1.0, "at": time.time()})
    fd = os.open(fleet / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert mon.run_fleet(project, {}, "2") == exitcodes.LOCKED
    finally:
        os.close(fd)
    assert f"a fleet monitor already runs on {project} (pid 4242, run fleet-x)" in capsys.readouterr().err


def test_a_command_genesis_conf_names_unapproved_refuses_the_fleet_as_a_loop(project, capsys):
    with_tasks(project, TASK)
    state = private_dir(state_dir_of(project))
    approve([], state)  # an earlier start approved what there was: nothing
    (project / "orchestrator").mkdir()
    (project / "orchestrator" / "genesis.conf").write_text("GENESIS_NOTIFY_CMD=touch /tmp/pwned\n")
    assert mon.run_fleet(project, {}, "2") == exitcodes.UNTRUSTED_COMMAND
    assert "GENESIS_NOTIFY_CMD" in capsys.readouterr().err
    assert not (state / "loop.json").exists()  # the project's lock let go again


def monitor_of(project: Path, ledger: FleetLedger) -> mon.Monitor:
    cfg = resolve(project, flags={"GENESIS_FLEET_MEMORY_FLOOR_MB": "0", "GENESIS_FLEET_STAGGER_SECONDS": "0"})
    fleet_dir = private_dir(private_dir(state_dir_of(project)) / "fleet")
    return mon.Monitor(project, cfg, fleet_settings(cfg.settings), 3, ledger, fleet_dir, "fleet-test",
                       mon.project_branch(project), {})


def test_a_restarted_monitor_adopts_the_running_child_and_launches_no_duplicate(project, tmp_path):
    with_tasks(project, TASK)
    ident = task_id(TASK)
    wt = tmp_path / "wt"
    git(project, "worktree", "add", "-q", "-b", branch_for(ident), str(wt))
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led, lock_held(default_layout(wt), "child-run") as child:
        led.upsert_task(TaskRow(ident, TASK, "running", attempts=1, branch=branch_for(ident), worktree=str(wt),
                                pid=child.pid))
        led.begin_attempt(ident, "start", "", "configured", "", time.time())
        monitor = monitor_of(project, led)
        monitor.reconcile()
        assert list(monitor.children) == [ident] and monitor.children[ident].pid == child.pid
        monitor.launches(monitor.sync_queue())  # the same task is open: it already has its child
        monitor.check_children()
        assert not led.events("launch")
        assert [(e.task_id, e.detail["pid"]) for e in led.events("adopted")] == [(ident, child.pid)]
        assert led.task(ident).state == "running" and led.task(ident).run_id == "child-run"


def test_a_child_that_ended_while_no_monitor_watched_is_taken_over(project, tmp_path):
    with_tasks(project, TASK)
    ident = task_id(TASK)
    wt = tmp_path / "wt"
    git(project, "worktree", "add", "-q", "-b", branch_for(ident), str(wt))
    (wt / "TASKS.md").write_text(f"- [x] {TASK}\n")
    git(wt, "commit", "-qam", "done")
    layout = default_layout(wt)
    private_dir(layout.state_dir)
    with Ledger.open(layout.ledger_file) as child_ledger:
        child_ledger.record("child-run", "loop_end", reason="done: the work is finished", exit_code=0)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, "running", attempts=1, branch=branch_for(ident), worktree=str(wt),
                                run_id="child-run", pid=999_999))
        led.begin_attempt(ident, "start", "", "configured", "child-run", time.time())
        monitor = monitor_of(project, led)
        monitor.reconcile()
        monitor.check_children()
        assert led.task(ident).state == "merging"
        (end,) = led.events("child_end")
        assert (end.detail["exit_code"], end.detail["outcome"]) == (0, "verified")
        assert [m.task_id for m in monitor.merges] == [ident]


def test_a_fleet_alert_reaches_the_users_alert_command(project, tmp_path):
    with_tasks(project, TASK)
    told = tmp_path / "told.json"
    notify = tmp_path / "notify.sh"
    notify.write_text(f"#!/bin/sh\ncat >{told}\n")
    notify.chmod(0o755)
    cfg_flags = {"GENESIS_NOTIFY_CMD": str(notify)}
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = monitor_of(project, led)
        monitor.cfg = resolve(project, flags={**cfg_flags, "GENESIS_FLEET_MEMORY_FLOOR_MB": "0"})
        monitor.alert(ident := task_id(TASK), "critical", f"task failed permanently: {TASK}",
                      "attempt 8 failed\nafter 3 restarts; " + "x" * 400, "reopen it\nwhen fixed")
        assert [(e.task_id, e.detail["severity"]) for e in led.events("alert")] == [(ident, "critical")]
    wait_for(lambda: told.exists() and told.stat().st_size > 0, 30, "the alert command")
    ticket = json.loads(told.read_text())
    assert ticket["severity"] == "critical" and ticket["cause"] == f"task failed permanently: {TASK}"
    assert all(len(line) <= 200 and "\n" not in line for line in ticket["lines"])
