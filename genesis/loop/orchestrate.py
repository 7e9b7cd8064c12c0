"""The loop's steps after the start, one function per `genesis` subcommand the loop calls."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from genesis import exitcodes
from genesis.config import load_snapshot, read_prompt
from genesis.health.toollog import tool_log_path
from genesis.loop import breaker
from genesis.loop.guard import breaker_store, guard_breaker, guard_config, heal, mirror_breaker
from genesis.loop.step import Step, StepFailed, agent_env
from genesis.phases import Phase, should_run
from genesis.procs.markers import markers_for
from genesis.repo import phasework
from genesis.repo.autocommit import commit
from genesis.repo.gitcmd import GitFailed
from genesis.repo.progress import Fingerprint, fingerprint
from genesis.store.atomicio import CorruptFile, read_json, write_json
from genesis.store.layout import Layout
from genesis.store.looplock import release
from genesis.words import LABELS

if TYPE_CHECKING:
    from genesis.procs.reaper import ReapPlan
    from genesis.watch.supervisor import Outcome

__all__ = ["run_phase", "reap", "iteration_start", "iteration_finish", "finish", "phase_lost",
           "commit_message", "WATCHER_DEATHS_MAX"]

WATCHER_DEATHS_MAX = 3  # watchers lost to signals in one run before the loop stops


def _user_files(lay: Layout) -> list[str]:
    try:
        data = read_json(lay.user_files, limit=16 << 20)
    except CorruptFile:
        return []
    return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []


def reap(step: Step, when: str, dry_run: bool = False) -> "ReapPlan":
    """Kill this loop's leftovers; report ports held by anything else."""
    from genesis.procs.reaper import execute, plan_reap

    cfg = step.cfg
    found = plan_reap(cfg.project, step.run_id, cfg.reap_scope, cfg.reap_patterns, cfg.reap_ports)
    for port in found.foreign_ports:
        owner = f"pid {port.pid} ({port.cmdline[:80]})" if port.pid else port.cmdline
        step.say(f"port {port.port} is held by {owner}, which is not this loop's: left alone", "warn")
    if dry_run:
        return found
    if found.foreign_ports:
        step.event("foreign_port", when=when, ports=[{"port": p.port, "pid": p.pid, "cmdline": p.cmdline[:200]}
                                                     for p in found.foreign_ports])
    if found.leftovers:
        report = execute(found, cfg.kill_grace)
        listing = "; ".join(f"pid {lo.ident.pid} {lo.cmdline[:60]!r} ({lo.why})" for lo in found.leftovers[:8])
        more = f" and {len(found.leftovers) - 8} more" if len(found.leftovers) > 8 else ""
        step.say(f"reaped {len(found.leftovers)} leftover process(es) {when}: {listing}{more}", "warn")
        if report.survivors:
            step.say(f"could not end pids {', '.join(map(str, report.survivors))}", "error")
        step.event("reap", when=when, pids=[lo.ident.pid for lo in found.leftovers],
                   why=[lo.why for lo in found.leftovers], survivors=list(report.survivors))
    return found


