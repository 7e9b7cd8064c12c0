"""The fleet's workflows on the real dev server, in one process: the real workflow code, the
home's real activities (open_tasks, merge, mark) on a real checkout and bare origin, and a
stand-in `run_attempt` whose verdicts each test plans ("verified" does the task's work for
real: its branch, as pushed, ticks the task). What this covers is the workflows' own paths:
a merge held (a durable wait) or refused (Temporal's tries, then a person), a loop that steps
aside, a limit's hold, the account's continue-as-new, the memo's upserts, and which task
workflows a status reads. The rules they share with the local monitor (the ladder, a ceiling,
the alerts' words) are judged by replay: tests/fleet/test_decide.py, test_parity.py."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_project  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.inprocess import Alerts, run_fleet_here, spec_for  # noqa: E402
from helpers.temporal import origin_for  # noqa: E402
from temporalio import activity  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from genesis import exitcodes  # noqa: E402
from genesis.fleet.taskref import task_id  # noqa: E402
from genesis.repo.tasks import DONE, parse  # noqa: E402
from genesis.temporal import reading  # noqa: E402
from genesis.temporal.records import (TASK_MEMO, USAGE_LIMIT, AttemptInput, AttemptResult,  # noqa: E402
                                      FleetSpec, fleet_queue, task_workflow_id)
from genesis.temporal.workflows import ASIDES_MAX, WORKFLOWS, AccountWorkflow  # noqa: E402

pytestmark = [pytest.mark.temporal]

ALPHA, BETA = "write the alpha note", "write the beta note"


class Agent:
    """`run_attempt` on the machine "M": each call takes its task's next planned step:
    "verified", ("stopped", exit code), ("limit", seconds to the reset)."""

    def __init__(self, origin: Path, tmp: Path, plan: dict[str, list]):
        self.origin, self.tmp, self.plan = origin, tmp, plan
        self.calls: list[tuple[str, str]] = []
        self.client: Client | None = None

    @activity.defn(name="run_attempt")
    async def run_attempt(self, inp: AttemptInput) -> AttemptResult:
        self.calls.append((inp.task.task_id, inp.kind))
        steps = self.plan.get(inp.task.task_id) or []
        step = steps.pop(0) if steps else "verified"
        if step == "verified":
            tip = await asyncio.to_thread(self._work, inp)
            return AttemptResult("M", "verified", 0, "its task is done on its branch", 0.0, "run", 0.1, False,
                                 False, 1, tip)
        kind, value = step
        if kind == "limit":   # and the account lost its subscription (as a continue-as-new once did)
            await self.client.get_workflow_handle(inp.account_workflow).signal("unsubscribe", inp.task_workflow)
            raise ApplicationError("M: a usage limit", {"host": "M", "resets_at": time.time() + value,
                                                        "exit_code": exitcodes.USAGE_LIMIT},
                                   type=USAGE_LIMIT, non_retryable=True)
        return AttemptResult("M", "stopped", value, f"exit {value}", 0.0, "run", 0.1, False, False, 1, "")

    def _work(self, inp: AttemptInput) -> str:
        clone = self.tmp / f"m-{uuid.uuid4().hex[:6]}"
        git(self.tmp, "clone", "-q", str(self.origin), str(clone))
        git(clone, "config", "user.name", "Agent")
        git(clone, "config", "user.email", "agent@example.invalid")
        git(clone, "checkout", "-q", "-b", inp.task.branch, f"origin/{inp.target}")
        tasks = clone / "TASKS.md"
        tasks.write_text(tasks.read_text().replace(f"- [ ] {inp.task.text}", f"- [x] {inp.task.text}"))
        git(clone, "commit", "-qam", f"do {inp.task.text}")
        git(clone, "push", "-q", "origin", inp.task.branch)
        return git(clone, "rev-parse", "HEAD").strip()


@pytest.fixture
def home(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / "notes.txt").write_text("the user's notes\n")
    git(project, "add", "notes.txt")
    fleet_project(project, [ALPHA, BETA])
    origin = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    git(project, "push", "-q", "origin", target)
    return project, origin, target


async def run_fleet(address: str, spec: FleetSpec, agent: Agent, during=None, alerts: Alerts | None = None) -> dict:
    """The fleet to its end; `during(client)` runs beside it."""
    client = await Client.connect(address)
    agent.client = client
    result, _ = await run_fleet_here(address, spec, agent.run_attempt, [(alerts or Alerts()).alert], during,
                                     client=client)
    return result


def states(result: dict) -> dict[str, str]:
    return {key: row["state"] for key, row in result["tasks"].items()}


def ticked(project: Path, target: str) -> set[str]:
    text = git(project, "show", f"{target}:TASKS.md")
    return set(parse(text).texts(DONE))


def alpha_alone(project: Path, target: str) -> None:
    """The project's tasks down to alpha, pushed: a fleet of one task."""
    (project / "TASKS.md").write_text(f"# Tasks\n\n- [ ] {ALPHA}\n")
    git(project, "commit", "-qam", "alpha alone")
    git(project, "push", "-q", "origin", target)


