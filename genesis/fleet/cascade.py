"""Cascades (seed 000: "more than 30% of the agents failing at once"), as pure decisions.

When more than `percent` of the fleet's children end abnormally within the last `window`
seconds (and at least two: one failing child is the ladder's business), the cause is most
likely shared (an outage, a broken dependency, a full disk): restarting them all would
only burn restarts. The gate then:

    open --cascade--> paused --probe_after--> probing --healthy--> open (the rest resume, staggered)
                        ^                        |
                        +-------probe failed-----+  (the wait before the next probe doubles)

paused: no restart, ONE critical alert (the step "pause"). probing: one child relaunched.
The probe proves the cause gone when it ends verified, or when it has run
`probe_healthy` seconds without failing, counted from its launch (whichever comes first: a
task may take hours to verify, a broken setup fails within minutes); no probe launched yet
(a usage limit, the memory floor), nothing is proved. It fails when it ends abnormally.

Every input is passed in (the time included): the monitor observes, records the step's
event and acts; the gate is rebuilt from those events after a monitor restart.

Workflow code: the fleet on Temporal runs this module inside its workflows
(`temporal/workflows.py`), replayed from their histories. A change to what it decides is a
change to those workflows: from the first release on, it follows their patch cycle
(docs/maintainers/temporal.md), and `tests/temporal/test_replay.py` keeps passing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Union

from genesis.config import Config
from genesis.fleet.ledger import FleetEvent

__all__ = ["CascadePolicy", "policy_of", "Failure", "failed_within", "cascade", "GateStep", "CascadeGate",
           "STATES", "EVENTS"]

STATES = ("open", "paused", "probing")
EVENTS = ("cascade_pause", "cascade_probe", "cascade_probe_failed", "cascade_resume")
# A failure: the epoch a child ended abnormally, or (epoch, task id) so that one task
# failing again and again within the window counts once (children fail, not attempts).
Failure = Union[float, int, tuple[float, str]]


@dataclass(frozen=True)
class CascadePolicy:
    percent: float                 # more than this percent of the children (0: never a cascade)
    window: float                  # seconds
    min_failures: int = 2          # one failing child is no cascade
    probe_after: float = 60.0      # paused this long before the probe (doubles after each failed probe)
    probe_healthy: float = 120.0   # a probe running this long without failing resumes the fleet
    probe_wait_cap: float = 1800.0


def policy_of(cfg: Config) -> CascadePolicy:
    return CascadePolicy(cfg.fleet_cascade_percent, cfg.fleet_cascade_window)


def failed_within(failures: Iterable[Failure], now: float, window: float, after: float = -math.inf) -> int:
    """The children that failed within (now - window, now] and after `after`."""
    start = max(now - window, after)
    seen: set[object] = set()
    count = 0
    for failure in failures:
        at, who = (failure[0], failure[1]) if isinstance(failure, tuple) else (failure, None)
        if start < at <= now:
            if who is None:
                count += 1
            elif who not in seen:
                seen.add(who)
                count += 1
    return count


def cascade(failures: Iterable[Failure], running_at_window_start: int, now: float, policy: CascadePolicy,
            after: float = -math.inf) -> bool:
    """True when the children that failed within the window are more than `percent` of the
    children that ran in it. running_at_window_start: those running at the window's start
    plus those launched within it (a child that failed was running: never fewer than them)."""
    if policy.percent <= 0:
        return False
    failed = failed_within(failures, now, policy.window, after)
    ran = max(running_at_window_start, failed)
    return failed >= policy.min_failures and failed * 100 > policy.percent * ran


@dataclass(frozen=True)
class GateStep:
    state: str          # the gate's state after the step
    action: str         # none | pause | probe | probe_failed | resume
    reason: str

    @property
    def event(self) -> str | None:
        """The fleet ledger event the monitor records for this step (None: nothing happened)."""
        return None if self.action == "none" else f"cascade_{self.action}"


class CascadeGate:
    """The fleet's cascade state: open (restarts allowed), paused, or probing."""

    def __init__(self, policy: CascadePolicy, state: str = "open", since: float = 0.0, failed_probes: int = 0,
                 probe_task: str | None = None, counted_from: float = -math.inf):
        if state not in STATES:
            raise ValueError(f"not a cascade state: {state!r}")
        self.policy = policy
        self.state = state
        self.since = since                 # when the state began
        self.failed_probes = failed_probes
        self.probe_task = probe_task
        self.counted_from = counted_from   # failures at or before this (the last resume) are spent

    @property
    def allows_restart(self) -> bool:
        return self.state == "open"

    def probe_wait(self) -> float:
        """Paused this long before the next probe."""
        return min(self.policy.probe_wait_cap, self.policy.probe_after * 2.0 ** min(self.failed_probes, 32))

    def next_probe_at(self) -> float | None:
        return self.since + self.probe_wait() if self.state == "paused" else None

    def observe(self, now: float, failures: Iterable[Failure], running: int) -> GateStep:
        """One check of the monitor: failures as for cascade(); running as for cascade()."""
        failures = list(failures)
        if self.state == "open":
            if cascade(failures, running, now, self.policy, self.counted_from):
                failed = failed_within(failures, now, self.policy.window, self.counted_from)
                self._to("paused", now)
                return GateStep("paused", "pause", f"{failed} of {max(running, failed)} children failed within "
                                f"{self.policy.window:g}s (more than {self.policy.percent:g}%): restarts paused; "
                                f"one child probes in {self.probe_wait():g}s")
            return GateStep("open", "none", "")
        if self.state == "paused":
            if now >= self.since + self.probe_wait():
                self._to("probing", now)
                return GateStep("probing", "probe", "relaunching one child to probe whether the cause is gone")
            return GateStep("paused", "none", "")
        if self.probe_task is None:  # no probe launched yet (a limit, the memory floor): nothing proves the cause gone
            return GateStep("probing", "none", "")
        if any(isinstance(f, tuple) and f[1] == self.probe_task and f[0] >= self.since for f in failures):
            return self.probe_ended(False, now)
        if now >= self.since + self.policy.probe_healthy:
            return self._resume(now, f"the probe ran {self.policy.probe_healthy:g}s without failing")
        return GateStep("probing", "none", "")

    def probe_started(self, task_id: str, now: float) -> None:
        """The monitor launched the probe (its healthy time counts from now)."""
        if self.state == "probing":
            self.probe_task = task_id
            self.since = now

    def probe_ended(self, verified: bool, now: float) -> GateStep:
        """The probe's child ended: verified resumes the fleet; anything abnormal pauses it again."""
        if self.state != "probing":
            return GateStep(self.state, "none", "")
        if verified:
            return self._resume(now, "the probe's task was verified")
        self.failed_probes += 1
        self._to("paused", now)
        return GateStep("paused", "probe_failed", f"the probe failed: restarts stay paused; the next probe in "
                        f"{self.probe_wait():g}s")

    def _resume(self, now: float, why: str) -> GateStep:
        self._to("open", now)
        self.failed_probes = 0
        self.counted_from = now
        return GateStep("open", "resume", f"{why}: restarts resume, staggered")

    def _to(self, state: str, now: float) -> None:
        self.state = state
        self.since = now
        if state != "probing":
            self.probe_task = None

    @classmethod
    def from_events(cls, policy: CascadePolicy, events: Iterable[FleetEvent]) -> "CascadeGate":
        """The gate as the fleet ledger's cascade events left it (after a monitor restart)."""
        gate = cls(policy)
        for event in sorted(events, key=lambda e: e.seq):
            if event.kind == "cascade_pause":
                gate._to("paused", event.at)
            elif event.kind == "cascade_probe":
                gate._to("probing", event.at)
                gate.probe_task = event.task_id
            elif event.kind == "cascade_probe_failed":
                gate.failed_probes += 1
                gate._to("paused", event.at)
            elif event.kind == "cascade_resume":
                gate._resume(event.at, "")
        return gate
