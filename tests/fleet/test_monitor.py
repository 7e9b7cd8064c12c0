"""The monitor over real git and real ledgers: its own refusals and its re-adoption, with real locks
and stand-in loops, and a fleet's paths replayed, the monitor fed what its children would have
left (the whole fleet runs in tests/scenarios/test_fleet.py)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.fleet import fleet_project
from helpers.git import git, new_repo
from helpers.procs import lock_held
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.agents.base import Limit
from genesis.config import default_layout, layout_for, resolve
from genesis.fleet import monitor as mon
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.resources import fleet_settings
from genesis.fleet.taskref import branch_for, task_id
from genesis.ledger.store import Ledger
from genesis.loop import agentgo
from genesis.loop.step import Step
from genesis.loop.waiting import plan_limit
from genesis.repo.tasks import DONE, parse
from genesis.reporting.fleet import load, render_text, timeline
from genesis.store.atomicio import write_json
from genesis.store.layout import private_dir, state_dir_of
from genesis.store.looplock import current_holder
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


def ended_child(project: Path, tmp_path: Path, evidence: str) -> Path:
    """A child's worktree whose loop ticked its task `[x]` and ended 0, its own ledger holding the
    tick and Genesis's evidence of it (`evidence`: its outcome)."""
    with_tasks(project, TASK)
    ident = task_id(TASK)
    wt = tmp_path / "wt"
    git(project, "worktree", "add", "-q", "-b", branch_for(ident), str(wt))
    (wt / "TASKS.md").write_text(f"- [x] {TASK}\n")
    git(wt, "commit", "-qam", "done")
    layout = default_layout(wt)
    private_dir(layout.state_dir)
    with Ledger.open(layout.ledger_file) as child_ledger:
        child_ledger.record("child-run", "phase_work", iteration=1, phase="Builder", tasks_done=[TASK])
        child_ledger.record("child-run", "task_evidence", iteration=1, phase="Builder", task=TASK, outcome=evidence)
        child_ledger.record("child-run", "loop_end", reason="done: the work is finished", exit_code=0)
    return wt


def test_a_child_that_ended_while_no_monitor_watched_is_taken_over(project, tmp_path):
    wt = ended_child(project, tmp_path, "agent's word")
    ident = task_id(TASK)
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


def test_a_childs_end_keeps_the_model_its_phases_used_and_their_cost(project, tmp_path):
    """The child's ledger goes with its worktree after the merge: its `child_end` keeps the model
    (the newest phase that named one) and the cost."""
    wt = ended_child(project, tmp_path, "agent's word")
    with Ledger.open(default_layout(wt).ledger_file) as child_ledger:
        child_ledger.record("child-run", "phase_end", iteration=1, phase="Builder", cost_usd=0.25,
                            model_used="claude-opus-4-5")
        child_ledger.record("child-run", "phase_end", iteration=1, phase="Criticizer", cost_usd=0.5)
        child_ledger.record("other-run", "phase_end", iteration=1, phase="Builder", model_used="claude-haiku-4-5")
    ident = task_id(TASK)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, "running", attempts=1, branch=branch_for(ident), worktree=str(wt),
                                run_id="child-run", pid=999_999))
        led.begin_attempt(ident, "start", "", "configured", "child-run", time.time())
        monitor = monitor_of(project, led)
        monitor.reconcile()
        monitor.check_children()
        (end,) = led.events("child_end")
        assert (end.detail["model_used"], end.detail["cost_usd"]) == ("claude-opus-4-5", 0.75)


def test_a_childs_end_with_a_corrupt_ledger_names_no_model(project, tmp_path):
    wt = ended_child(project, tmp_path, "agent's word")
    default_layout(wt).ledger_file.write_bytes(b"not a database" * 100)
    ident = task_id(TASK)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, "running", attempts=1, branch=branch_for(ident), worktree=str(wt),
                                run_id="child-run", pid=999_999))
        led.begin_attempt(ident, "start", "", "configured", "child-run", time.time())
        monitor = monitor_of(project, led)
        monitor.reconcile()
        monitor.check_children()
        (end,) = led.events("child_end")
        assert end.detail["model_used"] is None and "vanished" in end.detail["reason"]


def test_a_child_whose_task_is_ticked_on_its_branch_but_refuted_by_its_evidence_is_not_verified(project, tmp_path):
    """Its loop ended 0 with `[x]` on its branch (its reopening was never committed): its own
    ledger's evidence refutes the tick, so nothing of its branch is queued to come home."""
    wt = ended_child(project, tmp_path, "failed")
    ident = task_id(TASK)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, "running", attempts=1, branch=branch_for(ident), worktree=str(wt),
                                run_id="child-run", pid=999_999))
        led.begin_attempt(ident, "start", "", "configured", "child-run", time.time())
        monitor = monitor_of(project, led)
        monitor.reconcile()
        monitor.check_children()
        (end,) = led.events("child_end")
        assert (end.detail["exit_code"], end.detail["outcome"]) == (0, "failed")
        assert end.detail["reason"] == ("its task is [x] on its branch, but it was ticked done without evidence "
                                        "that bears it out")
        assert monitor.merges == [] and led.task(ident).state != "merging"


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


