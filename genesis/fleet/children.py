"""One child of a fleet: an ordinary loop in its task's worktree, launched, adopted, watched, stopped.

A child is `start-multi-agent-loop.sh --project <worktree>` in a session of its own, so a
Ctrl-C meant for the monitor, or the monitor's death, never reaches it by accident. What
it is doing is read from its own state, as for any loop: it is alive while its loop lock
is held (the kernel's word, never a pid alone: a pid is recycled), and how it ended is its
ledger's `loop_end`. A signal goes to it only once that is confirmed again at that moment.

Its environment names its task (GENESIS_TASK, GENESIS_TASK_ID), its own port range (PORT,
GENESIS_PORT_BASE, GENESIS_PORT_COUNT) and the fleet's folder (GENESIS_FLEET_DIR, where the
monitor's heartbeat is).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import psutil

from genesis.agents import adapter_of
from genesis.config import Config, default_layout
from genesis.fleet.ledger import TERMINAL, FleetLedger
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.agentgo import agent_died
from genesis.procs.proctree import identify
from genesis.repo.gitcmd import GitFailed, NotARepository
from genesis.store.layout import Layout, UnsafeDir
from genesis.store.looplock import Holder, current_holder

__all__ = ["ChildSpec", "Child", "Ending", "LOOP_SCRIPT", "child_argv", "child_env", "launch", "adopt", "layout_of",
           "holder_of", "ended", "signal_child", "ending_of_run", "agent_deaths", "running_loop_at", "live_children",
           "install_hook"]

LOOP_SCRIPT = Path(__file__).resolve().parent.parent.parent / "start-multi-agent-loop.sh"
LOG_MODE = 0o600
MAX_EVENTS = 5  # loop_end events read for one run: there is one


@dataclass(frozen=True)
class ChildSpec:
    task_id: str
    text: str                         # GENESIS_TASK: the task as written in TASKS.md ("" for the Planner)
    worktree: Path
    attempt: int
    phases: tuple[str, ...]
    iterations: int
    stop_flag: Path                   # the project's: `genesis stop` on the project stops every child
    fleet_dir: Path
    ports: tuple[int, int]            # (base, count)
    settings: Mapping[str, str]       # --set overrides: the fleet's own, then the strategy's
    log: Path


@dataclass
class Child:
    """A child loop the monitor watches: launched by this monitor (popen) or adopted from an earlier one."""
    task_id: str
    worktree: Path
    pid: int
    create_time: float
    launched: float
    attempt: int
    popen: subprocess.Popen | None = None
    run_id: str = ""
    signalled: int | None = None      # the signal this monitor sent it, if any
    layout: Layout | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Ending:
    exit_code: int | None             # None: it vanished without a recorded end
    at: float
    reason: str
    cost: float = 0.0
    model: str | None = None          # the model its newest phase that named one said it used


def child_argv(spec: ChildSpec, script: Path = LOOP_SCRIPT) -> list[str]:
    """The child's command line (the design's "A child"): the fleet's settings first, then what
    makes it a child, which no fleet setting can undo."""
    argv = ["bash", str(script), "--project", str(spec.worktree), "--trust"]
    fixed = {"GENESIS_PHASES": " ".join(spec.phases), "GENESIS_STOP_FLAG": str(spec.stop_flag),
             "GENESIS_MAX_ITERATIONS": str(spec.iterations)}
    for key, value in spec.settings.items():
        if key not in fixed:
            argv += ["--set", f"{key}={value}"]
    for key, value in fixed.items():
        argv += ["--set", f"{key}={value}"]
    return argv


def child_env(spec: ChildSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The monitor's environment with the child's task, fleet and ports (and the genesis CLI this
    monitor runs, so a child never bootstraps another)."""
    env = dict(base)
    for key in ("GENESIS_TASK", "GENESIS_TASK_ID"):
        env.pop(key, None)
    if spec.text:
        env.update(GENESIS_TASK=spec.text, GENESIS_TASK_ID=spec.task_id)
    base_port, count = spec.ports
    env.update(GENESIS_FLEET_DIR=str(spec.fleet_dir), PORT=str(base_port), GENESIS_PORT_BASE=str(base_port),
               GENESIS_PORT_COUNT=str(count))
    genesis = Path(sys.executable).parent / "genesis"
    if not env.get("GENESIS_BIN") and genesis.is_file():
        env["GENESIS_BIN"] = str(genesis)
    return env


def _open_log(path: Path) -> int:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC,
                   LOG_MODE)


