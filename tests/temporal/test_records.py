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
