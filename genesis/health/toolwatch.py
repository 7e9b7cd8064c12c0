"""The tool in flight: busy, or silent and stuck.

Claude Code fires PreToolUse before a tool runs and PostToolUse (or PostToolUseFailure)
after, so a heartbeat whose last event is PreToolUse means the agent is inside that tool.
While it is, what its processes do decides, not the heartbeat's age alone:

- busy (CPU or I/O moving, processes starting): not stuck, however long it is silent, up to
  TOOL_BUSY_MAX_MINUTES (the runtime cap still applies);
- silent (no CPU, no I/O, no new process, no output) for TOOL_SILENT: stuck, even
  though the general window (HEARTBEAT_STALE) has not passed.

With no tool in flight the general window alone applies; but a CLI without hooks (aider)
never says a tool is in flight, so there the work of its processes (a test command it
runs) is a sign of life too, up to the same TOOL_BUSY_MAX_MINUTES, and an idle tree leaves
the general window to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from genesis.health.activity import Change, Sample, compare
from genesis.health.heartbeat import BEFORE_TOOL, Heartbeat, tool_event

__all__ = ["ToolWatch", "ToolVerdict", "ToolMemory", "check"]


@dataclass(frozen=True)
class ToolVerdict:
    busy_until: float | None = None    # the tool's work counts as a sign of life until then (monotonic)
    stuck: str = ""                    # why the silent tool is stuck ("" when it is not)
    note: str = ""                     # something the user should hear (once per tool call)
    tool: str = ""                     # the tool in flight ("" when none)
    change: Change | None = None


@dataclass(frozen=True)
class ToolMemory:
    """What the tool watch remembers from one check to the next."""
    silent_after: float                # the tool-silent window, seconds
    busy_max: float                    # busy silence allowed at most, seconds
    hookless: bool = False             # no hook tells of tool calls: the tree's work counts by itself
    tool: str = ""                     # the tool in flight ("" when none)
    since: float = 0.0                 # monotonic: when the tool call was seen
    last_active: float = 0.0           # monotonic: the tool's tree last worked
    epoch: float | None = None         # the heartbeat the tool call was read from
    prev: Sample = field(default_factory=Sample)  # the tree at the previous check
    noted: bool = False                # the tool's busy silence was said
    busy_since: float | None = None    # hookless: the tree has worked since then


def check(m: ToolMemory, beat: Heartbeat | None, now: float, output_grew: bool,
          current: Sample) -> tuple[ToolMemory, ToolVerdict]:
    """One check: this run's heartbeat (None: none), the monotonic time, whether output grew,
    and the tool's tree as sampled now."""
    if beat is not None and beat.epoch != m.epoch:
        in_tool = tool_event(beat.event) == BEFORE_TOOL and bool(beat.tool)
        m = replace(m, epoch=beat.epoch, tool=beat.tool if in_tool else "", since=now, last_active=now, noted=False)
    change = compare(m.prev, current)
    m = replace(m, prev=current)
    if not m.tool:
        return _hookless(m, now, change) if m.hookless else (m, ToolVerdict(change=change))
    if change.busy or output_grew:
        m = replace(m, last_active=now)
    inside = now - m.since
    if change.busy and inside <= m.busy_max:
        note = ""
        if not m.noted:
            m = replace(m, noted=True)
            note = (f"inside {m.tool} for {inside:.0f}s, silent but busy ({change.describe()}"
                    f"{': ' + change.busiest if change.busiest else ''}): not stuck (allowed up to "
                    f"{m.busy_max:g}s)")
        return m, ToolVerdict(busy_until=now, note=note, tool=m.tool, change=change)
    silent = now - m.last_active
    if silent >= m.silent_after:
        return m, ToolVerdict(stuck=(f"inside {m.tool} for {inside:.0f}s, and its processes used no CPU, did "
                                     f"no I/O, started nothing and printed nothing for {silent:.1f}s "
                                     f"(tool-silent window {m.silent_after:g}s)"), tool=m.tool, change=change)
    return m, ToolVerdict(tool=m.tool, change=change)


def _hookless(m: ToolMemory, now: float, change: Change) -> tuple[ToolMemory, ToolVerdict]:
    """Without hooks: a tree that works is alive (up to busy_max of unbroken work); an idle
    one is judged by the general window, since the CLI may be waiting on its model. Work is
    unbroken until the tree rests a whole tool-silent window: on a loaded machine a busy tree
    can miss a check's CPU, and that must not give it a fresh allowance."""
    if not change.busy:
        if m.busy_since is not None and now - m.last_active >= m.silent_after:
            m = replace(m, busy_since=None)
        return m, ToolVerdict(change=change)
    m = replace(m, last_active=now)
    note = ""
    if m.busy_since is None:
        m = replace(m, busy_since=now)
        note = (f"its processes work ({change.describe()}{': ' + change.busiest if change.busiest else ''}): "
                f"not stuck while they do (up to {m.busy_max:g}s)")
    if now - m.busy_since > m.busy_max:
        return m, ToolVerdict(change=change)
    return m, ToolVerdict(busy_until=now, note=note, change=change)


class ToolWatch:
    """The tool watch with its memory kept in place, for a caller that holds one across checks."""

    def __init__(self, silent_after: float, busy_max: float, hookless: bool = False):
        self.memory = ToolMemory(silent_after, busy_max, hookless)

    @property
    def tool(self) -> str:
        return self.memory.tool

    @property
    def last_active(self) -> float:
        return self.memory.last_active

    def observe(self, beat: Heartbeat | None, now: float, output_grew: bool, current: Sample) -> ToolVerdict:
        """One check, as check() makes it, remembered for the next."""
        self.memory, verdict = check(self.memory, beat, now, output_grew, current)
        return verdict
