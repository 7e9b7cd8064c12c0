"""The events log (one JSON object per line): what happened overnight, for the morning."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["record", "read_events", "MAX_READ_BYTES"]

MAX_READ_BYTES = 32 << 20  # a report reads at most the newest 32 MiB of the log


def record(path: Path, run_id: str, kind: str, **detail: Any) -> None:
    """Append one event; a single O_APPEND write, so concurrent writers never interleave."""
    event = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "run_id": run_id, "event": kind}
    event.update(detail)
    line = (json.dumps(event, sort_keys=False, default=str) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _tail_text(path: Path, limit: int) -> str:
    """The file's last `limit` bytes, starting at a whole line; "" if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, OSError):
        return ""
    with os.fdopen(fd, "rb") as fh:
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