async def upserted_rows(client: Client, fleet_id: str) -> list[list[str]]:
    """The memo keys each of the fleet workflow's upserts carried, in order."""
    from temporalio.api.enums.v1 import EventType

    rows = []
    async for event in client.get_workflow_handle(fleet_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            rows.append(sorted(event.workflow_properties_modified_event_attributes.upserted_memo.fields))
    return rows


@pytest.mark.fault(112)
def test_a_merge_held_by_the_dirty_checkout_waits_then_merges_once_it_is_clean(dev_server, home, tmp_path):
    project, origin, target = home
    (project / "notes.txt").write_text("the user's notes, being edited\n")   # the user left it dirty
    spec = spec_for(project, origin, target, f"w{uuid.uuid4().hex[:8]}")
    agent = Agent(origin, tmp_path, {})
    seen = []

    async def clean_once_held(client):
        while True:
            memo = await reading.fleet_memo(client, spec.fleet_id)
            row = (memo.get("tasks") or {}).get(task_id(ALPHA), {})
            if "held" in row.get("reason", ""):
                seen.append(row)
                await asyncio.sleep(2 * spec.held_wait)   # held across a few durable waits
                git(project, "checkout", "--", "notes.txt")
                return
            await asyncio.sleep(0.1)

    result = asyncio.run(run_fleet(dev_server.address, spec, agent, clean_once_held))
    assert seen and seen[0]["state"] == "merging", seen
    assert result["exit_code"] == 0, result
    assert states(result) == {task_id(ALPHA): "merged", task_id(BETA): "merged"}, result
    assert ticked(project, target) == {ALPHA, BETA}

    # The fleet's memo, on the way: each upsert carries the header and the one row that changed
    # (a memo rewritten whole grows with every task), and its last state says both merged.
    async def read():
        client = await Client.connect(dev_server.address)
        return await upserted_rows(client, spec.fleet_id), await reading.fleet_memo(client, spec.fleet_id)

    upserts, memo = asyncio.run(read())
    assert len(upserts) >= 6, upserts   # each task queued, running, merging, merged
    assert all(len([k for k in keys if k.startswith(TASK_MEMO)]) <= 1 for keys in upserts), upserts
    assert {row["state"] for row in memo["tasks"].values()} == {"merged"} and len(memo["tasks"]) == 2, memo


@pytest.mark.fault(112)
def test_a_target_push_the_remote_rejects_makes_the_task_needs_review_and_the_fleet_32(dev_server, home,
                                                                                        tmp_path):
    project, origin, target = home
    alpha_alone(project, target)   # Temporal tries each merge HOME_TRIES times: one task is enough
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nwhile read old new ref; do [ \"$ref\" = refs/heads/{target} ] && "
                    f"{{ echo 'protected branch' >&2; exit 1; }}; done; exit 0\n")
    hook.chmod(0o755)
    spec = spec_for(project, origin, target, f"w{uuid.uuid4().hex[:8]}")
    alerts = Alerts()
    result = asyncio.run(run_fleet(dev_server.address, spec, Agent(origin, tmp_path, {}), alerts=alerts))
    assert result["exit_code"] == exitcodes.FLEET_NEEDS_REVIEW, result
    row = result["tasks"][task_id(ALPHA)]
    assert row["state"] == "needs-review" and "protected branch" in row["reason"], row
    review = {tid: r["text"] for tid, r in result["tasks"].items() if r["state"] == "needs-review"}
    said = sorted((a.about, a.severity, a.cause) for a in alerts.sent)   # one high alert a task, as locally
    assert said == sorted((tid, "high", f"task needs review: {text}") for tid, text in review.items()), said


def test_a_loop_that_steps_aside_gets_a_new_attempt_that_spends_nothing_until_a_bound(dev_server, home, tmp_path):
    """Alpha's loops keep stepping aside: the task fails after ASIDES_MAX of them, not forever.
    Beta's steps aside once: its next attempt resumes it, with no restart or escalation spent."""
    project, origin, target = home
    spec = spec_for(project, origin, target, f"w{uuid.uuid4().hex[:8]}")
    # MONITOR_LOST counts as a step aside too: a history recorded before STEPPED_ASIDE holds it.
    asides = [("stopped", exitcodes.STEPPED_ASIDE), ("stopped", exitcodes.MONITOR_LOST)] * (ASIDES_MAX // 2 + 3)
    agent = Agent(origin, tmp_path, {task_id(ALPHA): asides, task_id(BETA): [("stopped", exitcodes.STEPPED_ASIDE)]})
    captured = {}

    async def keep_beta(client):   # the task's memo, read while its workflow is there
        while True:
            try:
                memos = await reading.task_memos(client, spec.fleet_id)
            except Exception:  # noqa: BLE001 - not started yet
                memos = {}
            row = (memos.get(task_id(BETA)) or {}).get("row") or {}
            if row.get("state") == "verified":
                captured.update(memos[task_id(BETA)])
                return
            await asyncio.sleep(0.1)

    result = asyncio.run(run_fleet(dev_server.address, spec, agent, keep_beta))
    assert result["exit_code"] == exitcodes.FLEET_TASKS_FAILED, result
    assert states(result) == {task_id(ALPHA): "failed", task_id(BETA): "merged"}, result
    assert f"stepped aside {ASIDES_MAX} times in a row" in result["tasks"][task_id(ALPHA)]["reason"], result
    assert len([c for c in agent.calls if c[0] == task_id(ALPHA)]) == ASIDES_MAX, agent.calls
    assert f"- [!] {ALPHA}" in git(project, "show", f"{target}:TASKS.md")
    assert [c for c in agent.calls if c[0] == task_id(BETA)] == [(task_id(BETA), "start"),
                                                                 (task_id(BETA), "resume")], agent.calls
    assert captured["row"]["restarts"] == 0 and captured["row"]["escalations"] == 0, captured


def test_a_held_task_starts_at_the_limits_end_when_its_release_is_lost(dev_server, home, tmp_path):
    project, origin, target = home
    spec = spec_for(project, origin, target, f"w{uuid.uuid4().hex[:8]}")
    agent = Agent(origin, tmp_path, {task_id(ALPHA): [("limit", 2.0)]})
    result = asyncio.run(run_fleet(dev_server.address, spec, agent))
    assert result["exit_code"] == 0, result
    assert states(result) == {task_id(ALPHA): "merged", task_id(BETA): "merged"}, result
    assert [c for c in agent.calls if c[0] == task_id(ALPHA)] == [(task_id(ALPHA), "start"),
                                                                  (task_id(ALPHA), "resume")], agent.calls


def test_the_account_continues_as_new_with_its_subscribers_and_its_limit(dev_server):
    prefix = f"w{uuid.uuid4().hex[:8]}"

    async def scenario():
        client = await Client.connect(dev_server.address)
        async with Worker(client, task_queue=fleet_queue(prefix), workflows=WORKFLOWS):
            until = time.time() + 3600   # a limit already told (no subscriber to tell: they are names only)
            handle = await client.start_workflow(AccountWorkflow.run, {"bound": 40, "until": until, "limits": 1,
                                                                       "holding": True},
                                                 id=f"{prefix}-account", task_queue=fleet_queue(prefix))
            first = handle.result_run_id
            for n in range(60):   # a night of tasks subscribing: the history passes its bound
                await handle.signal("subscribe", f"{prefix}-fleet/task-{n}")
            deadline = time.monotonic() + 30
            while True:
                described = await client.get_workflow_handle(handle.id).describe()
                state = await client.get_workflow_handle(handle.id).query(AccountWorkflow.state)
                if described.run_id != first and len(state["subscribers"]) == 60:
                    break
                assert time.monotonic() < deadline, (described.run_id, first, sorted(set(f"{prefix}-fleet/task-{n}" for n in range(60)) - set(state["subscribers"])))
                await asyncio.sleep(0.2)
            await client.get_workflow_handle(handle.id).terminate("the test ended")
            return state

    state = asyncio.run(scenario())
    assert state["subscribers"] == [f"{prefix}-fleet/task-{n}" for n in range(60)], state
    assert state["until"] == pytest.approx(time.time() + 3600, abs=60) and state["limits"] == 1, state


def test_a_status_reads_only_the_current_fleet_runs_tasks(dev_server, home, tmp_path):
    project, origin, target = home
    alpha_alone(project, target)
    spec = spec_for(project, origin, target, f"w{uuid.uuid4().hex[:8]}")
    first = asyncio.run(run_fleet(dev_server.address, spec, Agent(origin, tmp_path, {})))
    assert states(first) == {task_id(ALPHA): "merged"}, first
    (project / "TASKS.md").write_text(project.joinpath("TASKS.md").read_text() + f"- [ ] {BETA}\n")
    git(project, "commit", "-qam", "beta next night")
    git(project, "push", "-q", "origin", target)
    second = asyncio.run(run_fleet(dev_server.address, spec, Agent(origin, tmp_path, {})))
    assert states(second) == {task_id(BETA): "merged"}, second

    async def ids():
        return await reading.task_ids(await Client.connect(dev_server.address), spec.fleet_id)

    assert asyncio.run(ids()) == [task_workflow_id(spec.fleet_id, task_id(BETA))]