# -- the review's findings: each with the monitor over a real repository and a real ledger ------------


class Clock:
    def __init__(self, at: float = 1_000_000.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def clocked(project: Path, ledger: FleetLedger, clock: Clock, **flags: str) -> mon.Monitor:
    cfg = resolve(project, flags={"GENESIS_FLEET_MEMORY_FLOOR_MB": "0", "GENESIS_FLEET_STAGGER_SECONDS": "0",
                                  **flags})
    fleet_dir = private_dir(private_dir(state_dir_of(project)) / "fleet")
    return mon.Monitor(project, cfg, fleet_settings(cfg.settings), 3, ledger, fleet_dir, "fleet-test",
                       mon.project_branch(project), {}, clock=clock)


def no_child(monkeypatch) -> list:
    """The child's start fails as an exec would (nothing real is launched); the specs asked for."""
    asked: list = []

    def launch(spec, env, now, *a, **kw):
        asked.append(spec)
        raise OSError("no loop in this test")

    monkeypatch.setattr(mon.kids, "launch", launch)
    return asked


def test_a_relaunch_commits_what_the_killed_attempt_left_so_the_next_child_can_start(project, tmp_path, monkeypatch):
    with_tasks(project, TASK)
    ident = task_id(TASK)
    asked = no_child(monkeypatch)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, Clock())
        wt = worktrees_create(monitor, ident)
        led.upsert_task(TaskRow(ident, TASK, "restarting", attempts=1, branch=branch_for(ident), worktree=str(wt),
                                reason="exit 137"))
        led.begin_attempt(ident, "start", "", "configured", "", 1.0)
        led.end_attempt(ident, 1, 137, "failed", 2.0)
        (wt / "README.md").write_text("half done by the killed agent\n")
        monitor.launches(monitor.sync_queue())
        assert [s.attempt for s in asked] == [2]
        assert git(wt, "status", "--porcelain") == ""
        assert git(wt, "log", "-1", "--format=%s").strip() == "Genesis: work left by attempt 1, which ended: exit 137"
        assert [e.detail["attempt"] for e in led.events("leftovers")] == [1]


def worktrees_create(monitor: mon.Monitor, ident: str) -> Path:
    return mon.worktrees.create(monitor.project, monitor.root, ident, branch_for(ident), monitor.target)


def test_the_exit_code_is_this_runs_a_task_failed_in_an_earlier_run_is_not_its_news(project, tmp_path):
    with_tasks(project, TASK)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow("old-one", "an old task", "failed"))
        led.record("failed_permanently", "old-one", reason="an earlier night")
        led.upsert_task(TaskRow("old-two", "another old task", "needs-review"))
        led.record("needs_review", "old-two", reason="an earlier night")
        monitor = clocked(project, led, Clock())
        monitor.start_seq = led.record("fleet_start", run_id="fleet-test")
        assert monitor.exit_code() == exitcodes.OK
        led.upsert_task(TaskRow("new", "a task of tonight", "needs-review"))
        led.record("needs_review", "new", reason="a conflict tonight")
        assert monitor.exit_code() == exitcodes.FLEET_NEEDS_REVIEW


@pytest.mark.parametrize("was", ["failed", "merged"])
def test_a_task_open_again_on_the_project_branch_starts_fresh(project, tmp_path, monkeypatch, was):
    with_tasks(project, TASK)  # reopened by the user (`[!]` -> `[ ]`), or a new task that reads the same
    ident = task_id(TASK)
    asked = no_child(monkeypatch)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, was, strategy=2, attempts=8, restarts=3, escalations=2,
                                branch=branch_for(ident)))
        for n in range(1, 9):
            led.begin_attempt(ident, "start" if n == 1 else "restart", "", "configured", "", float(n))
            led.end_attempt(ident, n, 1, "failed", n + 0.5)
        monitor = clocked(project, led, Clock())
        monitor.launches(monitor.sync_queue())
        row = led.task(ident)
        assert (row.state, row.strategy, row.restarts, row.escalations) == ("queued", 0, 0, 0)
        assert [s.attempt for s in asked] == [9] and led.attempts(ident)[-1].kind == "start"
        assert len(led.attempts(ident)) == 9  # the old attempts stay in the history
        assert [e.detail["was"] for e in led.events("reopened")] == [was]


def test_a_failed_tasks_held_mark_survives_the_monitor_and_is_made_once_the_checkout_is_clean(project, tmp_path):
    with_tasks(project, TASK)
    ident = task_id(TASK)
    (project / "README.md").write_text("the user's edit, not committed\n")
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, "restarting", branch=branch_for(ident)))
        first = clocked(project, led, Clock())
        first.fail(led.task(ident), "3 escalations spent")
        assert led.task(ident).state == "failed" and "[ ]" in git(project, "show", "HEAD:TASKS.md")
        assert [e.task_id for e in led.events("mark_pending")] == [ident]
        second = clocked(project, led, Clock())  # the next night's monitor
        assert second.unmarked == {ident: "3 escalations spent"}
        second.sync_queue()
        assert led.task(ident).state == "failed"  # still `[ ]` only because the mark waits: not reopened
        git(project, "checkout", "README.md")
        second.tick()
        assert "- [!] " + TASK in git(project, "show", "HEAD:TASKS.md")
        assert not second.unmarked and [e.task_id for e in led.events("marked")] == [ident]
        assert clocked(project, led, Clock()).unmarked == {}


