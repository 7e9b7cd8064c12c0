"""Clocks, injected so that time-dependent logic is tested without sleeping."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Clock", "SystemClock", "ISO", "iso", "parse_iso"]

ISO = "%Y-%m-%dT%H:%M:%SZ"  # how Genesis writes a time in its files: UTC, whole seconds


def iso(epoch: float) -> str:
    return time.strftime(ISO, time.gmtime(epoch))


def parse_iso(text: str) -> float:
    """The inverse of iso(); ValueError (or TypeError) for anything else."""
    return float(calendar.timegm(time.strptime(text, ISO)))


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
