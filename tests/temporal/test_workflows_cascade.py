"""The fleet-wide rules of the local monitor on Temporal, in one process on the real dev server
(the pattern of test_workflows_home.py: the real workflows, the home's real activities, a
stand-in `run_attempt` whose verdicts each test plans): the cascade gate (pause, probe, resume
by signals), the restart budget and the stagger, each by durable timers in the fleet's workflow.
Timing is asserted only as the order of the fleet's history events and the spacing its timers
guarantee, never as a wall-clock duration."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers import inprocess  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.inprocess import Alerts, run_fleet_here  # noqa: E402
from helpers.temporal import pushed_project  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402

from genesis import exitcodes  # noqa: E402
from genesis.fleet.taskref import task_id  # noqa: E402
from genesis.temporal import reading  # noqa: E402
from genesis.temporal.records import (AGENT_FAILED, AttemptInput, AttemptResult, FleetSpec,  # noqa: E402
                                      LadderSpec)
from genesis.temporal.workflows import PAUSE_REASON  # noqa: E402

pytestmark = [pytest.mark.temporal]

ALPHA, BETA, GAMMA = "write the alpha note", "write the beta note", "write the gamma note"
PAUSE_SEEN = 20.0         # the bound on gamma's wait for the cascade's pause


class Agent:
    """`run_attempt` on the machine "M": each call takes its task's next planned step:
    "verified" (the task's work, pushed), "failed" (the child ended abnormally, once every task
    named in `together` has an attempt running; "failed-later": a second after another's
    failure), "ceiling" (exit MAX_COST once their attempts
    ended), "until-paused" (runs until its task workflow's
    memo says the fleet paused it, then steps aside: exit MONITOR_LOST)."""

    def __init__(self, origin: Path, tmp: Path, plan: dict[str, list], together: tuple[str, ...] = ()):
        self.origin, self.tmp, self.plan, self.together = origin, tmp, plan, together
        self.events: list[tuple[str, str, str]] = []    # (start | end, task, kind or outcome)
        self.client: Client | None = None
        self.fleet_id = ""

    def starts(self) -> list[tuple[str, str]]:
        return [(task, kind) for what, task, kind in self.events if what == "start"]

    @activity.defn(name="run_attempt")
    async def run_attempt(self, inp: AttemptInput) -> AttemptResult:
        self.events.append(("start", inp.task.task_id, inp.kind))
        steps = self.plan.get(inp.task.task_id) or []
        step = steps.pop(0) if steps else "verified"
        try:
            if step == "verified":
                tip = await asyncio.to_thread(self._work, inp)
                return AttemptResult("M", "verified", 0, "its task is done on its branch", 0.0, "run", 0.1, False,
                                     False, 1, tip)
            if step == "ceiling":   # once the others' attempts ended: the fleet's cost ceiling
                while not all(any(e[0] == "end" and e[1] == t for e in self.events) for t in self.together):
                    await asyncio.sleep(0.05)
                return AttemptResult("M", "stopped", exitcodes.MAX_COST, "the cost ceiling", 0.0, "run", 0.1,
                                     False, False, 1, "")
            if step in ("failed", "failed-later"):
                while not all(any(e[1] == t for e in self.events) for t in self.together):
                    await asyncio.sleep(0.05)
                if step == "failed-later":   # a second after another task's failure: the fleet's next turn
                    while not any(e[0] == "end" and e[2] == "failed" for e in self.events):
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(1.0)
                raise ApplicationError("M: the child failed", {"host": "M", "exit_code": 1, "reason": "exit 1"},
                                       type=AGENT_FAILED, non_retryable=True)
            deadline = time.monotonic() + PAUSE_SEEN
            while time.monotonic() < deadline:
                memo = (await reading.task_memos(self.client, self.fleet_id)).get(inp.task.task_id) or {}
                if memo.get("paused"):   # its task workflow received the fleet's pause
                    break
                await asyncio.sleep(0.1)
            return AttemptResult("M", "stopped", exitcodes.MONITOR_LOST, "it stepped aside", 0.0, "run", 0.1,
                                 False, False, 1, "")
        finally:
            self.events.append(("end", inp.task.task_id, step))

    def _work(self, inp: AttemptInput) -> str:
        clone = self.tmp / f"m-{uuid.uuid4().hex[:6]}"
        git(self.tmp, "clone", "-q", str(self.origin), str(clone))
        git(clone, "config", "user.name", "Agent")
        git(clone, "config", "user.email", "agent@example.invalid")
        done = git(clone, "ls-remote", "origin", inp.task.branch).strip()
        git(clone, "checkout", "-q", "-b", inp.task.branch, f"origin/{inp.task.branch}" if done else
            f"origin/{inp.target}")
        tasks = clone / "TASKS.md"
        tasks.write_text(tasks.read_text().replace(f"- [ ] {inp.task.text}", f"- [x] {inp.task.text}"))
        git(clone, "commit", "-qam", f"do {inp.task.text}")
        git(clone, "push", "-q", "origin", inp.task.branch)
        return git(clone, "rev-parse", "HEAD").strip()


def make_home(tmp_path: Path, texts: list[str]) -> tuple[Path, Path, str]:
    project, origin = pushed_project(tmp_path, texts)
    return project, origin, git(project, "symbolic-ref", "--short", "HEAD").strip()


def spec_for(project: Path, origin: Path, target: str, **changes) -> FleetSpec:
    """Three tasks at once, on a queue prefix of the test's own."""
    return inprocess.spec_for(project, origin, target, f"c{uuid.uuid4().hex[:8]}", **{"parallel": 3, **changes})


