"""The loop's companion: a small process that watches the bash loop itself.

A phase's watcher watches the agent, but nothing watched the loop: SIGKILLed, the night
ended with no end recorded and no alert; SIGSTOPped, it stood still for ever while `status`
said RUNNING. The companion is started by the loop once it holds its lock, in a session of
its own, outside the agent's tree and cgroup, holding no descriptor of the loop's (not
its lock), and it carries no run marker (no reaper takes it for the agent's). It sleeps
on the loop's exit (a pidfd on Linux, kqueue on macOS, else a timed sleep) and looks at
its state once a check:

- stopped (state T) at two checks in a row: frozen, said once; and once more when it runs again;
- gone: the loop's own steps are given a bounded time to end (a phase's watcher sees the
  loop gone within a check and ends its phase itself; a step that only waits is stopped),
  then, unless the loop recorded its own end, `lost` is called with what is left of the
  loop's tree, as seen at the last check (identities: no recycled pid is taken).

It signals nothing but processes of the loop's own tree as it saw them, and only after
the loop is gone. What to record, reap and tell is the caller's (genesis/loop/lostloop.py).
"""

from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass
from typing import Callable

import psutil

from genesis.clock import Clock, SystemClock
from genesis.procs.proctree import ProcId, alive, descendants

__all__ = ["Sight", "Watch", "look", "PidWatch", "watch_loop", "is_step", "FINISHING_STEPS"]

FINISHING_STEPS = ("run-phase", "finish")  # steps that end by themselves once the loop is gone
STOPPED = (psutil.STATUS_STOPPED, getattr(psutil, "STATUS_TRACING_STOP", "tracing-stop"))


@dataclass(frozen=True)
class Sight:
    """One look at the loop."""
    alive: bool
    stopped: bool                  # state T: SIGSTOP, SIGTSTP, a debugger


@dataclass(frozen=True)
class Watch:
    loop: ProcId                   # the bash loop (pid and start time)
    run_id: str
    interval: float                # a check: how often the loop's state is looked at
    settle: float                  # how long the loop's own steps may take to end once it is gone


def look(loop: ProcId) -> Sight:
    proc = loop.process()
    if proc is None:
        return Sight(False, False)
    try:
        state = proc.status()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return Sight(False, False)
    except psutil.AccessDenied:
        return Sight(True, False)
    if state == psutil.STATUS_ZOMBIE:  # killed; its parent has not collected it yet
        return Sight(False, False)
    return Sight(True, state in STOPPED)


class PidWatch:
    """Sleep until a process (not our child) exits or the timeout passes."""

    def __init__(self, pid: int):
        self.fd: int | None = None
        self.kq = None
        try:
            if hasattr(os, "pidfd_open"):
                self.fd = os.pidfd_open(pid)
            elif hasattr(select, "kqueue"):
                self.kq = select.kqueue()
                self.kq.control([select.kevent(pid, select.KQ_FILTER_PROC, select.KQ_EV_ADD,
                                               select.KQ_NOTE_EXIT)], 0, 0)
        except OSError:
            self.fd, self.kq = None, None  # already gone, or not supported: a timed sleep

    def wait(self, timeout: float) -> None:
        timeout = max(0.0, timeout)
        if self.fd is not None:
            select.select([self.fd], [], [], timeout)
        elif self.kq is not None:
            self.kq.control(None, 1, timeout)
        else:
            time.sleep(timeout)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if self.kq is not None:
            self.kq.close()


def is_step(ident: ProcId, run_id: str, names: tuple[str, ...] = FINISHING_STEPS) -> bool:
    """Whether the process is one of this run's `genesis` steps with one of those names."""
    proc = ident.process()
    try:
        argv = proc.cmdline() if proc is not None else []
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return run_id in argv and any(name in argv for name in names)


def _alive(idents: set[ProcId]) -> set[ProcId]:
    return {ident for ident in idents if alive(ident)}


def watch_loop(watch: Watch, ended: Callable[[], bool], frozen: Callable[[float], None],
               thawed: Callable[[float, float], None], lost: Callable[[list[ProcId]], None],
               clock: Clock | None = None) -> str:
    """Watch the loop to its end; returns how it ended: "ended" (it recorded its own end)
    or "lost" (it did not: `lost` was called)."""
    clock = clock or SystemClock()
    me = os.getpid()
    waiter = PidWatch(watch.loop.pid)
    tree: set[ProcId] = set()
    stopped_since: float | None = None
    told = False
    try:
        while True:
            sight = look(watch.loop)
            if not sight.alive:
                break
            tree = {i for i in descendants(watch.loop) if i.pid != me and i != watch.loop}
            now = clock.wall()
            if sight.stopped:
                if stopped_since is None:
                    stopped_since = now
                elif not told and now - stopped_since >= watch.interval * 0.9:
                    frozen(stopped_since)
                    told = True
            else:
                if told:
                    thawed(stopped_since, now - stopped_since)
                stopped_since, told = None, False
            waiter.wait(watch.interval)
    finally:
        waiter.close()
    if ended():
        return "ended"
    return "ended" if _settle(watch, tree, ended, clock) else _lost(tree, lost)


def _settle(watch: Watch, tree: set[ProcId], ended: Callable[[], bool], clock: Clock) -> bool:
    """Give the loop's steps their bounded time to end: a phase's watcher and a finish end by
    themselves; anything else of the loop's (a wait, the pause's sleep) is asked to stop.
    Whether the loop's end got recorded meanwhile."""
    for ident in _alive(tree):
        proc = ident.process()
        if proc is None or is_step(ident, watch.run_id) or not _ancestor_gone(ident, tree):
            continue
        try:
            proc.send_signal(signal.SIGTERM)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    deadline = clock.mono() + watch.settle
    while clock.mono() < deadline:
        if not _alive({i for i in tree if is_step(i, watch.run_id)}):
            break
        time.sleep(min(0.2, max(0.0, deadline - clock.mono())))
    return ended()


def _ancestor_gone(ident: ProcId, tree: set[ProcId]) -> bool:
    """A direct child of the loop (its parent gone): a step or the pause's sleep, not a
    process below a phase's watcher, which the watcher ends itself."""
    proc = ident.process()
    try:
        parent = proc.ppid() if proc is not None else 0
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    return not any(i.pid == parent for i in tree)


def _lost(tree: set[ProcId], lost: Callable[[list[ProcId]], None]) -> str:
    lost(sorted(_alive(tree)))
    return "lost"
