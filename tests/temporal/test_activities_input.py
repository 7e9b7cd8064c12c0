"""What a workflow's input may name: ids that would become paths, a target that would become a
ref, and a remote URL that would put credentials into the workflow's history are refused before
any of it is used, and an attempt with one stops the fleet (non-retryable, exit USAGE) having
written nothing."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis import exitcodes  # noqa: E402
from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.temporal.activities import MachineActivities, bad_input  # noqa: E402
from genesis.temporal.records import FLEET_STOPPING, AttemptInput, TaskSpec  # noqa: E402

pytestmark = [pytest.mark.temporal]

TID = task_id("write the alpha note")
GOOD = TaskSpec(TID, "write the alpha note", branch_for(TID))
FLEET = "genesis-fleet-0123456789ab"
URL = "https://git.example.invalid/team/project.git"


def test_a_plain_input_is_taken():
    assert bad_input(FLEET, GOOD, "main", URL) == ""
    assert bad_input(FLEET, GOOD, "release/2.x", "git@git.example.invalid:team/project.git") == ""
    assert bad_input(FLEET, GOOD, "main", "ssh://git@git.example.invalid/team/project.git") == ""
    assert bad_input(FLEET, GOOD, "main", "/srv/git/project.git") == ""


@pytest.mark.fault(111)
@pytest.mark.parametrize("fleet", ["../escape", "..", "a/b", "/abs", "", ".hidden", "x" * 200])
def test_a_fleet_id_that_is_not_a_plain_name_is_refused(fleet):
    assert "workflow id" in bad_input(fleet, GOOD, "main", URL)


@pytest.mark.fault(111)
@pytest.mark.parametrize("tid", ["../../etc-abcdef", "a/b-abcdef", "no-hash", "UPPER-abcdef", "x-abcdef/.."])
def test_a_task_id_not_of_the_fleets_form_is_refused(tid):
    assert "task id" in bad_input(FLEET, TaskSpec(tid, "t", branch_for(tid)), "main", URL)


@pytest.mark.fault(111)
def test_a_branch_other_than_the_tasks_is_refused():
    assert "branch" in bad_input(FLEET, TaskSpec(TID, "t", "main"), "main", URL)


@pytest.mark.fault(111)
@pytest.mark.parametrize("target", ["../x", "a..b", "-x", "a//b", "x.lock", "refs@{1}", "a b", ""])
def test_a_target_that_is_not_a_branch_name_is_refused(target):
    assert "target" in bad_input(FLEET, GOOD, target, URL)


@pytest.mark.parametrize("url", ["https://user:secret@git.example.invalid/p.git",
                                 "https://ghp_token@git.example.invalid/p.git",
                                 "ssh://git:secret@git.example.invalid/p.git"])
@pytest.mark.fault(111)
def test_a_remote_url_with_credentials_is_refused_saying_so(url):
    assert "credentials" in bad_input(FLEET, GOOD, "main", url)


@pytest.mark.fault(111)
def test_an_attempt_with_a_bad_id_writes_nothing_and_stops_the_fleet(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    inp = AttemptInput("../outside", "x/y", GOOD, 1, "start", 0, URL, "main", "acct", ("Builder",), 1, (), 1.0)
    machine = MachineActivities(None, root, "A", {})
    with pytest.raises(ApplicationError) as refused:
        asyncio.run(ActivityEnvironment().run(machine.run_attempt, inp))
    assert refused.value.type == FLEET_STOPPING and refused.value.non_retryable
    assert refused.value.details[0]["exit_code"] == exitcodes.USAGE
    assert "refused" in str(refused.value)
    assert not (tmp_path / "outside").exists() and not any(root.iterdir())
