"""Auto-commit troubles, never silent: each failure is a ledger event with git's own words, the
report lists them as abnormal, and ALERT_AFTER of them in a row raise an alert (one per
streak); a stale index.lock removed before a commit is said and recorded."""

from __future__ import annotations

from genesis.loop.step import Step

__all__ = ["ALERT_AFTER", "commit_failed", "in_a_row", "lock_removed"]

ALERT_AFTER = 3   # auto-commits failing in a row before an alert: one may be a passing hiccup


def in_a_row(step: Step) -> int:
    """Auto-commits that failed in a row before this phase's: each phase records its commit's
    failure (commit_failed) before its work (phase_work), so the newest phases are read back
    in pairs until one committed or had nothing to commit."""
    events = step.events(kinds=("commit_failed", "phase_work"))
    count, i = 0, len(events) - 1
    while i >= 1 and events[i].get("event") == "phase_work" and events[i - 1].get("event") == "commit_failed":
        count += 1
        i -= 2
    return count


def commit_failed(step: Step, phase: str, iteration: int, error: str) -> int:
    """Record this phase's failed auto-commit; how many in a row it makes."""
    count = in_a_row(step) + 1
    step.event("commit_failed", iteration=iteration, phase=phase, error=error[:1000], in_a_row=count,
               alert=count == ALERT_AFTER)
    return count


def lock_removed(step: Step, phase: str, iteration: int, what: str) -> None:
    step.say(f"{phase}: {what}", "warn")
    step.event("index_lock_removed", iteration=iteration, phase=phase, what=what[:500])
