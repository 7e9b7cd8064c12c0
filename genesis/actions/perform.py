"""Every action, one implementation behind the terminal, the dashboard and the alert links.

What needs the live process (pause, resume, restart a running child, end or extend a wait) is
a request it picks up (inbox.py) within a check; the rest is done here, on the ledgers and the
repository, whether a monitor runs or not. Each action is recorded in the project's ledger
(event `action`: what, on which task, from where, with which credential, what came of it) and,
for a fleet's task, in the fleet's ledger: status, the report and the dashboard show it.
An action that does not apply raises NotApplicable with what does.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

from genesis.actions import inbox
from genesis.actions import tasks as fleet_tasks
from genesis.actions.errors import (ACTIONS, EVENT, MAX_NOTE, RELAUNCHED, REVIEW, TASK_ACTIONS, WAIT_REQUESTS, Done,
                                    NotApplicable, NothingRuns, Origin)
from genesis.actions.revert import revert_phase
from genesis.config import Config, default_layout, layout_for, resolve
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.status import lock_held
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.waiting import Pending
from genesis.store.atomicio import CorruptFile, read_json, write_text
from genesis.store.layout import Layout
from genesis.store.looplock import FLEET_RUN, current_holder
from genesis.words import WAIT_LABELS, duration

__all__ = ["perform", "record", "find_task", "fleet_dir"]


def fleet_dir(layout: Layout) -> Path:
    return layout.state_dir / "fleet"


def find_task(rows: list[TaskRow], wanted: str) -> TaskRow:
    """The task named by its id, its text, or a start of its id that only one has."""
    wanted = wanted.strip()
    exact = [r for r in rows if wanted in (r.id, r.text)]
    started = [r for r in rows if r.id.startswith(wanted)] if wanted else []
    found = exact or (started if len(started) == 1 else [])
    if not found:
        raise NotApplicable(f"no task {wanted!r} in the fleet" + (f" ({len(started)} ids start so: give more of it)"
                                                                  if len(started) > 1 else "")
                            + "; `fleet status` lists them, the first column is the id")
    return found[0]


def perform(project: Path, action: str, origin: Origin, *, task: str = "", note: str = "", seconds: float = 0.0,
            run_id: str = "", iteration: int = 0, phase: str = "", clock: Callable[[], float] = time.time,
            cfg: Config | None = None) -> Done:
    """Do the action on the project's loop or fleet (task: one of the fleet's tasks), record it, say what came of it."""
    if action not in ACTIONS:
        raise NotApplicable(f"no action {action!r}: one of {', '.join(ACTIONS)}")
    cfg = cfg or resolve(Path(project))
    layout = layout_for(cfg)
    note = " ".join(note.split())[:MAX_NOTE]
    if action in TASK_ACTIONS and not task:
        raise NotApplicable(f"{action} acts on one of a fleet's tasks: name it")
    now = clock()
    if action in ("stop", "stop-now"):
        done = _stop(cfg, layout, action == "stop-now")
    elif action in ("pause", "resume"):
        done = _fleet_request(layout, action, origin, now)
    elif action in WAIT_REQUESTS:
        done = _wait(layout, cfg, action, task, seconds, origin, now)
    elif action == "revert":
        tree = _task_tree(layout, task) if task else cfg.project
        done = Done(action, task, revert_phase(tree, run_id, iteration, phase, now, cfg.git_hooks))
    else:
        done = _task_action(cfg, layout, action, task, note, origin, now)
    record(layout, done, origin, now, note=note)
    return done


# -- recording ---------------------------------------------------------------------------------

def record(layout: Layout, done: Done, origin: Origin, now: float, note: str = "") -> None:
    """The action in the project's ledger (the running run's, else the newest run's) and, for a
    fleet's task, in the fleet's ledger too."""
    detail = dict(action=done.action, task=done.task, source=origin.surface, credential=origin.credential,
                  said=done.said, **({"note": note} if note else {}))
    holder = current_holder(layout.loop_lock, layout.loop_record)
    try:
        with Ledger.open(layout.ledger_file, clock=lambda: now) as ledger:
            runs = ledger.runs()
            run = holder.run_id if holder is not None and holder.run_id else runs[-1].run_id if runs else "actions"
            ledger.record(run, EVENT, **detail)
    except (LedgerError, OSError):
        pass  # the fleet's ledger below, and the answer, still say it
    path = fleet_dir(layout) / "ledger.sqlite3"
    if path.exists():
        with FleetLedger.open(path, clock=lambda: now) as fleet:
            fleet.record(EVENT, done.task or None, now, **detail)


# -- the loop or the fleet as a whole -------------------------------------------------------------

def _stop(cfg: Config, layout: Layout, now: bool) -> Done:
    holder = current_holder(layout.loop_lock, layout.loop_record)
    if holder is None:
        raise NothingRuns(f"no Genesis loop or fleet is running on {cfg.project}; nothing to stop")
    fleet = holder.run_id.startswith(FLEET_RUN)
    what = f"the fleet (monitor pid {holder.pid})" if fleet else f"the loop (pid {holder.pid})"
    cfg.stop_flag.parent.mkdir(parents=True, exist_ok=True)
    write_text(cfg.stop_flag, "false\n")
    if not now:
        return Done("stop", "", f"wrote false to the stop flag: {what} stops after the current phase"
                    + (", each child too" if fleet else ""))
    if not holder.pid:
        raise NothingRuns(f"the loop on {cfg.project} names no process to stop now; the stop flag says false: it "
                          f"stops after the current phase")
    try:
        os.kill(holder.pid, signal.SIGTERM)
    except ProcessLookupError:
        raise NothingRuns(f"{what} is gone already") from None
    return Done("stop-now", "", f"sent SIGTERM to {what}: its agent" + ("s are" if fleet else " is")
                + " stopped now, the work committed and the end recorded")


def _monitor_live(layout: Layout) -> bool:
    return lock_held(fleet_dir(layout) / "lock")


def _fleet_request(layout: Layout, action: str, origin: Origin, now: float, task: str = "",
                   said: str = "") -> Done:
    if not (fleet_dir(layout) / "ledger.sqlite3").exists():
        raise NotApplicable(f"no fleet ran on {layout.project}: {action} acts on a fleet (`start-multi-agent-loop.sh "
                            f"--parallel N`); a single loop is stopped with stop")
    if not _monitor_live(layout):
        raise NothingRuns(f"the fleet's monitor on {layout.project} is not running: nothing to {action}")
    inbox.submit(fleet_dir(layout) / inbox.FOLDER, inbox.Request(action, now, origin.surface, origin.credential,
                                                                task=task))
    return Done(action, task, said or {"pause": "asked the fleet's monitor to start no more children (those "
                                                "running go on); resume starts them again",
                                       "resume": "asked the fleet's monitor to start children again"}[action])


# -- a wait ------------------------------------------------------------------------------------

def _wait(layout: Layout, cfg: Config, action: str, task: str, seconds: float, origin: Origin, now: float) -> Done:
    tree_layout = layout if not task else _tree_layout(layout, _task_tree(layout, task))
    try:
        pending = Pending.from_json(read_json(tree_layout.wait_file))
    except (CorruptFile, OSError):
        pending = None
    holder = current_holder(tree_layout.loop_lock, tree_layout.loop_record)
    if pending is None or holder is None or pending.run_id != holder.run_id:
        raise NotApplicable(f"no wait is under way in {tree_layout.project}" + ("" if task else
                            "; a fleet's children each sit out their own: name the task"))
    if action == "wait-extend" and seconds <= 0:
        raise NotApplicable("wait-extend needs a duration to add (15m, 1h)")
    inbox.submit(tree_layout.state_dir / inbox.FOLDER, inbox.Request(action, now, origin.surface, origin.credential,
                                                                     task=task, seconds=seconds))
    label = WAIT_LABELS.get(pending.kind, pending.kind)
    if action == "wait-end":
        return Done(action, task, f"asked the loop to end its {label} now and run the phase again")
    return Done(action, task, f"asked the loop to sit out its {label} {duration(seconds)} longer")


def _tree_layout(_layout: Layout, tree: Path) -> Layout:
    return default_layout(tree)


def _task_tree(layout: Layout, task: str) -> Path:
    """The worktree of one of the fleet's tasks."""
    row = find_task(_rows(layout), task)
    if not row.worktree or not Path(row.worktree).is_dir():
        raise NotApplicable(f"the task {row.text!r} has no worktree (it is {row.state})")
    return Path(row.worktree)


