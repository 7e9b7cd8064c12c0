"""Waiting on a signal (a file written, a port open, a process gone) instead of a fixed sleep."""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["wait_for"]


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Return once `predicate()` is true; fail the test, naming `what`, after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
