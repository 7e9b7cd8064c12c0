"""git's index.lock before Genesis commits: a stale one (left by a killed git) is removed and
said; one a live process holds is waited for, within a bound, then named as the reason.

Stale means: no process this user can see has the file open, and no git process works in
this repository (its working folder is in the work tree or the git dir). Anything else is
someone's git at work, whose lock is never taken from it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

__all__ = ["LockState", "clear_stale", "holders", "HOLD_WAIT"]

HOLD_WAIT = 10.0      # seconds to wait for a held index.lock to go
POLL = 0.2


@dataclass(frozen=True)
class LockState:
    removed: str = ""     # what was removed, and why it was stale ("" when nothing was)
    held: str = ""        # who still holds it after the wait ("" when nobody does)


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def holders(lock: Path, roots: tuple[str, ...]) -> list[str]:
    """The live processes that hold lock open, or git processes working inside roots: 'pid (name)'."""
    found: list[str] = []
    target = os.path.realpath(lock)
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "name", "cwd"]):
        if proc.info["pid"] == me:
            continue
        try:
            name, cwd = proc.info["name"] or "", proc.info["cwd"] or ""
            if name.startswith("git") and cwd and _inside(os.path.realpath(cwd), roots):
                found.append(f"{proc.pid} ({name} in {cwd})")
                continue
            if any(os.path.realpath(f.path) == target for f in proc.open_files()):
                found.append(f"{proc.pid} ({name})")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def clear_stale(lock: Path, roots: tuple[str, ...], wait: float | None = None,
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> LockState:
    """Remove lock if it is stale; wait up to `wait` (HOLD_WAIT) for a held one to go; say which happened."""
    wait = HOLD_WAIT if wait is None else wait
    deadline = clock() + wait
    while True:
        try:
            st = os.lstat(lock)
        except FileNotFoundError:
            return LockState()
        who = holders(lock, roots)
        if not who:
            age = time.time() - st.st_mtime
            try:
                os.unlink(lock)
            except FileNotFoundError:
                return LockState()
            return LockState(removed=f"a stale {lock} ({age:.0f}s old; no process held it or ran git here), "
                                     f"left by a git that was killed, was removed")
        if clock() >= deadline:
            return LockState(held=f"{lock} is held by {', '.join(who[:3])} (waited {wait:g}s)")
        sleep(POLL)
