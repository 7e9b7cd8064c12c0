"""The finish step: on any stop, what is left reaped, the lock released, the night summed up."""

from __future__ import annotations

from genesis.loop.guard import breaker_store, mirror_breaker
from genesis.loop.reap import reap
from genesis.loop.step import Step, ledger_of
from genesis.reporting.load import night
from genesis.reporting.text import render_text
from genesis.store.looplock import release

__all__ = ["finish"]


def finish(step: Step, reason: str, code: int) -> None:
    """On any stop: reap what is left, release the lock, record and print a summary."""
    reap(step, "at stop")
    try:
        mirror_breaker(step.layout, breaker_store(step.layout).load()[0])
    except OSError as exc:
        step.say(f"could not write the breaker file: {exc}", "warn")
    release(step.layout.loop_record, step.run_id)
    step.event("loop_end", reason=reason, exit_code=code)
    try:
        text = render_text(night(ledger_of(step.layout), step.run_id, incidents_dir=step.layout.incidents_dir))
    except Exception as exc:  # noqa: BLE001 - the loop's end must not fail on its summary
        step.say(f"no summary: the ledger could not be read ({exc}); `genesis report` may say more", "warn")
        return
    for line in text.rstrip("\n").splitlines():
        step.say(line, "info")
