"""The events log (one JSON object per line): what happened overnight, for the morning."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["record", "read_events"]


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


def read_events(path: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """Events of one run (the latest when run_id is None); unreadable lines are skipped."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("run_id"), str):
            events.append(event)
    if run_id is None:
        starts = [e["run_id"] for e in events if e.get("event") == "loop_start"]
        if not starts:
            return []
        run_id = starts[-1]
    return [e for e in events if e["run_id"] == run_id]
