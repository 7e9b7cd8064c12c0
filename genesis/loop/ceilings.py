"""Ceilings for a whole night, checked between phases (a running phase finishes under its own
cap): GENESIS_MAX_RUNTIME_HOURS since the run started, and GENESIS_MAX_COST_USD of the costs
the agents reported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from genesis import exitcodes
from genesis.words import duration, epoch_of, reported

if TYPE_CHECKING:
    from genesis.loop.step import Step

__all__ = ["Spent", "spent", "deadline", "reached"]

KINDS = ("loop_start", "phase_end")  # the events the ceilings are counted from


@dataclass(frozen=True)
class Spent:
    started: float | None   # epoch of the run's start (None: unknown)
    cost_usd: float         # the agents' reported costs so far


def spent(evs: list[dict[str, Any]]) -> Spent:
    started = next((e["epoch"] if isinstance(e.get("epoch"), (int, float)) else epoch_of(e.get("at"))
                    for e in evs if e.get("event") == "loop_start"), None)
    cost = sum(reported([e for e in evs if e.get("event") == "phase_end"], "cost_usd"))
    return Spent(started, float(cost))


def deadline(step: "Step") -> float | None:
    """When the run's runtime ceiling falls (epoch), or None without one."""
    if not step.cfg.max_run_seconds:
        return None
    started = spent(step.events(kinds=KINDS)).started
    return started + step.cfg.max_run_seconds if started is not None else None


def reached(step: "Step", now: float) -> tuple[int, str] | None:
    """(exit code, why) when a ceiling is reached, else None."""
    cfg = step.cfg
    if not cfg.max_run_seconds and not cfg.max_cost_usd:
        return None
    so_far = spent(step.events(kinds=KINDS))
    if cfg.max_run_seconds and so_far.started is not None and now - so_far.started >= cfg.max_run_seconds:
        return exitcodes.MAX_RUNTIME, (f"the run has lasted {duration(now - so_far.started)}, reaching "
                                       f"GENESIS_MAX_RUNTIME_HOURS ({cfg.max_run_seconds / 3600:g} h)")
    if cfg.max_cost_usd and so_far.cost_usd >= cfg.max_cost_usd:
        return exitcodes.MAX_COST, (f"the agents reported ${so_far.cost_usd:.2f} in all, reaching "
                                    f"GENESIS_MAX_COST_USD (${cfg.max_cost_usd:.2f})")
    return None