def run_phase(step: Step, phase: Phase, iteration: int) -> int:
    """If the night's ceilings allow and the phase's trigger says so now: reap, run the agent
    under watch, reap, auto-commit; then act on how it ended (a usage limit or an API outage
    plans a wait and a retry, an error retrying cannot fix stops the loop).

    The trigger is checked here, just before the phase, so that it sees what the phases
    before it in this iteration did. Returns the phase's exit code.
    """
    from genesis.agents import adapter_of
    from genesis.loop import ceilings, waiting

    cfg, lay, say = step.cfg, step.layout, step.say
    ceiling = ceilings.reached(step, time.time())
    if ceiling is not None:
        code, why = ceiling
        say(f"{why}: stopping before {phase.name}", "warn")
        step.event("ceiling", iteration=iteration, phase=phase.name, why=why, code=code)
        return code
    due, why = should_run(phase, iteration, cfg.project)
    if not due:
        say(f"{phase.name}: skipped ({why})", "info")
        step.event("phase_skip", iteration=iteration, phase=phase.name, why=why)
        return exitcodes.PHASE_SKIPPED
    known = waiting.known_limit(step, time.time())
    if known is not None:
        return waiting.plan_limit(step, known, phase.name, iteration, time.time(), known=True)
    from genesis.watch.supervisor import AgentRun, Limits, supervise  # the watcher's machinery, only where it watches

    heal(step, phase.name, iteration)
    hb = lay.heartbeat_file(phase.name)
    for stale in (hb, tool_log_path(hb)):  # an earlier run's heartbeat and tool calls must not count for this one
        try:
            os.unlink(stale)
        except FileNotFoundError:
            pass
    reap(step, "before " + phase.name)
    from genesis.loop import recovery

    base = recovery.retry_command(step, iteration, phase.name) or cfg.agent_cmd  # a retry may use the fallback
    attempt = recovery.retries_so_far(step, iteration, phase.name)
    adapter = adapter_of(cfg, base)
    argv = adapter.command(base, phase)
    log = lay.agent_log(step.run_id, iteration, phase.name)
    suffix = adapter.raw_suffix(argv)
    raw = lay.agent_log(step.run_id, iteration, phase.name, suffix) if suffix else None
    env = agent_env(step, phase.name, iteration)
    prompt = read_prompt(phase.prompt_file)
    say(f"{phase.name}: agent started (log {step.rel(log)})", "head")
    started = time.time()
    work = phasework.before(cfg.project)
    step.event("phase_start", iteration=iteration, phase=phase.name, log=str(log), epoch=started, attempt=attempt)
    outcome = supervise(AgentRun(argv, cfg.project, env, log, hb, step.run_id, prompt=prompt,
                                 prompt_stdin=adapter.prompt_on_stdin, on_check=lambda: _on_check(step, hb),
                                 raw_log=raw, reader=adapter.reader(argv), on_health=_health_keeper(step, phase),
                                 on_incident=_incident_keeper(step, phase, iteration, hb, log),
                                 judge=_judge(step, hb),
                                 phase=phase.name, iteration=iteration),
                        Limits(cfg.check_interval, cfg.stale_after, cfg.max_runtime, cfg.kill_grace,
                               cfg.count_output, log_max_bytes=cfg.log_max_bytes,
                               tool_silent=cfg.tool_silent or None, tool_busy_max=cfg.tool_busy_max,
                               enforce=cfg.health_enforce, hookless=adapter.hooks is None),
                        note=lambda msg: say(f"{phase.name}: {msg}", "warn"))
    ending = how_it_ended(outcome)
    detail = _describe(step, phase, outcome, log, ending)
    step.event("phase_end", iteration=iteration, phase=phase.name, pid=outcome.pid, status=outcome.status,
               returncode=outcome.returncode, duration=round(outcome.duration, 2),
               killed=(outcome.kill.targets if outcome.kill else 0),
               sigkilled=(outcome.kill.killed if outcome.kill else 0), swept=outcome.swept, detail=detail,
               ending=ending, started=started, api_retries=outcome.api_retries, attempt=attempt,
               would_kill=list(outcome.would_kill[-3:]),
               said_done=_said_done(cfg.done_when, outcome), **_reported(outcome))
    reap(step, "after " + phase.name)
    if cfg.auto_commit and outcome.status not in ("interrupted", "not_started"):
        result = commit(cfg.project, commit_message(phase.name, iteration, step.run_id, outcome),
                        lay.ignored(), cfg.auto_push, keep_out=_user_files(lay),
                        markers=markers_for(cfg.project, step.run_id), run_hooks=cfg.git_hooks)
        if result.committed:
            say(f"{phase.name}: committed {result.sha}" + (" and pushed" if result.pushed else ""), "info")
        if result.error:
            say(f"{phase.name}: {result.error}", "warn")
    step.event("phase_work", iteration=iteration, phase=phase.name, **phasework.after(cfg.project, work))
    end = outcome.ending
    if ending in ("stale", "wedged"):
        code = recovery.after_stall(step, phase.name, iteration, "stalled" if ending == "stale" else "wedged",
                                    detail, base)
        return outcome.exit_code if code is None else code
    if ending == "limit":
        return waiting.plan_limit(step, end.limit, phase.name, iteration, time.time())
    if ending == "outage":
        return waiting.plan_outage(step, end.api_error, phase.name, iteration, time.time())
    if ending == "fatal":
        err = end.api_error
        say(f"{phase.name}: the agent reported an error that retrying cannot fix: {err.message} "
            f"({err.code}{f', HTTP {err.status}' if err.status else ''}). Fix it, then restart the loop", "error")
        return exitcodes.AGENT_FATAL
    return outcome.exit_code


