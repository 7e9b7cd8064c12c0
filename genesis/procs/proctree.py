"""Processes: identity that survives pid reuse, proof of ownership, and killing a tree."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import psutil

__all__ = ["ProcId", "KillReport", "identify", "alive", "descendants", "descendant_pids", "marked", "protected_pids",
           "adopted", "spare", "descends_from", "command_line", "kill_all", "become_subreaper", "reap_zombie_children"]

POLL = 0.05
_RAW_ENVIRON = sys.platform.startswith("linux") and os.path.isdir("/proc/self")
_TREE_BOUND = 100_000   # more descendants than a machine runs: a walk never goes on without end
# Whether the kernel lists each task's children (CONFIG_PROC_CHILDREN, in the common distributions' kernels).
_CHILD_LISTS = sys.platform.startswith("linux") and os.path.exists(f"/proc/self/task/{os.getpid()}/children")


@dataclass(frozen=True, order=True)
class ProcId:
    """A process as (pid, start time): a recycled pid never matches an old record."""

    pid: int
    create_time: float

    def process(self) -> psutil.Process | None:
        """The live process this record names, or None if it is gone or the pid was reused."""
        try:
            proc = psutil.Process(self.pid)
            if proc.create_time() != self.create_time:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None


@dataclass(frozen=True)
class KillReport:
    targets: int              # processes found to kill
    terminated: int           # gone after SIGTERM within the grace period
    killed: int               # needed SIGKILL
    survivors: tuple[int, ...]


def identify(pid: int) -> ProcId | None:
    try:
        return ProcId(pid, psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def descendants(root: ProcId) -> list[ProcId]:
    """The root (if still itself) and every descendant visible now."""
    proc = root.process()
    if proc is None:
        return []
    found = [root]
    for pid in descendant_pids(proc):
        ident = identify(pid)
        if ident is not None:
            found.append(ident)
    return found


def descendant_pids(proc: psutil.Process) -> list[int]:
    """The pids of every descendant of a live process (not the process itself), parents first.

    The watcher and the companion look at their trees at every check. psutil finds children
    by reading every process's /proc/PID/stat (a map of parents: ~500 files on a busy machine,
    twice a check); where Linux lists each task's children (/proc/PID/task/TID/children) the
    walk reads only the tree's own. Either way it is a moment's sight, as a fork can come just
    after: the kill freezes what it finds and looks again (kill_all)."""
    if not _CHILD_LISTS:
        try:
            return [kid.pid for kid in proc.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return []
    found: list[int] = []
    seen = {proc.pid}
    todo = [proc.pid]
    while todo and len(found) < _TREE_BOUND:
        for kid in _children_of(todo.pop()):   # a child is found only once its parent is
            if kid not in seen:
                seen.add(kid)
                found.append(kid)
                todo.append(kid)
    return found


def _children_of(pid: int) -> list[int]:
    """A process's children as the kernel lists them, under each of its threads (a child is
    listed under the thread that forked it); none once it is gone."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                kids.extend(int(field) for field in fh.read().split())
        except (OSError, ValueError):
            continue   # the thread (or the process) ended meanwhile
    return kids


