"""A task's next attempt on a machine starts with a fair circuit breaker: the one its last
attempt left OPEN in the same worktree (its agent made no progress) is set aside as the attempt
prepares its loop, kept beside it as evidence, so the new loop runs its agent instead of being
refused at once (exit 3). The activity runs to the start gate, whose limit then launches nothing:
what it prepared is there to read. (A stuck attempt and the next one, whole, on the local fleet:
tests/scenarios/test_fleet.py; the breaker set aside: tests/fleet/test_leftovers.py.)"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import pushed_project, trusting  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis.fleet.leftovers import BREAKER_FILE, unfair  # noqa: E402
from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.loop import breaker  # noqa: E402
from genesis.loop.breaker import BreakerState, BreakerStore  # noqa: E402
from genesis.temporal.records import USAGE_LIMIT, AttemptInput, TaskSpec  # noqa: E402

from .test_activities_gate import Gated  # noqa: E402

pytestmark = [pytest.mark.temporal]

TEXT = "write the alpha note"


def opened(now: float = 1_000_000.0) -> BreakerState:
    """The breaker a loop whose agent made no progress leaves (two iterations, thresholds 1)."""
    state = breaker.record(BreakerState(), 1, False, now, warn_at=1, stop_at=1)
    return breaker.record(state, 2, False, now, warn_at=1, stop_at=1)


def test_the_next_attempt_after_an_open_breaker_sets_it_aside_before_its_loop(tmp_path):
    project, remote = pushed_project(tmp_path, [TEXT])
    tid = task_id(TEXT)
    agent = task_agent(tmp_path / "agent.sh")
    first = AttemptInput("tfleet", "tfleet/t", TaskSpec(tid, TEXT, branch_for(tid)), 1, "start", 0, str(remote),
                         git(project, "symbolic-ref", "--short", "HEAD").strip(), "tacct", ("Builder",), 2,
                         (("GENESIS_AGENT_CMD", f"bash {agent}"), ("GENESIS_PHASES", "Builder")), 1.0)
    env = fleet_env(**trusting(tmp_path), HOME=str(tmp_path / "home"), GENESIS_SHARED_STATE_DIR=str(tmp_path / "state"))
    machine = Gated(None, tmp_path / "root", "A", env)

    def up_to_the_gate(inp: AttemptInput) -> None:
        with pytest.raises(ApplicationError) as held:
            asyncio.run(ActivityEnvironment().run(machine.run_attempt, inp))
        assert held.value.type == USAGE_LIMIT

    up_to_the_gate(first)   # the task's worktree, made for its first attempt
    (wt,) = (tmp_path / "root").glob(f"tfleet/*/{tid}")
    path = wt / BREAKER_FILE
    path.parent.mkdir(exist_ok=True)
    BreakerStore(path).update(lambda _old: opened())   # OPEN, as the first attempt's loop left it
    up_to_the_gate(dataclasses.replace(first, number=2, kind="restart", previous_end="exit 3"))

    assert machine.calls == ["prepared", "ask tacct"] * 2
    assert not unfair(BreakerStore(path).load()[0])   # the new loop's breaker holds nothing against it
    assert BreakerStore(path.with_name(path.name + ".attempt-2")).load()[0] == opened()   # the evidence, kept