def _incident_keeper(step: Step, phase: Phase, iteration: int, heartbeat: Path, log: Path):
    """Records what an abnormal phase was doing, just before its tree is killed."""

    def keep(root, found, kind: str, reason: str) -> None:
        from genesis.health.incidents import capture, write
        from genesis.health.toollog import in_flight, read_tail
        from genesis.watch.agentlog import tail

        calls = read_tail(tool_log_path(heartbeat))
        flying = in_flight(calls)
        try:
            beat = read_json(heartbeat, limit=64 << 10)
        except CorruptFile:
            beat = None
        extra = [p for p in found if root is None or p != root]
        inc = capture(root, extra, phase=phase.name, iteration=iteration, run_id=step.run_id, reason=reason,
                      kind=kind, heartbeat=beat if isinstance(beat, dict) else None,
                      tool_in_flight=flying, tool_calls=calls[-20:], transcript=tail(log, 40),
                      project=step.cfg.project, now=time.time(), git_timeout=2.0)
        path = write(inc, step.layout.incidents_dir)
        step.say(f"{phase.name}: incident recorded: `genesis incidents show {path.stem}`", "info")
        last_beat = beat.get("epoch") if isinstance(beat, dict) else None
        silent = round(time.time() - last_beat, 2) if isinstance(last_beat, (int, float)) else None
        step.event("incident", iteration=iteration, phase=phase.name, id=path.stem, kind=kind, reason=reason[:500],
                   silent_for=silent)

    return keep


def _on_check(step: Step, heartbeat: Path) -> None:
    """At every check of the watcher: the breaker file is back, the tool log stays bounded."""
    from genesis.health.toollog import rotate

    guard_breaker(step)
    rotate(tool_log_path(heartbeat))


def _judge(step: Step, heartbeat: Path):
    """Judges the phase's tool calls at every check: (wedged reason or "", severity, calls, the
    tool in flight with its command or "", when the last call succeeded (epoch) or None).
    Whether the repository changed is measured only when a cycle is seen (git costs)."""
    from genesis.health.doomloop import DOOM_LOOP, judge
    from genesis.health.toollog import describe, in_flight, pairs, read_tail

    def now() -> tuple[str, str, int, str, float | None]:
        calls = read_tail(tool_log_path(heartbeat))
        flying = in_flight(calls)
        done = pairs(calls)
        last_ok = next((c.t for c in reversed(done) if c.ok), None)
        verdict = judge(done, repo_changed=False, limits=step.cfg.doom_limits)
        wedged = verdict.wedged
        if verdict.pattern == DOOM_LOOP and _repo_changed(step):
            wedged = ""
        since = f" since {time.strftime('%H:%M:%S', time.localtime(flying.t))}" if flying else ""
        return (wedged, verdict.severity, verdict.calls, f"{describe(flying, 120)}{since}" if flying else "",
                last_ok)

    return now


def _repo_changed(step: Step) -> bool:
    """Whether the repository differs from the iteration's baseline (any doubt: changed)."""
    try:
        base = Fingerprint.from_json(read_json(step.layout.baseline_file))
        return base is None or base != fingerprint(step.cfg.project, step.layout.ignored())
    except (CorruptFile, GitFailed, OSError):
        return True


def _health_keeper(step: Step, phase: Phase):
    """Keeps the phase's health snapshot in the state folder at every check (for status and
    the report) and records each change of its class; a worse class is said at most once per
    stale window."""
    from genesis.health.classify import Tracker

    tracker = Tracker(step.cfg.stale_after)
    path = step.layout.health_file(phase.name)

    def keep(snap: dict) -> None:
        write_json(path, snap)
        changed, say = tracker.update(snap)
        if changed:
            step.event("health", iteration=snap["iteration"], phase=phase.name, classification=snap["classification"],
                       stall_score=snap["stall_score"], reason=snap["reason"][:300], idle=round(snap["idle"], 1),
                       steps_since_success=snap["tool_calls"])
        if say:
            step.say(f"{phase.name}: {snap['classification']} (stall score {snap['stall_score']:.2f}; last event: "
                     f"{snap['last_event']})", "warn")

    return keep


def how_it_ended(outcome: "Outcome") -> str:
    """One word for the phase's end: finished, failed, limit, outage, fatal, or the watcher's status."""
    end = outcome.ending
    if outcome.status == "api_fatal":  # ended by Genesis: the API refuses what retrying cannot fix soon
        return "limit" if end is not None and end.limit is not None else "fatal"
    if outcome.status != "exited":
        return outcome.status
    if end is not None and end.limit is not None:
        return "limit"
    if end is not None and end.api_error is not None:
        return "outage" if end.api_error.retryable else "fatal"
    return "finished" if outcome.returncode == 0 else "failed"


def _said_done(rule, outcome: "Outcome") -> bool:
    """Whether the agent's final result holds the completion phrase (never its echoed text)."""
    end = outcome.ending
    return (rule.kind == "phrase" and outcome.status == "exited" and end is not None
            and rule.text in end.final_text)


