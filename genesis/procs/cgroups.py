"""A cgroup of the agent's own (Linux, cgroup v2): ownership that no fork, setsid, cleared
environment or double fork can shed, and one write that ends everything in it.

The agent's cgroup is a child of the watcher's, created before the agent execs: the child
process joins it between fork and exec, so everything the agent ever starts is born in it.
Where cgroup v2 is not there or not writable (cgroup v1, a read-only /sys/fs/cgroup, a
session scope not delegated to the user, macOS), `create` says why and the watcher does
without: its other proofs of ownership (descent, the run's marker, being the subreaper)
still apply.

Being in the group is no proof alone: the agent can move any process of its user into it. So
before the watcher ends the group, what it holds without proof of descent from the agent is
moved back out (`evict`), and only the agent's own are killed with it (watch/supervisor.py).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = ["AgentGroup", "create", "own_cgroup"]

POLL = 0.02
_counter = 0


@dataclass(frozen=True)
class AgentGroup:
    """One agent's cgroup: its directory, and cgroup.procs opened before the fork."""

    path: Path
    rel: str                       # its path as /proc/PID/cgroup shows it ("/.../genesis-...")
    procs_fd: int

    def join(self) -> None:
        """Run in the child between fork and exec (preexec_fn): move it into the group.

        Nothing may raise here (Popen would fail the start); a child that could not move is
        seen by `holds` afterwards and the watcher does without the group.
        """
        try:
            os.write(self.procs_fd, b"0")
        except OSError:
            pass

    def holds(self, pid: int) -> bool:
        """Whether pid is in this group or a group below it now (False once it has exited)."""
        where = _cgroup_of(pid)
        return where is not None and (where == self.rel or where.startswith(self.rel + "/"))

    def pids(self) -> list[int]:
        """Every process in the group, and in the groups an agent may have made below it."""
        found: list[int] = []
        for folder in self._folders():
            try:
                found += [int(p) for p in (folder / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                continue
        return found

    def evict(self, pids: Iterable[int]) -> list[int]:
        """Move processes out of the group into its parent (the watcher's group), so that the
        group's kill spares them; returns those that could not be moved (still inside)."""
        stuck = []
        for pid in pids:
            try:
                (self.path.parent / "cgroup.procs").write_text(str(pid))
            except OSError as exc:
                if exc.errno != errno.ESRCH:  # ESRCH: it has exited meanwhile
                    stuck.append(pid)
        return stuck

    def _folders(self) -> list[Path]:
        """The group's folder and those below it, deepest first (the order rmdir needs)."""
        return [Path(top) for top, _dirs, _files in os.walk(self.path, topdown=False)]

    def kill(self, protected: Iterable[int] = (), wait: float = 2.0) -> int:
        """SIGKILL everything in the group; returns how many processes were in it.

        cgroup.kill (Linux 5.14+) kills atomically, a forking tree included; without it, every
        pid listed is killed until none is left. A protected pid found in the group (an agent
        with the rights to move its watcher in) stops the atomic kill: the others are then
        killed one by one.
        """
        found = self.pids()
        if not found:
            return 0
        keep = set(protected)
        deadline = time.monotonic() + wait
        atomic = (self.path / "cgroup.kill").exists() and not keep.intersection(found)
        if atomic:
            try:
                (self.path / "cgroup.kill").write_text("1")
            except OSError:
                atomic = False
        while True:
            left = [p for p in self.pids() if p not in keep]
            if not left or time.monotonic() >= deadline:
                return len(found)
            if not atomic:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(POLL)

    def remove(self, wait: float = 2.0) -> bool:
        """Remove the (emptied) group; True when it is gone."""
        try:
            os.close(self.procs_fd)
        except OSError:
            pass
        deadline = time.monotonic() + wait
        while True:
            try:
                for folder in self._folders():
                    os.rmdir(folder)
                return True
            except FileNotFoundError:
                if not self.path.exists():
                    return True
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY) or time.monotonic() >= deadline:
                    return False
            time.sleep(POLL)


def _cgroup_of(pid: int | str) -> str | None:
    """The cgroup v2 path of a process ("0::/path" in /proc/PID/cgroup), or None."""
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n")
    except OSError:
        return None
    return None


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def own_cgroup() -> tuple[Path | None, str, str]:
    """(the directory of this process's cgroup v2, its path as /proc shows it, "") or (None, "", why not)."""
    if not sys.platform.startswith("linux"):
        return None, "", "cgroups are Linux only"
    rel = _cgroup_of("self")
    if rel is None:
        return None, "", "no cgroup v2 hierarchy (cgroup v1 only)"
    try:
        with open("/proc/self/mountinfo") as fh:
            mounts = fh.read().splitlines()
    except OSError as exc:
        return None, "", f"cannot read /proc/self/mountinfo ({exc.strerror})"
    for line in mounts:
        mine, _, theirs = line.partition(" - ")
        fields, fstype = mine.split(), theirs.split()[:1]
        if fstype != ["cgroup2"] or len(fields) < 5:
            continue
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        inner = rel if root == "/" else rel[len(root):] if rel.startswith(root + "/") or rel == root else None
        if inner is None:
            continue
        path = Path(mountpoint) / inner.lstrip("/")
        try:
            if str(os.getpid()) in (path / "cgroup.procs").read_text().split():
                return path, rel, ""
        except OSError:
            continue
    return None, "", "this process's cgroup v2 directory is not mounted where it can be found"


def create(tag: str) -> tuple[AgentGroup | None, str]:
    """A fresh cgroup for one agent under the watcher's own, or (None, why not)."""
    global _counter
    parent, rel, why = own_cgroup()
    if parent is None:
        return None, why
    _sweep_stale(parent)
    _counter += 1
    name = f"genesis-{os.getpid()}-{_counter}-{re.sub(r'[^A-Za-z0-9_.-]', '_', tag)[:40]}"
    path = parent / name
    try:
        os.mkdir(path)
    except OSError as exc:
        return None, f"cannot create a cgroup in {parent} ({exc.strerror})"
    try:
        fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        try:
            os.rmdir(path)
        except OSError:
            pass
        return None, f"cannot write {path}/cgroup.procs ({exc.strerror})"
    return AgentGroup(path, rel.rstrip("/") + "/" + name, fd), ""


def _sweep_stale(parent: Path) -> None:
    """Remove the empty groups of watchers that died (SIGKILL) before removing their own.

    Only empty ones: rmdir refuses a populated group, and a live watcher's is never touched.
    """
    try:
        names = [e.name for e in os.scandir(parent) if e.name.startswith("genesis-") and e.is_dir()]
    except OSError:
        return
    for name in names:
        pid = name.split("-")[1]
        if not pid.isdigit() or int(pid) == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            os.rmdir(parent / name)
        except OSError:
            pass
