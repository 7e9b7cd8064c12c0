"""Before every phase, put back what an agent broke in Genesis's own places.

An agent runs `git clean -fdx`, `rm -rf orchestrator`, `chmod -R`, or edits the config in
the middle of a night. None of that may switch its supervision off: folders are recreated
and made private again, the hook is reinstalled where Genesis found it working, the
breaker file is restored from the state the loop holds, and a config edit is reported
and waits for the next start. Every repair is said and recorded, never a refusal.

Only what vanished without the user's word is put back: the user's own `genesis hook
uninstall` (not one run by the loop's agent) is noted in the loop's state and respected;
a loop whose agent cannot be supervised without the hook then stops cleanly (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from genesis import exitcodes
from genesis.agents import adapter_named, adapter_of
from genesis.agents.base import Adapter
from genesis.agents.hook.removal import clear_removal, note_removal, removal_of, same_file
from genesis.agents.hook.settingsfile import SettingsError
from genesis.config import CONFIG_FILE, MAX_CONFIG_BYTES, ConfigError, from_snapshot, load_snapshot
from genesis.health.heartbeat import default_heartbeat_file, hook_script
from genesis.hints import hint
from genesis.loop.breaker import BreakerState, BreakerStore
from genesis.loop.step import Step, StepFailed, agent_env
from genesis.procs.markers import markers_for
from genesis.procs.proctree import descends_from
from genesis.store.atomicio import CorruptFile, check_room, read_bytes, read_json, write_json, write_text
from genesis.store.layout import Layout, heal_dir
from genesis.store.looplock import Holder, current_holder

if TYPE_CHECKING:
    from genesis.agents.claude.hookcheck import HookCheck

__all__ = ["heal", "breaker_store", "mirror_breaker", "guard_breaker", "guard_hook", "guard_config",
           "record_hook", "config_digest", "HookRemoved", "respect_removal", "forget_removal", "reinstall_hint"]


CONSOLE_MAX = 64 << 20  # a night's status lines are far fewer


def heal(step: Step, phase: str | None = None, iteration: int = 0) -> None:
    """Everything below, in order; the hook only when a phase is about to run. First the
    room to write at all: a full disk stops the loop cleanly (DiskFull, exit 6) before any
    write fails half way or a working agent is blamed for heartbeats it could not write."""
    check_room(step.layout.state_dir)
    check_room(step.layout.run_dir(step.run_id))
    heal_folders(step)
    guard_breaker(step)
    if phase is not None:
        guard_hook(step, phase, iteration)


def _repaired(step: Step, what: str) -> None:
    step.say(f"repaired: {what}", "warn")
    step.event("tamper", what=what)


def heal_folders(step: Step) -> None:
    lay = step.layout
    for folder in (lay.state_dir, lay.heartbeat_dir):
        fixed = heal_dir(folder)
        if fixed:
            _repaired(step, fixed)
    run_dir = lay.run_dir(step.run_id)
    if not run_dir.is_dir():
        run_dir.mkdir(parents=True, exist_ok=True)
        _repaired(step, f"the log folder {step.rel(run_dir)} was deleted; recreated")
    elif not os.access(run_dir, os.W_OK | os.X_OK):
        os.chmod(run_dir, 0o755)
        _repaired(step, f"the log folder {step.rel(run_dir)} was not writable; reset to 755")
    # Every status line goes to both: a console log shorter than its twin lost lines.
    console, twin = lay.console_log(step.run_id), lay.console_copy(step.run_id)
    if twin.is_file() and not twin.is_symlink() and _size(console) < _size(twin) <= CONSOLE_MAX:
        write_text(console, read_bytes(twin, CONSOLE_MAX).decode("utf-8", "replace"))
        _repaired(step, f"the console log {step.rel(console)} was deleted; restored from Genesis's copy")


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return -1


# --- the breaker: the loop holds its truth; the user's file is a mirror while it runs ----

def breaker_store(lay: Layout) -> BreakerStore:
    return BreakerStore(lay.breaker_truth, lock_path=lay.breaker_lock)


def _mirror_text(state: BreakerState) -> str:
    return json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n"


def mirror_breaker(lay: Layout, state: BreakerState) -> None:
    lay.breaker_file.parent.mkdir(parents=True, exist_ok=True)
    write_text(lay.breaker_file, _mirror_text(state))


def guard_breaker(step: Step) -> None:
    """Restore the breaker file if it vanished or changed under the running loop."""
    lay = step.layout
    state, _warning = breaker_store(lay).load()
    expected = _mirror_text(state).encode()
    try:
        current: bytes | None = read_bytes(lay.breaker_file, 1 << 20)
    except FileNotFoundError:
        current = None
    except (CorruptFile, OSError):
        current = b""  # a symlink, a folder, unreadable: not the mirror
    if current == expected:
        return
    if lay.breaker_file.is_symlink() or (lay.breaker_file.exists() and not lay.breaker_file.is_file()):
        _move_aside(lay.breaker_file)  # a folder or a link planted in its place: kept, not followed
    mirror_breaker(lay, state)
    how = "deleted" if current is None else "changed"
    _repaired(step, f"the breaker file {step.rel(lay.breaker_file)} was {how} while the loop ran; restored "
                    f"({state.state}, {state.no_progress_count} without progress). The loop holds the breaker "
                    f"while it runs: to reset it, stop the loop, then delete the file")


def _move_aside(path: Path) -> None:
    try:
        os.rename(path, path.with_name(f"{path.name}.tampered-{os.getpid()}"))
    except OSError:
        pass


# --- the hook -------------------------------------------------------------------------

def record_hook(lay: Layout, check: "HookCheck") -> None:
    """Remember where the hook was found working, to reinstall it there if it goes."""
    if check.ok and check.scope in ("user", "project", "local") and check.path is not None:
        write_json(lay.hook_record, {"scope": check.scope, "path": str(check.path)})


def _hook_check(step: Step, phase: str, iteration: int) -> "HookCheck | None":
    return adapter_of(step.cfg).hook_check(step.cfg.project, agent_env(step, phase, iteration),
                                           step.layout.heartbeat_file(phase))


def _kept_hook(lay: Layout) -> dict | None:
    """Where the running loop keeps the hook working ({"scope", "path"}), or None."""
    try:
        where = read_json(lay.hook_record)
    except (CorruptFile, OSError):
        return None
    return where if isinstance(where, dict) and isinstance(where.get("path"), str) else None


class HookRemoved(StepFailed):
    """The user removed the hook the loop's agent needs: the loop stops (said and recorded)."""


