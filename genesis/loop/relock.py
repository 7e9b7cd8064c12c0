"""Genesis's own state taken from under a running loop: the lock kept, the run's settings put
back from what the loop still holds, or the loop stopped.

Without the box an agent can delete or swap `<git dir>/genesis/` mid-run. The loop's flock
then holds a file nobody can open again, and a second start would be let in beside it (its
reaper killing this loop's agent, the two committing in turn). So the loop (before each
step: its descriptor against the lock file's inode) and the phase's watcher (at each check)
notice it, heal the folder, put the run's settings snapshot back from the descriptor the loop
keeps open on it, and lock the new lock file; if another loop has it by then, this one stops
(STATE_LOST) so that the two never interleave. The ledger's record of the run before that
went with the folder: that is said, with the console log that still keeps it.

A step of a started run that finds the snapshot itself gone and not put back stops with
STATE_LOST (cli.py, Context.run_config) rather than read genesis.conf mid-run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from genesis import exitcodes
from genesis.loop.step import Step, StepFailed, forget_ledger
from genesis.store.atomicio import MAX_STATE_BYTES, write_json, write_text
from genesis.store.layout import Layout, heal_dir
from genesis.store.looplock import Locked, acquire, same_file

__all__ = ["LOOP_LOCK_FD", "SNAPSHOT_FD", "held_snapshot", "restore", "prompts_back", "take", "LockKeeper"]

LOOP_LOCK_FD = 9   # start-multi-agent-loop.sh holds its lock on this descriptor...
SNAPSHOT_FD = 8    # ...and the run's settings snapshot open on this one, for its whole life


def held_snapshot(fd: int, run_id: str) -> dict:
    """The run's settings snapshot read through the descriptor the loop holds (the file may be
    gone from its folder); StepFailed(STATE_LOST) when it is not this run's."""
    try:
        data = json.loads(os.pread(fd, MAX_STATE_BYTES + 1, 0)[:MAX_STATE_BYTES])
    except (OSError, ValueError) as exc:
        raise StepFailed(exitcodes.STATE_LOST, f"Genesis's state was taken from under the loop and the run's "
                                               f"settings cannot be read back ({exc}): stopping") from None
    if not isinstance(data, dict) or data.get("run_id") != run_id or not isinstance(data.get("settings"), dict):
        raise StepFailed(exitcodes.STATE_LOST, "Genesis's state was taken from under the loop and the settings "
                                               "it holds are not this run's: stopping")
    return data


def restore(layout: Layout, snap: dict, run_id: str) -> list[str]:
    """Make the state folder whole enough to go on: the folder (private), the run's settings
    snapshot and prompt copies, an empty lock file. Says what was put back; StepFailed
    (STATE_LOST) when a prompt the run started with cannot be."""
    found = [fixed for fixed in (heal_dir(layout.state_dir), heal_dir(layout.heartbeat_dir)) if fixed]
    layout.console_copy(run_id).parent.mkdir(mode=0o700, exist_ok=True)
    if not layout.config_snapshot.is_file():
        write_json(layout.config_snapshot, snap)
        found.append("the run's settings snapshot was missing; put back from the copy the loop holds")
    found += prompts_back(layout.prompts_dir, snap)
    if not layout.loop_lock.exists():
        found.append("the lock file was missing")
    fd = os.open(layout.loop_lock, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.close(fd)
    return found


def prompts_back(prompts_dir: Path, snap: dict) -> list[str]:
    """The run's prompt copies missing from prompts_dir written back from the snapshot (an agent's
    `rm -rf` of the state folder racing the watcher that made it again can take one after it was
    put back); what was. StepFailed(STATE_LOST) when the snapshot does not hold one."""
    prompts = snap.get("prompts") if isinstance(snap.get("prompts"), dict) else {}
    settings = snap.get("settings") if isinstance(snap.get("settings"), dict) else {}
    found = []
    for key, value in settings.items():
        if not (key.startswith("PHASE_") and key.endswith("_PROMPT") and isinstance(value, list) and value):
            continue
        copy = Path(str(value[0]))
        if copy.parent != prompts_dir or copy.is_file():
            continue
        text = prompts.get(copy.name)
        if not isinstance(text, str):
            raise StepFailed(exitcodes.STATE_LOST, f"Genesis's state was taken from under the loop and the run's "
                                                   f"prompt copy {copy.name} with it: stopping")
        prompts_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_text(copy, text)
        found.append(f"the prompt copy {copy.name} was missing; put back")
    return found


def take(step: Step, fd: int, loop_pid: int) -> None:
    """Lock the lock file anew on fd (open on it); StepFailed(STATE_LOST) if another loop has it."""
    lay = step.layout
    try:
        acquire(lay.loop_lock, lay.loop_record, fd, loop_pid, step.run_id, project=step.cfg.project)
    except (Locked, ValueError) as exc:
        message = (f"Genesis's state was taken from under the loop, and by the time it was made again the lock "
                   f"was not this loop's ({exc}): stopping so that two loops never work on the project at once")
        step.event("state_lost", what="the lock", found=[], by="loop", stopped=True)
        raise StepFailed(exitcodes.STATE_LOST, message) from None


def lost(step: Step, found: list[str], by: str) -> None:
    """Say and record that the state folder was taken: what was put back, and what is lost.
    The run starts again in the new ledger at its next event (see Step)."""
    forget_ledger(step.layout)  # a step's open ledger may be the deleted one: the rest goes to the new
    console = step.layout.console_log(step.run_id)
    step.say(f"Genesis's state folder {step.layout.state_dir} was deleted or replaced while the loop ran "
             f"(noticed by the {by}); made again and locked anew. The ledger's record of this run before now "
             f"went with it; the console log {step.rel(console)} keeps it" + (f" ({'; '.join(found)})" if found
                                                                              else ""), "warn")
    step.event("state_lost", what="the state folder", found=found, by=by, console=str(console), stopped=False)


class LockKeeper:
    """The watcher's side, at every check: the loop's lock still on the lock file, or taken anew
    by this process for the rest of the phase (the loop takes it over before its next step).
    Armed only when the loop's descriptor is the lock file as the phase starts."""

    def __init__(self, step: Step, loop_pid: int, fd: int = LOOP_LOCK_FD, snapshot_fd: int = SNAPSHOT_FD):
        self.step, self.loop_pid, self.fd, self.snapshot_fd = step, loop_pid, fd, snapshot_fd
        self.armed = same_file(fd, step.layout.loop_lock)
        self.held: int | None = None

    def check(self) -> None:
        lay = self.step.layout
        if not self.armed or same_file(self.held if self.held is not None else self.fd, lay.loop_lock):
            return
        found: list[str] = []
        try:
            found = restore(lay, held_snapshot(self.snapshot_fd, self.step.run_id), self.step.run_id)
        except StepFailed as exc:
            self.step.say(f"{exc}; the loop stops after this phase", "error")
            heal_dir(lay.state_dir)
        fd = os.open(lay.loop_lock, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            take(self.step, fd, self.loop_pid)
        except StepFailed as exc:
            os.close(fd)
            self.armed = False  # the loop stops at its next step (its own relock fails the same way)
            self.step.say(str(exc), "error")
            return
        if self.held is not None:
            os.close(self.held)
        self.held = fd
        lost(self.step, found, "watcher")
