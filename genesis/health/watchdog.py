"""Staleness: is the agent still alive, judged on this process's monotonic clock."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Verdict", "Watchdog", "FUTURE_TOLERANCE", "PAUSE_SLACK"]

FUTURE_TOLERANCE = 2.0  # seconds a heartbeat may be ahead of our wall clock before we warn
PAUSE_SLACK = 1.0       # a gap between two checks beyond 2 intervals + this: the watcher was paused
BEFORE_START = 1.0      # a heartbeat this close before the start still counts as this phase's


@dataclass(frozen=True)
class Verdict:
    stale: bool
    idle: float                          # seconds since the last sign of life
    notes: tuple[str, ...] = ()          # things worth telling the user (clock jumps...)
    output_ignored: bool = False         # output came during this silence but no longer counted


@dataclass
class Watchdog:
    """Fed one observation per check; decides staleness without trusting the wall clock.

    Activity is recorded on the monotonic clock when a new heartbeat is seen, back-dated
    by its age only as far as the previous check. So a heartbeat from before the agent
    started counts as the start, a future timestamp counts as now (with a warning), and a
    suspend or wall-clock jump larger than a check interval restarts the window instead of
    killing an agent that was merely asleep with the machine.

    Silence is measured only over time the watcher itself ran: a gap between two checks
    longer than 2 intervals + PAUSE_SLACK (the watcher was stopped or starved; the monotonic
    clock ran on, so the jump test cannot see it) restarts the window too. Meanwhile the
    agent may even have blocked on its output pipe, which nobody was reading.

    Output is a sign of life for an agent whose hooks never beat. Once one heartbeat of
    this phase was seen, output keeps the agent alive for at most one more window after
    its latest heartbeat: a hung agent with a chatty child is caught at most two windows
    and one check after its last tool call, not at the runtime cap.
    """

    stale_after: float
    interval: float
    started_mono: float
    started_wall: float
    last_activity: float = field(init=False)
    last_beat: float | None = field(default=None, init=False)  # mono time of the latest heartbeat
    _prev_mono: float = field(init=False)
    _prev_wall: float = field(init=False)
    _last_epoch: float | None = field(default=None, init=False)
    _ignored: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.last_activity = self.started_mono
        self._prev_mono = self.started_mono
        self._prev_wall = self.started_wall

    def observe(self, epoch: float | None, now_mono: float, now_wall: float,
                output_grew: bool = False, hold: bool = False, busy_until: float | None = None) -> Verdict:
        """One check: the newest heartbeat epoch (None: none or unusable), the clocks,
        whether the agent's output grew since the last check, whether silence must not
        count now (`hold`: the disk is full, so no heartbeat can be written), and until when
        (monotonic) the agent said it waits on something outside it (`busy_until`: the CLI's
        own API retry and its announced delay): silence counts only from then."""
        notes: list[str] = []
        since_prev = max(0.0, now_mono - self._prev_mono)
        jump = (now_wall - self._prev_wall) - since_prev
        restart = ""
        if since_prev > 2 * self.interval + PAUSE_SLACK:
            restart = f"the watcher itself was paused for {since_prev:.0f}s; staleness window restarted"
        elif abs(jump) > self.interval:
            kind = "suspend or clock jump" if jump > 0 else "clock moved backwards"
            restart = f"{kind} of {jump:+.0f}s detected; staleness window restarted"
        if epoch is not None and epoch != self._last_epoch:
            age = now_wall - epoch
            if age < -FUTURE_TOLERANCE and not restart:
                notes.append(f"heartbeat timestamp is {-age:.0f}s in the future; counted as now")
            at = now_mono - min(max(age, 0.0), since_prev)
            self._active(at)
            if epoch > self.started_wall - BEFORE_START:
                self.last_beat = max(self.last_beat if self.last_beat is not None else at, at)
        if restart or hold:
            if restart:
                notes.append(restart)
            self._active(now_mono)
            if self.last_beat is not None:
                self.last_beat = now_mono  # the output bound restarts with the window
        if busy_until is not None:
            self._active(min(busy_until, now_mono))
        if output_grew:
            if self.last_beat is None or now_mono - self.last_beat <= self.stale_after:
                self._active(now_mono)
            else:
                self._ignored = True
        if epoch is not None:
            self._last_epoch = epoch
        self._prev_mono, self._prev_wall = now_mono, now_wall
        idle = now_mono - self.last_activity
        return Verdict(stale=idle > self.stale_after, idle=idle, notes=tuple(notes), output_ignored=self._ignored)

    def _active(self, at: float) -> None:
        if at > self.last_activity:
            self.last_activity = at
            self._ignored = False