def guard_hook(step: Step, phase: str, iteration: int) -> None:
    """The same self-test as at start; a hook that went missing is reinstalled where it was,
    unless the user removed it (HookRemoved when the agent cannot do without it)."""

    lay = step.layout
    where = _kept_hook(lay)
    if where is None:
        return  # no hook worked at start (the start said so once): nothing to keep working
    check = _hook_check(step, phase, iteration)
    adapter = adapter_of(step.cfg)
    hooks = adapter.hooks
    path = Path(where["path"])
    if check is not None and check.ok:
        if check.path is not None and same_file(check.path, path):
            clear_removal(lay.hook_removal)  # the user put it back
        return
    if check is None or hooks is None:
        return
    removed = removal_of(lay.hook_removal, path)
    if removed is not None:
        _respect(step, adapter, phase, path, str(where.get("scope", "")), removed.at)
        return
    user_dir = default_heartbeat_file({k: v for k, v in os.environ.items()
                                       if k != "GENESIS_HEARTBEAT_FILE"}).parent
    try:
        hooks.install(path, hooks.command_for(hook_script()), user_dir)
    except (SettingsError, OSError) as exc:
        step.say(f"{phase}: the heartbeat hook stopped working ({check.detail}) and could not be reinstalled "
                 f"in {path}: {exc}", "error")
        step.event("tamper", what=f"hook broken, not reinstalled: {check.detail}")
        return
    again = _hook_check(step, phase, iteration)
    _repaired(step, f"the heartbeat hook stopped working ({check.detail}); reinstalled it in {path}"
                    + ("" if again is not None and again.ok else
                       f", but it still does not work: {again.detail if again else 'no check'}"))


def _respect(step: Step, adapter: Adapter, phase: str, path: Path, scope: str, at: float) -> None:
    """The user removed the hook from path at `at`: never put back. Without it the agent
    looks stuck: stop the loop (HookRemoved); else go on, told once."""
    when = time.strftime("%H:%M:%S", time.localtime(at))
    again = reinstall_hint(step.cfg.project, adapter, scope)
    step.event("hook_removed", path=str(path), removed_at=at, phase=phase)
    if not adapter.hook_required:
        step.say(f"the heartbeat hook was removed from {path} at {when} by your `hook uninstall`: the loop does "
                 f"not put it back, and goes on without it ({adapter.name}'s output and processes are its signs of "
                 f"life). To have it again: `{again}`", "warn")
        try:
            os.unlink(step.layout.hook_record)  # said once: nothing to keep working any more
        except FileNotFoundError:
            pass
        return
    why = (f"the heartbeat hook was removed from {path} at {when} by your `hook uninstall`, while the loop ran: "
           f"the loop does not undo your removal, and without the hook every {adapter.name} agent would look "
           f"stuck, so it stops before {phase} (exit {exitcodes.USAGE}). To run the loop again, put the hook back "
           f"with `{again}` and restart it")
    step.say(why, "error")
    step.event("stop_reason", reason=f"the heartbeat hook was removed by the user's `hook uninstall` ({path}); "
                                     f"put it back with `{again}` and restart", code=exitcodes.USAGE)
    raise HookRemoved(exitcodes.USAGE, why)


