"""Where the loop's events become tickets: called by Step.event for every event it records.

Only the kinds tickets.BUILDERS knows raise one; for those the ticket goes to a detached
deliverer (handoff.dispatch returns at once), which the watcher spares from its sweep of the
agent's orphans.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from genesis.alerts import handoff
from genesis.alerts.tickets import BUILDERS, ticket_for
from genesis.ledger.store import iso
from genesis.procs import proctree

if TYPE_CHECKING:
    from genesis.loop.step import Step

__all__ = ["raise_ticket"]

# For some kinds, only some values of one detail raise a ticket.
ONLY_WHEN = {"health": ("classification", {"stuck", "wedged"}), "iteration_end": ("breaker", {"HALF_OPEN", "OPEN"}),
             "wait_start": ("kind", {"limit", "outage"}), "commit_failed": ("alert", {True})}


def raise_ticket(step: "Step", kind: str, detail: dict[str, Any], at: float | None = None) -> None:
    """Raise the ticket this event calls for, if any; never fails the step."""
    if kind not in BUILDERS:
        return
    if kind in ONLY_WHEN:
        key, values = ONLY_WHEN[kind]
        if detail.get(key) not in values:
            return
    event = {**detail, "run_id": step.run_id, "event": kind, "at": iso(time.time() if at is None else at)}
    try:
        ticket = ticket_for(event, step.cfg.project)
    except ValueError as exc:  # a ticket its own checks refuse: say it, the night goes on
        step.say(f"no alert for {kind}: {exc}", "warn")
        return
    if ticket is None:
        return
    pid = handoff.dispatch(ticket, step.cfg.alerts, step.layout.ledger_file)
    if pid is not None:
        proctree.spare(pid)
