"""The loop's steps, one function per `genesis` subcommand the shell loop calls."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import breaker, events, exitcodes, report
from .atomicio import CorruptFile, read_bytes, read_json, write_json, write_text
from .autocommit import commit, user_changes
from .hookcheck import self_test
from .config import Config, read_prompt
from .layout import Layout, ensure_git_excludes, private_dir
from .looplock import Locked, acquire, release
from .phases import Phase, should_run
from .progress import Fingerprint, fingerprint, open_repo
from .reaper import ReapPlan, execute, markers_for, plan_reap
from .supervisor import AgentRun, Limits, Outcome, prompt_problem, supervise, tail

__all__ = ["Step", "StepFailed", "layout_for", "preflight", "run_phase", "reap", "iteration_start",
           "iteration_finish", "finish", "agent_problem"]

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


def preflight(step: Step, loop_pid: int, allow_dirty: bool = False) -> None:
    """Everything checked before the first agent runs; StepFailed says why not."""
    cfg, lay, say = step.cfg, step.layout, step.say
    open_repo(cfg.project)
    problem = agent_problem(cfg) or _prompt_problem(cfg)
    if problem:
        raise StepFailed(exitcodes.USAGE, problem)
    private_dir(lay.state_dir)
    lay.run_dir(step.run_id).mkdir(parents=True, exist_ok=True)
    ensure_git_excludes(lay)
    _check_user_changes(step, allow_dirty)
    try:
        acquire(lay.loop_lock, loop_pid, step.run_id)
    except Locked as exc:
        raise StepFailed(exitcodes.LOCKED, str(exc)) from None
    _check_hook(step)
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
    if is_claude(cfg):
        if "--bare" in cfg.agent_cmd:
            say("claude --bare skips the settings hooks, so no heartbeat will arrive; drop --bare", "warn")
        if os.geteuid() == 0 and "--dangerously-skip-permissions" in cfg.agent_cmd \
                and os.environ.get("IS_SANDBOX") != "1":
            say("as root, Claude Code refuses --dangerously-skip-permissions unless IS_SANDBOX=1 is set "
                "(in a sandbox or container); every phase would fail at once", "warn")
    say(f"project {cfg.project} (run {step.run_id})", "head")
    say(f"agent: {' '.join(cfg.agent_cmd)}")
    say("phases: " + ", ".join(f"{p.name} ({p.trigger})" for p in cfg.phases))
    say(f"stuck after {cfg.stale_after:g}s without a heartbeat (checked every {cfg.check_interval:g}s); "
        f"runtime cap {cfg.max_runtime:g}s; breaker {state.state}, warns at {cfg.cb_warning}, "
        f"stops at {cfg.cb_stop}")
    say(f"logs: {step.rel(lay.run_dir(step.run_id))}")
    step.event("loop_start", project=str(cfg.project), pid=loop_pid, agent=list(cfg.agent_cmd),
               phases=[p.name for p in cfg.phases])


def agent_problem(cfg: Config) -> str | None:
    """Why the agent command cannot run at all (not found, not executable), or None.

    A relative path with a slash is found from the project, where the agent starts.
    """
    program = cfg.agent_cmd[0]
    fix = "install it, or set GENESIS_AGENT_CMD (or --agent-cmd) to the agent's command line"
    if "/" in program:
        path = Path(program) if Path(program).is_absolute() else cfg.project / program
        if not path.is_file():
            return f"the agent command {program!r} does not exist ({path}); {fix}"
        if not os.access(path, os.X_OK):
            return f"the agent command {program!r} is not executable; run: chmod +x {path}"
        return None
    if shutil.which(program) is None:
        return f"the agent command {program!r} is not found on PATH; {fix}"
    return None


def reads_prompt_from_stdin(cfg: Config) -> bool:
    """`claude -p` takes its prompt on stdin when none is given: the way for a huge prompt."""
    return is_claude(cfg)


def _prompt_problem(cfg: Config) -> str | None:
    for phase in cfg.phases:
        problem = prompt_problem(cfg.agent_cmd, read_prompt(phase.prompt_file), os.environ,
                                 reads_prompt_from_stdin(cfg))
        if problem:
            return f"{phase.name}'s prompt ({phase.prompt_file}): {problem}"
    return None


def _check_user_changes(step: Step, allow_dirty: bool) -> None:
    """Never commit the user's work as the agent's.

    Changed tracked files refuse the start (the agent would work on top of them and
    auto-commit would take them); with --allow-dirty they are committed first, on their
    own, labelled as the user's. Untracked files are left out of every auto-commit.
    """
    lay = step.layout
    try:
        found = user_changes(step.cfg.project)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        raise StepFailed(exitcodes.USAGE, f"cannot tell whether the project has uncommitted work ({exc}); "
                         f"check `git status` there") from None
    if found.changed:
        listing = _listing(found.changed)
        if not allow_dirty:
            raise StepFailed(exitcodes.USAGE,
                             f"the project has uncommitted changes of yours: {listing}. Auto-commit would "
                             f"take them as the agent's work. Commit or stash them first, or start with "
                             f"--allow-dirty to have Genesis commit them now, separately, as yours")
        result = commit(step.cfg.project, f"Uncommitted changes present before Genesis run {step.run_id} "
                        f"(committed on the user's behalf by --allow-dirty)", lay.ignored(), push=False,
                        keep_out=list(found.untracked), tracked_only=True)
        if result.error or not result.committed:
            raise StepFailed(exitcodes.USAGE, f"--allow-dirty: could not commit your changes "
                             f"({result.error or 'nothing was staged'}); commit or stash them yourself")
        step.say(f"--allow-dirty: committed your uncommitted changes on their own as {result.sha} "
                 f"({listing}); the agents' commits come after it", "warn")
        step.event("user_changes_committed", sha=result.sha, paths=list(found.changed[:100]))
    write_json(lay.user_files, list(found.untracked))
    if found.untracked:
        step.say(f"{len(found.untracked)} untracked file(s) of yours are left out of every auto-commit: "
                 f"{_listing(found.untracked)}", "info")


def _listing(paths: tuple[str, ...], most: int = 10) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _user_files(lay: Layout) -> list[str]:
    try:
        data = read_json(lay.user_files, limit=16 << 20)
    except CorruptFile:
        return []
    return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []


def _check_hook(step: Step) -> None:
    """Run the hook as Claude Code would, with the loop's environment, and see that a
    heartbeat lands where the watcher will look. Without one, a healthy Claude Code looks
    stuck all night: refuse. Other agents may not use Claude Code's hooks: warn."""
    cfg = step.cfg
    phase = cfg.phases[0]
    heartbeat = step.layout.heartbeat_file(phase.name)
    private_dir(heartbeat.parent)
    check = self_test(cfg.project, agent_env(step, phase.name, 0), heartbeat)
    if check.ok:
        step.say(f"heartbeat hook: working ({check.scope} settings, {check.path})", "ok")
        return
    if is_claude(cfg):
        release(step.layout.loop_lock, step.run_id)
        raise StepFailed(exitcodes.USAGE, f"the heartbeat hook does not work ({check.state}): {check.detail}. "
                         f"Without it every Claude Code agent looks stuck; fix it, then check with "
                         f"`genesis hook status`")
    step.say(f"no working heartbeat hook ({check.state}): {check.detail}. The agent's output still counts "
             f"as a sign of life", "warn")