def test_a_task_removed_by_hand_is_not_relaunched_and_holds_nothing_open(project, tmp_path, monkeypatch):
    with_tasks(project, "another task")  # TASK was removed from the list by the user
    ident = task_id(TASK)
    asked = no_child(monkeypatch)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, "restarting", attempts=1, branch=branch_for(ident), not_before=0.0))
        led.begin_attempt(ident, "start", "", "configured", "", 1.0)
        led.end_attempt(ident, 1, 1, "failed", 2.0)
        monitor = clocked(project, led, Clock())
        rows = monitor.sync_queue()
        monitor.launches([r for r in rows if r.id == ident])
        assert not asked and len(led.attempts(ident)) == 1
        row = led.task(ident)
        assert (row.state, row.reason) == ("queued", f"no longer open on {monitor.target}")
        assert monitor.done([r for r in led.tasks() if r.id == ident])


def test_checks_that_keep_failing_end_the_fleet_with_1_and_its_end_recorded(project, tmp_path, monkeypatch, capsys):
    with_tasks(project, TASK)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, Clock(), GENESIS_FLEET_CHECK_SECONDS="0.05")
        calls = []

        def tick():
            calls.append(1)
            raise mon.GitTimeout("git show", project, 60)

        monkeypatch.setattr(monitor, "tick", tick)
        assert mon._run(monitor) == exitcodes.ERROR
        assert len(calls) == mon.TICK_ERRORS
        (end,) = led.events("fleet_end")
        assert end.detail["exit_code"] == exitcodes.ERROR and "checks in a row failed" in end.detail["reason"]
    assert "a check failed (1 of" in capsys.readouterr().err


def test_a_relaunched_task_gets_a_port_slot_no_running_child_holds(project, tmp_path):
    with_tasks(project, TASK)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, Clock())
        assert monitor._slot("a") == 0
        monitor.children["a"] = None
        assert monitor._slot("b") == 1
        monitor.children["b"] = None
        del monitor.children["a"]  # A failed
        assert monitor._slot("c") == 0
        monitor.children["c"] = None
        assert monitor._slot("a") == 2  # A relaunches: slot 0 is C's now
        del monitor.children["c"]
        monitor.children["a"] = None
        assert monitor._slot("a") == 2  # its own slot while it holds it


def test_a_worktree_git_cannot_make_for_a_moment_is_tried_again_not_sent_to_review(project, tmp_path, monkeypatch):
    with_tasks(project, TASK)
    ident = task_id(TASK)
    asked = no_child(monkeypatch)
    lock = project / ".git" / "refs" / "heads" / "genesis" / "task" / f"{ident}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")  # another git holds the branch's ref lock
    clock = Clock()
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, clock)
        monitor.launches(monitor.sync_queue())
        row = led.task(ident)
        assert row.state == "waiting" and "try 1 of" in row.reason and not led.events("needs_review")
        clock.at += 5
        monitor.launches(monitor.sync_queue())
        assert "try 1 of" in led.task(ident).reason  # not before its retry time
        lock.unlink()
        clock.at += mon.WORKTREE_RETRY
        monitor.launches(monitor.sync_queue())
        assert [s.attempt for s in asked] == [1] and not led.events("needs_review")


def test_a_worktree_that_keeps_failing_needs_review_in_the_end(project, tmp_path, monkeypatch):
    with_tasks(project, TASK)
    ident = task_id(TASK)
    no_child(monkeypatch)

    def create(*a, **kw):
        raise mon.GitTimeout("git worktree add", project, 120)

    monkeypatch.setattr(mon.worktrees, "create", create)
    clock = Clock()
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, clock)
        for _ in range(mon.WORKTREE_TRIES):
            monitor.launches(monitor.sync_queue())
            clock.at += mon.WORKTREE_RETRY + 1
        assert led.task(ident).state == "needs-review"
        assert [e.detail["outcome"] for e in led.events("needs_review")] == ["worktree"]


def test_an_attempt_whose_end_was_never_recorded_is_closed_and_stops_counting(project, tmp_path):
    with_tasks(project, TASK)
    ident = task_id(TASK)
    clock = Clock()
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow(ident, TASK, "restarting", attempts=1, branch=branch_for(ident)))
        led.begin_attempt(ident, "start", "", "configured", "", clock.at - 3600)  # the monitor was SIGKILLed
        monitor = clocked(project, led, clock)
        monitor.reconcile()
        (attempt,) = led.attempts(ident)
        assert attempt.ended == clock.at and attempt.outcome == "stopped"
        assert monitor._ran_within(clock.at + monitor.gate.policy.window + 1) == 0


