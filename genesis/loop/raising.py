"""Where the loop's events become tickets: called by Step.event for every event it records.

Only the kinds tickets.BUILDERS knows raise one; for those the ticket goes to a detached
deliverer (handoff.dispatch returns at once), which the watcher spares from its sweep of the
agent's orphans.

A stall the watcher ends is told once, after the auto-commit decided what its work became:
by the `retry` (or `phase_failed`, `recovery_spent`) that follows, not by the health change
or the incident seen before the kill. The retry's phase finishing raises the resolution
(`resolved`, at its `phase_work`). An event that ends the loop marks its ticket to be told
with the loop's end (deliver.py).

A fleet's child tells through the fleet (alerts/fleetchild.py): its end is the fleet's to
tell, its other tickets go to the fleet project's ledger, titled by the project and the task.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from genesis.alerts import handoff
from genesis.alerts.fleetchild import as_fleets, child_of, fleets_own
from genesis.alerts.tickets import BUILDERS, ticket_for
from genesis.ledger.store import iso
from genesis.procs import proctree

if TYPE_CHECKING:
    from genesis.loop.step import Step

__all__ = ["raise_ticket"]

# For some kinds, only some values of one detail raise a ticket.
ONLY_WHEN = {"health": ("classification", {"stuck", "wedged"}), "iteration_end": ("breaker", {"HALF_OPEN", "OPEN"}),
             "wait_start": ("kind", {"limit", "outage"}), "commit_failed": ("alert", {True}),
             "incident": ("kind", {"stuck", "wedged", "overtime"})}  # not "done": its result was written


# Kinds whose ticket says what became of the phase's work and which window ended it.
AFTER_COMMIT = ("retry", "phase_failed", "recovery_spent")


def raise_ticket(step: "Step", kind: str, detail: dict[str, Any], at: float | None = None) -> None:
    """Raise the ticket this event calls for, if any; never fails the step."""
    if kind == "phase_work":
        kind, detail = "resolved", _resolution(step, detail)
        if not detail:
            return
    if kind not in BUILDERS:
        return
    if kind in ONLY_WHEN:
        key, values = ONLY_WHEN[kind]
        if detail.get(key) not in values:
            return
    child = child_of(os.environ)
    if child is not None and fleets_own(kind, detail):
        return
    if kind in ("health", "incident") and step.cfg.health_enforce and \
            detail.get("classification", detail.get("kind")) in ("stuck", "wedged"):
        return  # the watcher ends the phase: the retry or the failure that follows tells it, once
    event = {**detail, **_context(step, kind, detail), "run_id": step.run_id, "event": kind,
             "at": iso(time.time() if at is None else at)}
    try:
        ticket = ticket_for(event, step.cfg.project)
    except ValueError as exc:  # a ticket its own checks refuse: say it, the night goes on
        step.say(f"no alert for {kind}: {exc}", "warn")
        return
    if ticket is None:
        return
    ledger = step.layout.ledger_file
    if child is not None:
        ticket, ledger = as_fleets(ticket, child), child.ledger
    pid = handoff.dispatch(ticket, step.cfg.alerts, ledger)
    if pid is not None:
        proctree.spare(pid)


def _last(step: "Step", kind: str, iteration: Any, phase: Any) -> dict[str, Any] | None:
    if not isinstance(iteration, int):
        return None
    found = [e for e in step.events(kinds=(kind,), iteration=iteration) if e.get("phase") == phase]
    return found[-1] if found else None


def _resolution(step: "Step", work: dict[str, Any]) -> dict[str, Any]:
    """The `resolved` event's detail when the phase whose work this is finished as a retry, or
    as the first run of this phase since it gave up (`phase_failed`) in an earlier iteration;
    else {}."""
    iteration, phase = work.get("iteration"), work.get("phase")
    end = _last(step, "phase_end", iteration, phase)
    attempt = end.get("attempt") if end else None
    if not end or end.get("ending") != "finished" or not isinstance(attempt, int):
        return {}
    if attempt >= 1:
        return {"iteration": iteration, "phase": phase, "attempt": attempt, "work": work}
    failed = _gave_up_before(step, iteration, phase)
    return {"iteration": iteration, "phase": phase, "attempt": 0, "fixes": failed, "work": work} if failed else {}


def _gave_up_before(step: "Step", iteration: Any, phase: Any) -> int | None:
    """The earlier iteration in which the phase gave up, when it has not finished since (its
    failure is still open), else None."""
    if not isinstance(iteration, int):
        return None
    ends = [e for e in step.events(kinds=("phase_failed", "phase_end"))
            if e.get("phase") == phase and isinstance(e.get("iteration"), int) and e["iteration"] < iteration]
    last = next((e for e in reversed(ends) if e["event"] == "phase_failed" or e.get("ending") == "finished"), None)
    return last["iteration"] if last is not None and last["event"] == "phase_failed" else None


def _context(step: "Step", kind: str, detail: dict[str, Any]) -> dict[str, Any]:
    """What the ticket needs beyond its event: the retry budget, the phase's work and the
    window that ended it, and whether the loop ends with this event."""
    cfg, extra = step.cfg, {}
    if kind in AFTER_COMMIT:
        iteration, phase = detail.get("iteration"), detail.get("phase")
        extra.update(allowed=cfg.phase_retries, night_allowed=cfg.max_recoveries)
        work = _last(step, "phase_work", iteration, phase)
        if work is not None:
            extra["work"] = {k: work.get(k) for k in ("commits", "files_changed", "tasks_done")}
        end = _last(step, "phase_end", iteration, phase)
        if end is not None and isinstance(end.get("window"), str):
            extra["window"] = end["window"]
    if kind == "iteration_end" and detail.get("breaker") == "OPEN":
        extra.update(cooldown=cfg.cb_cooldown is not None, ends_loop=True)  # with a cooldown: told after the hold
    if kind in ("recovery_spent", "disk_full") or (kind == "history_rewritten" and not detail.get("allowed")):
        extra["ends_loop"] = True
    return extra
