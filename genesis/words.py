"""How the views say things: durations, statuses, wait kinds; and the agents' reported figures."""

from __future__ import annotations

from typing import Any, Iterable

from genesis.clock import parse_iso

__all__ = ["LABELS", "WAIT_LABELS", "duration", "epoch_of", "money", "reported"]

# How a phase_end status reads; anything but a clean exit is abnormal.
LABELS = {"exited": "exited", "stale": "stuck", "wedged": "wedged", "overtime": "over time", "api_fatal": "refused by the API",
          "interrupted": "interrupted", "not_started": "could not start", "watcher_lost": "watcher lost"}

WAIT_LABELS = {"limit": "usage limit", "outage": "API outage", "cooldown": "breaker cooldown",
               "retry": "retry of a stuck phase"}


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))  # a clock stepped back never reads as a negative time
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def epoch_of(stamp: str | None) -> float | None:
    """An ISO time Genesis wrote, as epoch seconds; None for anything else."""
    try:
        return parse_iso(stamp or "")
    except (TypeError, ValueError):
        return None


def reported(phases: Iterable[dict[str, Any]], key: str) -> list[float]:
    """A figure the agents reported (cost_usd, num_turns) over phase_end events: real numbers only."""
    return [e[key] for e in phases if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool)]


def money(usd: float) -> str:
    """Dollars to the cent, or to a hundredth of a cent below ten cents (a phase's cost often is)."""
    return f"${usd:.2f}" if usd >= 0.1 or usd == 0 else f"${usd:.4f}"