def marked(markers: dict[str, str], uid: int | None = None, every: bool = False) -> list[ProcId]:
    """Processes of this user whose environment carries any (or, with every, all) of the KEY=VALUE markers.

    The loop puts the markers into the agent's environment; every process the agent
    starts inherits them, even one that moved to its own session or was orphaned, so a
    match is proof that the process descends from one of our agents.
    """
    uid = os.geteuid() if uid is None else uid
    if not _RAW_ENVIRON:
        return _marked_by_psutil(markers, uid, every)
    # On Linux each environment is read as it lies in /proc, one file a process, and searched for
    # the exact entries: the watcher scans every tick, and psutil's parsing of every process's
    # status and environment cost it ~8x as much on a busy machine. What matches is proved as
    # psutil proves it (the real uid), and named by the same start time as identify().
    wanted = [b"\0" + f"{key}={value}".encode() + b"\0" for key, value in markers.items()]
    found = []
    for pid in psutil.pids():
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:   # another user's (or a setuid program's)
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                block = b"\0" + fh.read() + b"\0"   # what exec gave it: bounded by the kernel
        except OSError:   # gone, or not ours to read
            continue
        if not (all if every else any)(entry in block for entry in wanted):
            continue
        try:
            proc = psutil.Process(pid)
            if proc.uids().real == uid:
                found.append(ProcId(pid, proc.create_time()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _marked_by_psutil(markers: dict[str, str], uid: int, every: bool) -> list[ProcId]:
    found = []
    for proc in psutil.process_iter(["uids"]):
        try:
            uids = proc.info["uids"]
            if uids is None or uids.real != uid:
                continue
            env = proc.environ()
            if (all if every else any)(env.get(k) == v for k, v in markers.items()):
                found.append(ProcId(proc.pid, proc.create_time()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


_SPARED: set[ProcId] = set()


def spare(pid: int) -> None:
    """A process this one started for its own work (an alert's deliverer): it and its
    descendants are never taken for the agent's orphans by adopted()."""
    ident = identify(pid)
    if ident is not None:
        _SPARED.add(ident)


def adopted(since: float) -> list[ProcId]:
    """This process's descendants started at or after `since` (a create time).

    While this process watches an agent as its child subreaper, every orphan of the agent's
    tree is re-parented to it: descent is proof of ownership whatever the orphan did to its
    environment or session. The start time leaves out what this process (a test runner, say)
    had started itself before the agent.
    """
    found = []
    kids = descendant_pids(psutil.Process())
    spared = {ident for root in list(_SPARED) for ident in descendants(root)}
    _SPARED.intersection_update(spared)  # the ones gone are forgotten
    for kid in kids:
        ident = identify(kid)
        if ident is not None and ident.create_time >= since and ident not in spared:
            found.append(ident)
    return found


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `ancestor` is among pid's parents (a zombie's parent is still known)."""
    try:
        proc = psutil.Process(pid)
        for _ in range(4096):  # bounded: a parent chain is never that long
            ppid = proc.ppid()
            if ppid == ancestor:
                return True
            if ppid <= 1:
                return False
            proc = psutil.Process(ppid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return False


def command_line(pid: int, width: int = 200) -> str:
    """A process's command line (its name for a zombie), cut short; "?" once it is gone."""
    try:
        proc = psutil.Process(pid)
        try:
            line = " ".join(proc.cmdline())
        except (psutil.ZombieProcess, psutil.AccessDenied):
            line = ""
        line = line or f"[{proc.name()}]"
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "?"
    return line if len(line) <= width else line[:width - 3] + "..."


def protected_pids() -> set[int]:
    """Never signalled: pid 0 and 1, this process and all of its ancestors."""
    pids = {0, 1, os.getpid()}
    try:
        for parent in psutil.Process().parents():
            pids.add(parent.pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return pids


def _send(ident: ProcId, sig: int) -> bool:
    proc = ident.process()
    if proc is None:
        return False
    try:
        proc.send_signal(sig)
        return True
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return False


def alive(ident: ProcId) -> bool:
    """The process still runs (not a zombie); one we may not examine is taken as running."""
    proc = ident.process()
    if proc is None:
        return False
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def reap_zombie_children(keep: int | None = None) -> None:
    """Collect exited children (orphans adopted as subreaper), leaving `keep` to its Popen.

    waitid(WNOWAIT) peeks at the next exited child without collecting it, so the agent's
    own exit status is never taken from under subprocess.Popen.
    """
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == 0 or info.si_pid == keep:
            return
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return


def _collect(idents: set[ProcId], keep: Iterable[int]) -> None:
    """Reap those of the idents that are our own exited children (adopted orphans)."""
    me, keep = os.getpid(), set(keep)
    for ident in idents:
        proc = ident.process()
        try:
            if proc is not None and ident.pid not in keep and proc.ppid() == me \
                    and proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(ident.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError, OSError):
            pass


def _wait_gone(idents: set[ProcId], deadline: float, keep: Iterable[int]) -> set[ProcId]:
    while True:
        _collect(idents, keep)
        idents = {i for i in idents if alive(i)}
        if not idents or time.monotonic() >= deadline:
            return idents
        time.sleep(POLL)


def kill_all(find: Callable[[], Iterable[ProcId]], grace: float, keep: Iterable[int] = (),
             rounds: int = 5) -> KillReport:
    """Stop, terminate, then kill every process `find` returns, until none is left.

    `find` is called again after each step so that children forked meanwhile are caught:
    first everything found is frozen with SIGSTOP (a forking tree stops growing), then
    SIGTERM and SIGCONT let each clean up, and after `grace` seconds SIGKILL ends the rest.
    Pids in protected_pids() are never signalled, whatever `find` says.
    """
    protected = protected_pids()
    keep = tuple(keep)

    def found() -> set[ProcId]:
        return {i for i in find() if i.pid not in protected}

    frozen: set[ProcId] = set()
    for _ in range(rounds):
        new = found() - frozen
        if not new:
            break
        for ident in new:
            _send(ident, signal.SIGSTOP)
        frozen |= new
    if not frozen:
        return KillReport(targets=0, terminated=0, killed=0, survivors=())  # nothing found, nothing to fork
    targets = {i for i in frozen if alive(i)}
    for ident in targets:
        _send(ident, signal.SIGTERM)
        _send(ident, signal.SIGCONT)
    left = _wait_gone(targets, time.monotonic() + grace, keep)
    killed = set(left)
    for _ in range(rounds):
        for ident in left:
            _send(ident, signal.SIGKILL)
        _wait_gone(left, time.monotonic() + 2.0, keep)
        left = {i for i in found() | left if alive(i)}
        if not left:
            break
        killed |= left
    return KillReport(targets=len(targets | killed), terminated=len(targets - killed),
                      killed=len(killed), survivors=tuple(sorted(i.pid for i in left)))


def become_subreaper() -> bool:
    """On Linux, adopt orphaned descendants (PR_SET_CHILD_SUBREAPER) so they stay findable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False
