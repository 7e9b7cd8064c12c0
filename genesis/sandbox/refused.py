"""What the box's network refused (GENESIS_NETWORK=allowlist): counted by (host, port) while
the agent runs (proxy.py), recorded at each phase's end (a `network_refused` event), summed
for a run and said in one line by status, the report and the dashboard. Bounded everywhere:
past `kinds` distinct (host, port), refusals count under `(others)`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable

__all__ = ["Refused", "Refusals", "EVENT", "summed", "refused_line", "KINDS"]

EVENT = "network_refused"
KINDS = 64
OTHERS = "(others)"


@dataclass(frozen=True)
class Refused:
    host: str
    port: int
    count: int

    def said(self) -> str:
        where = self.host if self.host == OTHERS else f"{self.host}:{self.port}"
        return where + (f" x{self.count}" if self.count > 1 else "")


def _counted(counts: dict[tuple[str, int], int], host: str, port: int, n: int, kinds: int) -> None:
    key = (host[:255], port)
    if key not in counts and len(counts) >= kinds:
        key = (OTHERS, 0)
    counts[key] = counts.get(key, 0) + n


def _ordered(counts: dict[tuple[str, int], int]) -> tuple[Refused, ...]:
    """Most refused first."""
    return tuple(Refused(h, p, n) for (h, p), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class Refusals:
    """The proxy's count, (host, port) -> refusals; read from another thread."""

    def __init__(self, kinds: int = KINDS):
        self.kinds = kinds
        self._counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def add(self, host: str, port: int) -> None:
        with self._lock:
            _counted(self._counts, host, port, 1, self.kinds)

    def items(self) -> tuple[Refused, ...]:
        with self._lock:
            return _ordered(dict(self._counts))


def summed(events: Iterable[dict[str, Any]], kinds: int = KINDS) -> tuple[Refused, ...]:
    """A run's refusals from its `network_refused` events (a malformed row is skipped)."""
    counts: dict[tuple[str, int], int] = {}
    for event in events:
        rows = event.get("refused")
        for row in rows if isinstance(rows, list) else ():
            if (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[1], int)
                    and isinstance(row[2], int) and row[2] > 0):
                _counted(counts, row[0], row[1], row[2], kinds)
    return _ordered(counts)


def refused_line(refused: tuple[Refused, ...], most: int = 6) -> str:
    """`network: 5 connections refused (example.com:443 x3, 127.0.0.1:8233, ...)`, or "" for none."""
    if not refused:
        return ""
    total = sum(r.count for r in refused)
    more = ", ..." if len(refused) > most else ""
    return (f"network: {total} connection{'s' if total != 1 else ''} refused "
            f"({', '.join(r.said() for r in refused[:most])}{more}); GENESIS_NETWORK_ALLOW adds a host")
