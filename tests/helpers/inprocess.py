"""The fleet's workflows run to their end in this process, on the real dev server: the real
workflow code on the fleet's queue, the home's real activities (open_tasks, merge, mark, and
any the test adds) on the home's queue, and the test's stand-in `run_attempt` on the `-any`
queue and on the queue of its machine "M".

  run_fleet_here(address, spec, run_attempt, home_extra=(), during=None, record="")
      -> (the fleet's result, its history's events)
  Alerts()    the home's `alert` activity, its alerts kept (in .sent) instead of sent
  spec_for(project, origin, target, prefix, **changes)
      -> a FleetSpec with compressed windows, one task at a time unless `changes` say otherwise
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from genesis.config import resolve
from genesis.temporal import reading
from genesis.temporal.activities import HomeActivities
from genesis.temporal.records import AlertInput, FleetSpec, LadderSpec, any_queue, fleet_queue, host_queue
from genesis.temporal.workflows import WORKFLOWS, AccountWorkflow, FleetWorkflow

__all__ = ["run_fleet_here", "Alerts", "spec_for", "HISTORIES", "WAIT"]

HISTORIES = Path(__file__).resolve().parent.parent / "temporal" / "histories"   # test_replay.py's
WAIT = 90.0               # the bound on one fleet here (each ends in seconds)


class Alerts:
    """The home's `alert` activity, kept instead of sent (the channels are the home's business)."""

    def __init__(self):
        self.sent: list[AlertInput] = []

    @activity.defn(name="alert")
    async def alert(self, inp: AlertInput) -> int:
        self.sent.append(inp)
        return 0


async def run_fleet_here(address: str, spec: FleetSpec, run_attempt, home_extra=(), during=None,
                         record: str = "", client: Client | None = None, merge=None) -> tuple[dict, list]:
    """The fleet to its end, with `during(client)` beside it: its result and its history's events
    (with TEMPORAL_RECORD_HISTORIES=1 and `record`, its and its tasks' histories kept for
    test_replay.py). `merge(home)`: the home's merge activity made of its real one."""
    client = client or await Client.connect(address)
    project = Path(spec.project)
    home = HomeActivities(project, resolve(project, flags={}), "origin")
    with ThreadPoolExecutor(max_workers=2) as pool:
        async with Worker(client, task_queue=fleet_queue(spec.queue_prefix), workflows=WORKFLOWS), \
                Worker(client, task_queue=host_queue(spec.queue_prefix, spec.home), activity_executor=pool,
                       activities=[home.open_tasks, merge(home) if merge else home.merge, home.mark,
                                   *home_extra]), \
                Worker(client, task_queue=any_queue(spec.queue_prefix), activities=[run_attempt]), \
                Worker(client, task_queue=host_queue(spec.queue_prefix, "M"), activities=[run_attempt]):
            await client.start_workflow(AccountWorkflow.run, id=spec.account_workflow,
                                        task_queue=fleet_queue(spec.queue_prefix))
            handle = await client.start_workflow(FleetWorkflow.run, spec, id=spec.fleet_id,
                                                 task_queue=fleet_queue(spec.queue_prefix))
            side = asyncio.create_task(during(client)) if during else None
            try:
                result = await asyncio.wait_for(handle.result(), WAIT)
            finally:
                if side is not None:
                    side.cancel()
                await client.get_workflow_handle(spec.account_workflow).terminate("the test ended")
                try:
                    await handle.terminate("the test ended")
                except Exception:  # noqa: BLE001 - it ended on its own
                    pass
            if side is not None and side.done() and not side.cancelled() and side.exception():
                raise side.exception()
            history = await handle.fetch_history()
            if record and os.environ.get("TEMPORAL_RECORD_HISTORIES") == "1":
                for workflow_id in [spec.fleet_id, *await reading.task_ids(client, spec.fleet_id)]:
                    kept = history if workflow_id == spec.fleet_id else \
                        await client.get_workflow_handle(workflow_id).fetch_history()
                    (HISTORIES / f"{record}--{workflow_id.rpartition('/')[2]}.json").write_text(kept.to_json())
            return result, list(history.events)


def spec_for(project: Path, origin: Path, target: str, prefix: str, **changes) -> FleetSpec:
    """The fleet's spec for a fleet run here: windows in seconds, restarts 0.1 s apart."""
    ladder = LadderSpec(1, 5, 0.1, ("claude",), ((),), (1.0,))
    spec = FleetSpec(fleet_id=f"{prefix}-fleet", project=str(project), remote_url=str(origin), target=target,
                     queue_prefix=prefix, home="home", account_workflow=f"{prefix}-account", parallel=1,
                     heartbeat=30.0, host_wait=30.0, check=0.2, stagger=0.0, ladder=ladder, phases=("Builder",),
                     iterations=1, overrides=(), attempt_timeout=60.0, merge_timeout=60.0, home_retry=0.1,
                     held_wait=0.5)
    return replace(spec, **changes)
