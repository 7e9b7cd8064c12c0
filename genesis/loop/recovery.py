"""The recovery ladder: a phase that ended stuck or wedged is retried within a budget, maybe
with a fallback agent command; a spent budget is an explicit failure.

1. Retry the phase after a short jittered delay, up to PHASE_RETRIES times per iteration;
   the retry runs GENESIS_FALLBACK_AGENT_CMD when it is set ("try a different model").
2. With the phase's retries spent: the phase failed for this iteration, with the reason;
   the loop goes on.
3. With the night's budget spent (GENESIS_MAX_RECOVERIES retries in one run): the loop
   only thrashes; it stops with RECOVERY_SPENT.

Every retry is recorded as a `retry` event (the retry history): type (stuck or wedged),
count, reason, the old and the new command; its outcome is the retried phase's `phase_end`.

The count of retries is the loop's own too (a small file in its state), and the larger of it
and the ledger's decides: a ledger that cannot be written never grants more retries.
"""

from __future__ import annotations

import random
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from genesis import exitcodes
from genesis.loop.waiting import Pending, plan
from genesis.store.atomicio import CorruptFile, read_json, write_json

if TYPE_CHECKING:
    from genesis.loop.step import Step

__all__ = ["JITTER", "retries_so_far", "retry_command", "after_stall"]

JITTER = 0.5         # a retry waits PHASE_RETRY_DELAY_SECONDS and up to half of it again, so that
                     # the retries of several loops do not line up


def retries_so_far(step: "Step", iteration: int | None = None, phase: str | None = None) -> int:
    """Retries in this run (of one phase in one iteration, when both are given): the most of
    what the ledger recorded and what the loop counted itself, so that a ledger that cannot be
    read (its tables dropped, a new one started mid-run) never makes the budget endless."""
    recorded = sum(1 for e in step.events(kinds=("retry",))
                   if (iteration is None or (e.get("iteration"), e.get("phase")) == (iteration, phase)))
    counted = sum(1 for it, ph in _counted(step) if iteration is None or (it, ph) == (iteration, phase))
    return max(recorded, counted)


def _count_file(step: "Step") -> Path:
    return step.layout.state_dir / "recoveries.json"


def _counted(step: "Step") -> list[tuple[int, str]]:
    """The retries this run's loop counted (iteration, phase), apart from the ledger."""
    try:
        data = read_json(_count_file(step))
    except CorruptFile:
        return []
    if not isinstance(data, dict) or data.get("run_id") != step.run_id or not isinstance(data.get("retries"), list):
        return []
    return [(r[0], r[1]) for r in data["retries"] if isinstance(r, list) and len(r) == 2]


def _count(step: "Step", iteration: int, phase: str) -> None:
    write_json(_count_file(step), {"run_id": step.run_id,
                                   "retries": [list(r) for r in _counted(step)] + [[iteration, phase]]})


def retry_command(step: "Step", iteration: int, phase: str) -> tuple[str, ...] | None:
    """The fallback agent command, when this run of the phase is a retry and one is set."""
    fallback = step.cfg.fallback_agent_cmd
    if fallback and retries_so_far(step, iteration, phase) > 0:
        return fallback
    return None


def after_stall(step: "Step", phase: str, iteration: int, kind: str, reason: str, command: tuple[str, ...],
                rng: Callable[[], float] = random.random, now: float | None = None) -> int | None:
    """After a phase ended stuck or wedged (`kind`): WAIT (a retry is planned), RECOVERY_SPENT (the
    night's budget is gone: stop), or None (the phase's retries are spent: failed, go on)."""

    cfg, say = step.cfg, step.say
    night = retries_so_far(step)
    mine = retries_so_far(step, iteration, phase)
    if mine >= cfg.phase_retries:
        if cfg.phase_retries:
            say(f"{phase}: {kind} again; its retries (PHASE_RETRIES={cfg.phase_retries}) are spent: the phase failed "
                f"for this iteration", "error")
        step.event("phase_failed", iteration=iteration, phase=phase, kind=kind, reason=reason[:300],
                   retries=mine)
        return None
    if night >= cfg.max_recoveries:
        say(f"{phase}: {kind}, and the night's recovery budget (GENESIS_MAX_RECOVERIES={cfg.max_recoveries}) is "
            f"spent: the loop only thrashes; stopping", "error")
        step.event("recovery_spent", iteration=iteration, phase=phase, retries=night)
        return exitcodes.RECOVERY_SPENT
    new = cfg.fallback_agent_cmd or command
    delay = cfg.retry_delay * (1 + JITTER * rng())
    now = time.time() if now is None else now
    _count(step, iteration, phase)
    step.event("retry", iteration=iteration, phase=phase, type=kind, count=mine + 1, reason=reason[:300],
               old_cmd=shlex.join(command), new_cmd=shlex.join(new), night=night + 1)
    say(f"{phase}: {kind}; retrying in {delay:.0f}s (retry {mine + 1} of {cfg.phase_retries}"
        + (f", with the fallback agent: {shlex.join(new)}" if cfg.fallback_agent_cmd else "")
        + f"; {night + 1} of {cfg.max_recoveries} tonight)", "warn")
    return plan(step, Pending(step.run_id, "retry", now + delay, f"{kind}: retry {mine + 1}", phase, iteration,
                              mine + 1))