def test_the_monitor_beats_before_each_step_that_may_block(project, tmp_path, monkeypatch):
    with_tasks(project, TASK)
    clock = Clock()
    seen = []
    real = mon.worktrees.create

    def create(*a, **kw):
        seen.append(json.loads((monitor.fleet_dir / mon.MONITOR_FILE).read_text())["at"])
        return real(*a, **kw)

    monkeypatch.setattr(mon.worktrees, "create", create)
    no_child(monkeypatch)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, clock)
        monitor.beat()
        clock.at += 50  # a check's earlier steps took a while
        monitor.launches(monitor.sync_queue())
        assert seen == [clock.at]


def test_several_projects_exit_with_the_worst_of_their_codes():
    assert mon.worst_exit([exitcodes.OK, exitcodes.FLEET_NEEDS_REVIEW, exitcodes.FLEET_TASKS_FAILED]) == \
        exitcodes.FLEET_TASKS_FAILED
    assert mon.worst_exit([exitcodes.FLEET_NEEDS_REVIEW, exitcodes.OK]) == exitcodes.FLEET_NEEDS_REVIEW
    assert mon.worst_exit([exitcodes.FLEET_TASKS_FAILED, exitcodes.DISK_FULL]) == exitcodes.DISK_FULL
    assert mon.worst_exit([exitcodes.DISK_FULL, exitcodes.INTERRUPTED_TERM, exitcodes.OK]) == \
        exitcodes.INTERRUPTED_TERM
    assert mon.worst_exit([exitcodes.OK, exitcodes.OK]) == exitcodes.OK


def test_several_projects_share_one_cascade_gate_rebuilt_from_the_ledger_that_saw_it_last(project, tmp_path):
    other = with_tasks(new_repo(tmp_path / "other"), "add the gadget")
    with_tasks(project, TASK)
    with FleetLedger.open(tmp_path / "a.sqlite3") as a, FleetLedger.open(tmp_path / "b.sqlite3") as b:
        b.record("cascade_pause", None, reason="3 of 4 children failed")  # an earlier night paused the gate
        first, second = monitor_of(project, a), monitor_of(other, b)
        assert first.gate.state == "open" and second.gate.state == "paused"
        mon.share([first, second], max_parallel=2)
        assert first.gate is second.gate and first.gate.state == "paused"
        assert first.failures is second.failures and first.peers == [first, second]
        step = first.gate.probe_ended(False, time.time())  # not probing: nothing; a resume is recorded everywhere
        assert step.event is None
        first.gate_step(first.gate._resume(time.time(), "the probe's task was verified"))
        assert [e.task_id for e in a.events("cascade_resume")] == [None]
        assert [e.detail["project"] for e in b.events("cascade_resume")] == [str(project)]


def test_a_cascade_is_said_as_the_fleets_own_line_not_as_an_error_of_the_users(project, tmp_path, capsys):
    with_tasks(project, TASK)
    now = time.time()
    with FleetLedger.open(tmp_path / "a.sqlite3") as led:
        monitor = monitor_of(project, led)
        monitor.failures.extend((now, f"task {n}") for n in range(3))
        monitor.gate_step(monitor.gate.observe(now, monitor.failures, 4))
        assert monitor.gate.state == "paused"
    said = capsys.readouterr().err
    assert re.search(r"^\[genesis fleet \d\d:\d\d:\d\d\] cascade: 3 of 4 children failed within ", said, re.M), said
    assert "genesis: error:" not in said


def test_the_same_task_failing_in_two_projects_counts_as_two_children_for_the_shared_gate(project, tmp_path):
    other = with_tasks(new_repo(tmp_path / "other"), TASK)
    with_tasks(project, TASK)
    now = time.time()
    with FleetLedger.open(tmp_path / "a.sqlite3") as a, FleetLedger.open(tmp_path / "b.sqlite3") as b:
        first, second = monitor_of(project, a), monitor_of(other, b)
        mon.share([first, second], max_parallel=None)
        for monitor in (first, second):  # one task id, two projects: two children failed
            monitor.failures.append((now, monitor.who(task_id(TASK))))
        assert first.gate.observe(now, first.failures, 2).action == "pause"
        assert second.gate.state == "paused"


def test_a_check_that_blocks_in_one_project_beats_for_every_project_of_the_fleet_file(project, tmp_path):
    other = with_tasks(new_repo(tmp_path / "other"), "add the gadget")
    with_tasks(project, TASK)
    clock = Clock()
    with FleetLedger.open(tmp_path / "a.sqlite3") as a, FleetLedger.open(tmp_path / "b.sqlite3") as b:
        first, second = clocked(project, a, clock), clocked(other, b, clock)
        mon.share([first, second], max_parallel=None)
        clock.at += 50
        first.beat()  # before a step of the first project's that may block for minutes
        assert json.loads((second.fleet_dir / mon.MONITOR_FILE).read_text())["at"] == clock.at


