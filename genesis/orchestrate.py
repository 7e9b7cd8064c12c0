"""The loop's steps, one function per `genesis` subcommand the shell loop calls."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import breaker, events, exitcodes
from .atomicio import CorruptFile, read_json, write_json, write_text
from .autocommit import commit
from .claude_settings import installed_events, settings_path
from .config import Config
from .layout import Layout, ensure_git_excludes, private_dir
from .looplock import Locked, acquire, release
from .phases import Phase, should_run
from .progress import Fingerprint, fingerprint, open_repo
from .reaper import ReapPlan, execute, markers_for, plan_reap
from .supervisor import AgentRun, Limits, supervise, tail

__all__ = ["Step", "layout_for", "preflight", "plan", "run_phase", "reap", "iteration_start",
           "iteration_finish", "finish", "summary_lines"]

Say = Callable[[str, str], None]


class StepFailed(Exception):
    """A step cannot go on; carries the exit code the loop should stop with."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Step:
    cfg: Config
    layout: Layout
    run_id: str
    say: Say

    def event(self, kind: str, **detail) -> None:
        events.record(self.layout.events_file, self.run_id, kind, **detail)

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)


def layout_for(cfg: Config) -> Layout:
    return Layout(cfg.project, cfg.log_dir, cfg.stop_flag)


def preflight(step: Step, loop_pid: int) -> None:
    """Everything checked before the first agent runs; StepFailed says why not."""
    cfg, lay, say = step.cfg, step.layout, step.say
    open_repo(cfg.project)
    private_dir(lay.state_dir)
    lay.log_dir.mkdir(parents=True, exist_ok=True)
    ensure_git_excludes(lay)
    try:
        acquire(lay.loop_lock, loop_pid, step.run_id)
    except Locked as exc:
        raise StepFailed(exitcodes.LOCKED, str(exc)) from None
    store = breaker.BreakerStore(lay.breaker_file)
    state, warning = store.load()
    if warning:
        say(warning, "warn")
    if state.state == breaker.OPEN:
        now_fp = fingerprint(cfg.project, lay.ignored()).to_json()
        if state.opened_fingerprint is not None and now_fp != state.opened_fingerprint:
            store.update(lambda s: breaker.close(s, time.time(), "repository changed since it opened"))
            say("circuit breaker was OPEN; the repository changed since then, so it is CLOSED again", "ok")
        else:
            release(lay.loop_lock, step.run_id)
            raise StepFailed(exitcodes.BREAKER_OPEN,
                             f"circuit breaker is OPEN since {state.opened_at} ({state.no_progress_count} "
                             f"iterations without progress). Make a change in the project and restart, or "
                             f"reset it: genesis breaker reset (or rm {lay.breaker_file})")
    if _read_flag(lay.stop_flag) == "false":
        write_text(lay.stop_flag, "true\n")
        say(f"stop flag {step.rel(lay.stop_flag)} said false (an earlier stop); set it back to true")
    if Path(cfg.agent_cmd[0]).name == "claude":
        if not hook_installed(cfg.project):
            say("Claude Code's heartbeat hook is not installed, so every agent will look stuck after "
                f"{cfg.stale_after:g}s; install it with: genesis hook install", "warn")
        if "--bare" in cfg.agent_cmd:
            say("claude --bare skips the settings hooks, so no heartbeat will arrive; drop --bare", "warn")
        if os.geteuid() == 0 and "--dangerously-skip-permissions" in cfg.agent_cmd \
                and os.environ.get("IS_SANDBOX") != "1":
            say("as root, Claude Code refuses --dangerously-skip-permissions unless IS_SANDBOX=1 is set "
                "(in a sandbox or container); every phase would fail at once", "warn")
    say(f"project {cfg.project}", "head")
    say(f"agent: {' '.join(cfg.agent_cmd)}")
    say("phases: " + ", ".join(f"{p.name} ({p.trigger})" for p in cfg.phases))
    say(f"stuck after {cfg.stale_after:g}s without a heartbeat (checked every {cfg.check_interval:g}s); "
        f"runtime cap {cfg.max_runtime:g}s; breaker {state.state}, warns at {cfg.cb_warning}, "
        f"stops at {cfg.cb_stop}")
    step.event("loop_start", project=str(cfg.project), pid=loop_pid, agent=list(cfg.agent_cmd),
               phases=[p.name for p in cfg.phases])


