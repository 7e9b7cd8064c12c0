"""The fleet's restart budget: at most one restart (or escalation) per `every` seconds,
across every task, whatever the ladder and the cascade gate allow.

It bounds the damage of what no other rule catches (a shared cause the cascade rule
misses: failures spread just wide enough apart). An agent started again inside its running
child after it died is a restart too (fleet/decide.AgentRestartDue). Pure: the time is passed
in; the monitor spends it when it relaunches or gives a child's loop its go, records a
`restart`, `escalate` or `agent_restart` event, and a monitor started again rebuilds the
budget from those events.

Workflow code: the fleet on Temporal runs this module inside its workflows
(`temporal/workflows.py`), replayed from their histories. A change to what it decides is a
change to those workflows: from the first release on, it follows their patch cycle
(docs/maintainers/temporal.md), and `tests/temporal/test_replay.py` keeps passing.
"""

from __future__ import annotations

from typing import Iterable

from genesis.config import Config
from genesis.fleet.ledger import FleetEvent

__all__ = ["RestartBudget", "SPENDING", "budget_of"]

SPENDING = ("restart", "escalate", "agent_restart")  # the fleet ledger events that spent the budget


class RestartBudget:
    def __init__(self, every: float, last: float | None = None):
        if not every >= 0:
            raise ValueError(f"a restart budget's period must be 0 or more seconds, not {every!r}")
        self.every = every
        self.last = last          # when a restart was last spent (epoch); None: never

    def next_at(self, now: float) -> float:
        """The first time a restart may happen: now, or when the period since the last one ends."""
        if self.last is None or self.last > now + self.every:
            return now  # never spent, or spent "in the future": the clock was set back; do not hold all night
        return max(now, self.last + self.every)

    def may_restart(self, now: float) -> bool:
        return self.next_at(now) <= now

    def spend(self, now: float) -> None:
        self.last = now

    @classmethod
    def from_events(cls, every: float, events: Iterable[FleetEvent]) -> "RestartBudget":
        """The budget as the fleet ledger's restart and escalate events left it."""
        spent = [e.at for e in events if e.kind in SPENDING]
        return cls(every, max(spent) if spent else None)


def budget_of(cfg: Config) -> RestartBudget:
    return RestartBudget(cfg.fleet_restart_every)
