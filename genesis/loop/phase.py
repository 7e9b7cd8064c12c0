"""The phase step: one agent run under watch, from its trigger to what its ending calls for.

`genesis run-phase` runs it in a process of its own: the watcher's machinery is loaded only
here, by the one step that watches.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from genesis import exitcodes
from genesis.agents import adapter_of
from genesis.agents.base import PERMISSION_REFUSED, Adapter
from genesis.agents.models import model_of
from genesis.config import read_prompt
from genesis.health.toollog import tool_log_path
from genesis.ledger.store import WATCH_TIMEOUT, LedgerError
from genesis.loop import agentgo, ceilings, keyedtries, lostloop, recovery, refusal, startfail, taskcheck, waiting, workerlink
from genesis.loop.ending import commit_message, describe, how_it_ended, reported, said_done
from genesis.loop.commitfail import commit_failed, lock_removed
from genesis.loop.guard import HookRemoved, heal
from genesis.loop.keptout import agent_committed, note_left_out, rules_of
from genesis.loop.monitorwatch import monitor_gone
from genesis.loop.onetask import task_id_of, task_of, with_task
from genesis.loop.phasewatch import health_keeper, incident_keeper, judge_of, on_check
from genesis.loop.reap import reap
from genesis.loop.relock import LockKeeper
from genesis.loop.safekeeping import history_of, keep_at_phase, kept_after, orphaning, stop_for
from genesis.loop.sandboxing import box_for, compare_with_start
from genesis.loop.step import Step, agent_env, ledger_of
from genesis.phases import Phase, should_run
from genesis.procs.markers import markers_for
from genesis.repo import phasework, planted
from genesis.repo.autocommit import CommitResult, commit
from genesis.repo.autocommit import push as push_branch
from genesis.repo.ownership import remember, user_files
from genesis.repo.phasekeys import TRAILER, trailer_value
from genesis.repo.signing import unsigned_for
from genesis.sandbox.box import Box
from genesis.sandbox.network import serving
from genesis.sandbox.refused import EVENT as REFUSED_EVENT
from genesis.sandbox.refused import Refused, refused_line
from genesis.store.atomicio import DiskFull
from genesis.watch.evidence import transcript_tail
from genesis.watch.supervisor import AgentRun, Limits, Outcome, supervise

__all__ = ["run_phase", "phase_lost", "WATCHER_DEATHS_MAX"]

WATCHER_DEATHS_MAX = 3  # watchers lost to signals in one run before the loop stops


@dataclass(frozen=True)
class Attempt:
    """What one run of a phase's agent is: its command, its adapter, and where it writes."""
    base: tuple[str, ...]          # the agent command before the adapter's flags (a retry may use the fallback)
    number: int                    # retries of this phase in this iteration so far
    ordinal: int                   # this phase's nth start in this iteration (a retry, a run after a wait): its logs
    adapter: Adapter
    argv: tuple[str, ...]
    log: Path
    raw_log: Path | None
    heartbeat: Path
    env: dict[str, str]
    prompt: str
    box: Box | None = None         # the box the agent runs in (see loop/sandboxing.py)


