"""Before the first agent runs: everything that can be known to fail is refused, with what to do.

The agent command and its prompts, the heartbeat hook (run as Claude Code would run it),
the repository's state (an operation in progress, a detached HEAD), the user's uncommitted
work (told from what Genesis's last run left), the one-loop-per-project lock, the breaker;
and the settings the run will keep all night are snapshotted here.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path
from typing import Mapping

from genesis import exitcodes
from genesis.agents import adapter_of
from genesis.agents.generic import NO_HOOK, says_no_hook
from genesis.agents.hook.removal import clear_removal
from genesis.alerts.channels import banner, configured
from genesis.config import CONFIG_FILE, Config, advice, read_prompt, snapshot
from genesis.hints import hint
from genesis.loop import breaker
from genesis.loop.guard import breaker_store, config_digest, mirror_breaker, record_hook
from genesis.loop.keptout import note_left_out, rules_of
from genesis.loop.safekeeping import keep_at_start
from genesis.loop.sandboxing import announce, box_for
from genesis.loop.step import Step, StepFailed, agent_env, is_claude, reads_prompt_from_stdin
from genesis.loop.stopflag import read_flag
from genesis.procs.markers import markers_for
from genesis.repo import gitenv
from genesis.repo.autocommit import commit, user_changes
from genesis.repo.gitcmd import GitFailed
from genesis.repo.ownership import Leftovers, leftovers_in, recall
from genesis.repo.progress import fingerprint
from genesis.repo.signing import probe, save, signing_file, unsigned_for
from genesis.repo.state import OPERATION_NAMES, repo_state, way_out
from genesis.repo.worktree import open_repo
from genesis.store.atomicio import write_json, write_text
from genesis.store.layout import ensure_git_excludes, heal_dir
from genesis.store.looplock import Locked, acquire, release
from genesis.trust import approve, judge
from genesis.watch.cmdline import prompt_problem
from genesis.words import duration

__all__ = ["preflight", "agent_problem", "root_problem", "skipped_permissions", "BYPASS_FLAGS"]

SNAPSHOT_PROMPTS_MAX = 256 << 10  # characters of prompts the settings snapshot also keeps

# Claude Code's flags that skip its permission checks, which it refuses as root outside a sandbox.
BYPASS_FLAGS = ("--dangerously-skip-permissions", "--allow-dangerously-skip-permissions")


def preflight(step: Step, loop_pid: int, lock_fd: int, allow_dirty: bool = False,
              allow_detached: bool = False, trust: bool = False) -> None:
    """Everything checked before the first agent runs; StepFailed says why not."""
    cfg, lay, say = step.cfg, step.layout, step.say
    open_repo(cfg.project)
    problem = agent_problem(cfg) or root_problem(cfg) or _options_problem(cfg) or _prompt_problem(cfg)
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
        acquire(lay.loop_lock, lay.loop_record, lock_fd, loop_pid, step.run_id, project=cfg.project)
    except Locked as exc:
        raise StepFailed(exitcodes.LOCKED, str(exc)) from None
    try:
        _check_commands(step, trust)
        _record_git(step)
        _check_signing(step)
        _check_repo_state(step, allow_detached)
        _check_user_changes(step, allow_dirty)
        keep_at_start(step)
        _snapshot(step)
        _check_hook(step)
        # A named box that cannot run refuses the start (exit 29), before any agent runs.
        box = box_for(step, adapter_of(cfg).command(cfg.agent_cmd), agent_env(step, cfg.phases[0].name, 1))
        state = _start_breaker(step)
    except BaseException:
        release(lay.loop_record, step.run_id)
        raise
    if read_flag(lay.stop_flag) == "false":
        write_text(lay.stop_flag, "true\n")
        say(f"stop flag {step.rel(lay.stop_flag)} said false (an earlier stop); set it back to true")
    if is_claude(cfg) and "--bare" in cfg.agent_cmd:
        say("claude --bare skips the settings hooks, so no heartbeat will arrive; drop --bare", "warn")
    for doubt in advice(cfg, os.environ):
        say(doubt, "warn")
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
    say(banner(configured(cfg.alerts, os.environ), hint(cfg.project, "alert", "test")))
    announce(step, box)
    step.event("loop_start", project=str(cfg.project), pid=loop_pid, agent=list(cfg.agent_cmd),
               phases=[p.name for p in cfg.phases])


def _check_commands(step: Step, trust: bool) -> None:
    """A command genesis.conf names runs only with the user's word (see genesis.trust): one
    that is new or changed since the last start refuses it, shown as written, unless --trust."""
    cfg, say = step.cfg, step.say
    verdict = judge(cfg.settings, step.layout.state_dir)
    if verdict.kept_aside:
        say(f"the record of approved commands was unreadable and is kept aside as {verdict.kept_aside}; "
            f"every command in {CONFIG_FILE} needs approval again", "warn")
    if verdict.unapproved and not trust:
        shown = "; ".join(f"{c.shown()} ({c.state} since the last approved start)" for c in verdict.unapproved)
        raise StepFailed(exitcodes.UNTRUSTED_COMMAND,
                         f"{CONFIG_FILE} names commands you have not approved: {shown}. Genesis runs no command "
                         f"that file names until you do, since an agent can write it. If they are yours, approve "
                         f"them with `{hint(cfg.project, 'config', 'trust')}` or start the loop with --trust; if "
                         f"not, remove them from {CONFIG_FILE}")
    if verdict.first_use and verdict.commands:
        say(f"first start here: the commands {CONFIG_FILE} names are trusted as they are now (trust on first "
            f"use): {'; '.join(c.shown() for c in verdict.commands)}. From now on a new or changed one "
            f"refuses the start until you approve it (`{hint(cfg.project, 'config', 'trust')}` or --trust)",
            "info")
    elif verdict.unapproved:
        say(f"--trust: approved {'; '.join(c.shown() for c in verdict.unapproved)}", "warn")
    approve(verdict.commands, step.layout.state_dir)


def _record_git(step: Step) -> None:
    """The user's git settings as the night starts: Genesis's git takes them from here (gitenv)."""
    settings = gitenv.record(step.cfg.project)
    gitenv.save(gitenv.settings_file(step.layout.state_dir), step.run_id, settings)
    if gitenv.lfs_line(settings):
        step.say(gitenv.lfs_line(settings), "info")


def _check_signing(step: Step) -> None:
    """Signing that would wait on a prompt is found now, once and bounded, not at every commit."""
    signing = probe(step.cfg.project)
    save(signing_file(step.layout.state_dir), step.run_id, signing)
    if signing.unsigned:
        step.say(f"{signing.unsigned}: Genesis's own commits are made unsigned (commit.gpgsign=false for them "
                 f"alone), each with a trailer 'Genesis-Unsigned: ...' saying why; sign them later if you must "
                 f"(git rebase --exec 'git commit --amend --no-edit -S')", "warn")
        step.event("signing_off", why=signing.unsigned)
    elif signing.configured:
        step.say("commit.gpgsign is on and signing works unattended: Genesis's commits are signed", "info")


def _snapshot(step: Step) -> None:
    """Keep the settings and prompts the run starts with: edits during the night wait for
    the next start, so an agent cannot loosen its own supervision."""
    cfg, lay = step.cfg, step.layout
    settings = snapshot(cfg)
    lay.prompts_dir.mkdir(mode=0o700, exist_ok=True)
    prompts = {}  # in the snapshot too: a deleted state folder is made again from it (loop/relock.py)
    for phase in cfg.phases:
        copy = lay.prompts_dir / f"{phase.name}.md"
        prompts[copy.name] = read_prompt(phase.prompt_file)
        write_text(copy, prompts[copy.name])
        key = f"PHASE_{phase.name}_PROMPT"
        settings[key] = [str(copy), settings.get(key, ["", "default"])[1]]
    if sum(len(text) for text in prompts.values()) > SNAPSHOT_PROMPTS_MAX:
        prompts = {}  # the snapshot stays well under what a state file may be; the copies are the prompts
    write_json(lay.config_snapshot, {"run_id": step.run_id, "settings": settings, "prompts": prompts,
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
                             f"reset it: {hint(cfg.project, 'breaker', 'reset')} (or rm {lay.breaker_file})")
    breaker_store(lay).update(lambda _old: state)
    mirror_breaker(lay, state)
    return state


def agent_problem(cfg: Config) -> str | None:
    """Why the agent command cannot run at all (not found, not executable), or None.

    A relative path with a slash is found from the project, where the agent starts.
    """
    program = cfg.agent_cmd[0]
    fix = (f"install it, or set GENESIS_AGENT_CMD (or --agent-cmd) to the agent's command line "
           f"(`{hint(cfg.project, 'doctor')}` checks all the loop needs)")
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


def skipped_permissions(argv: tuple[str, ...]) -> str | None:
    """The flag of a Claude Code command that skips its permission checks, or None."""
    for i, arg in enumerate(argv):
        if arg in BYPASS_FLAGS or arg == "--permission-mode=bypassPermissions":
            return arg
        if arg == "--permission-mode" and argv[i + 1:i + 2] == ("bypassPermissions",):
            return "--permission-mode bypassPermissions"
    return None


def root_problem(cfg: Config, euid: int | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """Why the loop cannot start as it is configured, or None: Claude Code run as root refuses to
    skip its permission checks unless IS_SANDBOX=1, so every phase would fail in a second."""
    euid = os.geteuid() if euid is None else euid
    env = os.environ if env is None else env
    if euid != 0 or env.get("IS_SANDBOX") == "1":
        return None
    for argv in (cfg.agent_cmd, cfg.fallback_agent_cmd):
        flag = skipped_permissions(argv) if argv and adapter_of(cfg, argv).name == "claude" else None
        if flag:
            now = f" (it is {env['IS_SANDBOX']!r}; only 1 counts)" if "IS_SANDBOX" in env else ""
            return (f"running as root, and Claude Code refuses {flag} as root unless IS_SANDBOX=1 is set{now}: "
                    f"every phase would fail at once. Run the loop as another user, or, only in a sandbox or "
                    f"container, run `export IS_SANDBOX=1` and start the loop again")
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


def _check_repo_state(step: Step, allow_detached: bool) -> None:
    """Never start inside a half-done merge, rebase, cherry-pick, revert, bisect or `git am`
    (the night's commits would land in it), nor on a detached HEAD unless asked to."""
    project = step.cfg.project
    try:
        state = repo_state(project)
    except GitFailed as exc:
        raise StepFailed(exitcodes.USAGE, f"cannot tell the repository's state ({exc}); check `git status` "
                         f"there") from None
    if state.operations:
        what = " and ".join(OPERATION_NAMES[op] for op in state.operations)
        ways = "; ".join(f"{op}: {way_out(op, project)}" for op in state.operations)
        raise StepFailed(exitcodes.USAGE,
                         f"{what} {'is' if len(state.operations) == 1 else 'are'} in progress in {project}: the "
                         f"night's commits would land in the middle of it. Finish it or give it up first ({ways}), "
                         f"then start again (--allow-dirty does not change this)")
    if not state.detached:
        return
    where = f"at {state.head}" if state.head else "at no commit"
    keep = f"git -C {shlex.quote(str(project))} switch -c genesis-night"
    if not allow_detached:
        raise StepFailed(exitcodes.USAGE,
                         f"HEAD is detached ({where}, on no branch): the night's commits would belong to no branch "
                         f"and be easy to lose. Put it on a branch first ({keep}, or `git switch` to an existing "
                         f"one), or start with --allow-detached to commit on the detached HEAD anyway")
    step.say(f"HEAD is detached ({where}, on no branch) and --allow-detached was given: the night's commits "
             f"belong to no branch; keep them afterwards with {keep}", "warn")
    step.event("detached_head", head=state.head)


def _check_user_changes(step: Step, allow_dirty: bool) -> None:
    """Never commit the user's work as the agent's, nor the agent's as the user's.

    A change that is exactly what Genesis's last run left uncommitted (its record) is the
    agent's: committed now as that run's work (unless auto-commit is off). Files with
    unresolved conflicts refuse the start, whatever the flags. Other changed tracked files
    refuse it too (the agent would work on top of them and auto-commit would take them);
    with --allow-dirty they are committed first, on their own, labelled as the user's.
    The user's untracked files are left out of every auto-commit. A refusal changes nothing.
    """
    cfg, lay = step.cfg, step.layout
    markers = markers_for(cfg.project, step.run_id)
    try:
        found = user_changes(cfg.project, markers=markers)
        earlier = recall(lay.leftovers_file)
        agents = leftovers_in(earlier, cfg.project, found.changed + found.untracked) if earlier else ()
    except RuntimeError as exc:
        raise StepFailed(exitcodes.USAGE, f"cannot tell whether the project has uncommitted work ({exc}); "
                         f"check `git status` there") from None
    if found.unmerged:
        raise StepFailed(exitcodes.USAGE,
                         f"the project has files with unresolved conflicts: {_listing(found.unmerged)}. Committing "
                         f"them would record the conflict markers, so Genesis never does, even with --allow-dirty. "
                         f"Resolve them and `git add` them (`git -C {shlex.quote(str(cfg.project))} status` lists "
                         f"them), then start again")
    left = set(agents)
    changed = tuple(p for p in found.changed if p not in left)
    untracked = tuple(p for p in found.untracked if p not in left)
    if changed and not allow_dirty:
        also = (f" ({len(agents)} other uncommitted file(s) are the agent's work left by Genesis run "
                f"{earlier.run_id}, not yours: they are not in the way)") if agents else ""
        raise StepFailed(exitcodes.USAGE,
                         f"the project has uncommitted changes of yours: {_listing(changed)}{also}. Auto-commit "
                         f"would take them as the agent's work. Commit or stash them first, or start with "
                         f"--allow-dirty to have Genesis commit them now, separately, as yours")
    if agents:
        _adopt_leftovers(step, earlier, agents)
    if changed:
        result = commit(cfg.project, f"Uncommitted changes present before Genesis run {step.run_id} "
                        f"(committed on the user's behalf by --allow-dirty)", lay.ignored(), push=False,
                        only=changed, markers=markers, run_hooks=cfg.git_hooks, rules=rules_of(cfg),
                        unsigned=unsigned_for(cfg.project, lay.state_dir, step.run_id))
        note_left_out(step, result, "--allow-dirty")
        if result.error or not (result.committed or result.left_out):
            raise StepFailed(exitcodes.USAGE, f"--allow-dirty: could not commit your changes "
                             f"({result.error or 'nothing was staged'}); commit or stash them yourself")
    if changed and result.committed:
        step.say(f"--allow-dirty: committed your uncommitted changes on their own as {result.sha} "
                 f"({_listing(changed)}); the agents' commits come after it", "warn")
        step.event("user_changes_committed", sha=result.sha, paths=list(changed[:100]))
    write_json(lay.user_files, list(untracked))
    if untracked:
        step.say(f"{len(untracked)} untracked file(s) of yours are left out of every auto-commit: "
                 f"{_listing(untracked)}", "info")


def _adopt_leftovers(step: Step, earlier: Leftovers, paths: tuple[str, ...]) -> None:
    """The agent's work an earlier run left uncommitted, committed as that run's (or left to
    the first auto-commit), never as the user's."""
    cfg, lay = step.cfg, step.layout
    listing = _listing(paths)
    whose = f"the agent's work that Genesis run {earlier.run_id} left uncommitted ({earlier.when or 'at its end'})"
    if not cfg.auto_commit:
        step.say(f"{len(paths)} uncommitted file(s) are {whose}, not yours: {listing}; AUTO_COMMIT is off, so "
                 f"they stay uncommitted", "info")
        return
    result = commit(cfg.project, f"genesis: work left uncommitted by run {earlier.run_id} "
                    f"({earlier.when or 'at its end'}) [run {step.run_id}]", lay.ignored(), push=False,
                    only=paths, markers=markers_for(cfg.project, step.run_id), run_hooks=cfg.git_hooks,
                    rules=rules_of(cfg), unsigned=unsigned_for(cfg.project, lay.state_dir, step.run_id))
    note_left_out(step, result, f"the work Genesis run {earlier.run_id} left uncommitted")
    if result.committed:
        step.say(f"committed {whose} as {result.sha}: {listing}", "info")
        step.event("leftovers_committed", sha=result.sha, run=earlier.run_id, paths=list(paths[:100]))
    else:
        step.say(f"{len(paths)} uncommitted file(s) are {whose}: {listing}; they could not be committed now "
                 f"({result.error or 'nothing was staged'}), so the first auto-commit takes them", "warn")


def _listing(paths: tuple[str, ...], most: int = 10) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _check_hook(step: Step) -> None:
    """Run the hook as the agent's CLI would, with the loop's environment, and see that a
    heartbeat lands where the watcher will look. Without one, a healthy agent looks stuck
    all night: refuse. A CLI without hooks: its output and processes are its signs of life."""

    cfg = step.cfg
    phase = cfg.phases[0]
    heartbeat = step.layout.heartbeat_file(phase.name)
    clear_removal(step.layout.hook_removal)  # an earlier run's: this run checks the hook for itself
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
    if says_no_hook(adapter, check):
        step.say(NO_HOOK, "info")
        return
    if adapter.hook_required:
        raise StepFailed(exitcodes.USAGE, f"the heartbeat hook does not work ({check.state}): {check.detail}. "
                         f"Without it every {adapter.name} agent looks stuck; fix it, then check with "
                         f"`{hint(cfg.project, 'hook', 'status', '--agent', adapter.name)}`")
    step.say(f"no working heartbeat hook ({check.state}): {check.detail}. The agent's output still counts "
             f"as a sign of life", "warn")
