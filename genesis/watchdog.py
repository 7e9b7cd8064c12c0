"""Staleness: is the agent still alive, judged on this process's monotonic clock."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Verdict", "Watchdog", "FUTURE_TOLERANCE"]

FUTURE_TOLERANCE = 2.0  # seconds a heartbeat may be ahead of our wall clock before we warn


@dataclass(frozen=True)
class Verdict:
    stale: bool
    idle: float                          # seconds since the last sign of life
    notes: tuple[str, ...] = ()          # things worth telling the user (clock jumps...)


@dataclass
class Watchdog:
    """Fed one observation per poll; decides staleness without trusting the wall clock.

    Activity is recorded on the monotonic clock when a new heartbeat is seen, back-dated
    by its age only as far as the previous poll. So a heartbeat from before the agent
    started counts as the start, a future timestamp counts as now (with a warning), and a
    suspend or wall-clock jump larger than a poll interval restarts the window instead of
    killing an agent that was merely asleep with the machine.
    """

    stale_after: float
    interval: float
    started_mono: float
    started_wall: float
    last_activity: float = field(init=False)
    _prev_mono: float = field(init=False)
    _prev_wall: float = field(init=False)
    _last_epoch: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.last_activity = self.started_mono
        self._prev_mono = self.started_mono
        self._prev_wall = self.started_wall

    def observe(self, epoch: float | None, now_mono: float, now_wall: float,
                output_grew: bool = False) -> Verdict:
        """One poll: the newest heartbeat epoch (None: none or unusable), the clocks, and
        whether the agent's output grew since the last poll (a sign of life too)."""
        notes: list[str] = []
        since_prev = max(0.0, now_mono - self._prev_mono)
        jump = (now_wall - self._prev_wall) - since_prev
        if abs(jump) > self.interval:
            kind = "suspend or clock jump" if jump > 0 else "clock moved backwards"
            notes.append(f"{kind} of {jump:+.0f}s detected; staleness window restarted")
            self.last_activity = now_mono
        elif epoch is not None and epoch != self._last_epoch:
            age = now_wall - epoch
            if age < -FUTURE_TOLERANCE:
                notes.append(f"heartbeat timestamp is {-age:.0f}s in the future; counted as now")
            self.last_activity = max(self.last_activity, now_mono - min(max(age, 0.0), since_prev))
        if output_grew:
            self.last_activity = now_mono
        if epoch is not None:
            self._last_epoch = epoch
        self._prev_mono, self._prev_wall = now_mono, now_wall
        idle = now_mono - self.last_activity
        return Verdict(stale=idle > self.stale_after, idle=idle, notes=tuple(notes))
