"""One loop per project, enforced by the kernel: a flock held for the loop's whole life.

The bash loop opens the lock file on a descriptor it keeps until it exits, and the
preflight step locks that descriptor (flock locks belong to the open file, which the loop
holds). The kernel drops the lock when the loop and every step it started are gone, so a
SIGKILLed loop never blocks the next start, and deleting files never lets a second loop
in while the first still runs. A small record beside the lock names the holder for
messages; the lock, not the record, is the truth.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from genesis.hints import hint
from genesis.procs.proctree import identify
from genesis.store.atomicio import CorruptFile, finite, read_json, write_json

__all__ = ["Holder", "Locked", "acquire", "release", "current_holder", "hold", "recorded", "same_file", "FLEET_RUN"]

# A fleet's monitor holds its project's loop lock (a single loop and a fleet exclude each other)
# under a run id starting so: what `stop` and `status` tell apart.
FLEET_RUN = "fleet-"


@dataclass(frozen=True)
class Holder:
    pid: int                       # 0: the lock is held but its record is gone
    create_time: float
    run_id: str
    started_at: str
    host: str

    def alive(self) -> bool:
        """True if that very process (pid and start time) still runs on this host."""

        if self.host != socket.gethostname():
            return True  # cannot check another machine's processes: assume it runs
        ident = identify(self.pid)
        return ident is not None and ident.create_time == self.create_time


class Locked(RuntimeError):
    def __init__(self, holder: Holder, path: Path, project: Path | None = None):
        if holder.pid and holder.alive():
            stop = f"`{hint(project, 'stop')}` or " if project is not None else ""
            who = (f"pid {holder.pid} (run {holder.run_id}, started {holder.started_at} on {holder.host}); "
                   f"stop it first ({stop}kill {holder.pid})")
        elif holder.pid:
            who = (f"a step of the loop pid {holder.pid} (run {holder.run_id}), which is gone: its last phase "
                   f"is still being ended; try again in a moment")
        else:
            who = "a process whose record is gone; find it with `fuser` or `lsof` on the lock"
        super().__init__(f"another Genesis loop is already running on this project: {who}. Lock: {path}")
        self.holder = holder


def _read(record: Path) -> Holder | None:
    try:
        data = read_json(record)
    except (CorruptFile, OSError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or finite(data.get("create_time")) is None:
        return None
    return Holder(data["pid"], float(data["create_time"]), str(data.get("run_id", "")),
                  str(data.get("started_at", "")), str(data.get("host", "")))


def recorded(record: Path, run_id: str) -> Holder | None:
    """The holder record, if it is this run's (what the loop wrote at its start)."""
    holder = _read(record)
    return holder if holder is not None and holder.run_id == run_id else None


def _unknown() -> Holder:
    return Holder(0, 0.0, "", "", socket.gethostname())


def same_file(fd: int, path: Path) -> bool:
    """The descriptor is the regular file at path: not a symlink planted in its place, not a
    file deleted or replaced since it was opened."""
    try:
        st, at = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(at.st_mode) and (st.st_dev, st.st_ino) == (at.st_dev, at.st_ino)


PROBE_RETRIES = 5    # tries past a probe's momentary shared lock before a start is refused
PROBE_PAUSE = 0.02   # seconds between them


def acquire(lock: Path, record: Path, fd: int, pid: int, run_id: str, project: Path | None = None) -> Holder:
    """Lock the loop's descriptor `fd` (open on `lock`) for good; Locked (naming how to stop the
    other loop of project) if another loop has it."""
    if not same_file(fd, lock):
        raise ValueError(f"descriptor {fd} is not the lock file {lock}")
    for attempt in range(PROBE_RETRIES + 1):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            # current_holder() (a `genesis status --watch`, every second) holds a shared lock
            # for an instant to ask the kernel: that is not a loop. A loop holds it for good.
            if attempt == PROBE_RETRIES:
                raise Locked(_read(record) or _unknown(), lock, project) from None
            time.sleep(PROBE_PAUSE)

    ident = identify(pid)
    if ident is None:
        raise ValueError(f"loop process {pid} does not exist")
    mine = Holder(pid, ident.create_time, run_id, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  socket.gethostname())
    write_json(record, asdict(mine))
    return mine


def current_holder(lock: Path, record: Path) -> Holder | None:
    """The running loop, or None: asks the kernel whether the lock is held."""
    try:
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None  # no lock file: no loop has run since the state was made
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(record) or _unknown()
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def release(record: Path, run_id: str) -> bool:
    """Remove the holder record if it is this run's (the lock goes when the loop exits)."""
    holder = _read(record)
    if holder is None or holder.run_id != run_id:
        return False
    try:
        os.unlink(record)
    except FileNotFoundError:
        return False
    return True


def hold(lock: Path, record: Path, run_id: str) -> int:
    """Open and lock the lock file in this process (for a loop run from Python, and tests);
    returns the descriptor, which holds the lock until it is closed."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        acquire(lock, record, fd, os.getpid(), run_id)
    except BaseException:
        os.close(fd)
        raise
    return fd