async def run_fleet(address: str, spec: FleetSpec, agent: Agent, alerts: Alerts, during=None,
                    record: str = "") -> tuple[dict, list]:
    client = await Client.connect(address)
    agent.client, agent.fleet_id = client, spec.fleet_id
    return await run_fleet_here(address, spec, agent.run_attempt, [alerts.alert], during, record, client)


def states(result: dict) -> dict[str, str]:
    return {key: row["state"] for key, row in result["tasks"].items()}


def signals_out(events: list, name: str) -> list:
    return [e for e in events if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
            and e.signal_external_workflow_execution_initiated_event_attributes.signal_name == name]


def timers_between(events: list, first, second) -> list:
    return [e for e in events if first.event_id < e.event_id < second.event_id and
            e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]


def seconds(event) -> float:
    return event.event_time.ToMicroseconds() / 1e6


def test_two_tasks_failing_at_once_pause_the_fleet_until_a_probe_succeeds(dev_server, tmp_path):
    project, origin, target = make_home(tmp_path, [ALPHA, BETA, GAMMA])
    # The second failure reaches the fleet's workflow a second after the first, in a later turn
    # (as on a loaded machine). The first's restart waits 5 s (its backoff), so the second
    # failure trips the gate before that restart is ready: both are held, and one of them probes.
    spec = spec_for(project, origin, target, cascade_percent=30.0, cascade_window=300.0, probe_after=1.0,
                    probe_healthy=600.0, ladder=LadderSpec(1, 5, 5.0, ("claude",), ((),), (1.0,)))
    a, b, g = task_id(ALPHA), task_id(BETA), task_id(GAMMA)
    agent = Agent(origin, tmp_path, {a: ["failed"], b: ["failed-later"], g: ["until-paused"]}, together=(a, b, g))
    alerts = Alerts()
    seen = {"fleet_row": False, "task_row": False}

    async def watch(client):   # gamma's rows, as a status reads them, while the cascade holds it
        while not all(seen.values()):   # once both are seen, the server is asked no more
            memo = await reading.fleet_memo(client, spec.fleet_id)
            if ((memo.get("tasks") or {}).get(g) or {}).get("paused"):
                seen["fleet_row"] = True
            try:
                row = ((await reading.task_memos(client, spec.fleet_id)).get(g) or {}).get("row") or {}
            except Exception:  # noqa: BLE001 - not started yet
                row = {}
            if row.get("state") == "waiting" and row.get("reason") == PAUSE_REASON:
                seen["task_row"] = True
            await asyncio.sleep(0.1)

    result, events = asyncio.run(run_fleet(dev_server.address, spec, agent, alerts, watch, record="cascade"))
    assert result["exit_code"] == 0, result
    assert states(result) == {a: "merged", b: "merged", g: "merged"}, result
    memo = asyncio.run(fleet_memo_of(dev_server.address, spec.fleet_id))
    moves = memo["cascade"]["moves"]
    assert [m[1] for m in moves] == ["cascade_pause", "cascade_probe", "cascade_resume"], moves
    probe = moves[1][3]
    other = b if probe == a else a
    assert probe in (a, b), moves
    assert seen == {"fleet_row": True, "task_row": True}, seen
    # Nothing started between the pause and the probe's verified end but the probe itself.
    starts = agent.starts()
    assert starts[:3] and sorted(starts[:3]) == sorted([(a, "start"), (b, "start"), (g, "start")]), starts
    assert starts[3] == (probe, "restart"), agent.events
    probe_end = agent.events.index(("end", probe, "verified"))
    later = [e for e in agent.events[probe_end:] if e[0] == "start"]
    assert sorted(later) == sorted([("start", other, "restart"), ("start", g, "resume")]), agent.events
    paused = signals_out(events, "pause")
    assert len(paused) >= 3, "the pause reached every running task workflow"
    assert [x.about for x in alerts.sent] == ["cascade"], alerts.sent


