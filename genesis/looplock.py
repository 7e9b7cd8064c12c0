"""One loop per project: a lock record naming the running loop, released if its holder died."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from .atomicio import CorruptFile, finite, read_json, write_json
from .proctree import identify

__all__ = ["Holder", "Locked", "acquire", "release", "current_holder"]


@dataclass(frozen=True)
class Holder:
    pid: int
    create_time: float
    run_id: str
    started_at: str
    host: str

    def alive(self) -> bool:
        """True only if that very process (pid and start time) still runs on this host."""
        if self.host != socket.gethostname():
            return True  # cannot check another machine's processes: assume it runs
        ident = identify(self.pid)
        return ident is not None and ident.create_time == self.create_time


class Locked(RuntimeError):
    def __init__(self, holder: Holder, path: Path):
        super().__init__(f"another Genesis loop is already running on this project: pid {holder.pid} "
                         f"(run {holder.run_id}, started {holder.started_at} on {holder.host}); "
                         f"stop it first (`genesis stop` or kill {holder.pid}). Lock: {path}")
        self.holder = holder


def _read(path: Path) -> Holder | None:
    try:
        data = read_json(path)
    except CorruptFile:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or finite(data.get("create_time")) is None:
        return None
    return Holder(data["pid"], float(data["create_time"]), str(data.get("run_id", "")),
                  str(data.get("started_at", "")), str(data.get("host", "")))


def current_holder(path: Path) -> Holder | None:
    """The live loop holding the lock, or None (no record, or its holder is gone)."""
    holder = _read(path)
    return holder if holder is not None and holder.alive() else None


def acquire(path: Path, pid: int, run_id: str) -> Holder:
    """Record `pid` as this project's loop; Locked if a live loop already holds it."""
    ident = identify(pid)
    if ident is None:
        raise ValueError(f"loop process {pid} does not exist")
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        holder = current_holder(path)
        if holder is not None and holder.pid != pid:
            raise Locked(holder, path)
        mine = Holder(pid, ident.create_time, run_id,
                      time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), socket.gethostname())
        write_json(path, asdict(mine))
        return mine


def release(path: Path, run_id: str) -> bool:
    with FileLock(str(path) + ".lock"):
        holder = _read(path)
        if holder is None or holder.run_id != run_id:
            return False
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True
