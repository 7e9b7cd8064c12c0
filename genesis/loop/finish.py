"""The finish step: on any stop, what is left reaped, what stays uncommitted recorded as the
agent's, the lock released, the night summed up."""

from __future__ import annotations

import time

from genesis.hints import hint
from genesis.loop.guard import breaker_store, mirror_breaker
from genesis.loop.reap import reap
from genesis.loop.step import Step, ledger_of
from genesis.procs.markers import markers_for
from genesis.repo.ownership import remember, user_files
from genesis.reporting.load import night
from genesis.reporting.text import render_text
from genesis.store.looplock import release

__all__ = ["finish"]


def finish(step: Step, reason: str, code: int) -> None:
    """On any stop: reap what is left, record what stays uncommitted (the next start knows it
    as the agent's), release the lock, record and print a summary."""
    reason = _said(step, code) or reason
    reap(step, "at stop")
    lay = step.layout
    problem = remember(step.cfg.project, lay.leftovers_file, step.run_id, f"at its end: {reason[:120]}",
                       user_files(lay.user_files), time.time(), markers=markers_for(step.cfg.project, step.run_id))
    if problem:
        step.say(problem, "warn")
    try:
        mirror_breaker(step.layout, breaker_store(step.layout).load()[0])
    except OSError as exc:
        step.say(f"could not write the breaker file: {exc}", "warn")
    release(step.layout.loop_record, step.run_id)
    _end_open_phases(step, reason)
    step.event("loop_end", reason=reason, exit_code=code)
    try:
        text = render_text(night(ledger_of(step.layout), step.run_id, incidents_dir=step.layout.incidents_dir))
    except Exception as exc:  # noqa: BLE001 - the loop's end must not fail on its summary
        step.say(f"no summary: the ledger could not be read ({exc}); `{hint(step.cfg.project, 'report')}` may "
                 f"say more", "warn")
        return
    for line in text.rstrip("\n").splitlines():
        step.say(line, "info")


def _said(step: Step, code: int) -> str | None:
    """The reason a step recorded (a stop_reason event) for stopping the loop with this code:
    the loop itself knows only the code's generic words."""
    said = [e for e in step.events(kinds=("stop_reason",)) if e.get("code") == code and e.get("reason")]
    return str(said[-1]["reason"]) if said else None


def _end_open_phases(step: Step, reason: str) -> None:
    """A phase whose step was ended before it could record the phase's end (a second signal,
    a hangup in the middle of the phase's start) ends with the loop, for the same reason."""
    running: dict[tuple[object, object], dict] = {}
    for e in step.events(kinds=("phase_start", "phase_end")):
        key = (e.get("iteration"), e.get("phase"))
        if e.get("event") == "phase_start":
            running[key] = e
        else:
            running.pop(key, None)
    now = time.time()
    for (iteration, phase), start in running.items():
        started = start.get("epoch") if isinstance(start.get("epoch"), (int, float)) else now
        step.event("phase_end", iteration=iteration, phase=phase, pid=None, status="interrupted", returncode=None,
                   duration=round(now - started, 2), killed=0, sigkilled=0, detail=f"ended with the loop: {reason}",
                   started=started, attempt=start.get("attempt", 0))