def run_phase(step: Step, phase: Phase, iteration: int) -> int:
    """If the night's ceilings allow and the phase's trigger says so now: reap, run the agent
    under watch, reap, auto-commit; then act on how it ended (a usage limit or an API outage
    plans a wait and a retry, an error retrying cannot fix stops the loop).

    The trigger is checked here, just before the phase, so that it sees what the phases
    before it in this iteration did. Returns the phase's exit code.
    """
    code = monitor_gone(step, os.environ)  # a fleet's child: its monitor's heartbeat, between phases
    if code is not None:
        return code
    code = keyedtries.already_committed(step, phase.name, iteration)  # an earlier try of the attempt ran it
    if code is not None:
        return code
    code = _not_now(step, phase, iteration)
    if code is None:  # a fleet's child whose agent died: the fleet's restart budget says when another starts
        code = agentgo.wait_for_go(step, phase.name, iteration, os.environ)
    if code is not None:
        return code
    try:
        attempt = _prepare(step, phase, iteration)
    except HookRemoved as exc:
        return exc.code  # the guard said why and recorded it
    step.say(f"{phase.name}: agent started (log {step.rel(attempt.log)})", "head")
    started = time.time()
    work = phasework.before(step.cfg.project)
    git_files = planted.snapshot(step.cfg.project)
    at_start = keep_at_phase(step, iteration, phase.name)
    _note_leftovers(step, f"when {phase.name} started, iteration {iteration}")
    step.event("phase_start", iteration=iteration, phase=phase.name, log=str(attempt.log), epoch=started,
               attempt=attempt.number, raw_log=str(attempt.raw_log) if attempt.raw_log else None,
               agent=attempt.adapter.name, model=model_of(attempt.adapter.name, attempt.argv, attempt.env))
    outcome = _watch(step, phase, iteration, attempt)
    ending = how_it_ended(outcome)
    lines = transcript_tail(attempt.log)  # this attempt's own evidence, kept with its end
    detail = describe(step, phase, outcome, attempt.log, ending, lines)
    step.event("phase_end", iteration=iteration, phase=phase.name, pid=outcome.pid, box_pid=outcome.box_pid,
               status=outcome.status, returncode=outcome.returncode, duration=round(outcome.duration, 2),
               killed=(outcome.kill.targets if outcome.kill else 0),
               sigkilled=(outcome.kill.killed if outcome.kill else 0), swept=outcome.swept, detail=detail,
               ending=ending, started=started, api_retries=outcome.api_retries, attempt=attempt.number,
               would_kill=list(outcome.would_kill[-3:]), window=outcome.window, log=str(attempt.log), tail=lines,
               said_done=said_done(step.cfg.done_when, outcome), **reported(outcome))
    reap(step, "after " + phase.name)
    _undo_planted(step, iteration, phase.name, git_files)
    rewrites = history_of(step, iteration, phase.name, at_start)
    leaked = agent_committed(step, iteration, phase.name, work)  # a secret in the agent's own commits: not pushed
    # After a rewrite that stops the loop, the work is committed (kept) but not pushed.
    done = _commit(step, phase, iteration, outcome,
                   push=(not rewrites or step.cfg.allow_history_rewrite) and not leaked,
                   off_branch=orphaning(rewrites), start=work.head)
    if orphaning(rewrites):
        kept_after(step, iteration, phase.name)
    _note_leftovers(step, f"after {phase.name}, iteration {iteration}")
    since = phasework.since_refs(step.run_id, iteration, phase.name)
    step.event("phase_work", iteration=iteration, phase=phase.name,
               **phasework.after(step.cfg.project, work, since=since, orphaned=orphaning(rewrites),
                                 own=done.sha if done is not None and done.committed else None))
    if outcome.status == "interrupted" and outcome.detail.startswith("the agent sent "):
        step.event("stop_reason", reason=outcome.detail, code=outcome.exit_code)  # the loop's end says so
    if outcome.loop_lost:  # nobody is left to act on this phase's end: the night ends here
        lostloop.settle(step, (), "the phase's watcher")
        return outcome.exit_code
    stopped = stop_for(step, iteration, phase.name, rewrites)
    if stopped is not None:
        return stopped
    aside = keyedtries.stepped_aside(step, phase.name, iteration, done)  # a newer loop owns the branch
    if aside is not None:
        return aside
    if outcome.status != "interrupted":  # a stopping loop runs no check; what it ticked stays unproven
        taskcheck.after_phase(step, phase.name, iteration, work)
    return _act_on(step, phase, iteration, outcome, ending, detail, attempt)


def _not_now(step: Step, phase: Phase, iteration: int) -> int | None:
    """The exit code when the phase does not run now (a ceiling, its trigger, a known usage
    limit), else None."""
    ceiling = ceilings.reached(step, time.time())
    if ceiling is not None:
        code, why = ceiling
        step.say(f"{why}: stopping before {phase.name}", "warn")
        step.event("ceiling", iteration=iteration, phase=phase.name, why=why, code=code)
        return code
    due, why = should_run(phase, iteration, step.cfg.project,
                          {**os.environ, **markers_for(step.cfg.project, step.run_id)})
    if not due:
        step.say(f"{phase.name}: skipped ({why})", "info")
        step.event("phase_skip", iteration=iteration, phase=phase.name, why=why)
        return exitcodes.PHASE_SKIPPED
    base = recovery.retry_command(step, iteration, phase.name) or step.cfg.agent_cmd
    who = waiting.whose(step, base, agent_env(step, phase.name, iteration))
    _ask_worker(step)
    known = waiting.known_limit(step, time.time(), who)
    if known is not None:
        return waiting.plan_limit(step, known.limit, phase.name, iteration, time.time(), known=known, who=who)
    outage = waiting.known_outage(step, time.time(), who)  # another loop of this CLI is backing off
    if outage is not None:
        return waiting.plan_shared_outage(step, outage, phase.name, iteration, time.time())
    return None


