"""A pid seen inside the agent's PID namespace (the box's), told as the watcher sees it.

The hook writes the pid it knows (`$PPID`): inside a bubblewrap box that is the box's own
numbering. Linux lists every pid of a process, outermost first, on the `NSpid:` line of
/proc/<pid>/status; the agent's descendant whose innermost pid is the hook's is the one. The box's first process
(bubblewrap's, pid 1 inside) starts the command it runs: that child is the agent itself.
"""

from __future__ import annotations

import psutil

from genesis.procs.proctree import ProcId, descendants

__all__ = ["ns_pids", "outer_pid", "boxed"]


def ns_pids(pid: int) -> tuple[int, ...]:
    """The pids of pid in each namespace, outermost first; () if unknown (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return tuple(int(w) for w in line.split()[1:] if w.isdigit())
    except OSError:
        pass
    return ()


def outer_pid(inner: int, root: ProcId) -> int | None:
    """The watcher's pid of the descendant of root whose innermost pid is inner, or None."""
    for ident in descendants(root):
        found = ns_pids(ident.pid)
        if len(found) > 1 and found[-1] == inner:
            return ident.pid
    return None


def boxed(root: ProcId) -> ProcId | None:
    """The command a box below root runs (the eldest child of the box's pid 1), or None: not yet started, gone."""
    for ident in descendants(root):
        if ns_pids(ident.pid)[1:][-1:] == (1,):
            proc = ident.process()
            try:
                kids = sorted((k.create_time(), k.pid) for k in proc.children()) if proc is not None else []
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                kids = []
            return ProcId(kids[0][1], kids[0][0]) if kids else None
    return None