def is_claude(cfg: Config) -> bool:
    return Path(cfg.agent_cmd[0]).name == "claude"


def agent_env(step: Step, phase: str, iteration: int) -> dict[str, str]:
    """The environment of a phase's agent: the caller's, the loop's markers and where to beat."""
    return {**os.environ, **markers_for(step.cfg.project, step.run_id), "GENESIS_AGENT": phase,
            "GENESIS_HEARTBEAT_FILE": str(step.layout.heartbeat_file(phase)), "GENESIS_ITERATION": str(iteration)}


def _read_flag(path: Path) -> str | None:
    try:
        return read_bytes(path, 64).decode("utf-8", "replace").strip().lower()
    except (CorruptFile, OSError):  # missing, too large, a FIFO or a symlink: not a "false"
        return None


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
    """If the phase's trigger says so now: reap, run the agent under watch, reap, auto-commit.

    The trigger is checked here, just before the phase, so that it sees what the phases
    before it in this iteration did. Returns the phase's exit code.
    """
    cfg, lay, say = step.cfg, step.layout, step.say
    due, why = should_run(phase, iteration, cfg.project)
    if not due:
        say(f"{phase.name}: skipped ({why})", "info")
        step.event("phase_skip", iteration=iteration, phase=phase.name, why=why)
        return exitcodes.PHASE_SKIPPED
    hb = lay.heartbeat_file(phase.name)
    private_dir(hb.parent)
    try:
        os.unlink(hb)  # a heartbeat from an earlier run must not count for this one
    except FileNotFoundError:
        pass
    reap(step, "before " + phase.name)
    log = lay.agent_log(step.run_id, iteration, phase.name)
    env = agent_env(step, phase.name, iteration)
    prompt = read_prompt(phase.prompt_file)
    say(f"{phase.name}: agent started (log {step.rel(log)})", "head")
    step.event("phase_start", iteration=iteration, phase=phase.name, log=str(log))
    outcome = supervise(AgentRun(cfg.agent_cmd, cfg.project, env, log, hb, step.run_id, prompt=prompt,
                                 prompt_stdin=reads_prompt_from_stdin(cfg)),
                        Limits(cfg.check_interval, cfg.stale_after, cfg.max_runtime, cfg.kill_grace,
                               cfg.count_output),
                        note=lambda msg: say(f"{phase.name}: {msg}", "warn"))
    detail = _describe(step, phase, outcome, log)
    step.event("phase_end", iteration=iteration, phase=phase.name, pid=outcome.pid, status=outcome.status,
               returncode=outcome.returncode, duration=round(outcome.duration, 2),
               killed=(outcome.kill.targets if outcome.kill else 0),
               sigkilled=(outcome.kill.killed if outcome.kill else 0), detail=detail)
    reap(step, "after " + phase.name)
    if cfg.auto_commit and outcome.status not in ("interrupted", "not_started"):
        result = commit(cfg.project, commit_message(phase.name, iteration, step.run_id, outcome),
                        lay.ignored(), cfg.auto_push, keep_out=_user_files(lay))
        if result.committed:
            say(f"{phase.name}: committed {result.sha}" + (" and pushed" if result.pushed else ""), "info")
        if result.error:
            say(f"{phase.name}: {result.error}", "warn")
    return outcome.exit_code


