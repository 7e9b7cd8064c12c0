"""`genesis fleet status --engine temporal`: the project's fleet read straight from Temporal,
from any clone of the project (a worker's machine, a teammate's laptop), not only at its home.

The fleet's workflow id comes from the project's remote URL and branch, as the home names it.
What Temporal holds is copied into a throwaway ledger by the home's own Mirror and shown by the
ordinary fleet status, so both views say the same things in the same words. The fleet's
workflow stands for the monitor: it is alive while the workflow runs.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TextIO

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode

from genesis import exitcodes
from genesis.fleet import status
from genesis.fleet.queue import project_branch
from genesis.fleet.status import FleetStatus, Monitor, document, from_ledger, show
from genesis.repo.gitcmd import NotARepository
from genesis.store.layout import work_tree_of
from genesis.temporal import reading
from genesis.temporal.connection import client_options
from genesis.temporal.mirror import Mirror
from genesis.temporal.starting import remote_url
from genesis.temporal.records import FleetSpec, fingerprint, fleet_workflow_id
from genesis.temporal.settings import TemporalSettings

__all__ = ["read_live", "run_live_status", "fleet_id_of", "Unread", "READ_SECONDS"]

READ_SECONDS = 20.0      # the whole read from Temporal: connect, memos, histories


@dataclass(frozen=True)
class Snapshot:
    """The fleet's workflow and its tasks as Temporal described them."""
    run_id: str
    running: bool
    started: float | None
    closed: float | None
    exit_code: int | None
    reason: str
    parallel: int
    fleet: dict
    tasks: dict[str, dict]
    tries: dict[str, list[reading.Try]]
    account: dict                     # the account's memo: the limit it holds


def fleet_id_of(project: Path, remote: str) -> tuple[str, str]:
    """The fleet workflow's id for this clone (its remote's URL and branch, as the home names it),
    or "" and why not."""
    url = remote_url(project, remote)
    if not url:
        return "", (f"{project} has no git remote named {remote!r}: a Temporal fleet is named by its remote's "
                    f"URL and branch (GENESIS_TEMPORAL_REMOTE names another remote)")
    return fleet_workflow_id(fingerprint(url, project_branch(project))), ""


async def _snapshot(settings: TemporalSettings, fleet_id: str, runtime: Runtime) -> Snapshot | None:
    """None when Temporal has no such workflow (no fleet of this project ran there)."""
    client = await Client.connect(settings.address, identity=f"genesis-status@{settings.host}", runtime=runtime,
                                  **client_options(settings, os.environ))
    handle = client.get_workflow_handle(fleet_id)
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    running = described.status == WorkflowExecutionStatus.RUNNING
    code, reason = None, ""
    if not running:
        try:
            result = await handle.result()
            code = int(result.get("exit_code", exitcodes.ERROR)) if isinstance(result, dict) else None
        except WorkflowFailureError as exc:
            code, reason = exitcodes.ERROR, f"the fleet's workflow ended {described.status.name.lower()}: " \
                                            f"{exc.cause or exc}"
    spec = None
    async for event in handle.fetch_history_events(page_size=1):   # the first: the fleet's spec
        (spec,) = await client.data_converter.decode(
            event.workflow_execution_started_event_attributes.input.payloads, [FleetSpec])
        break
    fleet, tasks, tries, account = await reading.fleet_state(
        client, fleet_id, spec.account_workflow if isinstance(spec, FleetSpec) else "", {})
    if not running and not reason:   # the home's words for the end
        reason = "stopped" if fleet.get("stopping") else "every task ended"
    return Snapshot(described.run_id or "", running,
                    described.start_time.timestamp() if described.start_time else None,
                    described.close_time.timestamp() if described.close_time else None,
                    code, reason, spec.parallel if isinstance(spec, FleetSpec) else 0, fleet, tasks, tries, account)


