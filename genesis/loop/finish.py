"""The finish step: on any stop, what is left reaped, what stays uncommitted recorded as the
agent's, the lock released, the night summed up."""

from __future__ import annotations

import os
import time
from typing import Callable

from genesis import exitcodes
from genesis.alerts.deliver import deadline_seconds
from genesis.alerts.fleetchild import child_of
from genesis.alerts.notify import channels_for
from genesis.hints import hint
from genesis.loop.guard import breaker_store, mirror_breaker
from genesis.loop.reap import reap
from genesis.loop.step import Step, ledger_of
from genesis.procs.markers import markers_for
from genesis.repo.ownership import remember, user_files
from genesis.repo.tasks import DONE, read_tasks
from genesis.ledger.store import LedgerError
from genesis.reporting.load import final_alert_recorded, night
from genesis.reporting.text import render_text
from genesis.status.lately import note_end
from genesis.store.looplock import release
from genesis.words import one_line

__all__ = ["finish", "FINAL_ALERT_WAIT"]

# Seconds the loop's end waits for its alert's outcome (never past the deliverer's own
# deadline), so that the report it prints says where the alert went.
FINAL_ALERT_WAIT = 5.0
POLL = 0.1


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
    step.event("loop_end", reason=reason, exit_code=code, summary=_summary(step))
    if child_of(os.environ) is None:  # `status --all` finds it tomorrow (a fleet's child: with its fleet)
        note_end(step.cfg.project, step.layout.state_dir)
    sending = _await_final_alert(step)
    try:
        text = render_text(night(ledger_of(step.layout), step.run_id, incidents_dir=step.layout.incidents_dir),
                           sending=sending)
    except Exception as exc:  # noqa: BLE001 - the loop's end must not fail on its summary
        step.say(f"no summary: the ledger could not be read ({exc}); `{hint(step.cfg.project, 'report')}` may "
                 f"say more", "warn")
        return
    child = child_of(os.environ) is not None
    for line in text.rstrip("\n").splitlines():
        if child and line.startswith("final alert: "):
            line = "final alert: none of its own (a fleet's child: the fleet tells its end)"
        step.say(line, "info")


def _await_final_alert(step: Step, clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> tuple[str, ...]:
    """Wait, bounded, for the deliverer of the loop's end's ticket to record what the channels
    did; returns the channels it was telling (none set: no wait, nothing will go out)."""
    settings = step.cfg.alerts
    if child_of(os.environ) is not None:
        return ()  # a fleet's child: its end is the fleet's to tell, no ticket of its own
    try:
        channels = tuple(c.name for c in channels_for(settings))
    except Exception:  # noqa: BLE001 - the report goes out whatever the alert settings are
        return ()
    if not channels:
        return ()
    deadline = clock() + min(FINAL_ALERT_WAIT, deadline_seconds(settings))
    while True:
        try:
            if final_alert_recorded(ledger_of(step.layout), step.run_id):
                break
        except (LedgerError, OSError):
            break
        if clock() >= deadline:
            break
        sleep(POLL)
    return channels


def _summary(step: Step, now: float | None = None) -> dict:
    """The night in numbers, for the end-of-night message: tasks done and open (TASKS.md now,
    and ticked tonight), commits, iterations, abnormal phases, incidents, cost, duration.
    What cannot be read is left out (the message says what it knows)."""
    found: dict = {}
    try:
        summed = night(ledger_of(step.layout), step.run_id, running=True, incidents_dir=step.layout.incidents_dir)
        found.update(commits=len(summed.commits), iterations=len(summed.iterations), abnormal=len(summed.abnormal),
                     incidents=len(summed.incidents), tasks_tonight=len(summed.tasks_done), cost_usd=summed.cost_usd,
                     duration=round((time.time() if now is None else now) - summed.started, 1))
    except Exception:  # noqa: BLE001 - the loop's end must not fail on its summary
        pass
    try:
        tasks = read_tasks(step.cfg.project)
    except (OSError, ValueError):
        tasks = None
    if tasks is not None and tasks.items:
        found.update(tasks_done=tasks.count(DONE), tasks_total=len(tasks.items))
    return found


def _said(step: Step, code: int) -> str | None:
    """The reason a step recorded (a stop_reason event) for stopping the loop with this code:
    the loop itself knows only the code's generic words."""
    said = [e for e in step.events(kinds=("stop_reason",)) if e.get("code") == code and e.get("reason")]
    if said:
        return str(said[-1]["reason"])
    if code == exitcodes.USAGE:  # the agent could not start: its own words are the cause
        found = [e for e in step.events(kinds=("agent_cannot_start",)) if e.get("words")]
        if found:
            return f"the agent cannot start: {one_line(str(found[-1]['words']), 300)}"
    return None


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
