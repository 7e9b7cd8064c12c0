"""Which actions a tile, a loop's page and an alert offer, by the state they show: only those that
apply, so a button never leads to 'does not apply'. Each says whether it asks to confirm (what
cannot be undone) and what it asks for first (a note, a duration, a phase)."""

from __future__ import annotations

from typing import Any

from genesis.actions.errors import CONFIRM

__all__ = ["for_loop", "for_task", "for_fleet", "offer", "LABELS", "ASKS"]

LABELS = {"stop": "Stop after the phase", "stop-now": "Stop now", "retry": "Retry now", "approve": "Approve",
          "send-back": "Send back", "skip": "Skip", "pause": "Pause launches", "resume": "Resume launches",
          "wait-extend": "Wait longer", "wait-end": "End the wait", "revert": "Revert a phase"}
ASKS = {"send-back": "note", "wait-extend": "duration", "revert": "phase"}
LIVE = ("running", "waiting", "frozen")
WAITS = ("limit", "outage", "cooldown")


def offer(action: str) -> dict[str, Any]:
    return {"action": action, "label": LABELS[action], "confirm": action in CONFIRM, "ask": ASKS.get(action)}


def _waits(wait_kind: str | None) -> list[str]:
    return ["wait-end", "wait-extend"] if wait_kind in WAITS else []


def for_loop(state: str | None, wait_kind: str | None, page: bool = False) -> list[dict[str, Any]]:
    """A single loop: stop it, act on its wait; on its page, revert a phase once it stopped."""
    names = (["stop", "stop-now"] + _waits(wait_kind)) if state in LIVE else (["revert"] if page else [])
    return [offer(n) for n in names]


def for_task(state: str | None, wait_kind: str | None) -> list[dict[str, Any]]:
    """A fleet's task, by its state in the fleet."""
    names = {"running": ["retry", "skip"], "restarting": ["retry", "skip"], "escalated": ["retry", "skip"],
             "queued": ["skip"], "waiting": ["skip"], "failed": ["retry"],
             "ready": ["approve", "send-back", "skip"], "needs-review": ["approve", "send-back", "skip"]}
    found = names.get(state or "", [])
    return [offer(n) for n in found + (_waits(wait_kind) if state == "running" else [])]


def for_fleet(running: bool) -> list[dict[str, Any]]:
    """A fleet whose monitor runs: its launches and its end."""
    return [offer(n) for n in ("pause", "resume", "stop", "stop-now")] if running else []