def _reported(outcome: "Outcome") -> dict:
    """What the agent reported of its run, for the ledger and the report."""
    from dataclasses import asdict

    end = outcome.ending
    result = end.result if end is not None else None
    return {
        "num_turns": result.num_turns if result else None,
        "cost_usd": result.total_cost_usd if result else None,
        "input_tokens": result.input_tokens if result else None,
        "output_tokens": result.output_tokens if result else None,
        "is_error": result.is_error if result else None,
        "terminal_reason": (result.terminal_reason or None) if result else None,
        "api_error_status": result.api_error_status if result else None,
        "session_id": (result.session_id or None) if result else None,
        "result": (result.text[:500] or None) if result else None,
        "limit": asdict(end.limit) if end is not None and end.limit is not None else None,
        "api_error": asdict(end.api_error) if end is not None and end.api_error is not None else None,
    }


def _describe(step: Step, phase: Phase, outcome: "Outcome", log: Path, ending: str) -> str:
    """Say how the phase ended; return the reason the ledger and the report keep."""
    from genesis.watch.agentlog import sanitize, tail

    say, took = step.say, f"{outcome.duration:.0f}s"
    result = outcome.ending.result if outcome.ending is not None else None
    cost = (f", {result.num_turns} turns" if result and result.num_turns is not None else "") + \
        (f", ${result.total_cost_usd:.4f}" if result and result.total_cost_usd is not None else "")
    if ending == "finished":
        say(f"{phase.name}: finished in {took}{cost}", "ok")
        return "finished"
    if ending in ("limit", "outage", "fatal") and outcome.ending is not None:
        end = outcome.ending
        message = end.limit.message if end.limit is not None else end.api_error.message
        detail = {"limit": "usage limit", "outage": "API error", "fatal": "API error"}[ending] + \
            f": {sanitize(message)}"
        say(f"{phase.name}: {detail} (after {took}; see {step.rel(log)})", "warn")
        return detail
    if outcome.status == "exited":
        last = next((line for line in reversed(tail(log)) if line.strip()), "")
        detail = f"the agent exited with status {outcome.returncode}" + (f"; its last line: {last}" if last else "")
        say(f"{phase.name}: {detail} (after {took}; see {step.rel(log)})", "warn")
        return detail
    if outcome.status == "not_started":
        say(f"{phase.name}: {outcome.detail}", "error")
        return outcome.detail
    kill = outcome.kill
    killed = f"; killed {kill.targets} process(es), {kill.killed} with SIGKILL" if kill else ""
    label = LABELS.get(outcome.status, outcome.status)
    say(f"{phase.name}: {label}: {outcome.detail}{killed}", "error" if outcome.status != "interrupted" else "warn")
    if outcome.status != "interrupted":
        for line in tail(log):
            say(f"  | {line}", "info")
    return outcome.detail


def commit_message(phase: str, iteration: int, run_id: str, outcome: "Outcome") -> str:
    """Names the run and how the phase ended; work of an agent that did not finish is partial."""
    if outcome.status == "exited" and outcome.returncode == 0:
        how = "finished"
    elif outcome.status == "exited":
        how = f"ended: exit {outcome.returncode}; partial work"
    else:
        how = f"ended: {LABELS.get(outcome.status, outcome.status)}, killed; partial work"
    return f"genesis: {phase}, iteration {iteration} ({how}) [run {run_id}]"


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
    except GitFailed as exc:
        raise StepFailed(exitcodes.STEP_TIMEOUT, f"measuring progress failed twice: {exc}") from None


def iteration_start(step: Step, iteration: int) -> None:
    heal(step)
    snap = load_snapshot(step.layout.config_snapshot, step.run_id)
    if snap is not None:
        guard_config(step, str(snap.get("conf_digest", "")))
    fp = _measure(step)
    write_json(step.layout.baseline_file, {"iteration": iteration, "run_id": step.run_id, **fp.to_json()})
    step.say(f"--- iteration {iteration} ---", "head")
    step.event("iteration_start", iteration=iteration)