def launch(spec: ChildSpec, base_env: Mapping[str, str], now: float, script: Path = LOOP_SCRIPT) -> Child:
    """Start the child loop in a session of its own, its output to spec.log; OSError if it cannot start."""
    fd = _open_log(spec.log)
    try:
        popen = subprocess.Popen(child_argv(spec, script), env=child_env(spec, base_env), stdin=subprocess.DEVNULL,
                                 stdout=fd, stderr=fd, start_new_session=True, close_fds=True, cwd=str(spec.worktree))
    finally:
        os.close(fd)
    ident = identify(popen.pid)
    return Child(spec.task_id, spec.worktree, popen.pid, ident.create_time if ident else 0.0, now, spec.attempt,
                 popen=popen)


def layout_of(worktree: Path) -> Layout | None:
    """The child's layout (its own state folder, in its worktree's git dir), or None if gone."""
    try:
        return default_layout(worktree)
    except (NotARepository, GitFailed, UnsafeDir, OSError):
        return None


def holder_of(child: Child) -> Holder | None:
    """Who holds the child's loop lock now (None: nobody, or its worktree is gone)."""
    if child.layout is None:
        child.layout = layout_of(child.worktree)
        if child.layout is None:
            return None
    return current_holder(child.layout.loop_lock, child.layout.loop_record)


def adopt(task_id: str, worktree: Path, holder: Holder, attempt: int, now: float) -> Child:
    """A child an earlier monitor launched, still running (its lock is held)."""
    return Child(task_id, worktree, holder.pid, holder.create_time, now, attempt, run_id=holder.run_id)


def running_loop_at(worktree: Path, pid: int | None) -> Child | None:
    """A child loop started on worktree whose lock is not taken yet (it is starting): the pid
    recorded at its launch, if that process still runs the loop script on that worktree."""
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        argv = proc.cmdline()
        created = proc.create_time()
    except (psutil.Error, OSError):
        return None
    if not any(a.endswith("start-multi-agent-loop.sh") for a in argv) or str(worktree) not in argv:
        return None
    return Child("", worktree, pid, created, time.time(), 0)


def _same_process(child: Child) -> bool:
    if child.pid <= 0:
        return False
    ident = identify(child.pid)
    return ident is not None and (not child.create_time or abs(ident.create_time - child.create_time) < 0.01)


def ended(child: Child, now: float) -> Ending | None:
    """How the child ended, or None while it runs. A child this monitor launched is its own
    process's status; an adopted one, its lock let go and its ledger's `loop_end`."""
    if child.popen is not None:
        code = child.popen.poll()
        if code is None:
            holder = holder_of(child)
            if holder is not None and holder.pid == child.pid and not child.run_id:
                child.run_id = holder.run_id
            return None
        if code < 0 and child.signalled is None:
            # Killed by a signal this monitor did not send (the OOM killer, a kill -9): known
            # now, from its own exit status. Its phase's watcher may hold its lock a while
            # longer, ending its agent: the relaunch waits for that (Monitor.launch), not this.
            return Ending(128 - code, now, f"killed by signal {-code}")
        holder = holder_of(child)
        if holder is not None and holder.pid in (0, child.pid):
            return None  # a step of the ended loop still holds its lock: its end is being recorded
        recorded = ending_of_run(child, now)
        at = recorded.at if recorded else now
        if code < 0:
            return Ending(128 - code, at, f"killed by signal {-code}", recorded.cost if recorded else 0.0,
                          recorded.model if recorded else None)
        return Ending(code, at, recorded.reason if recorded else "", recorded.cost if recorded else 0.0,
                      recorded.model if recorded else None)
    holder = holder_of(child)
    if holder is not None and holder.pid in (0, child.pid):
        # Still its loop; pid 0: its record is already let go, its end being recorded (finish
        # releases the record first, then records `loop_end`; the lock goes when the loop exits).
        if not child.run_id and holder.pid:
            child.run_id = holder.run_id
        return None
    if holder is None and not child.run_id and _same_process(child):
        return None  # still starting: its lock is not taken yet
    recorded = ending_of_run(child, now)
    return recorded or Ending(None, now, "vanished: its loop ended without recording how")