def test_launches_go_round_the_projects_not_to_the_first_in_the_file(project, tmp_path, monkeypatch):
    other = with_tasks(new_repo(tmp_path / "other"), "add the gadget")
    with_tasks(project, TASK)
    order: list[str] = []
    last = [-1e9]

    def tick(self):  # a launch whenever the shared stagger allows, six in all
        self.launched = len(order) < 6 and time.monotonic() - last[0] >= self.fleet.stagger
        if self.launched:
            order.append(self.project.name)
            last[0] = time.monotonic()
        return len(order) >= 6

    monkeypatch.setattr(mon.Monitor, "tick", tick)
    knobs = {"GENESIS_FLEET_CHECK_SECONDS": "2", "GENESIS_FLEET_STAGGER_SECONDS": "0.1"}
    with FleetLedger.open(tmp_path / "a.sqlite3") as a, FleetLedger.open(tmp_path / "b.sqlite3") as b:
        first, second = clocked(project, a, Clock(), **knobs), clocked(other, b, Clock(), **knobs)
        mon.share([first, second], max_parallel=None)
        assert mon._run_all([first, second]) == exitcodes.OK
    assert order == [project.name, other.name] * 3


@pytest.mark.parametrize("ends", ["finished", "gave up"])
def test_a_project_whose_fleet_ended_lets_its_locks_go_and_leaves_its_peers(project, tmp_path, monkeypatch, ends):
    other = with_tasks(new_repo(tmp_path / "other"), "add the gadget")
    with_tasks(project, TASK)
    layout = default_layout(project)
    seen = []

    def fleet_lock_free() -> bool:
        fd = os.open(layout.state_dir / "fleet" / "lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def tick(self):
        if self.project == project.resolve():
            if ends == "gave up":  # its checks keep failing: the monitor gives up on it
                raise mon.GitTimeout("git show", project, 60)
            return True  # every task of the first project is finished at once
        seen.append((current_holder(layout.loop_lock, layout.loop_record), fleet_lock_free(),
                     [m.project for m in self.peers]))
        return seen[-1][0] is None or len(seen) >= 100  # the other goes on (bounded)

    monkeypatch.setattr(mon.Monitor, "tick", tick)
    knobs = {"GENESIS_FLEET_CHECK_SECONDS": "0.05"}
    code = mon.run_projects([(project, knobs, "1"), (other, knobs, "1")])
    assert code == (exitcodes.OK if ends == "finished" else exitcodes.ERROR)
    assert seen[-1] == (None, True, [other.resolve()])


def test_the_ports_of_the_children_a_project_that_gave_up_left_running_stay_theirs(project, tmp_path, monkeypatch):
    other = with_tasks(new_repo(tmp_path / "other"), "add the gadget")
    with_tasks(project, TASK)
    slots = []

    def tick(self):
        if self is first:
            raise mon.GitTimeout("git show", project, 60)  # the monitor gives up on it: its child runs on
        if first.ended_code is None:
            return False
        slots.append(self._slot("b"))
        return True

    monkeypatch.setattr(mon.Monitor, "tick", tick)
    knobs = {"GENESIS_FLEET_CHECK_SECONDS": "0.05"}
    with FleetLedger.open(tmp_path / "a.sqlite3") as a, FleetLedger.open(tmp_path / "b.sqlite3") as b:
        first, second = clocked(project, a, Clock(), **knobs), clocked(other, b, Clock(), **knobs)
        first.children["a"], first.slots["a"] = None, 0
        mon.share([first, second], max_parallel=None)
        assert mon._run_all([first, second]) == exitcodes.ERROR
    assert slots == [1]  # not slot 0, its child's


def test_agents_killed_inside_running_children_pause_the_restarts_as_child_deaths_do(project, tmp_path):
    """The OOM killer takes agents, not their loops: each loop would restart its agent on its own.
    The monitor reads the deaths from the children's ledgers and its next check pauses the fleet."""
    with_tasks(project, TASK)
    now = time.time()
    with FleetLedger.open(tmp_path / "a.sqlite3") as led:
        monitor = monitor_of(project, led)
        for n in range(3):
            wt = new_repo(tmp_path / f"wt{n}")
            child = mon.kids.Child(f"t{n}", wt, 0, 0.0, now, 1, run_id=f"run-{n}")
            child.layout = default_layout(wt)
            private_dir(child.layout.state_dir)
            with Ledger.open(child.layout.ledger_file) as own:
                own.record(f"run-{n}", "phase_end", at=now - 1, returncode=-9 if n < 2 else 0, killed=0)
            monitor.children[f"t{n}"] = child
            led.upsert_task(TaskRow(f"t{n}", f"task {n}", "running", attempts=1, updated=now, created=now))
            led.begin_attempt(f"t{n}", "start", "", "configured", f"run-{n}", now - 10)
        monitor.agent_deaths(now)
        assert sorted(monitor.failures) == [(now - 1, "t0"), (now - 1, "t1")]
        assert [e.task_id for e in led.events("agent_died")] == ["t0", "t1"]
        told = [m for m in timeline(led.events()) if "agent was killed" in m.what]   # the report's timeline
        assert [m.task_id for m in told] == ["t0", "t1"]
        monitor.agent_deaths(now + 10)   # read once each
        assert len(monitor.failures) == 2
        monitor.apply(monitor.decided(mon.decide.TimePassed(now, monitor._ran_within(now))))
        assert monitor.gate.state == "paused" and [e.kind for e in led.events("cascade_pause")] == ["cascade_pause"]
        assert [e.detail["cause"] for e in led.events("alert")] == ["cascade: many children failed at once"]
        # A monitor started again counts the deaths it did not see itself.
        again = monitor_of(project, led)
        assert sorted(again.failures) == [(now - 1, "t0"), (now - 1, "t1")]


def test_an_agent_killed_inside_its_child_starts_again_only_on_the_restart_budgets_go(project, tmp_path):
    """The monitor reads the deaths, asks the restart budget (one restart a minute) and answers
    in monitor.json; each child's loop reads its answer before it starts an agent again
    (loop/agentgo.py): the oldest death goes, the next is held to the budget's next restart,
    one whose loop already started an agent again is not asked about, and a monitor started
    again counts the go as a spent restart."""
    with_tasks(project, TASK)
    now = time.time()
    steps = {}
    with FleetLedger.open(tmp_path / "a.sqlite3") as led:
        monitor = monitor_of(project, led)
        assert monitor.budget.every == 60
        for n in range(3):
            wt = new_repo(tmp_path / f"wt{n}")
            child = mon.kids.Child(f"t{n}", wt, 0, 0.0, now, 1, run_id=f"run-{n}")
            child.layout = default_layout(wt)
            private_dir(child.layout.state_dir)
            with Ledger.open(child.layout.ledger_file) as own:
                own.record(f"run-{n}", "phase_end", at=now - 5 + n, returncode=137, killed=0)
                if n == 2:   # this loop started its agent again already (the monitor was down meanwhile)
                    own.record(f"run-{n}", "phase_start", at=now - 1)
            monitor.children[f"t{n}"] = child
            led.upsert_task(TaskRow(f"t{n}", f"task {n}", "running", attempts=1, updated=now, created=now))
            steps[f"t{n}"] = Step(resolve(wt, env={}), child.layout, f"run-{n}", lambda *_: None)
        env = {"GENESIS_FLEET_DIR": str(monitor.fleet_dir)}
        monitor.beat()
        for task in ("t0", "t1"):   # not read yet: they ask again soon
            assert agentgo.wait_for_go(steps[task], "Builder", 1, {**env, "GENESIS_TASK_ID": task}, now) == \
                exitcodes.WAIT
        monitor.agent_deaths(now)
        monitor.agent_restarts(now)
        answers = json.loads((monitor.fleet_dir / "monitor.json").read_text())["agent_restarts"]
        assert answers == {"t0": {"died": now - 5}, "t1": {"died": now - 4, "held": now + 60}}
        assert [e.task_id for e in led.events("agent_restart")] == ["t0"]
        (held,) = led.events("budget_held")
        assert held.task_id == "t1" and held.detail["reason"].startswith("the restart budget: next restart at")
        assert agentgo.wait_for_go(steps["t0"], "Builder", 1, {**env, "GENESIS_TASK_ID": "t0"}, now) is None
        assert agentgo.wait_for_go(steps["t1"], "Builder", 1, {**env, "GENESIS_TASK_ID": "t1"}, now) == \
            exitcodes.WAIT
        wait = json.loads(steps["t1"].layout.wait_file.read_text())
        assert (wait["kind"], wait["until"], wait["phase"]) == ("budget", now + 60, "Builder")
        monitor.agent_restarts(now + 30)   # still held: said once
        assert len(led.events("budget_held")) == 1 and len(led.events("agent_restart")) == 1
        # A monitor started again rebuilds the budget from the go it gave.
        assert now + 60 <= monitor_of(project, led).budget.next_at(now) <= time.time() + 60
        monitor.agent_restarts(now + 60)
        assert json.loads((monitor.fleet_dir / "monitor.json").read_text())["agent_restarts"]["t1"] == \
            {"died": now - 4}
        assert agentgo.wait_for_go(steps["t1"], "Builder", 1, {**env, "GENESIS_TASK_ID": "t1"}, now + 60) is None


# -- a fleet's paths, replayed: the monitor fed what its children would have left, no child process --
# (each one's whole fleet, where it has one, is in tests/scenarios/test_fleet.py)


def dropping_launches(monitor: mon.Monitor) -> None:
    """Whatever the monitor launched after all (the test then fails) does not outlive the test."""
    for child in monitor.children.values():
        if child is not None and child.popen is not None:
            child.popen.kill()
            child.popen.wait()


def test_once_the_stop_flag_says_false_nothing_new_starts_and_the_fleet_is_over_with_no_child(project, tmp_path):
    with_tasks(project, TASK)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, Clock())
        monitor.cfg.stop_flag.parent.mkdir(parents=True, exist_ok=True)
        monitor.cfg.stop_flag.write_text("false\n")  # what `genesis stop` writes
        try:
            monitor.read_stop()
            monitor.launches(monitor.sync_queue())
        finally:
            dropping_launches(monitor)
        row = led.task(task_id(TASK))
        assert monitor.stopping and not monitor.children and not led.events("launch")
        assert (row.state, row.attempts) == ("queued", 0)  # the next start takes it up
        assert monitor.done(led.tasks())


