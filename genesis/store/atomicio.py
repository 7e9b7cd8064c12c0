"""Atomic, symlink-safe JSON state files: a reader sees the old file or the new one."""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any

__all__ = ["CorruptFile", "TooLarge", "DiskFull", "read_bytes", "read_json", "write_json", "quarantine",
           "write_text", "free_bytes", "check_room", "no_room", "flock_within", "LOCK_POLL"]

MAX_STATE_BYTES = 1 << 20
LOCK_POLL = 0.05   # seconds between tries for a held lock
NO_ROOM = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class CorruptFile(ValueError):
    """A state file exists but cannot be used as it is."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class TooLarge(CorruptFile):
    """A file holds more than the reader's limit; only limit + 1 bytes of it were read."""

    def __init__(self, path: Path, limit: int):
        super().__init__(path, f"is larger than {limit} bytes")
        self.limit = limit


class DiskFull(OSError):
    """No room (or no quota) left to write a file; what was there before is intact."""

    def __init__(self, path: Path, free: int | None, need: int | None = None):
        room = "free space unknown" if free is None else f"{free} bytes free there"
        wanted = f", {need} needed" if need else ""
        super().__init__(errno.ENOSPC, f"no room to write {path} ({room}{wanted}); free some space on that "
                                       f"disk (the file was left as it was)")
        self.path = Path(path)
        self.free = free
        self.need = need

    def __str__(self) -> str:
        return self.strerror


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding path (or
    the nearest of its parents that exists)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def check_room(path: Path, need: int = 1 << 20) -> None:
    """DiskFull before a write when the file system holding path has less than need bytes."""
    try:
        free = free_bytes(path)
    except OSError:
        return  # not knowing is not full: the write itself still reports ENOSPC
    if free < need:
        raise DiskFull(path, free, need)


def no_room(exc: BaseException, path: Path, need: int | None = None) -> DiskFull | None:
    """The DiskFull to raise for exc when it is ENOSPC or EDQUOT, else None."""
    if isinstance(exc, DiskFull):
        return exc
    if not isinstance(exc, OSError) or exc.errno not in NO_ROOM:
        return None
    try:
        free = free_bytes(Path(path).parent)
    except OSError:
        free = None
    return DiskFull(path, free, need)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_bytes(path: Path, limit: int, follow_symlinks: bool = False) -> bytes:
    """A regular file's contents, reading at most limit + 1 bytes whatever its size.

    FileNotFoundError when it does not exist; TooLarge past the limit; CorruptFile for a
    symlink (unless follow_symlinks) or anything but a regular file: a FIFO or a device is
    refused at once instead of blocking or streaming forever.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise CorruptFile(path, "is a symlink; refusing to follow it") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CorruptFile(path, "is not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(path, limit)
    return data


def read_json(path: Path, limit: int = MAX_STATE_BYTES) -> Any | None:
    """Return the parsed file, None when it does not exist; CorruptFile when unusable.

    Opened with O_NOFOLLOW: a symlink planted at a state path is refused, not followed.
    """
    try:
        data = read_bytes(path, limit)
    except FileNotFoundError:
        return None
    if not data.strip():
        raise CorruptFile(path, "is empty")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptFile(path, f"is not valid JSON ({exc})") from None


def _sweep_temps(path: Path) -> None:
    """Remove temp files a crashed writer left beside path (their writer pid is gone)."""
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        pid = name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            try:
                os.unlink(path.parent / name)
            except OSError:
                pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: an existence check, nothing is sent
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Write via a temp file in the same directory, fsync, then rename over the target.

    A crash before the rename leaves the old file intact; its temp file is swept away by
    the next write. No room on the disk (ENOSPC, EDQUOT): DiskFull, the temp file gone
    and the old file intact.
    """
    path = Path(path)
    _sweep_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    except OSError as exc:
        full = no_room(exc, path)
        if full:
            raise full from exc
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        full = no_room(exc, path)
        if full:
            raise full from exc
        raise


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def quarantine(path: Path, now: float) -> Path:
    """Keep a bad file aside under a timestamped name for inspection; return the new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists() or target.is_symlink():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.rename(path, target)
    return target


def finite(value: Any) -> float | None:
    """A finite real number from JSON, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def flock_within(fd: int, seconds: float) -> bool:
    """Take an exclusive flock on fd, trying for at most `seconds`; False if still held by another."""

    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(LOCK_POLL)
