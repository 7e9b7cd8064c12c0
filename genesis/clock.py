"""Clocks, injected so that time-dependent logic is tested without sleeping."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def wall(self) -> float:
        """Seconds since the epoch: for what is persisted or compared with other processes."""

    def mono(self) -> float:
        """A monotonic reading: for measuring intervals within this process."""


@dataclass(frozen=True)
class SystemClock:
    def wall(self) -> float:
        return time.time()

    def mono(self) -> float:
        return time.monotonic()
