"""A fleet's child tells its user through the fleet, never as a night of its own.

A child (GENESIS_FLEET_DIR in its environment) is one attempt at one task; the fleet's
monitor decides what becomes of it. So:
- its end, an OPEN breaker and a spent recovery budget raise no ticket: the monitor restarts
  the task or tells that it failed for good, and the fleet's end sums the night up;
- any other ticket is the fleet project's: titled by the project and the task (not the
  worktree's slug), its cause naming the task (one cause of one task is told once), and
  recorded in the project's ledger beside the monitor's own alerts, so that triage sees every
  child's and the fleet's report and dashboard list them all;
- nothing is held for the child's end (no message of that end follows).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from genesis.alerts.tickets import MAX_CAUSE, MAX_HEADLINE, MAX_LINE, MAX_LINES, Ticket

__all__ = ["FleetChild", "child_of", "fleets_own", "as_fleets", "FLEET_WIDE", "LEDGER_FILE"]

LEDGER_FILE = "ledger.sqlite3"     # the project's run ledger, beside the fleet's folder (store/layout.py)
FLEET_WIDE = ("monitor_down", "monitor_back")  # about the fleet, not the child's task: one for all children
TASK_CHARS = 32                    # the task's words in a title


@dataclass(frozen=True)
class FleetChild:
    project: str      # the fleet's project (its work tree)
    ledger: Path      # the project's run ledger, where the fleet's alerts are recorded
    task_id: str
    task: str


def child_of(env: Mapping[str, str]) -> FleetChild | None:
    """The fleet this loop is a child of, or None (a loop of its own)."""
    folder = env.get("GENESIS_FLEET_DIR", "").strip()
    if not folder:
        return None
    state = Path(folder).parent                       # <git dir>/genesis/fleet -> <git dir>/genesis
    git_dir = state.parent
    project = str(git_dir.parent) if git_dir.name == ".git" else str(state)
    text = env.get("GENESIS_TASK", "").strip()
    return FleetChild(project, state / LEDGER_FILE, env.get("GENESIS_TASK_ID", "").strip(), text)


def fleets_own(kind: str, detail: Mapping[str, Any]) -> bool:
    """Whether the event is the fleet's to tell (the child raises no ticket for it)."""
    return kind in ("loop_end", "recovery_spent") or (kind == "iteration_end" and detail.get("breaker") == "OPEN")


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 3].rstrip() + "..."


def as_fleets(ticket: Ticket, child: FleetChild) -> Ticket:
    """The child's ticket as the fleet's: the project's name in the title, the task in the
    headline and the cause, its first line naming the task; never held for the child's end."""
    if ticket.kind in FLEET_WIDE or not (child.task or child.task_id):
        return replace(ticket, project=child.project, holds_for_end=False)
    task = _short(child.task or child.task_id, TASK_CHARS)
    head = ticket.headline or ticket.cause
    resolved = head.startswith("resolved: ")
    core = head[len("resolved: "):] if resolved else head
    headline = _short(("resolved: " if resolved else "") + f"{task}: {core}", MAX_HEADLINE)
    cause = _short(f"task {child.task_id or task}: {ticket.cause}", MAX_CAUSE)
    lines = (_short(f"Task: {child.task}", MAX_LINE), *ticket.lines)[:MAX_LINES] if child.task else ticket.lines
    return replace(ticket, project=child.project, headline=headline, cause=cause, lines=tuple(lines),
                   holds_for_end=False)