def ending_of_run(child: Child, now: float) -> Ending | None:
    """The child's `loop_end` from its own ledger (bounded: one run's few events), if recorded,
    with what its phases cost and the model they used (kept in the fleet's ledger: the child's
    goes with its worktree after the merge)."""
    if child.layout is None or not child.run_id:
        return None
    path = child.layout.ledger_file
    if not path.is_file():
        return None
    try:
        with Ledger.open(path, readonly=True) as led:
            ends = led.events(child.run_id, kinds=["loop_end"], limit=MAX_EVENTS, newest=True)
            costs = led.events(child.run_id, kinds=["phase_end"], limit=1000)
    except (LedgerError, OSError, Exception):  # a damaged child ledger: its end is unknown, not a crash
        return None
    cost = 0.0
    for ev in costs:
        value = ev.get("cost_usd")
        if isinstance(value, (int, float)):
            cost += float(value)
    model = next((m for ev in reversed(costs) if isinstance(m := ev.get("model_used"), str) and m), None)
    if not ends:
        return None
    last = ends[-1]
    code = last.get("exit_code")
    return Ending(code if isinstance(code, int) else None, float(last.get("epoch", now)), str(last.get("reason", "")),
                  cost, model)


def install_hook(worktree: Path, cfg: Config, timeout: float) -> None:
    """A Claude Code child needs the heartbeat hook in its worktree (settings.local.json is
    untracked: a fresh worktree lacks it); best effort, bounded: a child without it is judged by
    its output and processes, and its preflight says what is wrong."""
    try:
        if adapter_of(cfg).name != "claude":
            return
    except Exception:  # noqa: BLE001 - no adapter to speak of: the child's preflight says what is wrong
        return
    genesis = Path(sys.executable).parent / "genesis"
    argv = [str(genesis)] if genesis.is_file() else [sys.executable, "-m", "genesis"]
    try:
        subprocess.run([*argv, "--project", str(worktree), "hook", "install", "--scope", "local"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


def agent_deaths(child: Child, after: int) -> tuple[list[float], int, float | None]:
    """When the child's agents died by a signal Genesis did not send (the OOM killer, a kill -9)
    since its ledger's event `after`, the newest event read, and when the newest of those events'
    agents started (None: none started): the loop starts an agent again only on the fleet's go
    (loop/agentgo.py), so the fleet hears of it only here. ([], after, None) when nothing is known."""
    if child.layout is None or not child.run_id or not child.layout.ledger_file.is_file():
        return [], after, None
    try:
        with Ledger.open(child.layout.ledger_file, readonly=True) as led:
            seen = led.events(child.run_id, kinds=["phase_start", "phase_end"], after_id=after, limit=1000)
    except (LedgerError, OSError, Exception):  # a damaged child ledger: nothing known, not a crash
        return [], after, None
    died = [float(e.get("epoch") or 0.0) for e in seen if e.get("event") == "phase_end" and agent_died(e)]
    started = [float(e.get("epoch") or 0.0) for e in seen if e.get("event") == "phase_start"]
    return died, max((int(e.get("seq") or 0) for e in seen), default=after), max(started, default=None)


def signal_child(child: Child, sig: int) -> bool:
    """Send sig to the child's loop if, at this moment, it still is that loop: the same process
    (pid and start time) and, once it took its lock, still the lock's holder."""
    if not _same_process(child):
        return False
    if child.popen is not None and child.popen.poll() is not None:
        return False
    holder = holder_of(child)
    if holder is not None and holder.pid != child.pid:
        return False
    if holder is None and child.popen is None and child.run_id:
        return False  # adopted, and its lock is let go: it is ending by itself
    try:
        os.kill(child.pid, sig)
    except ProcessLookupError:
        return False
    child.signalled = sig
    return True


SIGNALS = {signal.SIGHUP: "HUP", signal.SIGINT: "INT", signal.SIGTERM: "TERM"}


def live_children(ledger_path: Path) -> list[tuple[str, Holder]]:
    """The fleet's child loops running now (their loop lock held), by the fleet ledger's worktrees:
    found even while no monitor runs (`genesis stop` on a fleet whose monitor died)."""
    from_ledger: list[tuple[str, Path]] = []
    try:
        with FleetLedger.open(ledger_path, readonly=True) as ledger:
            from_ledger = [(row.id, Path(row.worktree)) for row in ledger.tasks()
                           if row.worktree and row.state not in TERMINAL]
    except (LedgerError, OSError):
        return []
    live = []
    for task_id, worktree in from_ledger:
        layout = layout_of(worktree) if worktree.is_dir() else None
        holder = current_holder(layout.loop_lock, layout.loop_record) if layout else None
        if holder is not None:
            live.append((task_id, holder))
    return live