async def fleet_memo_of(address: str, fleet_id: str) -> dict:
    return await reading.fleet_memo(await Client.connect(address), fleet_id)


def test_the_stagger_and_the_restart_budget_space_launches_by_durable_timers(dev_server, tmp_path):
    """Three tasks launched the stagger apart; alpha and beta fail together and their two restarts
    go the budget's period apart (its wait far longer than the stagger's): each a timer of the
    fleet's workflow."""
    project, origin, target = make_home(tmp_path, [ALPHA, BETA, GAMMA])
    stagger = 1.5
    every = 5.0   # far more than the time between the two failures, even on a loaded machine
    spec = spec_for(project, origin, target, stagger=stagger, restart_every=every)
    a, b = task_id(ALPHA), task_id(BETA)
    agent = Agent(origin, tmp_path, {a: ["failed"], b: ["failed"]}, together=(a, b))
    result, events = asyncio.run(run_fleet(dev_server.address, spec, agent, Alerts()))
    assert result["exit_code"] == 0 and set(states(result).values()) == {"merged"}, result
    launched = [e for e in events if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED]
    assert len(launched) == 3, launched
    for first, second in zip(launched, launched[1:]):
        assert timers_between(events, first, second), "each launch waited for the stagger's timer"
        assert seconds(second) - seconds(first) >= stagger - 0.25, (seconds(first), seconds(second))
    gone = signals_out(events, "go")
    assert len(gone) == 2, gone
    waits = [t.timer_started_event_attributes.start_to_fire_timeout.ToMilliseconds() / 1000
             for t in timers_between(events, gone[0], gone[1])]
    assert waits and max(waits) > stagger, ("the second restart waited for the budget's timer", waits)
    assert seconds(gone[1]) - seconds(gone[0]) >= every - 0.25, (seconds(gone[0]), seconds(gone[1]))


def test_a_ceiling_ends_the_restarts_waiting_for_the_fleet(dev_server, tmp_path):
    project, origin, target = make_home(tmp_path, [ALPHA, BETA])
    spec = spec_for(project, origin, target, parallel=2,
                    ladder=LadderSpec(1, 5, 3600.0, ("claude",), ((),), (1.0,)))   # a restart an hour away
    a, b = task_id(ALPHA), task_id(BETA)
    agent = Agent(origin, tmp_path, {a: ["failed"], b: ["ceiling"]}, together=(a,))
    result, _ = asyncio.run(run_fleet(dev_server.address, spec, agent, Alerts()))
    assert result["exit_code"] == exitcodes.MAX_COST, result
    assert agent.starts() == [(a, "start"), (b, "start")] or agent.starts() == [(b, "start"), (a, "start")], \
        agent.events
    assert states(result) == {a: "queued", b: "queued"}, result