def hook_installed(project: Path) -> bool:
    return any("PostToolUse" in installed_events(settings_path(scope, project))
               for scope in ("user", "project", "local"))


def _read_flag(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(64).strip().lower()
    except OSError:
        return None


def plan(step: Step, iteration: int) -> list[Phase]:
    due = []
    for phase in step.cfg.phases:
        run, why = should_run(phase, iteration, step.cfg.project)
        if run:
            due.append(phase)
        else:
            step.say(f"{phase.name}: skipped this iteration ({why})", "info")
    return due


def reap(step: Step, when: str, dry_run: bool = False) -> ReapPlan:
    """Kill this loop's leftovers; report ports held by anything else."""
    cfg = step.cfg
    found = plan_reap(cfg.project, step.run_id, cfg.reap_scope, cfg.reap_patterns, cfg.reap_ports)
    for port in found.foreign_ports:
        owner = f"pid {port.pid} ({port.cmdline[:80]})" if port.pid else port.cmdline
        step.say(f"port {port.port} is held by {owner}, which is not this loop's: left alone", "warn")
    if dry_run:
        return found
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
    """Reap, run the agent under watch, reap, auto-commit; returns the phase's exit code."""
    cfg, lay, say = step.cfg, step.layout, step.say
    hb = lay.heartbeat_file(phase.name)
    private_dir(hb.parent)
    try:
        os.unlink(hb)  # a heartbeat from an earlier run must not count for this one
    except FileNotFoundError:
        pass
    reap(step, "before " + phase.name)
    log = lay.agent_log(iteration, phase.name)
    env = {**os.environ, **markers_for(cfg.project, step.run_id), "GENESIS_AGENT": phase.name,
           "GENESIS_HEARTBEAT_FILE": str(hb), "GENESIS_ITERATION": str(iteration)}
    argv = cfg.agent_cmd + (phase.prompt_file.read_text(encoding="utf-8"),)
    say(f"{phase.name}: agent started (log {step.rel(log)})", "head")
    step.event("phase_start", iteration=iteration, phase=phase.name, log=str(log))
    outcome = supervise(AgentRun(argv, cfg.project, env, log, hb, step.run_id),
                        Limits(cfg.check_interval, cfg.stale_after, cfg.max_runtime, cfg.kill_grace,
                               cfg.count_output),
                        note=lambda msg: say(f"{phase.name}: {msg}", "warn"))
    took = f"{outcome.duration:.0f}s"
    if outcome.status == "exited" and outcome.returncode == 0:
        say(f"{phase.name}: finished in {took}", "ok")
    elif outcome.status == "exited":
        say(f"{phase.name}: agent exited with status {outcome.returncode} after {took} "
            f"(see {step.rel(log)})", "warn")
    elif outcome.status == "not_started":
        say(f"{phase.name}: {outcome.detail}; install it or set GENESIS_AGENT_CMD", "error")
    else:
        kill = outcome.kill
        killed = (f"; killed {kill.targets} process(es), {kill.killed} with SIGKILL" if kill else "")
        label = {"stale": "stuck", "overtime": "over time", "interrupted": "interrupted"}[outcome.status]
        say(f"{phase.name}: {label}: {outcome.detail}{killed}", "error" if label != "interrupted" else "warn")
        if outcome.status != "interrupted":
            for line in tail(log):
                say(f"  | {line}", "info")
    step.event("phase_end", iteration=iteration, phase=phase.name, pid=outcome.pid, status=outcome.status,
               returncode=outcome.returncode, duration=round(outcome.duration, 2),
               killed=(outcome.kill.targets if outcome.kill else 0),
               sigkilled=(outcome.kill.killed if outcome.kill else 0), detail=outcome.detail)
    reap(step, "after " + phase.name)
    if cfg.auto_commit and outcome.status not in ("interrupted", "not_started"):
        result = commit(cfg.project, f"genesis: {phase.name}, iteration {iteration}", lay.ignored(),
                        cfg.auto_push)
        if result.committed:
            say(f"{phase.name}: committed {result.sha}" + (" and pushed" if result.pushed else ""), "info")
        if result.error:
            say(f"{phase.name}: {result.error}", "warn")
    return outcome.exit_code


def iteration_start(step: Step, iteration: int) -> None:
    fp = fingerprint(step.cfg.project, step.layout.ignored())
    write_json(step.layout.baseline_file, {"iteration": iteration, "run_id": step.run_id, **fp.to_json()})
    step.say(f"--- iteration {iteration} ---", "head")
    step.event("iteration_start", iteration=iteration)


def iteration_finish(step: Step, iteration: int) -> int:
    """Measure progress, move the breaker; BREAKER_OPEN tells the loop to stop."""
    cfg, lay = step.cfg, step.layout
    now_fp = fingerprint(cfg.project, lay.ignored())
    try:
        base = Fingerprint.from_json(read_json(lay.baseline_file))
    except CorruptFile:
        base = None
    if base is None:
        step.say("no usable baseline for this iteration; counting it as progress", "warn")
    progressed = base is None or base != now_fp
    how = ("" if not progressed or base is None else
           "new commits" if base.head != now_fp.head else "uncommitted changes")
    state, warning = breaker.BreakerStore(lay.breaker_file).update(
        lambda s: breaker.record(s, iteration, progressed, time.time(), cfg.cb_warning, cfg.cb_stop,
                                 now_fp.to_json()))
    if warning:
        step.say(warning, "warn")
    step.event("iteration_end", iteration=iteration, progress=progressed, breaker=state.state,
               no_progress=state.no_progress_count)
    if progressed:
        step.say(f"iteration {iteration}: progress ({how}); breaker {state.state}", "ok")
        return exitcodes.OK
    count = f"{state.no_progress_count} iteration(s) in a row without progress"
    if state.state == breaker.OPEN:
        step.say(f"iteration {iteration}: no progress; breaker OPEN after {count}: stopping the loop. "
                 f"Reset with `genesis breaker reset` or make a change and restart", "error")
        return exitcodes.BREAKER_OPEN
    if state.state == breaker.HALF_OPEN:
        step.say(f"iteration {iteration}: no progress; breaker HALF_OPEN ({count}; stops at "
                 f"{cfg.cb_stop})", "warn")
    else:
        step.say(f"iteration {iteration}: no progress ({count}); breaker {state.state}", "info")
    return exitcodes.OK


def finish(step: Step, reason: str, code: int) -> None:
    """On any stop: reap what is left, release the lock, record and print a summary."""
    reap(step, "at stop")
    release(step.layout.loop_lock, step.run_id)
    step.event("loop_end", reason=reason, exit_code=code)
    for line in summary_lines(step.layout, step.run_id):
        step.say(line, "head" if line.startswith("summary") else "info")


def summary_lines(layout: Layout, run_id: str | None) -> list[str]:
    """What a run did, from the events log: the morning report."""
    evs = events.read_events(layout.events_file, run_id)
    if not evs:
        return ["no Genesis run recorded in " + str(layout.events_file)]
    start = evs[0]
    ends = [e for e in evs if e["event"] == "phase_end"]
    iterations = {e.get("iteration") for e in evs if e["event"] == "iteration_start"}
    by_status: dict[str, int] = {}
    for e in ends:
        by_status[e.get("status", "?")] = by_status.get(e.get("status", "?"), 0) + 1
    reaped = sum(len(e.get("pids", [])) for e in evs if e["event"] == "reap")
    killed = sum(e.get("killed", 0) for e in ends)
    loop_end = next((e for e in reversed(evs) if e["event"] == "loop_end"), None)
    breakers = [e for e in evs if e["event"] == "iteration_end"]
    lines = [f"summary of run {start['run_id']} (started {start['at']})",
             f"  iterations: {len(iterations)}; phases run: {len(ends)} "
             f"({', '.join(f'{n} {s}' for s, n in sorted(by_status.items())) or 'none'})",
             f"  stuck or over-time agents killed: {by_status.get('stale', 0) + by_status.get('overtime', 0)} "
             f"({killed} processes); leftovers reaped: {reaped}"]
    if breakers:
        last = breakers[-1]
        lines.append(f"  breaker: {last.get('breaker')} ({last.get('no_progress')} iteration(s) without "
                     f"progress at the end)")
    for e in ends:
        if e.get("status") in ("stale", "overtime"):
            lines.append(f"  iteration {e.get('iteration')} {e.get('phase')}: {e.get('status')}: {e.get('detail')}")
    if loop_end:
        lines.append(f"  stopped: {loop_end.get('reason')} (exit {loop_end.get('exit_code')})")
    lines.append(f"  logs: {layout.log_dir}")
    return lines