def started_loop(project: Path) -> Step:
    """A started run of a loop of this user on another project (the account store is the user's)."""
    cfg = resolve(project, env={})
    layout = layout_for(cfg)
    private_dir(layout.state_dir)
    step = Step(cfg, layout, "run-single", lambda msg, kind="info": None)
    step.event("loop_start")
    return step


def test_a_usage_limit_another_loop_met_holds_every_launch_until_its_reset_and_margin(project, tmp_path):
    """Another loop of this user met a 5-hour limit of the same CLI and account: the fleet starts no
    child, its task `waiting` and why, until the reset and its margin."""
    with_tasks(project, TASK)
    clock = Clock(time.time())
    limit = Limit(clock.at + 600, "five_hour", "You've hit your 5-hour limit")
    assert plan_limit(started_loop(new_repo(tmp_path / "single")), limit, "Builder", 1, clock.at) == exitcodes.WAIT
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, clock, GENESIS_LIMIT_MARGIN_SECONDS="2")
        try:
            for _ in range(3):  # several checks
                clock.at += 1
                monitor.launches(monitor.sync_queue())
        finally:
            dropping_launches(monitor)
        (row,) = led.tasks()
        (hold,) = led.events("limit_hold")
        assert not led.events("launch") and row.state == "waiting" and "usage limit of claude" in row.reason
        assert hold.detail["until"] == limit.resets_at + 2
        assert monitor.known_limit(limit.resets_at + 1) and not led.events("limit_resume")  # within the margin
        assert monitor.known_limit(limit.resets_at + 2 + mon.LIMIT_CHECK) == ""
        assert [e.kind for e in led.events("limit_resume")] == ["limit_resume"]


