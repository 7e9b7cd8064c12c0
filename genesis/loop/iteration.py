"""The iteration's steps: its baseline at the start; at its end, progress measured, the breaker
moved, and whether the work is done."""

from __future__ import annotations

import os
import time

from genesis import exitcodes
from genesis.config import load_snapshot
from genesis.hints import hint
from genesis.loop import breaker
from genesis.loop.completion import is_done
from genesis.loop.guard import breaker_store, guard_config, heal, mirror_breaker
from genesis.loop.keyedtries import replayed
from genesis.loop.monitorwatch import monitor_gone
from genesis.loop.onetask import task_of
from genesis.loop.startfail import START_FAILURES, spares_breaker
from genesis.loop.step import Step, StepFailed
from genesis.loop.taskcheck import done_gate
from genesis.loop.waiting import plan_cooldown
from genesis.procs.markers import markers_for
from genesis.repo.gitcmd import GitFailed, GitTimeout
from genesis.repo.progress import Fingerprint, fingerprint
from genesis.store.atomicio import CorruptFile, read_json, write_json

__all__ = ["iteration_start", "iteration_finish"]


def _measure(step: Step) -> Fingerprint:
    """The repository's fingerprint; a git command that overran its bound is tried once more,
    then the loop is stopped with the reason (never a silent hang)."""
    try:
        return fingerprint(step.cfg.project, step.layout.ignored())
    except GitFailed as exc:
        step.say(f"measuring progress failed ({exc}); trying once more", "warn")
        step.event("step_retry", what="fingerprint", why=str(exc)[:300])
    try:
        return fingerprint(step.cfg.project, step.layout.ignored())
    except GitTimeout as exc:
        code, reason = exitcodes.STEP_TIMEOUT, f"measuring progress overran its time bound twice: {exc}"
    except GitFailed as exc:
        # Nothing timed out: git cannot read the repository (a corrupt index, a FIFO where a
        # tracked file was), which another try does not mend. Said as it is, a usage error.
        code, reason = exitcodes.USAGE, (f"git cannot read the project, so progress cannot be measured (tried "
                                         f"twice): {exc}. Repair the repository (`git status` there says what "
                                         f"git finds), then start again")
    step.event("stop_reason", code=code, reason=reason[:1000])
    raise StepFailed(code, reason)


def iteration_start(step: Step, iteration: int) -> int:
    """Record the iteration's baseline. OK, or MONITOR_LOST: a fleet's child whose monitor is
    gone stops here (see loop/monitorwatch.py)."""
    heal(step)
    snap = load_snapshot(step.layout.config_snapshot, step.run_id)
    if snap is not None:
        guard_config(step, str(snap.get("conf_digest", "")))
    fp = _measure(step)
    write_json(step.layout.baseline_file, {"iteration": iteration, "run_id": step.run_id, **fp.to_json()})
    step.say(f"--- iteration {iteration} ---", "head")
    step.event("iteration_start", iteration=iteration)
    # A fleet's child: its monitor's heartbeat, between phases.
    return monitor_gone(step, os.environ) or exitcodes.OK