def _bounded(settings: TemporalSettings, fleet_id: str, bound: float) -> Snapshot | None:
    """The read, on a runtime of its own that is gone when it returns: the SDK's core threads
    left running into the interpreter's finalization abort it (temporalio/sdk-python#300)."""
    runtime = Runtime(telemetry=TelemetryConfig(), worker_heartbeat_interval=None)

    async def within() -> Snapshot | None:
        return await asyncio.wait_for(_snapshot(settings, fleet_id, runtime), bound)
    try:
        return asyncio.run(within())
    finally:
        del runtime
        gc.collect()   # the client and its connection with it, while the interpreter is whole


class Unread(Exception):
    """The fleet could not be read from Temporal; code is the exit code that says why."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def read_live(project: Path, settings: TemporalSettings, clock: Callable[[], float] = time.time,
              bound: float = READ_SECONDS) -> FleetStatus:
    """The project's fleet as Temporal holds it now; Unread when it cannot be read (no remote,
    no answer within the bound, no such fleet)."""
    try:
        project = work_tree_of(project)
    except NotARepository:
        raise Unread(f"{project} is not in a git work tree: pass --project with a clone of the fleet's project",
                     exitcodes.USAGE) from None
    fleet_id, problem = fleet_id_of(project, settings.remote)
    if not fleet_id:
        raise Unread(problem, exitcodes.USAGE)
    try:
        snap = _bounded(settings, fleet_id, bound)
    except (asyncio.TimeoutError, TimeoutError):
        raise Unread(f"Temporal at {settings.address} did not answer within {bound:.0f}s: is the server up, "
                     f"and is --temporal-address right?", exitcodes.ERROR) from None
    except (RPCError, RuntimeError, OSError, ValueError) as exc:
        raise Unread(f"Temporal at {settings.address} (namespace {settings.namespace}) cannot be read: {exc}",
                     exitcodes.ERROR) from None
    if snap is None:
        raise Unread(f"no fleet {fleet_id} on Temporal at {settings.address} (namespace {settings.namespace}): "
                     f"no fleet of this remote and branch ran there", exitcodes.NOT_RUNNING)
    now = clock()
    with tempfile.TemporaryDirectory(prefix="genesis-live-") as folder:
        ledger = Path(folder) / "ledger.sqlite3"
        mirror = Mirror(ledger, snap.run_id)
        mirror.start(snap.parallel, fleet_id, settings.address, snap.started or now)
        mirror.sync(snap.fleet, snap.tasks, snap.tries, snap.account if snap.running else {}, now)
        if not snap.running:
            mirror.end(snap.exit_code if snap.exit_code is not None else exitcodes.ERROR, snap.reason,
                       snap.closed or now)
        monitor = Monitor(snap.running, None, snap.run_id, snap.started, now if snap.running else None)
        return from_ledger(project, ledger, monitor, now, clock,
                           source=f"Temporal at {settings.address}, namespace {settings.namespace}, workflow {fleet_id}")


def run_live_status(project: Path, settings: TemporalSettings, as_json: bool = False, out: TextIO | None = None,
                    clock: Callable[[], float] = time.time) -> int:
    """`genesis fleet status --engine temporal`: as `fleet status`, read from Temporal. When
    Temporal does not answer, the checkout's own copy (the home's) is shown if it has one, saying so."""
    out = out if out is not None else sys.stdout
    try:
        fs = read_live(project, settings, clock)
    except Unread as exc:
        kept = status.read(project, clock=clock) if exc.code == exitcodes.ERROR else None
        if kept is not None and kept.ran:   # at home: its copy, kept once the server is gone
            return show(replace(kept, error=f"{exc}; shown: this checkout's copy of the fleet, from the home's "
                                            f"last read of Temporal"), as_json, out)
        if not as_json:
            print(f"genesis: {exc}", file=sys.stderr)
            return exc.code
        nothing = FleetStatus(Path(project), clock(), False, "", None, None, None, None, "",
                              Monitor(False, None, "", None, None), None, None, (), error=str(exc))
        out.write(json.dumps({**document(nothing), "exit_code": exc.code}, indent=2) + "\n")
        return exc.code
    return show(fs, as_json, out)
