"""The tool in flight: busy, or silent and stuck.

Claude Code fires PreToolUse before a tool runs and PostToolUse (or PostToolUseFailure)
after, so a heartbeat whose last event is PreToolUse means the agent is inside that tool.
While it is, what its processes do decides, not the heartbeat's age alone:

- busy (CPU or I/O moving, processes starting): not stuck, however long it is silent, up to
  TOOL_BUSY_MAX_MINUTES (the runtime cap still applies);
- silent (no CPU, no I/O, no new process, no output) for TOOL_SILENT_MINUTES: stuck, even
  though the general window (HEARTBEAT_STALE_MINUTES) has not passed.

With no tool in flight the general window alone applies; but a CLI without hooks (aider)
never says a tool is in flight, so there the work of its processes (a test command it
runs) is a sign of life too, up to the same TOOL_BUSY_MAX_MINUTES, and an idle tree leaves
the general window to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from genesis.health.activity import Change, Sample, compare
from genesis.health.heartbeat import BEFORE_TOOL, Heartbeat, tool_event

__all__ = ["ToolWatch", "ToolVerdict"]


@dataclass(frozen=True)
class ToolVerdict:
    busy_until: float | None = None    # the tool's work counts as a sign of life until then (monotonic)
    stuck: str = ""                    # why the silent tool is stuck ("" when it is not)
    note: str = ""                     # something the user should hear (once per tool call)
    tool: str = ""                     # the tool in flight ("" when none)
    change: Change | None = None


@dataclass
class ToolWatch:
    silent_after: float                # the tool-silent window, seconds
    busy_max: float                    # busy silence allowed at most, seconds
    hookless: bool = False             # no hook tells of tool calls: the tree's work counts by itself
    tool: str = field(default="", init=False)
    since: float = field(default=0.0, init=False)        # monotonic: when the tool call was seen
    last_active: float = field(default=0.0, init=False)  # monotonic: the tool's tree last worked
    _epoch: float | None = field(default=None, init=False)
    _prev: Sample = field(default_factory=Sample, init=False)
    _noted: bool = field(default=False, init=False)
    _busy_since: float | None = field(default=None, init=False)  # hookless: the tree has worked since then

    def observe(self, beat: Heartbeat | None, now: float, output_grew: bool, current: Sample) -> ToolVerdict:
        if beat is not None and beat.epoch != self._epoch:
            self._epoch = beat.epoch
            in_tool = tool_event(beat.event) == BEFORE_TOOL and bool(beat.tool)
            self.tool = beat.tool if in_tool else ""
            self.since = self.last_active = now
            self._noted = False
        change = compare(self._prev, current)
        self._prev = current
        if not self.tool:
            return self._hookless(now, change) if self.hookless else ToolVerdict(change=change)
        if change.busy or output_grew:
            self.last_active = now
        inside = now - self.since
        if change.busy and inside <= self.busy_max:
            note = ""
            if not self._noted:
                self._noted = True
                note = (f"inside {self.tool} for {inside:.0f}s, silent but busy ({change.describe()}"
                        f"{': ' + change.busiest if change.busiest else ''}): not stuck (allowed up to "
                        f"{self.busy_max:g}s)")
            return ToolVerdict(busy_until=now, note=note, tool=self.tool, change=change)
        silent = now - self.last_active
        if silent >= self.silent_after:
            return ToolVerdict(stuck=(f"inside {self.tool} for {inside:.0f}s, and its processes used no CPU, did "
                                      f"no I/O, started nothing and printed nothing for {silent:.1f}s "
                                      f"(tool-silent window {self.silent_after:g}s)"), tool=self.tool, change=change)
        return ToolVerdict(tool=self.tool, change=change)

    def _hookless(self, now: float, change: Change) -> ToolVerdict:
        """Without hooks: a tree that works is alive (up to busy_max of unbroken work); an idle
        one is judged by the general window, since the CLI may be waiting on its model."""
        if not change.busy:
            self._busy_since = None
            return ToolVerdict(change=change)
        note = ""
        if self._busy_since is None:
            self._busy_since = now
            note = (f"its processes work ({change.describe()}{': ' + change.busiest if change.busiest else ''}): "
                    f"not stuck while they do (up to {self.busy_max:g}s)")
        if now - self._busy_since > self.busy_max:
            return ToolVerdict(change=change)
        return ToolVerdict(busy_until=now, note=note, change=change)