def verified(monitor: mon.Monitor, text: str, files: dict[str, str]) -> TaskRow:
    """A task as its verified attempt leaves it: its work committed on its branch, its task ticked
    there, queued for the merge."""
    ident = task_id(text)
    wt = worktrees_create(monitor, ident)
    for name, content in files.items():
        (wt / name).write_text(content)
    (wt / "TASKS.md").write_text((wt / "TASKS.md").read_text().replace(f"- [ ] {text}", f"- [x] {text}"))
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", text)
    row = TaskRow(ident, text, "merging", attempts=1, branch=branch_for(ident), worktree=str(wt))
    monitor.ledger.upsert_task(row)
    monitor.ledger.begin_attempt(ident, "start", "", "configured", "", monitor.clock())
    monitor.ledger.end_attempt(ident, 1, 0, "verified", monitor.clock())
    return row


def merge(monitor: mon.Monitor, row: TaskRow) -> None:
    """The merge queue's step for the task, as the monitor takes it (its result recorded)."""
    monitor.merged(row, monitor._merge(row), monitor.clock())


# The Merger is the configured agent, run once in the task's worktree on the conflict: this one
# keeps its own task's line and drops the other task's.
ONE_SIDED = """#!/usr/bin/env bash
echo "${GENESIS_AGENT} ${GENESIS_TASK_ID} in ${PWD}" >>"${0%.sh}.ran"
printf '%s\\n' "${GENESIS_TASK}" >shared.txt
git add shared.txt
"""


def test_a_conflict_the_merger_resolves_by_dropping_the_other_tasks_line_needs_review_naming_the_hunk(project,
                                                                                                     tmp_path):
    (project / "shared.txt").write_text("nobody yet\n")
    git(project, "add", "shared.txt")
    fleet_project(project, ["say hello", "say goodbye"])
    merger = script(tmp_path / "merger.sh", ONE_SIDED)
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, Clock(), GENESIS_AGENT_CMD=f"bash {merger}")
        hello, goodbye = (verified(monitor, text, {"shared.txt": f"{text}\n"}) for text in ("say hello", "say goodbye"))
        merge(monitor, hello)
        merge(monitor, goodbye)
        rows = {r.id: r for r in led.tasks()}
        (asked,) = led.events("merger")
        (review,) = led.events("needs_review")
        alerts = [(e.task_id, e.detail["severity"]) for e in led.events("alert")]
    assert (rows[hello.id].state, rows[goodbye.id].state) == ("merged", "needs-review")
    assert (tmp_path / "merger.ran").read_text() == f"Merger {goodbye.id} in {goodbye.worktree}\n"  # once
    assert asked.task_id == review.task_id == goodbye.id and asked.detail["files"] == ["shared.txt"]
    # Not landed: the lost hunk named with the task whose commit on the project branch added it.
    assert review.detail["outcome"] == "dropped"
    (lost,) = review.detail["lost"]
    assert lost.startswith("shared.txt line 1 (added by the task 'say hello' (its commit ")
    assert lost.endswith(" on the project branch): 'say hello')")
    assert "would drop what was added" in rows[goodbye.id].reason and "not landed" in rows[goodbye.id].reason
    assert alerts == [(goodbye.id, "high")]
    assert git(project, "show", "HEAD:shared.txt") == "say hello\n"
    assert git(project, "show", f"{goodbye.branch}:shared.txt") == "say goodbye\n"  # its branch kept as it was


