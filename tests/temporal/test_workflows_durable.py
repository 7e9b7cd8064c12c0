"""The fleet's workflows on the real dev server, in one process, where a machine or the home fails
under them: a machine's git failing before any agent ran never spends the task's ladder (its
own backoff, any machine next), and a home gone silent mid-merge is known by the merge's
heartbeat timeout: the next try, on a fresh merge worktree, merges."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.git import git  # noqa: E402
from helpers.inprocess import run_fleet_here, spec_for  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.api.enums.v1 import EventType, TimeoutType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402

from genesis.fleet.worktrees import worktree_root  # noqa: E402
from genesis.temporal.records import INFRA, AttemptInput, LadderSpec, MergeInput, MergeOutcome  # noqa: E402

from genesis.temporal.workflows import INFRA_MAX, infra_wait  # noqa: E402

from .test_workflows_home import ALPHA, BETA, Agent, home, states, ticked  # noqa: E402,F401

pytestmark = [pytest.mark.temporal]

NO_LADDER = LadderSpec(0, 0, 0.1, ("claude",), ((),), (1.0,))   # any failure counted would fail the task


class Flaky(Agent):
    """`run_attempt` whose machine's git fails `infra` times before the attempt runs (and verifies)."""

    def __init__(self, origin, tmp, infra: int):
        super().__init__(origin, tmp, {})
        self.infra = infra

    @activity.defn(name="run_attempt")
    async def run_attempt(self, inp: AttemptInput):
        if self.infra:
            self.infra -= 1
            self.calls.append((inp.task.task_id, "infra"))
            raise ApplicationError("M: no worktree for its branch: the fast-forward failed",
                                   {"host": "M", "activity_attempt": 1}, type=INFRA, non_retryable=True)
        return await super().run_attempt(inp)


def test_a_machines_git_failures_do_not_spend_the_tasks_ladder(dev_server, home, tmp_path):
    project, origin, target = home
    spec = spec_for(project, origin, target, f"w{uuid.uuid4().hex[:8]}", ladder=NO_LADDER, infra_wait=0.2)
    agent = Flaky(origin, tmp_path, infra=3)
    result = asyncio.run(run_fleet(dev_server.address, spec, agent))
    assert result["exit_code"] == 0, result
    assert set(states(result).values()) == {"merged"}, result
    assert [kind for _, kind in agent.calls].count("infra") == 3
    assert ticked(project, target) >= {ALPHA}
    attempts = asyncio.run(_attempts(dev_server.address, spec))
    assert [a["outcome"] for a in attempts[agent.calls[0][0]]] == ["verified"], attempts   # nothing else recorded


def test_git_failures_wait_longer_each_time_and_a_long_run_of_them_needs_a_person():
    waits = [infra_wait(n, 10.0) for n in range(1, INFRA_MAX + 2)]
    assert waits[:6] == [10, 20, 40, 80, 160, 300] and set(waits[6:-1]) == {300}
    assert waits[-1] is None and sum(waits[:-1]) >= 3000   # about an hour of an unreachable remote


def test_a_home_silent_mid_merge_is_timed_out_by_its_heartbeat_and_the_next_try_merges(dev_server, home, tmp_path):
    project, origin, target = home
    spec = spec_for(project, origin, target, f"w{uuid.uuid4().hex[:8]}", home_heartbeat=2.0)
    agent = Agent(origin, tmp_path, {})
    gone = threading.Event()
    tries = []

    def merge_of(real):
        @activity.defn(name="merge")
        def merge(inp: MergeInput) -> MergeOutcome:
            tries.append(activity.info().attempt)
            if len(tries) == 1:   # the home dies mid-replay: its merge worktree left detached and dirty
                left = worktree_root(project, real.cfg) / inp.task.task_id
                git(project, "worktree", "add", "-q", "--detach", str(left), target)
                (left / "half.txt").write_text("a replay cut short\n")
                gone.wait(60)     # silent from now on: no heartbeat
                raise ApplicationError("this try's home is long dead")
            done = real.merge(inp)
            gone.set()   # the dead try's thread may end now
            return done
        return merge

    try:
        result, events = asyncio.run(run_fleet_here(dev_server.address, spec, agent.run_attempt,
                                                     merge=lambda h: merge_of(h)))
    finally:
        gone.set()
    assert result["exit_code"] == 0 and set(states(result).values()) == {"merged"}, result
    assert ticked(project, target) == {ALPHA, BETA} and tries == [1, 2, 1]   # the second task merged at once
    scheduled = [e.activity_task_scheduled_event_attributes for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name == "merge"]
    assert scheduled and all(s.heartbeat_timeout.ToSeconds() == 2 for s in scheduled)
    started = [e.activity_task_started_event_attributes for e in events
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    retried = [s for s in started if s.attempt == 2]
    assert retried and retried[0].last_failure.timeout_failure_info.timeout_type == \
        TimeoutType.TIMEOUT_TYPE_HEARTBEAT, started


async def run_fleet(address, spec, agent) -> dict:
    client = await Client.connect(address)
    agent.client = client
    result, _ = await run_fleet_here(address, spec, agent.run_attempt, client=client)
    return result


async def _attempts(address, spec) -> dict:
    from genesis.temporal import reading

    client = await Client.connect(address)
    memos = await reading.task_memos(client, spec.fleet_id)
    return {task: memo["attempts"] for task, memo in memos.items()}
