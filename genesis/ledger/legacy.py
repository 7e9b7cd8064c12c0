"""Bringing the events log of Genesis before the ledger (`events.jsonl`) into a new ledger, once."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from genesis.ledger.schema import renamed_stuck
from genesis.ledger.store import Ledger, LedgerError
from genesis.store.atomicio import DiskFull
from genesis.words import epoch_of

__all__ = ["import_events", "MAX_LEGACY_BYTES"]

MAX_LEGACY_BYTES = 32 << 20  # the newest 32 MiB of the old log: its whole history in practice


def _tail(path: Path, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""  # a FIFO or a device: nothing to bring, and never a wait
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - limit))
        data = fh.read(limit)
    return data[data.find(b"\n") + 1:] if size > limit else data


def import_events(led: Ledger, path: Path) -> int:
    """Record every well-formed event of the old log in the ledger (with its own time), then
    rename the log to events.jsonl.imported; returns how many came in."""

    count = 0
    for line in _tail(path, MAX_LEGACY_BYTES).decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not (isinstance(event, dict) and isinstance(event.get("run_id"), str)
                and isinstance(event.get("event"), str)):
            continue
        run_id, kind, at = event.pop("run_id"), event.pop("event"), epoch_of(event.pop("at", None))
        try:
            led.record(run_id, kind, at=at, **renamed_stuck(kind, event))  # in this version's words
        except (DiskFull, LedgerError):
            return count  # the rest stays in the old log, which is left where it is
        count += 1
    if count or path.is_file():
        try:
            os.replace(path, path.with_name(path.name + ".imported"))
        except OSError:
            pass
    return count
