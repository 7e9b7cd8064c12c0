"""Requests a live process picks up: one JSON file per request in a folder of Genesis's state
(the fleet's `<state>/fleet/requests`, a loop's `<state>/requests`), written atomically, read
and removed by the monitor's check or the loop's wait. That state is read-only in the agent's
box: the agent cannot plant a request."""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Collection

from genesis.store.atomicio import CorruptFile, read_json, write_json

__all__ = ["Request", "submit", "take", "FOLDER", "MOST"]

FOLDER = "requests"
MOST = 100            # requests read at one check; the rest at the next


@dataclass(frozen=True)
class Request:
    action: str
    at: float
    source: str = "terminal"       # terminal, dashboard, alert
    credential: str = ""
    task: str = ""
    note: str = ""
    seconds: float = 0.0
    id: str = ""

    @classmethod
    def from_json(cls, data: object) -> "Request | None":
        if not isinstance(data, dict):
            return None
        known = {f.name for f in fields(cls)}
        try:
            request = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None
        ok = isinstance(request.action, str) and isinstance(request.at, (int, float)) and \
            isinstance(request.task, str) and isinstance(request.seconds, (int, float))
        return request if ok else None


def submit(folder: Path, request: Request) -> Path:
    """Write the request where its process reads it; the file's path."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    ident = request.id or secrets.token_hex(6)
    path = folder / f"{int(request.at * 1000):015d}-{ident}.json"
    write_json(path, asdict(request) | {"id": ident})
    return path


def take(folder: Path, actions: Collection[str] | None = None) -> list[Request]:
    """The waiting requests (those of `actions` only, when given), oldest first, each removed as
    it is read: a request is acted on once. A file that is not a request is removed too."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))[:MOST]
    except OSError:
        return []
    found = []
    for name in names:
        path = folder / name
        try:
            request = Request.from_json(read_json(path))
        except (CorruptFile, OSError):
            request = None
        if request is not None and actions is not None and request.action not in actions:
            continue
        try:
            path.unlink()
        except OSError:
            continue  # another reader took it
        if request is not None:
            found.append(request)
    return found
