"""Where `status --all` looks for the loops and fleets that ended lately: one small note per
project, in this user's shared state folder (`<shared>/ended/`), written at each loop's and
fleet's end.

A note only says where a project's state is; what ended, when and how is read from the
project's own ledgers, as for any project. It is keyed by the state folder, resolved: a
project named through a symlink, a relative path or a subfolder is one note. Notes older
than a day are not read, and one whose project is gone is passed over.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Mapping

from genesis.store.accounts import root_of
from genesis.store.atomicio import write_json

__all__ = ["note_end", "lately", "FOLDER", "KEEP"]

FOLDER = "ended"
KEEP = 7 * 24 * 3600.0     # seconds: older notes are removed when a new one is written
MAX_NOTES = 1000           # notes read at most (the newest)
MAX_BYTES = 4096


def _folder(env: Mapping[str, str] | None) -> Path:
    env = os.environ if env is None else env
    return root_of(env.get("GENESIS_SHARED_STATE_DIR", ""), env) / FOLDER


def note_end(project: Path, state_dir: Path, at: float | None = None,
             env: Mapping[str, str] | None = None) -> None:
    """Say that a run of project (its state in state_dir) ended now; never raises (a status
    hint is never worth failing a loop's end)."""
    try:
        folder = _folder(env)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        state = Path(state_dir).resolve()
        key = hashlib.sha1(str(state).encode()).hexdigest()[:20]
        now = time.time() if at is None else at
        write_json(folder / f"{key}.json", {"project": str(Path(project).resolve()), "state_dir": str(state),
                                            "at": now})
        for old in folder.glob("*.json"):
            try:
                if old.stat().st_mtime < now - KEEP:
                    old.unlink()
            except OSError:
                pass
    except Exception:  # noqa: BLE001 - no room, no home: the project's own status still works
        pass


def lately(now: float, within: float, env: Mapping[str, str] | None = None) -> list[tuple[Path, Path]]:
    """(project, state folder) of each project with a note from the `within` seconds before now."""
    try:
        notes = sorted(_folder(env).glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_NOTES]
    except OSError:
        return []
    found = []
    for path in notes:
        try:
            with open(path, "rb") as fh:
                data = json.loads(fh.read(MAX_BYTES))
            at, project, state = float(data["at"]), Path(data["project"]), Path(data["state_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if now - within <= at <= now + 60 and state.is_dir():
            found.append((project, state))
    return found