# -- a fleet's task ----------------------------------------------------------------------------

def _rows(layout: Layout) -> list[TaskRow]:
    path = fleet_dir(layout) / "ledger.sqlite3"
    if not path.exists():
        raise NotApplicable(f"no fleet ran on {layout.project}: retry, approve, send-back and skip act on a "
                            f"fleet's tasks (`start-multi-agent-loop.sh --parallel N`)")
    with FleetLedger.open(path, readonly=True) as ledger:
        return ledger.tasks()


def _task_action(cfg: Config, layout: Layout, action: str, task: str, note: str, origin: Origin,
                 now: float) -> Done:
    row = find_task(_rows(layout), task)
    live = _monitor_live(layout)
    with FleetLedger.open(fleet_dir(layout) / "ledger.sqlite3", clock=lambda: now) as ledger:
        if action == "retry":
            if row.state == "running":
                if not live:
                    raise NothingRuns(f"{row.text!r} runs, but the fleet's monitor does not: it cannot be restarted "
                                      f"from here")
                return _fleet_request(layout, action, origin, now, row.id,
                                      f"asked the fleet's monitor to stop {row.text!r} now and start it again")
            if row.state in RELAUNCHED:
                ledger.set_state(row.id, row.state, row.reason, not_before=0.0)
                return Done(action, row.id, f"{row.text!r} starts again at the monitor's next check, without "
                                            f"waiting out its backoff" if live else
                            f"{row.text!r} starts at the fleet's next start, without waiting out a backoff")
            if row.state == "failed":
                return Done(action, row.id, fleet_tasks.reopen(cfg, ledger, row, now))
            raise NotApplicable(f"{row.text!r} is {row.state}: retry takes a failed, running or restarting task"
                                + ("; approve or send it back" if row.state in REVIEW else ""))
        if action == "approve":
            if row.state not in REVIEW:
                raise NotApplicable(f"{row.text!r} is not waiting for review (it is {row.state})")
            return Done(action, row.id, fleet_tasks.approve(cfg, ledger, row))
        if action == "send-back":
            if row.state not in REVIEW:
                raise NotApplicable(f"{row.text!r} is not waiting for review (it is {row.state})")
            if not note:
                raise NotApplicable("send-back needs a note: what the agent must do differently")
            return Done(action, row.id, fleet_tasks.send_back(cfg, ledger, row, note))
        # skip
        if row.state in ("merged", "failed", "merging"):
            raise NotApplicable(f"{row.text!r} is {row.state}: nothing to skip")
        if row.state == "running":
            if not live:
                raise NothingRuns(f"{row.text!r} runs, but the fleet's monitor does not: stop it first")
            return _fleet_request(layout, action, origin, now, row.id,
                                  f"asked the fleet's monitor to stop {row.text!r} now and start it no more")
        return Done(action, row.id, fleet_tasks.skip(cfg, ledger, row, f"skipped from the {origin.surface}"))