# Two tasks' work together, unmended, fails the project's check (each alone passes).
CLASH = ("if [ \"$(ls work-*.txt 2>/dev/null | wc -l)\" -gt 1 ] && [ ! -e mended.txt ]; then "
         "echo 'FAILED test_clash: the two works clash'; exit 1; fi")


def test_a_merge_that_breaks_the_projects_check_goes_back_to_its_task_told_the_tail_and_lands_once_mended(
        project, tmp_path):
    fleet_project(project, ["add the parser", "add the printer"])
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, Clock(), GENESIS_CHECK_CMD=CLASH)
        parser, printer = (verified(monitor, text, {f"work-{task_id(text)}.txt": f"{text}\n"})
                           for text in ("add the parser", "add the printer"))
        merge(monitor, parser)
        home = git(project, "rev-parse", "HEAD").strip()
        merge(monitor, printer)
        (red,) = led.events("merge_red")
        row = led.task(printer.id)
        assert git(project, "rev-parse", "HEAD").strip() == home  # nothing red landed
        assert red.task_id == printer.id and red.detail["to"] == "task"
        assert "the project's check" in red.detail["reason"] and "exited 1" in red.detail["reason"]
        assert red.detail["tail"] == ["FAILED test_clash: the two works clash"]
        assert [(c["kind"], c["exit_code"]) for c in red.detail["checks"]] == [("project", 1)]
        # The verified attempt counts as failed; the ladder restarts the task, told on its branch.
        assert [a.outcome for a in led.attempts(printer.id)] == ["failed"]
        assert (row.state, row.restarts) == ("restarting", 1)
        told = (Path(printer.worktree) / "TASKS.md").read_text()
        assert "- [ ] add the printer" in told and "its merge onto" in told
        assert "FAILED test_clash: the two works clash" in told
        # The next attempt mends it (its task ticked again) and comes home green.
        (Path(printer.worktree) / "mended.txt").write_text("mended\n")
        (Path(printer.worktree) / "TASKS.md").write_text(told.replace("- [ ] add the printer", "- [x] add the printer"))
        git(Path(printer.worktree), "add", "-A")
        git(Path(printer.worktree), "commit", "-qm", "mend the clash")
        led.set_state(printer.id, "merging", "queued for the merge queue")
        merge(monitor, row)
        (merged,) = [e for e in led.events("merged") if e.task_id == printer.id]
        assert led.task(printer.id).state == "merged"
    assert [c["exit_code"] for c in merged.detail["checks"]] == [0]
    tasks = git(project, "show", "HEAD:TASKS.md")
    assert {t.text: t.state for t in parse(tasks).items} == {"add the parser": DONE, "add the printer": DONE}
    assert "Genesis:" not in tasks  # the note was the attempt's, never the project's
    assert git(project, "show", "HEAD:mended.txt") == "mended\n"


def test_a_planner_that_added_nothing_is_no_merged_task_of_the_report(project, tmp_path):
    fleet_project(project, ["write the readme"])
    ident = task_id("write the readme")
    clock = Clock()
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        monitor = clocked(project, led, clock)
        led.upsert_task(TaskRow(ident, "write the readme", "merged", attempts=1, branch=branch_for(ident)))
        led.begin_attempt(ident, "start", "", "configured", "run-1", clock.at - 60)
        led.end_attempt(ident, 1, 0, "verified", clock.at - 30)
        led.record("merged", ident, sha="abc", commits=["abc"])
        # The Planner's pass, once nothing was open: its child ended 0 with no commit on its branch.
        planner = mon.PLANNER + monitor.run_id.lower()
        branch = f"genesis/plan/{monitor.run_id}"
        wt = mon.worktrees.create(project, monitor.root, planner, branch, monitor.target)
        row = TaskRow(planner, mon.PLANNER_TEXT, "running", attempts=1, branch=branch, worktree=str(wt))
        led.upsert_task(row)
        led.begin_attempt(planner, "start", "", "configured", "run-plan", clock.at - 20)
        monitor.planner_ended(row, mon.kids.Child(planner, wt, 0, 0.0, clock.at - 20, 1, run_id="run-plan"),
                              mon.kids.Ending(exitcodes.OK, clock.at, "done: the work is finished"))
        assert led.task(planner).state == "merged" and not monitor.merges  # nothing to merge
        assert led.task(planner).reason == "the Planner added nothing: the fleet is done"
    report = render_text(load(tmp_path / "ledger.sqlite3", project, False, clock.at))
    assert "1 task: 1 merged; the Planner: nothing-added" in report, report
    assert "tasks merged without escalation: 1 of 1 task (1 merged in all)" in " ".join(report.split())
