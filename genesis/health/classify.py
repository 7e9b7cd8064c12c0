"""A running phase's health at each check: healthy, slow, stuck or wedged.

- healthy: a sign of life within the first half of the window, or a busy tool;
- slow: silent for half the window or more, not yet stuck;
- stuck: no sign of life for the general window (its heartbeat is stale), or for the
  tool-silent window;
- wedged: busy doing the same thing over and over (a doom loop).

The snapshot is what status and the report read; the classification's changes are recorded.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass

__all__ = ["HEALTHY", "SLOW", "STUCK", "WEDGED", "Snapshot", "Tracker", "classify", "fingerprint"]

HEALTHY, SLOW, STUCK, WEDGED = "healthy", "slow", "stuck", "wedged"
RANK = {HEALTHY: 0, SLOW: 1, STUCK: 2, WEDGED: 3}


@dataclass(frozen=True)
class Snapshot:
    run_id: str
    phase: str
    iteration: int
    at: str                      # UTC, when it was taken
    classification: str
    stall_score: float           # silence as a fraction of the window that applies (1.0: stuck)
    idle: float                  # seconds since the last sign of life
    last_event: str              # the heartbeat's last event and tool, with its age
    severity: str                # by tool calls since the last successful one: ok, warn ... critical
    last_progress: float | None  # seconds since the last successful tool call (None: none yet)
    tool_in_flight: str          # the tool the agent is inside, with its command and since when ("" none)
    turns: int | None            # the model's turns so far, when the CLI's output tells
    last_action: str             # the tool in flight, else the last tool called
    tool_calls: int
    fingerprint: str             # changes whenever the agent does anything new
    reason: str = ""             # why it is not healthy

    def to_json(self) -> dict:
        return asdict(self)


def classify(idle: float, window: float, busy: bool, stuck: bool, wedged: bool) -> tuple[str, float]:
    """The class and the stall score from what the watcher saw at one check."""
    # A fraction of the window, at most 1 (the window is spent: stuck); how far past it is the idle time.
    score = 0.0 if busy else round(min(idle / window, 1.0), 3) if window > 0 else 0.0
    if wedged:
        return WEDGED, score
    if stuck or score >= 1.0:
        return STUCK, score
    if score >= 0.5:
        return SLOW, score
    return HEALTHY, score


def fingerprint(*parts: object) -> str:
    """A short digest of what the agent has done so far (tool calls, output, heartbeat)."""
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:12]


class Tracker:
    """Follows one phase's classification: every change is recorded, but a warning about the
    same class is said at most once per cooldown, so a flapping agent does not flood the console."""

    def __init__(self, cooldown: float, mono=time.monotonic):
        self.cooldown, self.mono = cooldown, mono
        self.current = HEALTHY
        self.said: dict[str, float] = {}

    def update(self, snap: Snapshot) -> tuple[bool, bool]:
        """(the class changed, the change is worth saying now)."""
        cls = snap.classification
        if cls == self.current:
            return False, False
        worse = RANK.get(cls, 0) > RANK.get(self.current, 0)
        self.current = cls
        now = self.mono()
        if worse and now - self.said.get(cls, -1e18) >= self.cooldown:
            self.said[cls] = now
            return True, True
        return True, False
