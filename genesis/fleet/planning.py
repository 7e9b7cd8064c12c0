"""The monitor's pure decisions: what a child's end means, what may launch now, how the fleet ends.

No processes, no clock of its own: the monitor observes, these decide, the monitor acts.

A child's end is one of: verified, failed, limit, outage, stopped, config; only `failed`
climbs the ladder. The fleet's exit code (fleet_exit) puts 31, a task failed for good, over
32, a task that needs review.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from genesis import exitcodes

__all__ = ["Verdict", "outcome_of", "fleet_exit", "LaunchGate", "launch_gate", "SIGNAL_CODES"]

SIGNAL_CODES = frozenset({exitcodes.INTERRUPTED_HUP, exitcodes.INTERRUPTED_INT, exitcodes.INTERRUPTED_TERM})
# Ends that would fail every child the same way: the fleet stops with the child's code. Not 2:
# a child's preflight also says 2 for what is its own worktree's (leftovers of a killed attempt),
# so a 2 climbs that task's ladder like any abnormal end. 22: every child runs the same agent
# command on the same account (a refused login, billing, model or tool permission); 36: a limit
# weeks away binds every child of the account. Not 37: a refusal by the model's safeguards is
# its task's own request; that task goes to its ladder's next strategy (ladder.next_rung).
FLEET_STOPPING = frozenset({exitcodes.UNTRUSTED_COMMAND, exitcodes.SANDBOX_UNAVAILABLE, exitcodes.DISK_FULL,
                            exitcodes.AGENT_FATAL, exitcodes.LIMIT_FAR})
CEILINGS = frozenset({exitcodes.MAX_RUNTIME, exitcodes.MAX_COST})


@dataclass(frozen=True)
class Verdict:
    outcome: str          # the attempt's outcome: verified|failed|limit|outage|stopped|config
    fleet_code: int | None = None   # the fleet ends with this code (config, disk full, a ceiling)
    reason: str = ""


def outcome_of(exit_code: int | None, verified: bool, stopping: bool, signalled: bool, why: str = "") -> Verdict:
    """What a child's end means (the design's "A child ends")."""
    if exit_code == exitcodes.OK:
        if verified:
            return Verdict("verified", reason="its task is done on its branch")
        if stopping:
            return Verdict("stopped", reason="the fleet is stopping")
        return Verdict("failed", reason=why or "ended without finishing its task")
    if exit_code == exitcodes.USAGE_LIMIT:
        return Verdict("limit", reason=why or "a usage limit resets later than GENESIS_MAX_LIMIT_WAIT")
    if exit_code == exitcodes.API_OUTAGE:
        return Verdict("outage", reason=why or "an API outage outlasted GENESIS_MAX_OUTAGE_MINUTES")
    if exit_code == exitcodes.POLICY_REFUSED:  # its task's own: another agent may do it, the fleet goes on
        return Verdict("failed", reason=why or "the model's safeguards refused its task: its next strategy "
                                               "(another agent) tries it")
    if exit_code in FLEET_STOPPING:
        return Verdict("config", exit_code, why or f"exit {exit_code}: it would stop every child the same way")
    if exit_code == exitcodes.MONITOR_LOST:  # no failure of its task: it stopped for another machine
        return Verdict("stopped", reason=why or "its monitor was gone: it stopped so that no two loops work its task")
    if exit_code == exitcodes.STEPPED_ASIDE:  # no failure of its task: another loop of it owns the branch
        return Verdict("stopped", reason=why or "its push was refused: it stepped aside for the loop that owns the "
                                               "task's branch")
    if exit_code in CEILINGS:
        return Verdict("stopped", exit_code, why or f"a ceiling was reached (exit {exit_code})")
    if exit_code in SIGNAL_CODES and (signalled or stopping):
        return Verdict("stopped", reason="stopped by the monitor")
    if exit_code is None:
        return Verdict("failed", reason=why or "vanished without a recorded end")
    return Verdict("failed", reason=why or f"exit {exit_code}")


def fleet_exit(states: Iterable[str], fatal: int | None = None, interrupted: int | None = None) -> int:
    """The fleet's exit code: a signal, then a fatal child end, then 31 if some task failed
    permanently, 32 if some needs review, else 0."""
    if interrupted is not None:
        return interrupted
    if fatal is not None:
        return fatal
    states = set(states)
    if "failed" in states:
        return exitcodes.FLEET_TASKS_FAILED
    if "needs-review" in states:
        return exitcodes.FLEET_NEEDS_REVIEW
    return exitcodes.OK


@dataclass(frozen=True)
class LaunchGate:
    open: bool
    why: str = ""         # when closed: what holds the launch, for the task's `waiting` reason


def launch_gate(*, running: int, parallel: int, stopping: bool, since_last: float, stagger: float,
                available: int, floor: int, limit: str = "") -> LaunchGate:
    """Whether one more child may start now (stagger, N at once, the memory floor, a known limit)."""
    if stopping:
        return LaunchGate(False, "the fleet is stopping")
    if running >= parallel:
        return LaunchGate(False, "")
    if limit:
        return LaunchGate(False, limit)
    if available < floor:
        return LaunchGate(False, f"free memory {available >> 20} MB is below the floor GENESIS_FLEET_MEMORY_FLOOR_MB="
                                 f"{floor >> 20}: no child starts until more is free")
    if since_last < stagger:
        return LaunchGate(False, "")
    return LaunchGate(True)