def iteration_finish(step: Step, iteration: int) -> int:
    """Measure progress, move the breaker, see whether the work is done.

    OK: go on; WORK_DONE: the work is finished (the loop ends with 0); WAIT: the OPEN
    breaker cools down, then a trial iteration; BREAKER_OPEN: stop. An iteration that sat
    out a usage limit or an outage and made no progress is not counted against the breaker.
    """
    from genesis.loop import waiting
    from genesis.loop.completion import is_done

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
    waited = any(e.get("event") == "wait_start" and e.get("kind") in ("limit", "outage") for e in mine)
    store = breaker_store(lay)
    if progressed or not waited:
        state, warning = store.update(
            lambda s: breaker.record(s, iteration, progressed, time.time(), cfg.cb_warning, cfg.cb_stop,
                                     now_fp.to_json()))
        if warning:
            step.say(warning, "warn")
    else:
        state, _ = store.load()
    mirror_breaker(lay, state)
    step.event("iteration_end", iteration=iteration, progress=progressed, breaker=state.state,
               no_progress=state.no_progress_count, waited=waited)
    ended = [e for e in mine if e.get("event") == "phase_end"]
    done, why = is_done(cfg.done_when, cfg.project, [p.name for p in cfg.phases],
                        [e.get("phase") for e in ended if e.get("ending") == "finished"],
                        any(e.get("said_done") for e in ended), iteration)
    if done:
        step.say(f"iteration {iteration}: done: {why}; the loop ends here", "ok")
        step.event("work_done", iteration=iteration, why=why)
        return exitcodes.WORK_DONE
    if progressed:
        step.say(f"iteration {iteration}: progress ({how}); breaker {state.state}", "ok")
        return exitcodes.OK
    if waited:
        step.say(f"iteration {iteration}: no progress, but it waited out a usage limit or an API outage: "
                 f"not counted; breaker {state.state}", "info")
        return exitcodes.OK
    count = f"{state.no_progress_count} iteration(s) in a row without progress"
    if state.state == breaker.OPEN:
        cooldown = breaker.cooldown_seconds(state, cfg.cb_cooldown, cfg.cb_max_trials) if cfg.cb_cooldown else None
        if cooldown is not None:
            step.say(f"iteration {iteration}: no progress; breaker OPEN after {count}", "error")
            return waiting.plan_cooldown(step, cooldown, iteration, time.time())
        trials = f" and {state.trials} trial iteration(s)" if state.trials else ""
        step.say(f"iteration {iteration}: no progress; breaker OPEN after {count}{trials}: stopping the loop. "
                 f"Reset with `genesis breaker reset` or make a change and restart", "error")
        return exitcodes.BREAKER_OPEN
    if state.state == breaker.HALF_OPEN:
        step.say(f"iteration {iteration}: no progress; breaker HALF_OPEN ({count}; stops at "
                 f"{cfg.cb_stop})", "warn")
    else:
        step.say(f"iteration {iteration}: no progress ({count}); breaker {state.state}", "info")
    return exitcodes.OK


def phase_lost(step: Step, phase: str, iteration: int, status: int) -> int:
    """A watcher that died (SIGKILL, or a signal the loop did not send) is a failed phase, not
    the end of the night: its run is reaped by identity and the loop goes on, up to
    WATCHER_DEATHS_MAX times a run. Returns OK, or WATCHER_LOST when the bound is spent."""
    signal_no = status - 128 if status > 128 else 0
    how = f"died of signal {signal_no}" if signal_no else f"exited with status {status}"
    step.say(f"{phase}: the watcher {how}; the phase counts as failed and its processes are ended", "error")
    found = reap(step, f"after the watcher of {phase} died")
    step.event("phase_end", iteration=iteration, phase=phase, pid=None, status="watcher_lost", returncode=status,
               duration=0, killed=len(found.leftovers), sigkilled=0, detail=f"the watcher {how}")
    deaths = sum(1 for e in step.events(kinds=("phase_end",))
                 if e.get("event") == "phase_end" and e.get("status") == "watcher_lost")
    if deaths >= WATCHER_DEATHS_MAX:
        step.say(f"the watcher died {deaths} times in this run; stopping rather than running unsupervised", "error")
        return exitcodes.WATCHER_LOST
    return exitcodes.OK


def finish(step: Step, reason: str, code: int) -> None:
    """On any stop: reap what is left, release the lock, record and print a summary."""
    reap(step, "at stop")
    try:
        mirror_breaker(step.layout, breaker_store(step.layout).load()[0])
    except OSError as exc:
        step.say(f"could not write the breaker file: {exc}", "warn")
    release(step.layout.loop_record, step.run_id)
    step.event("loop_end", reason=reason, exit_code=code)
    from genesis.loop.step import ledger_of
    from genesis.reporting.load import night
    from genesis.reporting.text import render_text

    try:
        text = render_text(night(ledger_of(step.layout), step.run_id, incidents_dir=step.layout.incidents_dir))
    except Exception as exc:  # noqa: BLE001 - the loop's end must not fail on its summary
        step.say(f"no summary: the ledger could not be read ({exc}); `genesis report` may say more", "warn")
        return
    for line in text.rstrip("\n").splitlines():
        step.say(line, "info")
