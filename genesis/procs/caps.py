"""The agent tree's resource caps: a pids cap (a fork bomb meets it) and, where cgroup v2 is
not there, the memory cap too, in cgroup v1's hierarchies where they are writable.

With cgroup v2 the agent's own group (cgroups.py) takes both: `pids.max` written here,
`memory.max` by memory.py. With cgroup v1 (a container, an older distribution) a group of
the agent's own is made in the `pids` and `memory` hierarchies below this process's, and
the child joins them between fork and exec, like the v2 group. RLIMIT_NPROC is no substitute:
it counts every process of the user, the loop's and the user's own included, and does not
hold for root. Where neither can be written the agent runs uncapped, and a note says so.

At the end, the groups' event counters say whether a cap bit: `pids.events` (forks refused)
and the memory cap's OOM kills, for the phase's reason.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Caps", "cap_pids", "open_v1", "bitten"]

V1_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Caps:
    """The groups the child joins (cgroup.procs opened before the fork), and their folders."""
    folders: tuple[Path, ...]
    fds: tuple[int, ...]

    def join(self) -> None:
        """In the child between fork and exec; nothing may raise here."""
        for fd in self.fds:
            try:
                os.write(fd, b"0")
            except OSError:
                pass

    def remove(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for folder in self.folders:
            try:
                os.rmdir(folder)
            except OSError:
                pass  # still busy (a process left): the sweep ends it; an empty group costs nothing


def cap_pids(group: Path, most: int) -> str:
    """Write pids.max of the agent's (v2) group; "" or why it could not."""
    try:
        (group / "pids.max").write_text(str(most))
    except OSError as exc:
        return f"cannot cap the agent's processes in {group} ({exc.strerror}; the pids controller may be off there)"
    return ""


def _own_v1(controller: str) -> Path | None:
    """This process's group in a cgroup v1 hierarchy (e.g. 'pids'), or None."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, names, path = line.rstrip("\n").split(":", 2)
                if controller in names.split(","):
                    return V1_ROOT / controller / path.lstrip("/")
    except (OSError, ValueError):
        return None
    return None


def open_v1(name: str, pids_max: int | None, memory_max: int | None) -> tuple[Caps | None, str]:
    """Groups named `name` in cgroup v1's pids and memory hierarchies with the caps written;
    (None, why) where none could be made."""
    folders: list[Path] = []
    fds: list[int] = []
    why: list[str] = []
    for controller, file, value in (("pids", "pids.max", pids_max), ("memory", "memory.limit_in_bytes", memory_max)):
        if not value:
            continue
        own = _own_v1(controller)
        if own is None or not (own / "cgroup.procs").exists():
            why.append(f"no cgroup v1 {controller} hierarchy")
            continue
        folder = own / name
        try:
            folder.mkdir()
            (folder / file).write_text(str(value))
            fds.append(os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            folders.append(folder)
        except OSError as exc:
            why.append(f"cannot cap {controller} in {folder} ({exc.strerror})")
            try:
                folder.rmdir()
            except OSError:
                pass
    if not fds:
        return None, "; ".join(why) or "no cap asked"
    return Caps(tuple(folders), tuple(fds)), "; ".join(why)


def _count(path: Path, key: str) -> int:
    try:
        found = re.search(rf"^{key}\s+(\d+)", path.read_text(), re.M)
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


def bitten(folders: tuple[Path, ...], pids_max: int | None, memory_max: int | None) -> str:
    """Which cap bit the agent's tree, in words ("" none): its own reason for the phase's end."""
    forks = sum(_count(f / "pids.events", "max") for f in folders)
    kills = sum(_count(f / "memory.events", "oom_kill") + _count(f / "memory.oom_control", "oom_kill")
                for f in folders)
    said = []
    if forks:
        said.append(f"the agent's tree met its process cap (GENESIS_AGENT_PIDS_MAX={pids_max}): {forks} fork(s) "
                    f"refused")
    if kills:
        size = f"{memory_max >> 20}M" if memory_max else "its"
        said.append(f"the memory cap (GENESIS_AGENT_MEMORY_MAX, {size}) killed {kills} process(es) of the agent's "
                    f"tree (a filled /tmp counts: it is memory)")
    return "; ".join(said)
