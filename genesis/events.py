"""The events log (one JSON object per line): what happened overnight, for the morning."""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from .atomicio import DiskFull, free_bytes, no_room

__all__ = ["record", "read_events", "MAX_READ_BYTES"]

MAX_READ_BYTES = 32 << 20  # a report reads at most the newest 32 MiB of the log


def record(path: Path, run_id: str, kind: str, /, **detail: Any) -> None:
    """Append one event; a single O_APPEND write, so concurrent writers never interleave.

    A full disk raises atomicio.DiskFull and leaves no part of the line behind. A symlink
    or anything but a regular file at path is refused (OSError), never written through.
    """
    event = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "run_id": run_id, "event": kind}
    event.update(detail)
    line = (json.dumps(event, sort_keys=False, default=str) + "\n").encode("utf-8")
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)  # O_NONBLOCK: a FIFO planted there is never waited on
    except OSError as exc:
        full = no_room(exc, path, len(line))
        if full:
            raise full from exc
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise _not_regular(path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_regular(path)
        try:
            written = os.write(fd, line)
        except OSError as exc:
            full = no_room(exc, path, len(line))
            if full:
                raise full from exc
            raise
        if written < len(line):  # the disk filled up during the write: take the fragment back
            _take_back(fd, written)
            try:
                free = free_bytes(path.parent)
            except OSError:
                free = None
            raise DiskFull(path, free, len(line))
    finally:
        os.close(fd)


def _not_regular(path: Path) -> OSError:
    return OSError(errno.EINVAL, f"{path} is not a regular file; remove it and the events log starts again")


def _take_back(fd: int, written: int) -> None:
    """Truncate the partial line just appended, unless another writer appended after it."""
    end = os.lseek(fd, 0, os.SEEK_CUR)
    if os.fstat(fd).st_size == end:
        os.ftruncate(fd, end - written)


def _tail_text(path: Path, limit: int) -> str:
    """The file's last `limit` bytes, starting at a whole line; "" if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""  # a FIFO or a device: nothing to report, and never a wait
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - limit))
        data = fh.read(limit)
    if size > limit:
        data = data[data.find(b"\n") + 1:]
    return data.decode("utf-8", errors="replace")


def read_events(path: Path, run_id: str | None = None, all_runs: bool = False) -> list[dict[str, Any]]:
    """Events of one run (the latest when run_id is None), or of every run; bad lines skipped."""
    events = []
    for line in _tail_text(path, MAX_READ_BYTES).splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("run_id"), str) and isinstance(event.get("event"), str):
            events.append(event)
    if all_runs:
        return events
    if run_id is None:
        starts = [e["run_id"] for e in events if e.get("event") == "loop_start"]
        if not starts:
            return []
        run_id = starts[-1]
    return [e for e in events if e["run_id"] == run_id]
