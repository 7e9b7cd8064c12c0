"""The fleet as Temporal holds it, read back for status and reports: the fleet's and each task's
memo (`describe()`: no worker needs to run) and each task's history, where the tries a lost
worker cost are (Temporal records one start per activity: its last try, with the failure of
the try before it and the identity of the worker that took it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from genesis.temporal.records import task_workflow_id, tasks_of_memo
from genesis.temporal.workflows import MEMO_KEY

__all__ = ["Try", "tries_of", "task_memos", "fleet_memo", "account_memo", "task_ids", "fleet_state",
           "MAX_TASKS"]

MAX_TASKS = 1000          # task workflows read for one status (a TASKS.md is never this long)


@dataclass(frozen=True)
class Try:
    """One scheduled activity as its history tells it."""
    activity: str
    queue: str
    scheduled_at: float
    attempt: int = 0                 # Temporal's try that started last (1: no worker was lost)
    identity: str = ""               # the worker that took it: genesis-worker@<host>:<pid>
    started_at: float = 0.0
    last_failure: str = ""           # why the try before it ended (a heartbeat timeout: a lost worker)
    closed: str = ""                 # completed | failed | timed out | cancelled
    closed_at: float = 0.0
    failure: str = ""

    @property
    def host(self) -> str:
        return self.identity.partition("@")[2].rpartition(":")[0]


def _utc(moment: datetime) -> float:
    from_epoch = moment - datetime(1970, 1, 1)
    return from_epoch.total_seconds()


async def tries_of(handle: WorkflowHandle) -> list[Try]:
    """Every activity the workflow scheduled, in order, with its last try and how it closed."""
    rows: dict[int, dict] = {}
    async for event in handle.fetch_history_events():
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            rows[event.event_id] = {"activity": attrs.activity_type.name, "queue": attrs.task_queue.name,
                                    "scheduled_at": _utc(event.event_time.ToDatetime())}
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            rows.setdefault(attrs.scheduled_event_id, {}).update(
                attempt=attrs.attempt, identity=attrs.identity, started_at=_utc(event.event_time.ToDatetime()),
                last_failure=attrs.last_failure.message or "")
        elif kind in _CLOSED:
            name, field = _CLOSED[kind]
            attrs = getattr(event, field)
            failure = getattr(attrs, "failure", None)
            rows.setdefault(attrs.scheduled_event_id, {}).update(
                closed=name, closed_at=_utc(event.event_time.ToDatetime()),
                failure=_chain(failure) if failure is not None else "")
    return [Try(**row) for row in rows.values() if "activity" in row]


_CLOSED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: ("completed", "activity_task_completed_event_attributes"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("failed", "activity_task_failed_event_attributes"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: ("timed out", "activity_task_timed_out_event_attributes"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: ("cancelled", "activity_task_canceled_event_attributes"),
}


def _chain(failure) -> str:
    """A failure and its causes, innermost last: `ScheduleToStart <- Heartbeat`."""
    parts = []
    while failure is not None and failure.message and len(parts) < 5:
        parts.append(failure.message)
        failure = failure.cause if failure.HasField("cause") else None
    return " <- ".join(parts)


async def fleet_memo(client: Client, fleet_id: str) -> dict:
    """The fleet workflow's memo: its tasks' states, pause and stop (no worker needed)."""
    described = await client.get_workflow_handle(fleet_id).describe()
    whole = await described.memo()
    memo = whole.get(MEMO_KEY) or {}
    memo = memo if isinstance(memo, dict) else {}
    return {**memo, "tasks": tasks_of_memo(memo, whole), "status": described.status.name if described.status else ""}


async def account_memo(client: Client, account_id: str) -> dict:
    """The account workflow's memo: the reset its one timer waits for (`until`), {} before any limit."""
    if not account_id:
        return {}
    try:
        described = await client.get_workflow_handle(account_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return {}
        raise
    memo = await described.memo_value(MEMO_KEY, default={})
    return memo if isinstance(memo, dict) else {}


async def task_ids(client: Client, fleet_id: str, limit: int = MAX_TASKS) -> list[str]:
    """The task workflows of the fleet's current run, by their ids (`<fleet id>/<task id>`): the
    tasks its memo names (ids are stable per project: earlier nights' workflows share the prefix),
    at most `limit`."""
    tasks = (await fleet_memo(client, fleet_id)).get("tasks") or {}
    return sorted(task_workflow_id(fleet_id, task_id) for task_id in tasks)[:limit]


async def task_memos(client: Client, fleet_id: str) -> dict[str, dict]:
    """Each task's row and attempts, as its workflow last published them."""
    memos = {}
    for workflow_id in await task_ids(client, fleet_id):
        try:
            described = await client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:   # a task the fleet has not launched yet
                continue
            raise
        memo = await described.memo_value(MEMO_KEY, default={})
        if isinstance(memo, dict):
            running = await _running(client, described)
            memo = {**memo, "running": running} if running else memo
        memos[workflow_id.rpartition("/")[2]] = memo
    return memos


async def _running(client: Client, described) -> dict:
    """The task's attempt running now, as its worker's last heartbeat tells it: its machine, its
    stage, the loop's run and pid, its worktree there, and Temporal's try ({} when none runs)."""
    for pending in described.raw_description.pending_activities:
        if pending.activity_type.name != "run_attempt":
            continue
        found: dict = {"tries": pending.attempt}
        if pending.heartbeat_details.payloads:
            try:
                details = await client.data_converter.decode(pending.heartbeat_details.payloads)
            except Exception:  # noqa: BLE001 - a detail this version cannot read: the try alone
                details = []
            last = details[-1] if details else None
            if isinstance(last, dict):
                found.update({k: last[k] for k in ("host", "stage", "run_id", "pid", "worktree") if k in last})
        return found
    return {}


async def fleet_state(client: Client, fleet_id: str, account_id: str,
                      done: Mapping[str, int]) -> tuple[dict, dict[str, dict], dict[str, list[Try]], dict]:
    """All a Mirror syncs: the fleet's memo, its tasks' memos, the account's memo, and the history
    of each task whose attempts past its `done` first ones include a try a lost worker cost."""
    fleet = await fleet_memo(client, fleet_id)
    account = await account_memo(client, account_id)
    tasks = await task_memos(client, fleet_id)
    tries = {}
    for task_id, memo in tasks.items():
        attempts = memo.get("attempts", [])[done.get(task_id, 0):]
        if any(int(a.get("tries") or 1) > 1 for a in attempts if isinstance(a, dict)):
            tries[task_id] = await tries_of(client.get_workflow_handle(task_workflow_id(fleet_id, task_id)))
    return fleet, tasks, tries, account
