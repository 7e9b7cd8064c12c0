"""Wedged: an agent that keeps calling tools and gets nowhere.

Each tool call is a heartbeat, so a looping agent's heartbeat never goes stale. Judged from the
completed calls of the phase (oldest first, from the tool log):

- severity, by steps since the last successful call: ok below `warn`, then warn, medium,
  high, critical. Informational: it goes to the health snapshot and the report.
- wedged, which ends the phase early, when one of two patterns holds:
  `stall_same_tool`: the same tool input failed `same_failures` times in a row;
  `doom_loop`: the last `cycle_window` calls cycle over at most `cycle_inputs` distinct
  inputs and the repository did not change since the cycle (the phase) began.

Default ladder 5 / 10 / 15 / 20: in our loop a "step" is one tool call,
and a working agent meets short runs of failures all the time (a grep with no match
exits 1, a test fails while it is being fixed, a probe for a missing file), runs of 3 or
4 calls; 5 failed calls in a row is the first point that is unusual, and 20 in a row
(minutes of calls that all fail) is critical. Same-input failures: 6, because a fix-and-
rerun cycle repeats the same command with edits in between (which succeed and break the
run), while 6 identical failures with nothing in between is a loop, detected in seconds
to a few minutes instead of at the stale window. Cycle: 12 calls over at most 3 inputs,
with the repository unchanged: a build-test-read loop that edits nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import ClassVar

from genesis.health.toollog import ToolCall, describe

__all__ = ["DoomLimits", "Judgement", "judge", "SEVERITIES", "DOOM_LOOP", "STALL_SAME_TOOL"]

SEVERITIES = ("ok", "warn", "medium", "high", "critical")
DOOM_LOOP = "doom_loop"
STALL_SAME_TOOL = "stall_same_tool"


@dataclass(frozen=True)
class DoomLimits:
    warn: int = 5               # steps since the last successful call
    medium: int = 10
    high: int = 15
    critical: int = 20
    same_failures: int = 6      # the same input failing this many times in a row: wedged
    cycle_window: int = 12      # the last this many calls...
    cycle_inputs: int = 3       # ...over at most this many distinct inputs, repo unchanged: wedged

    # Sane bounds: below them a working agent is stopped, above them a loop runs
    # for an hour. Anything unusable falls back to the default.
    BOUNDS: ClassVar[dict[str, tuple[int, int]]] = {
        "warn": (2, 100), "medium": (3, 200), "high": (4, 300), "critical": (5, 400),
        "same_failures": (3, 50), "cycle_window": (6, 200), "cycle_inputs": (1, 10)}

    def clamped(self) -> DoomLimits:
        """Every threshold within its bounds, the ladder strictly rising, and the cycle
        window at least twice the number of inputs (a cycle must repeat)."""
        values = {}
        for f in fields(self):
            low, high = self.BOUNDS[f.name]
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int):
                try:
                    value = int(value)
                except (TypeError, ValueError, OverflowError):
                    value = f.default
            values[f.name] = min(max(value, low), high)
        values["medium"] = max(values["medium"], values["warn"] + 1)
        values["high"] = max(values["high"], values["medium"] + 1)
        values["critical"] = max(values["critical"], values["high"] + 1)
        values["cycle_window"] = max(values["cycle_window"], 2 * values["cycle_inputs"])
        return replace(self, **values)


@dataclass(frozen=True)
class Judgement:
    severity: str = "ok"              # ok, warn, medium, high or critical
    steps_since_success: int = 0      # completed calls since the last successful one
    wedged: str = ""                  # "" or the reason, starting with the pattern's name
    pattern: str = ""                 # "", DOOM_LOOP or STALL_SAME_TOOL
    calls: int = 0                    # completed calls judged


def _severity(steps: int, limits: DoomLimits) -> str:
    for name, threshold in (("critical", limits.critical), ("high", limits.high), ("medium", limits.medium),
                            ("warn", limits.warn)):
        if steps >= threshold:
            return name
    return "ok"


def _same_failures(calls: Sequence[ToolCall]) -> int:
    """How many of the last calls are failures of the same (known) input."""
    last = calls[-1]
    if last.ok is not False or not last.hash:
        return 0
    n = 0
    for call in reversed(calls):
        if call.ok is not False or call.hash != last.hash:
            break
        n += 1
    return n


def judge(calls: Sequence[ToolCall], repo_changed: bool, limits: DoomLimits | None = None) -> Judgement:
    """Judge the completed calls of a phase (oldest first: `toollog.pairs`). repo_changed:
    did the repository change since the phase began."""
    limits = (limits or DoomLimits()).clamped()
    done = [c for c in calls if c.ok is not None]
    steps = 0
    for call in reversed(done):
        if call.ok:
            break
        steps += 1
    base = Judgement(_severity(steps, limits), steps, calls=len(done))
    if not done:
        return base
    run = _same_failures(done)
    if run >= limits.same_failures:
        return replace(base, pattern=STALL_SAME_TOOL,
                       wedged=f"{STALL_SAME_TOOL}: {describe(done[-1])} failed {run} times in a row")
    window = done[-limits.cycle_window:]
    if len(window) == limits.cycle_window and not repo_changed and all(c.hash for c in window):
        inputs: dict[str, ToolCall] = {}
        for call in window:
            inputs.setdefault(call.hash, call)
        if len(inputs) <= limits.cycle_inputs:
            named = ", ".join(describe(c, 40) for c in inputs.values())
            return replace(base, pattern=DOOM_LOOP,
                           wedged=(f"{DOOM_LOOP}: the last {len(window)} calls cycle over {len(inputs)} "
                                   f"input{'s' if len(inputs) != 1 else ''} and the repository did not change "
                                   f"({named})"))
    return base
