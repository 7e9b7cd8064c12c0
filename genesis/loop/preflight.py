"""Before the first agent runs: everything that can be known to fail is refused, with what to do.

The agent command and its prompts, the heartbeat hook (run as Claude Code would run it),
the user's uncommitted work, the one-loop-per-project lock, the breaker; and the settings
the run will keep all night are snapshotted here.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

from genesis import exitcodes
from genesis.agents import adapter_of
from genesis.config import Config, read_prompt, snapshot
from genesis.loop import breaker
from genesis.loop.guard import breaker_store, config_digest, mirror_breaker, record_hook
from genesis.loop.step import Step, StepFailed, agent_env, is_claude, reads_prompt_from_stdin
from genesis.procs.markers import markers_for
from genesis.repo.autocommit import commit, user_changes
from genesis.repo.progress import fingerprint
from genesis.repo.worktree import open_repo
from genesis.store.atomicio import CorruptFile, read_bytes, write_json, write_text
from genesis.store.layout import ensure_git_excludes, heal_dir
from genesis.store.looplock import Locked, acquire, release
from genesis.watch.cmdline import prompt_problem
from genesis.words import duration

__all__ = ["preflight", "agent_problem"]


def preflight(step: Step, loop_pid: int, lock_fd: int, allow_dirty: bool = False) -> None:
    """Everything checked before the first agent runs; StepFailed says why not."""
    cfg, lay, say = step.cfg, step.layout, step.say
    open_repo(cfg.project)
    problem = agent_problem(cfg) or _options_problem(cfg) or _prompt_problem(cfg)
    if problem:
        raise StepFailed(exitcodes.USAGE, problem)
    for folder in (lay.state_dir, lay.heartbeat_dir):
        fixed = heal_dir(folder)
        if fixed and "recreated" not in fixed:
            say(f"repaired: {fixed}", "warn")
    lay.run_dir(step.run_id).mkdir(parents=True, exist_ok=True)
    lay.console_copy(step.run_id).parent.mkdir(mode=0o700, exist_ok=True)
    ensure_git_excludes(lay)
    try:
        acquire(lay.loop_lock, lay.loop_record, lock_fd, loop_pid, step.run_id)
    except Locked as exc:
        raise StepFailed(exitcodes.LOCKED, str(exc)) from None
    try:
        _check_user_changes(step, allow_dirty)
        _snapshot(step)
        _check_hook(step)
        state = _start_breaker(step)
    except BaseException:
        release(lay.loop_record, step.run_id)
        raise
    if read_flag(lay.stop_flag) == "false":
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

    say(f"agent: {shlex.join(adapter_of(cfg).command(cfg.agent_cmd))}")
    say("phases: " + ", ".join(f"{p.name} ({p.trigger})" for p in cfg.phases))
    say(f"stuck after {cfg.stale_after:g}s without a heartbeat (checked every {cfg.check_interval:g}s); "
        f"runtime cap {cfg.max_runtime:g}s; breaker {state.state}, warns at {cfg.cb_warning}, "
        f"stops at {cfg.cb_stop}")
    ceilings = [f"{cfg.max_run_seconds / 3600:g} h" if cfg.max_run_seconds else "",
                f"${cfg.max_cost_usd:g}" if cfg.max_cost_usd else ""]
    say(f"usage limits: wait to the reset + {cfg.limit_margin:g}s (up to {duration(cfg.max_limit_wait)}); API "
        f"outages: back off {cfg.backoff_first:g}s doubling to {cfg.backoff_max:g}s, for up to "
        f"{duration(cfg.max_outage)}; done when: {cfg.done_when}; ceilings: "
        f"{', '.join(c for c in ceilings if c) or 'none'}")
    say(f"logs: {step.rel(lay.run_dir(step.run_id))}")
    step.event("loop_start", project=str(cfg.project), pid=loop_pid, agent=list(cfg.agent_cmd),
               phases=[p.name for p in cfg.phases])


def _snapshot(step: Step) -> None:
    """Keep the settings and prompts the run starts with: edits during the night wait for
    the next start, so an agent cannot loosen its own supervision."""
    cfg, lay = step.cfg, step.layout
    settings = snapshot(cfg)
    lay.prompts_dir.mkdir(mode=0o700, exist_ok=True)
    for phase in cfg.phases:
        copy = lay.prompts_dir / f"{phase.name}.md"
        write_text(copy, read_prompt(phase.prompt_file))
        key = f"PHASE_{phase.name}_PROMPT"
        settings[key] = [str(copy), settings.get(key, ["", "default"])[1]]
    write_json(lay.config_snapshot, {"run_id": step.run_id, "settings": settings,
                                     "conf_digest": config_digest(cfg.project)})


def _start_breaker(step: Step) -> breaker.BreakerState:
    """The user's breaker file is the truth while no loop runs (deleting it resets); from now
    on the loop holds the state and the file mirrors it."""
    cfg, lay, say = step.cfg, step.layout, step.say
    state, warning = breaker.BreakerStore(lay.breaker_file, lock_path=lay.breaker_lock).load()
    if warning:
        say(warning, "warn")
    if state.state == breaker.OPEN:
        now_fp = fingerprint(cfg.project, lay.ignored()).to_json()
        if state.opened_fingerprint is not None and now_fp != state.opened_fingerprint:
            state = breaker.close(state, time.time(), "repository changed since it opened")
            say("circuit breaker was OPEN; the repository changed since then, so it is CLOSED again", "ok")
        else:
            raise StepFailed(exitcodes.BREAKER_OPEN,
                             f"circuit breaker is OPEN since {state.opened_at} ({state.no_progress_count} "
                             f"iterations without progress). Make a change in the project and restart, or "
                             f"reset it: genesis breaker reset (or rm {lay.breaker_file})")
    breaker_store(lay).update(lambda _old: state)
    mirror_breaker(lay, state)
    return state


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


def _options_problem(cfg: Config) -> str | None:
    adapter = adapter_of(cfg)
    return next((why for phase in cfg.phases if (why := adapter.options_problem(cfg.agent_cmd, phase))), None)


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
        found = user_changes(step.cfg.project, markers=markers_for(step.cfg.project, step.run_id))
    except RuntimeError as exc:
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
                        keep_out=list(found.untracked), tracked_only=True,
                        markers=markers_for(step.cfg.project, step.run_id), run_hooks=step.cfg.git_hooks)
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


def _check_hook(step: Step) -> None:
    """Run the hook as the agent's CLI would, with the loop's environment, and see that a
    heartbeat lands where the watcher will look. Without one, a healthy agent looks stuck
    all night: refuse. A CLI without hooks: its output and processes are its signs of life."""

    cfg = step.cfg
    phase = cfg.phases[0]
    heartbeat = step.layout.heartbeat_file(phase.name)
    adapter = adapter_of(cfg)
    check = adapter.hook_check(cfg.project, agent_env(step, phase.name, 0), heartbeat)
    if check is None:
        step.say(f"{adapter.name} has no per-tool-call hook: its output and its processes' activity are its "
                 f"signs of life", "info")
        return
    if check.ok:
        record_hook(step.layout, check)
        step.say(f"heartbeat hook: working ({check.scope} settings, {check.path})", "ok")
        return
    try:
        os.unlink(step.layout.hook_record)  # an earlier run's: nothing to reinstall for this one
    except FileNotFoundError:
        pass
    if adapter.hook_required:
        raise StepFailed(exitcodes.USAGE, f"the heartbeat hook does not work ({check.state}): {check.detail}. "
                         f"Without it every {adapter.name} agent looks stuck; fix it, then check with "
                         f"`genesis hook status --agent {adapter.name}`")
    step.say(f"no working heartbeat hook ({check.state}): {check.detail}. The agent's output still counts "
             f"as a sign of life", "warn")


def read_flag(path: Path) -> str | None:
    try:
        return read_bytes(path, 64).decode("utf-8", "replace").strip().lower()
    except (CorruptFile, OSError):  # missing, too large, a FIFO or a symlink: not a "false"
        return None
