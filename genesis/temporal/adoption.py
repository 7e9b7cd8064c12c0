"""Which running loop an attempt may adopt: the loop launched for that very attempt, and never
one being stopped.

A machine whose worker died leaves its loop running; the attempt's retry that comes back to the
machine adopts it (never two loops on one task). But a loop still running in the task's
worktree may also be one its own attempt is stopping (the attempt was cancelled: a server
outage timed out its heartbeat, the worker is shutting down) or the loop of an earlier
attempt of the task: adopted, it ends by the signal it was sent and spends a rung of the
ladder that no agent failed. So each launch is recorded on the machine (`children/<task
id>.launch.json` in the fleet's folder: the loop's session, the task's workflow, the attempt's
number, and `stopping` once its attempt stops it) and a retry adopts only the loop that record
names for its own attempt, not being stopped; any other loop in the worktree is stopped first,
and a fresh one started.
"""

from __future__ import annotations

import os
from pathlib import Path

from genesis.store.atomicio import CorruptFile, read_json, write_json
from genesis.store.layout import private_dir

__all__ = ["launch_file", "record_launch", "mark_stopping", "read_launch", "session_of", "refusal"]


def launch_file(fleet_dir: Path, task_id: str) -> Path:
    return fleet_dir / "children" / f"{task_id}.launch.json"


def record_launch(fleet_dir: Path, task_id: str, session: int, task_workflow: str, number: int) -> None:
    private_dir(fleet_dir / "children")
    write_json(launch_file(fleet_dir, task_id), {"session": session, "task_workflow": task_workflow,
                                                 "number": number, "stopping": False})


def mark_stopping(fleet_dir: Path, task_id: str, session: int) -> None:
    """The loop of this launch is being stopped: no retry adopts it."""
    found = read_launch(fleet_dir, task_id)
    if found is not None and found.get("session") == session:
        write_json(launch_file(fleet_dir, task_id), {**found, "stopping": True})


def read_launch(fleet_dir: Path, task_id: str) -> dict | None:
    try:
        found = read_json(launch_file(fleet_dir, task_id))
    except (OSError, CorruptFile, ValueError):
        return None
    return found if isinstance(found, dict) else None


def session_of(pid: int) -> int:
    """The session a process runs in (a launched loop leads its own: its steps share it); 0 when gone."""
    try:
        return os.getsid(pid)
    except OSError:
        return 0


def refusal(record: dict | None, session: int, task_workflow: str, number: int) -> str:
    """Why the loop running in the worktree (in `session`) is not this attempt's to adopt ("" when
    it is): the launch recorded for the task must be this session's, for this task's workflow and
    attempt number, and not being stopped."""
    if record is None:
        return "no launch of it is recorded on this machine"
    if not session or record.get("session") != session:
        return "it is not the loop this machine last launched for the task"
    if record.get("task_workflow") != task_workflow or record.get("number") != number:
        return (f"it was launched for attempt {record.get('number')} of {record.get('task_workflow')}, not "
                f"attempt {number} of {task_workflow}")
    if record.get("stopping"):
        return "its attempt is stopping it"
    return ""