def _ask_worker(step: Step) -> None:
    """A fleet's child on Temporal: the fleet's account asked through its worker, whose answer
    puts any hold in the account store read next (genesis/loop/workerlink.py)."""
    folder, task = os.environ.get("GENESIS_FLEET_DIR", "").strip(), task_id_of(os.environ)
    if not folder or not task:
        return
    why = workerlink.through_worker(Path(folder), task)
    if why:
        step.say(why, "warn")


def _prepare(step: Step, phase: Phase, iteration: int) -> Attempt:
    """Genesis's own places repaired, an earlier run's beats gone, leftovers reaped; the run's command."""
    cfg, lay = step.cfg, step.layout
    heal(step, phase.name, iteration)
    hb = lay.heartbeat_file(phase.name)
    for stale in (hb, tool_log_path(hb)):  # an earlier run's heartbeat and tool calls must not count for this one
        try:
            os.unlink(stale)
        except FileNotFoundError:
            pass
    reap(step, "before " + phase.name)
    base = recovery.retry_command(step, iteration, phase.name) or cfg.agent_cmd
    adapter = adapter_of(cfg, base)
    argv = adapter.command(base, phase)
    suffix = adapter.raw_suffix(argv)
    env = agent_env(step, phase.name, iteration)
    box = box_for(step, argv, env, adapter)  # a named box gone: exit 29 before the start
    compare_with_start(step, box)
    env, _dropped = box.environment(env, adapter.box_keys(env))  # no secret but the CLI's own key in the box
    nth = _ordinal(step, iteration, phase.name)
    return Attempt(base, recovery.retries_so_far(step, iteration, phase.name), nth, adapter, argv,
                   lay.agent_log(step.run_id, iteration, phase.name, attempt=nth),
                   lay.agent_log(step.run_id, iteration, phase.name, suffix, attempt=nth) if suffix else None, hb,
                   env, _prompt(step, phase), box=box)


def _prompt(step: Step, phase: Phase) -> str:
    """The phase's prompt; a loop told its one task (a fleet's child) is told it first, and the
    checks that refuted a task's last claim (loop/taskcheck.py) before the instructions."""
    return with_task(taskcheck.notes_for_prompt(step) + read_prompt(phase.prompt_file), task_of(os.environ),
                     task_id_of(os.environ))


def _ordinal(step: Step, iteration: int, phase: str) -> int:
    """Which start of the phase in this iteration this is (1: its first), for its logs' names: the
    most of what the ledger recorded and what the log folder holds, so that neither a ledger that
    cannot be read nor a log folder deleted mid-run makes two attempts share a log."""
    started = sum(1 for e in step.events(kinds=("phase_start",), iteration=iteration) if e.get("phase") == phase)
    nth = started + 1
    while nth < started + 1000 and os.path.lexists(step.layout.agent_log(step.run_id, iteration, phase, attempt=nth)):
        nth += 1
    return nth


def _watch(step: Step, phase: Phase, iteration: int, attempt: Attempt) -> Outcome:
    """The agent run under watch, to its end; the allow-list's proxy serves its box meanwhile."""
    with serving(attempt.box) as (box, proxy):
        try:
            # Seatbelt's proxy has its port only now: the variables naming it join the agent's environment.
            env = {**attempt.env, **box.proxy_env()}
            return _supervised(step, phase, iteration, replace(attempt, box=box, env=env))
        finally:
            if proxy is not None:
                _note_refused(step, phase.name, iteration, proxy.refused())


def _note_refused(step: Step, phase: str, iteration: int, refused: tuple[Refused, ...]) -> None:
    """What the box's proxy refused in this phase (host, port, count), said and recorded."""
    if refused:
        step.say(f"{phase}: {refused_line(refused)}", "warn")
        step.event(REFUSED_EVENT, iteration=iteration, phase=phase, total=sum(r.count for r in refused),
                   refused=[[r.host, r.port, r.count] for r in refused])