def iteration_finish(step: Step, iteration: int) -> int:
    """Measure progress, move the breaker, see whether the work is done.

    OK: go on; WORK_DONE: the work is finished (the loop ends with 0); WAIT: the OPEN
    breaker cools down, then a trial iteration; BREAKER_OPEN: stop. An iteration that sat
    out a usage limit or an outage and made no progress is not counted against the breaker,
    nor one whose agent failed to start (startfail.py: a broken command stops the loop as a
    configuration error instead).
    """
    cfg, lay = step.cfg, step.layout
    now_fp = _measure(step)
    try:
        base = Fingerprint.from_json(read_json(lay.baseline_file))
    except CorruptFile:
        base = None
    if base is None:
        step.say("no usable baseline for this iteration; counting it as progress", "warn")
    progressed = base is None or base != now_fp
    how = ("" if not progressed or base is None else
           "new commits" if base.head != now_fp.head else "uncommitted changes")
    mine = step.events(iteration=iteration)
    if progressed and any(e.get("event") == "history_rewritten" for e in mine):
        # Allowed (GENESIS_ALLOW_HISTORY_REWRITE=true), a rewrite changes HEAD but is no step forward.
        progressed = False
        step.say(f"iteration {iteration}: a phase rewrote history; that is not counted as progress", "warn")
    waited = any(e.get("event") == "wait_start" and e.get("kind") in ("limit", "outage") for e in mine)
    unstarted = None if progressed else spares_breaker(step, iteration)
    earlier = not progressed and replayed(mine)   # its phases were run by an earlier try of the attempt
    store = breaker_store(lay)
    if progressed or not (waited or unstarted or earlier):
        state, warning = store.update(
            lambda s: breaker.record(s, iteration, progressed, time.time(), cfg.cb_warning, cfg.cb_stop,
                                     now_fp.to_json()))
        if warning:
            step.say(warning, "warn")
    else:
        state, _ = store.load()
    mirror_breaker(lay, state)
    step.event("iteration_end", iteration=iteration, progress=progressed, breaker=state.state,
               no_progress=state.no_progress_count, waited=waited, unstarted=unstarted is not None,
               replayed=earlier)
    ended = [e for e in mine if e.get("event") == "phase_end"]
    task = task_of(os.environ)
    done, why = is_done(cfg.done_when, cfg.project, [p.name for p in cfg.phases],
                        [e.get("phase") for e in ended if e.get("ending") == "finished"],
                        any(e.get("said_done") for e in ended), iteration, markers_for(cfg.project, step.run_id),
                        task=task)
    if cfg.done_when.kind == "tasks":  # no `[x]` an agent ticked counts without its evidence
        done, why = done_gate(step, done, why, task, iteration)
    if task and not done and cfg.done_when.kind == "tasks":
        step.say(f"iteration {iteration}: not done: {why}", "info")  # a child's one task: where it stands
    if done:
        step.say(f"iteration {iteration}: done: {why}; the loop ends here", "ok")
        step.event("work_done", iteration=iteration, why=why)
        return exitcodes.WORK_DONE
    if progressed:
        step.say(f"iteration {iteration}: progress ({how}); breaker {state.state}", "ok")
        return exitcodes.OK
    if earlier:
        step.say(f"iteration {iteration}: its phases were committed by an earlier try of this attempt: not "
                 f"counted; breaker {state.state}", "info")
        return exitcodes.OK
    if waited:
        step.say(f"iteration {iteration}: no progress, but it waited out a usage limit or an API outage: "
                 f"not counted; breaker {state.state}", "info")
        return exitcodes.OK
    if unstarted is not None:
        step.say(f"iteration {iteration}: no progress, but its agent failed to start ({unstarted.same} time(s) in "
                 f"a row with the same words; {START_FAILURES} stop the loop as a configuration error): not "
                 f"counted; breaker {state.state}", "warn")
        return exitcodes.OK
    count = f"{state.no_progress_count} iteration(s) in a row without progress"
    if state.state == breaker.OPEN:
        cooldown = breaker.cooldown_seconds(state, cfg.cb_cooldown, cfg.cb_max_trials) if cfg.cb_cooldown else None
        if cooldown is not None:
            step.say(f"iteration {iteration}: no progress; breaker OPEN after {count}", "error")
            return plan_cooldown(step, cooldown, iteration, time.time())
        trials = f" and {state.trials} trial iteration(s)" if state.trials else ""
        step.say(f"iteration {iteration}: no progress; breaker OPEN after {count}{trials}: stopping the loop. "
                 f"Reset with `{hint(step.cfg.project, 'breaker', 'reset')}` or make a change and restart", "error")
        return exitcodes.BREAKER_OPEN
    if state.state == breaker.HALF_OPEN:
        step.say(f"iteration {iteration}: no progress; breaker HALF_OPEN ({count}; stops at "
                 f"{cfg.cb_stop})", "warn")
    else:
        step.say(f"iteration {iteration}: no progress ({count}); breaker {state.state}", "info")
    return exitcodes.OK
