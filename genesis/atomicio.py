"""Atomic, symlink-safe JSON state files: a reader sees the old file or the new one."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any

__all__ = ["CorruptFile", "TooLarge", "read_bytes", "read_json", "write_json", "quarantine", "write_text"]

MAX_STATE_BYTES = 1 << 20


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
    the next write.
    """
    path = Path(path)
    _sweep_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
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
