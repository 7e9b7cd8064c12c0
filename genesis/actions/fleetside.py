"""The fleet's monitor heeding the requests made to it (pause, resume, restart or skip a running
task): read in one place, once a check, each recorded in the fleet's ledger with what came of it."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import TYPE_CHECKING

from genesis.actions import inbox
from genesis.actions.errors import FLEET_REQUESTS
from genesis.actions.tasks import skip
from genesis.console import say
from genesis.fleet import children as kids

if TYPE_CHECKING:
    from genesis.fleet.monitor import Monitor

__all__ = ["heed", "SETTLE"]


SETTLE = "skip-settle"   # a skipped task's child is ending: its row is set failed again once it has


def heed(monitor: "Monitor") -> None:
    for request in inbox.take(monitor.fleet_dir / inbox.FOLDER, FLEET_REQUESTS | {SETTLE}):
        if request.action == SETTLE:
            _settle(monitor, request)
            continue
        said = _one(monitor, request)
        monitor.ledger.record("action_done", request.task or None, action=request.action, said=said,
                              source=request.source, credential=request.credential)
        say(f"{request.action} (from the {request.source}): {said}")


def _one(monitor: "Monitor", request: inbox.Request) -> str:
    if request.action == "pause":
        monitor.paused = True
        monitor.ledger.record("paused", None, source=request.source)
        return "no child starts until resume; those running go on"
    if request.action == "resume":
        monitor.paused = False
        monitor.ledger.record("resumed", None, source=request.source)
        return "children start again, one by one"
    row = monitor.ledger.task(request.task)
    child = monitor.children.get(request.task)
    if row is None:
        return f"no task {request.task!r}"
    if child is None:
        return f"{row.text!r} was not running any more: nothing stopped"
    if not kids.signal_child(child, signal.SIGTERM):
        return f"{row.text!r}: its loop had ended already"
    if request.action == "retry":
        return f"stopped {row.text!r}; it starts again at once, on its branch"
    # Marked first: the child's end sets the row queued, and a task no longer open is not relaunched.
    said = skip(monitor.cfg, monitor.ledger, row, f"skipped from the {request.source}")
    inbox.submit(monitor.fleet_dir / inbox.FOLDER, replace(request, action=SETTLE, id=""))
    return "stopped it; " + said


def _settle(monitor: "Monitor", request: inbox.Request) -> None:
    """Once the skipped task's child has ended, its row says failed (skipped) again; until then, wait."""
    if request.task in monitor.children:
        inbox.submit(monitor.fleet_dir / inbox.FOLDER, replace(request, id=""))
        return
    monitor.ledger.set_state(request.task, "failed", f"skipped from the {request.source}", pid=None)
