"""Staleness: is the agent still alive, judged on this process's monotonic clock.

Activity is recorded on the monotonic clock when a new heartbeat is seen, back-dated by its
age only as far as the previous check. So a heartbeat from before the agent started counts
as the start, a future timestamp counts as now (with a warning), and a suspend or wall-clock
jump larger than a check interval restarts the window instead of killing an agent that was
merely asleep with the machine.

Silence is measured only over time the watcher itself ran: a gap between two checks longer
than 2 intervals + PAUSE_SLACK (the watcher was stopped or starved; the monotonic clock ran
on, so the jump test cannot see it) restarts the window too. Meanwhile the agent may even
have blocked on its output pipe, which nobody was reading.

Output is a sign of life for an agent whose hooks never beat. Once one heartbeat of this
phase was seen, output keeps the agent alive for at most one more window after its latest
heartbeat: a hung agent with a chatty child is caught at most two windows and one check
after its last tool call, not at the runtime cap.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["Verdict", "Window", "begin", "check", "Watchdog", "FUTURE_TOLERANCE", "PAUSE_SLACK"]

FUTURE_TOLERANCE = 2.0  # seconds a heartbeat may be ahead of our wall clock before we warn
PAUSE_SLACK = 1.0       # a gap between two checks beyond 2 intervals + this: the watcher was paused
BEFORE_START = 1.0      # a heartbeat this close before the start still counts as this phase's


@dataclass(frozen=True)
class Verdict:
    stale: bool
    idle: float                          # seconds since the last sign of life
    notes: tuple[str, ...] = ()          # things worth telling the user (clock jumps...)
    output_ignored: bool = False         # output came during this silence but no longer counted


@dataclass(frozen=True)
class Window:
    """What the watchdog remembers from one check to the next."""
    stale_after: float
    interval: float
    started_wall: float
    last_activity: float                 # monotonic: the latest sign of life
    prev_mono: float                     # the previous check, on both clocks
    prev_wall: float
    last_beat: float | None = None       # monotonic: the latest heartbeat of this phase
    last_epoch: float | None = None      # the newest heartbeat epoch seen
    ignored: bool = False                # output came during this silence but no longer counted


def begin(stale_after: float, interval: float, started_mono: float, started_wall: float) -> Window:
    """The watchdog's memory at the agent's start."""
    return Window(stale_after, interval, started_wall, last_activity=started_mono, prev_mono=started_mono,
                  prev_wall=started_wall)


def check(w: Window, epoch: float | None, now_mono: float, now_wall: float, output_grew: bool = False,
          hold: bool = False, busy_until: float | None = None, own: float = 0.0) -> tuple[Window, Verdict]:
    """One check: the newest heartbeat epoch (None: none or unusable), the clocks, whether the
    agent's output grew since the last check, whether silence must not count now (`hold`: the
    disk is full, so no heartbeat can be written), and until when (monotonic) the agent said it
    waits on something outside it (`busy_until`: the CLI's own API retry and its announced
    delay): silence counts only from then. `own`: seconds of the gap since the previous check
    the watcher spent in its own work (a write waiting on a ledger another program holds): a
    slow watcher, not a paused one, so it never restarts the window."""
    notes: list[str] = []
    since_prev = max(0.0, now_mono - w.prev_mono)
    jump = (now_wall - w.prev_wall) - since_prev
    restart = ""
    if since_prev - max(own, 0.0) > 2 * w.interval + PAUSE_SLACK:
        restart = f"the watcher itself was paused for {since_prev:.0f}s; staleness window restarted"
    elif abs(jump) > w.interval:
        kind = "suspend or clock jump" if jump > 0 else "clock moved backwards"
        restart = f"{kind} of {jump:+.0f}s detected; staleness window restarted"
    if epoch is not None and epoch != w.last_epoch:
        age = now_wall - epoch
        if age < -FUTURE_TOLERANCE and not restart:
            notes.append(f"heartbeat timestamp is {-age:.0f}s in the future; counted as now")
        at = now_mono - min(max(age, 0.0), since_prev)
        w = _active(w, at)
        if epoch > w.started_wall - BEFORE_START:
            w = replace(w, last_beat=max(w.last_beat if w.last_beat is not None else at, at))
    if restart or hold:
        if restart:
            notes.append(restart)
        w = _active(w, now_mono)
        if w.last_beat is not None:
            w = replace(w, last_beat=now_mono)  # the output bound restarts with the window
    if busy_until is not None:
        w = _active(w, min(busy_until, now_mono))
    if output_grew:
        if w.last_beat is None or now_mono - w.last_beat <= w.stale_after:
            w = _active(w, now_mono)
        else:
            w = replace(w, ignored=True)
    w = replace(w, last_epoch=epoch if epoch is not None else w.last_epoch, prev_mono=now_mono, prev_wall=now_wall)
    idle = now_mono - w.last_activity
    return w, Verdict(stale=idle > w.stale_after, idle=idle, notes=tuple(notes), output_ignored=w.ignored)


def _active(w: Window, at: float) -> Window:
    return replace(w, last_activity=at, ignored=False) if at > w.last_activity else w


class Watchdog:
    """The watchdog with its memory kept in place, for a caller that holds one across checks."""

    def __init__(self, stale_after: float, interval: float, started_mono: float, started_wall: float):
        self.window = begin(stale_after, interval, started_mono, started_wall)

    @property
    def stale_after(self) -> float:
        return self.window.stale_after

    @property
    def interval(self) -> float:
        return self.window.interval

    @property
    def last_activity(self) -> float:
        return self.window.last_activity

    @property
    def last_beat(self) -> float | None:
        return self.window.last_beat

    def observe(self, epoch: float | None, now_mono: float, now_wall: float, output_grew: bool = False,
                hold: bool = False, busy_until: float | None = None, own: float = 0.0) -> Verdict:
        """One check, as check() makes it, remembered for the next."""
        self.window, verdict = check(self.window, epoch, now_mono, now_wall, output_grew, hold, busy_until, own)
        return verdict