def reinstall_hint(project: Path, adapter: Adapter, scope: str) -> str:
    """The command that puts the hook back where it was (the scope matters to Claude Code only)."""
    if adapter.name in ("claude", "generic"):
        return hint(project, "hook", "install", *(("--scope", scope) if scope in ("project", "local") else ()))
    return hint(project, "hook", "install", "--agent", adapter.name)


def respect_removal(path: Path, layouts: list[Layout], now: float) -> list[str]:
    """The user removed the hook from path: note it in each running loop that keeps the hook
    working there (its repair then respects it), and say what each will do. A removal run
    by a loop's own agent is not the user's: that loop puts the hook back as ever."""
    said, seen = [], set()
    for lay in layouts:
        holder = current_holder(lay.loop_lock, lay.loop_record)
        where = _kept_hook(lay) if holder is not None else None
        if holder is None or where is None or not same_file(where["path"], path) or lay.state_dir in seen:
            continue
        seen.add(lay.state_dir)
        loop = f"the loop running on {lay.project} (pid {holder.pid}, run {holder.run_id})"
        if _from_inside(lay, holder):
            said.append(f"{loop} started this command (an agent's): it puts the hook back before its next phase")
            continue
        note_removal(lay.hook_removal, path, now)
        adapter = _adapter_of_run(lay, holder.run_id)
        again = reinstall_hint(lay.project, adapter, str(where.get("scope", "")))
        if adapter.hook_required:
            said.append(f"{loop} used this hook: it will not put it back, and stops cleanly before its next phase "
                        f"(exit {exitcodes.USAGE}), since every {adapter.name} agent would look stuck without it. "
                        f"To keep it running, put the hook back now: `{again}`")
        else:
            said.append(f"{loop} used this hook: it will not put it back, and goes on without it "
                        f"({adapter.name}'s output and processes are its signs of life)")
    return said


def forget_removal(path: Path, layouts: list[Layout]) -> None:
    """The user put the hook back at path: no loop keeps an earlier removal of it."""
    for lay in layouts:
        if removal_of(lay.hook_removal, path) is not None:
            clear_removal(lay.hook_removal)


def _from_inside(lay: Layout, holder: Holder) -> bool:
    """Whether this process belongs to that loop: it carries the run's markers, or descends
    from the loop's own process."""
    markers = markers_for(lay.project, holder.run_id)
    if all(os.environ.get(k) == v for k, v in markers.items()):
        return True
    return holder.pid > 1 and holder.alive() and descends_from(os.getpid(), holder.pid)


def _adapter_of_run(lay: Layout, run_id: str) -> Adapter:
    """The running loop's agent adapter, from the settings its run started with (Claude Code's
    when they cannot be read: the one whose hook is required)."""
    snap = load_snapshot(lay.config_snapshot, run_id)
    try:
        return adapter_of(from_snapshot(lay.project, (snap or {}).get("settings")))
    except (ConfigError, OSError):
        return adapter_named("claude")


# --- the configuration: read once at start --------------------------------------------

def config_digest(project: Path) -> str:
    try:
        return hashlib.sha256(read_bytes(project / CONFIG_FILE, MAX_CONFIG_BYTES * 16,
                                         follow_symlinks=True)).hexdigest()
    except FileNotFoundError:
        return "missing"
    except (CorruptFile, OSError):
        return "unreadable"


def guard_config(step: Step, started_digest: str) -> None:
    """Report an edit of genesis.conf made during the run (once per edit); it is not applied."""
    lay = step.layout
    now = config_digest(step.cfg.project)
    seen_file = lay.state_dir / "config-seen"
    try:
        seen = read_bytes(seen_file, 128).decode()
    except (FileNotFoundError, CorruptFile, OSError):
        seen = started_digest
    if now == seen:
        return
    write_text(seen_file, now)
    if now == started_digest:
        step.say(f"{CONFIG_FILE} is back as it was at the start of the run", "info")
        return
    step.say(f"{CONFIG_FILE} changed during the run; the loop keeps the settings it started with, and the "
             f"change takes effect at the next start", "warn")
    step.event("config_changed", digest=now)
