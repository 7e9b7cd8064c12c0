"""States the dashboard reads, written as Genesis writes them: a loop mid-phase (its lock held,
its ledger, heartbeat, health check and transcript), a fleet with tasks in several states and a
child loop in a real linked worktree, alerts in a ledger.

  loop_mid_phase(project, run_id, now, ...)   -> the lock's descriptor (close it: the loop "dies")
  fleet_running(project, now, tasks)          -> the monitor lock's descriptor
  child_loop(project, task_id, now, ...)      -> (worktree, the child's lock descriptor)
  alert(project, run_id, at, cause, ...)      one alert row in the project's ledger
  first_line(proc)                            a started `genesis serve`'s first line, or "" after 30 s
"""

from __future__ import annotations

import fcntl
import os
import queue
import subprocess
import threading
from pathlib import Path

from helpers.git import git
from helpers.nights import first_hour

from genesis.config import default_layout
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.status import fleet_dir_of
from genesis.ledger.store import Ledger, iso
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold

__all__ = ["first_line", "loop_mid_phase", "fleet_running", "child_loop", "alert", "task", "beat"]


def first_line(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    """The first line a process writes (text mode), "" when none came in time: a server that
    hangs before it prints fails the test rather than hanging it."""
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: got.put(proc.stdout.readline()), daemon=True).start()
    try:
        return got.get(timeout=timeout)
    except queue.Empty:
        return ""


def beat(project: Path, phase: str, run_id: str, epoch: float, tool: str = "Bash") -> None:
    """A heartbeat, as the hook writes one per tool call."""
    lay = default_layout(project)
    lay.heartbeat_dir.mkdir(parents=True, exist_ok=True)
    write_json(lay.heartbeat_file(phase), {"epoch": epoch, "tool": tool, "event": "PreToolUse", "run_id": run_id})


def loop_mid_phase(project: Path, run_id: str, now: float, *, health: str = "healthy",
                   tool_text: str = "Bash: pytest -x", transcript: str = "", hold_lock: bool = True) -> int | None:
    """The loop in iteration 1's Criticizer, inside a tool call; its transcript where the loop
    writes it (`<log dir>/<run id>/iter-0001-Criticizer.log`).
    The lock's descriptor (None with hold_lock False: a loop that was killed)."""
    lay = default_layout(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    fd = hold(lay.loop_lock, lay.loop_record, run_id) if hold_lock else None
    log = lay.run_dir(run_id) / "iter-0001-Criticizer.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(transcript)
    with Ledger.open(lay.ledger_file) as led:
        first_hour(led, run_id, now)
        led.record(run_id, "incident", at=now - 15 * 60, iteration=1, phase="Criticizer", id="inc-1", kind="stuck",
                   reason="no heartbeat for 600s")
        led.record(run_id, "phase_start", at=now - 120, iteration=1, phase="Criticizer", epoch=now - 120,
                   log=str(log), attempt=1)
    beat(project, "Criticizer", run_id, now - 4)
    write_json(lay.health_file("Criticizer"), {
        "run_id": run_id, "phase": "Criticizer", "iteration": 1, "at": iso(now - 2), "classification": health,
        "stall_score": 0.5, "reason": f"the agent is {health}", "turns": 3, "tool_in_flight": tool_text})
    return fd


def alert(project: Path, run_id: str, at: float, cause: str, severity: str = "high") -> None:
    lay = default_layout(project)
    with Ledger.open(lay.ledger_file) as led:
        led.record(run_id, "alert", at=at, decision="intervene", why="rules", by="rules",
                   ticket={"ticket_id": f"t-{at}", "severity": severity, "cause": cause, "kind": "stuck"})


def task(tid: str, state: str, now: float, text: str | None = None, **kw) -> TaskRow:
    return TaskRow(id=tid, text=text or f"Do {tid}", state=state, branch=f"genesis/task/{tid}", created=now - 3600,
                   updated=now - 60, **kw)


def child_loop(project: Path, tid: str, now: float, *, health: str = "healthy",
               tool_text: str = "Bash: make test", transcript: str = "") -> tuple[Path, int]:
    """A real worktree of the task's branch with a child loop mid-phase in it."""
    where = project.parent / "worktrees" / tid
    git(project, "worktree", "add", "-q", "-b", f"genesis/task/{tid}", str(where))
    fd = loop_mid_phase(where, f"child-{tid}", now, health=health, tool_text=tool_text, transcript=transcript)
    assert fd is not None
    return where, fd


def fleet_running(project: Path, now: float, tasks: list[TaskRow], events: tuple[tuple, ...] = ()) -> int:
    """A fleet whose monitor runs (its lock held here, its heartbeat fresh) with these tasks."""
    fleet = fleet_dir_of(project)
    fleet.mkdir(parents=True, exist_ok=True)
    write_json(fleet / "monitor.json", {"pid": os.getpid(), "run_id": "fleet-1", "started": now - 3600, "at": now - 2})
    fd = os.open(fleet / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with FleetLedger.open(fleet / "ledger.sqlite3") as led:
        led.record("fleet_start", now=now - 3600, run_id="fleet-1", parallel=3, pid=os.getpid())
        for row in tasks:
            led.upsert_task(row)
        for kind, task_id, detail in events:
            led.record(kind, task_id, now=now - 300, **detail)
    return fd
