"""The home's copy of a Temporal fleet in the project's fleet ledger: rows with the fleet's word
on their state, attempts written once each, and a try lost with its machine as an attempt of its
own (stopped: no restart spent) before the one that finished it elsewhere."""

from __future__ import annotations

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from genesis.fleet.ledger import FleetLedger  # noqa: E402
from genesis.fleet.lines import ended_line, merged_line, started_line  # noqa: E402
from genesis.fleet.status import Monitor, from_ledger  # noqa: E402
from genesis.temporal.mirror import Mirror  # noqa: E402
from genesis.temporal.reading import Try  # noqa: E402

ROW = {"id": "t-1", "text": "do it", "state": "verified", "strategy": 0, "attempts": 1, "restarts": 0,
       "escalations": 0, "branch": "genesis/task/t-1", "reason": "", "not_before": 0.0, "updated": 10.0,
       "created": 1.0}


def attempt(**over) -> dict:
    return {"task_id": "t-1", "attempt": 1, "kind": "start", "reason": "its task is done on its branch",
            "agent": "configured", "started": 100.0, "ended": 130.0, "exit_code": 0, "outcome": "verified",
            "run_id": "r1", "strategy": 0, "host": "A", "tries": 1, "fresh_clone": False, "adopted": False,
            "lost": "", **over}


def test_a_lost_try_is_an_attempt_of_its_own_and_the_fleet_says_merged(tmp_path):
    mirror = Mirror(tmp_path / "ledger.sqlite3", "fleet-1")
    lost = attempt(tries=2, lost="B: running", fresh_clone=True)
    run = Try("run_attempt", "g-any", 99.0, attempt=2, identity="genesis-worker@A:42", started_at=112.5,
              last_failure="activity Heartbeat timeout", closed="completed", closed_at=130.0)
    fleet = {"tasks": {"t-1": {"state": "merged", "sha": "abc", "reason": "came home"}}}
    for _ in range(2):   # synced twice: written once
        mirror.sync(fleet, {"t-1": {"row": ROW, "attempts": [lost]}}, {"t-1": [run]})
    with FleetLedger.open(tmp_path / "ledger.sqlite3", readonly=True) as led:
        (row,) = led.tasks()
        first, second = led.attempts("t-1")
        merged = led.events("merged")
    assert (row.state, row.attempts, row.merged_sha) == ("merged", 2, "abc")
    assert (first.kind, first.outcome, first.started, first.ended) == ("start", "stopped", 100.0, 112.5)
    assert "its worker was lost (B: running; activity Heartbeat timeout)" in first.reason
    assert "again on A 12.5s after" in first.reason
    assert (second.kind, second.outcome, second.started, second.ended) == ("resume", "verified", 112.5, 130.0)
    assert second.reason.startswith("on A (a fresh clone of its branch)")
    assert len(merged) == 1


def test_a_running_attempt_waits_for_its_end(tmp_path):
    mirror = Mirror(tmp_path / "ledger.sqlite3", "fleet-1")
    mirror.sync({"tasks": {}}, {"t-1": {"row": {**ROW, "state": "running"}, "attempts": [attempt(ended=None)]}}, {})
    with FleetLedger.open(tmp_path / "ledger.sqlite3", readonly=True) as led:
        assert led.attempts("t-1") == [] and led.tasks()[0].state == "running"
    mirror.sync({"tasks": {}}, {"t-1": {"row": ROW, "attempts": [attempt()]}}, {})
    with FleetLedger.open(tmp_path / "ledger.sqlite3", readonly=True) as led:
        (one,) = led.attempts("t-1")
        assert (one.outcome, led.tasks()[0].state) == ("verified", "merging")


def test_each_start_end_and_merge_is_said_once_in_the_local_monitors_words(tmp_path):
    mirror = Mirror(tmp_path / "ledger.sqlite3", "fleet-1")
    failed = attempt(ended=110.0, exit_code=3, outcome="failed", reason="exit 3")
    running = attempt(attempt=2, kind="restart", started=112.0, ended=None, exit_code=None, outcome=None, host="")
    mirror.sync({"tasks": {}}, {"t-1": {"row": {**ROW, "state": "running"}, "attempts": [failed, running]}}, {})
    assert mirror.take_lines() == [started_line("do it", "start", 1, "configured") + " on A",   # one sync saw both
                                   ended_line("do it", 3, "failed", "exit 3"),
                                   started_line("do it", "restart", 2, "configured")]
    assert mirror.take_lines() == []
    done = attempt(attempt=2, kind="restart", started=112.0, host="B")
    fleet = {"tasks": {"t-1": {"state": "merged", "sha": "abcdef0123456789", "reason": "came home"}}}
    for _ in range(2):   # synced twice: said once
        mirror.sync(fleet, {"t-1": {"row": ROW, "attempts": [failed, done]}}, {})
    assert mirror.take_lines() == [ended_line("do it", 0, "verified", "its task is done on its branch"),
                                   merged_line("do it", "merged", "abcdef0123456789")]
    assert merged_line("do it", "merged", "abcdef0123456789") == "'do it' came home: abcdef012345"