def _supervised(step: Step, phase: Phase, iteration: int, attempt: Attempt) -> Outcome:
    cfg, hb = step.cfg, attempt.heartbeat
    keeper = LockKeeper(step, os.getppid())  # this step's parent is the loop, whose lock it keeps

    def check() -> None:
        keeper.check()
        on_check(step, hb)

    reader = attempt.adapter.reader(attempt.argv)
    run = AgentRun(attempt.argv, cfg.project, attempt.env, attempt.log, hb, step.run_id,
                   prompt=attempt.prompt, prompt_stdin=attempt.adapter.prompt_on_stdin,
                   on_check=check, raw_log=attempt.raw_log,
                   reader=reader, on_health=health_keeper(step, phase),
                   on_incident=incident_keeper(step, phase, iteration, hb, attempt.log), judge=judge_of(step, hb),
                   phase=phase.name, iteration=iteration, box=attempt.box, memory_max=cfg.agent_memory_max,
                   pids_max=cfg.agent_pids_max,
                   loop=lostloop.loop_of(step))
    limits = Limits(cfg.check_interval, cfg.stale_after, cfg.max_runtime, cfg.kill_grace, cfg.count_output,
                    log_max_bytes=cfg.log_max_bytes, tool_silent=cfg.tool_silent or None,
                    tool_busy_max=cfg.tool_busy_max, enforce=cfg.health_enforce,
                    hookless=attempt.adapter.hooks is None,
                    first_event_after=cfg.first_event_window if reader.speaks_first else 0.0,
                    result_exit_after=cfg.result_exit_window)
    try:  # the watcher's writes never hold up its judgement: a held ledger costs events, said
        writes = ledger_of(step.layout).waiting_at_most(WATCH_TIMEOUT)
    except (DiskFull, LedgerError):
        writes = contextlib.nullcontext()
    with writes:
        return supervise(run, limits, note=lambda msg: step.say(f"{phase.name}: {msg}", "warn"))


def _undo_planted(step: Step, iteration: int, phase: str, start: planted.GitFiles) -> None:
    """Git config, hooks or attributes the agent planted: undone before anything of git's runs
    again (planted.py), kept under the run's log folder, said and recorded."""
    evidence = step.layout.run_dir(step.run_id) / "planted" / f"{iteration}-{phase}"
    for found in planted.undo(step.cfg.project, start, evidence):
        found = replace(found, kept=step.rel(Path(found.kept)) if found.kept else "")
        step.say(f"{phase}: {found.line()}", "warn")
        step.event("git_planted", iteration=iteration, phase=phase, text=found.line(), **found.record())


def _note_leftovers(step: Step, when: str) -> None:
    """Record what the work tree holds uncommitted, but the user's files: if the run ends
    before it is committed, the next start knows it as the agent's (repo/ownership.py)."""
    lay = step.layout
    problem = remember(step.cfg.project, lay.leftovers_file, step.run_id, when, user_files(lay.user_files),
                       time.time(), markers=markers_for(step.cfg.project, step.run_id))
    if problem:
        step.say(problem, "warn")


def _commit(step: Step, phase: Phase, iteration: int, outcome: Outcome, push: bool = True,
            off_branch: bool = False, start: str | None = None) -> CommitResult | None:
    """The phase's work committed as the agent's, an interrupted phase's too (labelled so),
    unless auto-commit is off or the agent never ran. Pushed only if asked and `push`, and
    never from off the phase's branch (`off_branch`: switched or detached by the agent). A
    keyed child's task branch (the fleet on Temporal) gets its upstream on its first push, so
    that another machine can take the task up from the remote where this one left it; a local
    fleet's child pushes only to an upstream the user set. With nothing to commit, the agent's
    own commits since the phase's `start` are pushed all the same."""
    cfg, lay = step.cfg, step.layout
    if not cfg.auto_commit or outcome.status == "not_started":
        return None
    pushing = cfg.auto_push and push and not off_branch
    child = keyedtries.gives_upstream(cfg)  # the engine's task branch is Genesis's: it may get an upstream
    result = commit(cfg.project, commit_message(phase.name, iteration, step.run_id, outcome),
                    lay.ignored(), pushing, keep_out=user_files(lay.user_files),
                    markers=markers_for(cfg.project, step.run_id), run_hooks=cfg.git_hooks, rules=rules_of(cfg),
                    unsigned=unsigned_for(cfg.project, lay.state_dir, step.run_id),
                    said=lambda removed: lock_removed(step, phase.name, iteration, removed),
                    trailers=[(TRAILER, trailer_value(cfg.commit_key, iteration, phase.name))] if cfg.commit_key
                    else (), set_upstream=child)
    if pushing and not result.committed and not result.error and start is not None:
        alone = push_branch(cfg.project, markers_for(cfg.project, step.run_id), set_upstream=child, unless_at=start)
        result = replace(result, sha=alone.sha, pushed=alone.pushed, error=alone.error, rejected=alone.rejected)
        if alone.pushed:
            step.say(f"{phase.name}: nothing to commit; the agent's own commits pushed ({alone.sha})", "info")
    note_left_out(step, result, phase.name, iteration, phase.name)
    if result.committed and off_branch:
        step.say(f"{phase.name}: committed {result.sha} off the phase's branch (the agent switched branch or "
                 f"detached HEAD): orphaned work, kept by a safety ref", "warn")
    elif result.committed:
        step.say(f"{phase.name}: committed {result.sha}" + (" and pushed" if result.pushed else ""), "info")
    if result.error:
        count = commit_failed(step, phase.name, iteration, result.error)
        step.say(f"{phase.name}: auto-commit failed ({count} in a row): {result.error}", "warn")
    return result