def _describe(step: Step, phase: Phase, outcome: Outcome, log: Path) -> str:
    """Say how the phase ended; return the reason the events log and the report keep."""
    say, took = step.say, f"{outcome.duration:.0f}s"
    if outcome.status == "exited" and outcome.returncode == 0:
        say(f"{phase.name}: finished in {took}", "ok")
        return "finished"
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
    label = report.LABELS.get(outcome.status, outcome.status)
    say(f"{phase.name}: {label}: {outcome.detail}{killed}", "error" if outcome.status != "interrupted" else "warn")
    if outcome.status != "interrupted":
        for line in tail(log):
            say(f"  | {line}", "info")
    return outcome.detail


def commit_message(phase: str, iteration: int, run_id: str, outcome: Outcome) -> str:
    """Names the run and how the phase ended; work of an agent that did not finish is partial."""
    if outcome.status == "exited" and outcome.returncode == 0:
        how = "finished"
    elif outcome.status == "exited":
        how = f"ended: exit {outcome.returncode}; partial work"
    else:
        how = f"ended: {report.LABELS.get(outcome.status, outcome.status)}, killed; partial work"
    return f"genesis: {phase}, iteration {iteration} ({how}) [run {run_id}]"


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
    for line in report.summary_lines(step.layout, step.run_id):
        step.say(line, "head" if line.startswith("run ") else "info")