def test_the_accounts_limit_is_one_hold_while_it_lasts_and_the_status_shows_it(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    mirror = Mirror(path, "fleet-1")
    mirror.start(2, "genesis-fleet-x", "127.0.0.1:7233", 100.0)
    tasks = {"t-1": {"row": {**ROW, "state": "waiting"}, "attempts": []}}
    mirror.sync({"tasks": {}}, tasks, {}, {"until": 50.0, "limits": 1}, now=110.0)     # a reset long past
    for at in (120.0, 122.0):                                                          # synced twice: one hold
        mirror.sync({"tasks": {}}, tasks, {}, {"until": 200.0, "limits": 2}, now=at)
    with FleetLedger.open(path, readonly=True) as led:
        (hold,) = led.events("limit_hold")
    assert (hold.at, hold.detail["until"]) == (120.0, 200.0)
    shown = from_ledger(tmp_path, path, Monitor(True, None, "", 100.0, None), now=150.0)
    assert (shown.limit.kind, shown.limit.until) == ("limit", 200.0)
    assert from_ledger(tmp_path, path, Monitor(True, None, "", 100.0, None), now=201.0).limit is None


def test_a_restarted_home_copies_only_the_attempts_the_home_before_it_had_not(tmp_path):
    """Each home has a Mirror of its own on the one ledger: attempts are keyed by (task, attempt,
    start), never by what this process has seen."""
    path = tmp_path / "ledger.sqlite3"
    failed = attempt(ended=110.0, exit_code=3, outcome="failed", reason="exit 3")
    done = attempt(attempt=2, kind="restart", started=112.0, host="B")
    first = Mirror(path, "fleet-1")
    first.sync({"tasks": {}}, {"t-1": {"row": {**ROW, "state": "running"}, "attempts": [failed]}}, {})
    again = Mirror(path, "fleet-2")   # the home died and came back
    fleet = {"tasks": {"t-1": {"state": "merged", "sha": "abc", "reason": "came home"}}}
    for _ in range(2):
        again.sync(fleet, {"t-1": {"row": ROW, "attempts": [failed, done]}}, {})
    with FleetLedger.open(path, readonly=True) as led:
        assert [(a.attempt, a.outcome) for a in led.attempts("t-1")] == [(1, "failed"), (2, "verified")]
        assert led.tasks()[0].attempts == 2
    assert again.take_lines() == [started_line("do it", "restart", 2, "configured") + " on B",   # nothing twice
                                  ended_line("do it", 0, "verified", "its task is done on its branch"),
                                  merged_line("do it", "merged", "abc")]
    later = Mirror(path, "fleet-3")   # a later fleet of the project: its attempt 1 is another one
    later.sync({"tasks": {}}, {"t-1": {"row": ROW, "attempts": [attempt(started=500.0, ended=530.0)]}}, {})
    with FleetLedger.open(path, readonly=True) as led:
        assert len(led.attempts("t-1")) == 3


def test_the_running_attempt_counts_and_says_where_it_runs(tmp_path):
    """As its worker's heartbeat tells it (reading.task_memos): its machine, stage, loop and worktree."""
    path = tmp_path / "ledger.sqlite3"
    running = {"host": "A", "stage": "running", "run_id": "r9", "pid": 42, "worktree": "/srv/w/t-1", "tries": 1}
    memo = {"row": {**ROW, "state": "running", "reason": ""}, "attempts": [attempt(ended=None, exit_code=None,
                                                                                   outcome=None, host="")],
            "running": running}
    Mirror(path, "fleet-1").sync({"tasks": {}}, {"t-1": memo}, {})
    with FleetLedger.open(path, readonly=True) as led:
        (row,) = led.tasks()
        assert led.attempts("t-1") == []   # written once, at its end
    assert (row.state, row.attempts, row.run_id) == ("running", 1, "r9")
    assert row.reason == "attempt 1 on A: running, pid 42, in /srv/w/t-1"


def test_fleet_status_and_the_dashboard_read_the_running_attempts_machine_from_the_home_copy(tmp_path):
    """The home's words for a running attempt are where fleet status (and the dashboard's tile)
    read its machine from; an ended one's, from its end."""
    path = tmp_path / "ledger.sqlite3"
    running = {"host": "box-b", "stage": "running", "run_id": "r9", "pid": 42, "worktree": "/srv/w/t-1", "tries": 1}
    memo = {"row": {**ROW, "state": "running", "reason": ""},
            "attempts": [attempt(host="box-a", outcome="failed", exit_code=1),
                         attempt(attempt=2, started=140.0, ended=None, exit_code=None, outcome=None, host="")],
            "running": running}
    Mirror(path, "fleet-1").sync({"tasks": {}}, {"t-1": memo}, {})
    monitor = Monitor(False, None, "", None, None)
    (view,) = from_ledger(tmp_path, path, monitor, 200.0).tasks
    assert view.place == "box-b"
    memo = {**memo, "row": {**ROW, "state": "failed"}, "running": None,
            "attempts": [attempt(host="box-a", outcome="failed", exit_code=1)]}
    Mirror(path, "fleet-1").sync({"tasks": {}}, {"t-1": memo}, {})
    (view,) = from_ledger(tmp_path, path, monitor, 200.0).tasks
    assert view.place == "box-a"
