"""Queue and workflow names: stable, and free of machine-local paths where machines must agree."""

from __future__ import annotations

from genesis.temporal import records


def test_queue_names():
    assert records.fleet_queue("genesis") == "genesis-fleet"
    assert records.any_queue("genesis") == "genesis-any"
    assert records.host_queue("genesis", "gpu-2") == "genesis@gpu-2"


def test_the_account_workflow_is_the_same_on_every_machine_of_one_subscription():
    one = records.account_workflow_id("genesis", "claude", "team-max")
    assert one == records.account_workflow_id("genesis", "claude", "team-max")
    assert one != records.account_workflow_id("genesis", "claude", "team-pro")
    assert one != records.account_workflow_id("genesis", "codex", "team-max")
    assert one != records.account_workflow_id("other", "claude", "team-max")
    assert "/" not in one and "team-max" not in one


def test_a_fleet_is_named_by_its_remote_and_branch_not_by_where_it_is_checked_out():
    a = records.fleet_workflow_id(records.fingerprint("git@host:team/app.git", "main"))
    assert a == records.fleet_workflow_id(records.fingerprint("git@host:team/app.git", "main"))
    assert a != records.fleet_workflow_id(records.fingerprint("git@host:team/app.git", "dev"))
    assert records.task_workflow_id(a, "add-x-123456") == f"{a}/add-x-123456"


def test_the_fleets_tasks_come_from_their_own_memo_keys_over_an_older_headers():
    from genesis.temporal.records import task_memo_key, tasks_of_memo

    header = {"paused": False, "tasks": {"a-000001": {"state": "running"}, "b-000002": {"state": "queued"}}}
    whole = {"genesis": header, task_memo_key("a-000001"): {"state": "merged"},
             task_memo_key("c-000003"): {"state": "running"}, "other": {"state": "x"}}
    assert tasks_of_memo(header, whole) == {"a-000001": {"state": "merged"}, "b-000002": {"state": "queued"},
                                            "c-000003": {"state": "running"}}
    assert tasks_of_memo({"paused": True}, {"genesis": {"paused": True}}) == {}