def _act_on(step: Step, phase: Phase, iteration: int, outcome: Outcome, ending: str, detail: str,
            attempt: Attempt) -> int:
    """The phase's exit code: a stuck or wedged phase is retried within its budget, a limit or an
    outage is waited out, an error retrying cannot fix stops the loop, and so does an agent
    that keeps failing to start."""
    end = outcome.ending
    if ending in ("stuck", "wedged"):
        code = recovery.after_stall(step, phase.name, iteration, ending, detail, attempt.base)
        return outcome.exit_code if code is None else code
    if ending in ("failed", "not_started"):
        code = startfail.stop_if_it_cannot_start(step, phase.name, attempt.base, attempt.log)
        return outcome.exit_code if code is None else code
    if ending == "limit":
        return waiting.plan_limit(step, end.limit, phase.name, iteration, time.time(),
                                  who=(attempt.adapter, attempt.adapter.account(attempt.env)))
    if ending == "outage":
        return waiting.plan_outage(step, end.api_error, phase.name, iteration, time.time())
    if ending == "refused":  # the same request would be refused again: only another agent may try it
        return refusal.act_on_refusal(step, phase.name, iteration, end.api_error.message, attempt.base)
    if ending == "fatal":
        err = end.api_error
        if err.code == PERMISSION_REFUSED:  # the agent command's configuration: its message says the fix
            reason = err.message
            step.say(f"{phase.name}: the loop stops: a refused permission is refused again on every retry", "error")
        else:
            reason = (f"the agent reported an error that retrying cannot fix: {err.message} "
                      f"({err.code}{f', HTTP {err.status}' if err.status else ''}). Fix it, then restart the loop")
            step.say(f"{phase.name}: {reason}", "error")
        step.event("stop_reason", code=exitcodes.AGENT_FATAL, reason=f"{phase.name}: {reason}"[:1000])
        return exitcodes.AGENT_FATAL
    return outcome.exit_code


def _open_attempt_log(step: Step, iteration: int, phase: str) -> str | None:
    """The log of the phase's attempt that started and has not ended (None: none, e.g. a watcher
    that died before it recorded its start: an earlier attempt's log is not its evidence)."""
    last = [e for e in step.events(kinds=("phase_start", "phase_end"), iteration=iteration) if e.get("phase") == phase]
    log = last[-1].get("log") if last and last[-1].get("event") == "phase_start" else None
    return log if isinstance(log, str) else None


def phase_lost(step: Step, phase: str, iteration: int, status: int) -> int:
    """A watcher that died (SIGKILL, or a signal the loop did not send) is a failed phase, not
    the end of the night: its run is reaped by identity and the loop goes on, up to
    WATCHER_DEATHS_MAX times a run. Returns OK, or WATCHER_LOST when the bound is spent."""
    signal_no = status - 128 if status > 128 else 0
    how = f"died of signal {signal_no}" if signal_no else f"exited with status {status}"
    step.say(f"{phase}: the watcher {how}; the phase counts as failed and its processes are ended", "error")
    found = reap(step, f"after the watcher of {phase} died")
    log = _open_attempt_log(step, iteration, phase)
    step.event("phase_end", iteration=iteration, phase=phase, pid=None, status="watcher_lost", returncode=status,
               duration=0, killed=len(found.leftovers), sigkilled=0, detail=f"the watcher {how}", log=log,
               tail=transcript_tail(Path(log)) if log else [])
    deaths = sum(1 for e in step.events(kinds=("phase_end",))
                 if e.get("event") == "phase_end" and e.get("status") == "watcher_lost")
    if deaths >= WATCHER_DEATHS_MAX:
        step.say(f"the watcher died {deaths} times in this run; stopping rather than running unsupervised", "error")
        return exitcodes.WATCHER_LOST
    return exitcodes.OK
