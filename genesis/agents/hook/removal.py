"""A user's `genesis hook uninstall` while a loop runs, remembered in that loop's state.

The loop's repair (loop/guard.py) puts back a hook that vanished mid-run, so that an
agent's `git clean -fdx` cannot switch its supervision off. A removal the user asked for is
another matter: noted here, in the private state of each running loop that guards that
settings file, it is respected instead of undone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from genesis.store.atomicio import CorruptFile, finite, read_json, write_json

__all__ = ["Removal", "note_removal", "removal_of", "clear_removal", "same_file"]


@dataclass(frozen=True)
class Removal:
    """The user removed the hook from this settings file at this time (epoch seconds)."""
    path: str
    at: float


def same_file(a: Path | str, b: Path | str) -> bool:
    """Whether two paths name one settings file (through a dotfile manager's symlink too)."""
    return os.path.realpath(a) == os.path.realpath(b)


def note_removal(marker: Path, path: Path, at: float) -> None:
    """Record that the user removed the hook from path (written atomically)."""
    write_json(marker, {"path": str(path), "at": at})


def removal_of(marker: Path, path: Path) -> Removal | None:
    """The user's removal noted for this settings file; None when there is none (or only an
    unreadable marker, or another file's)."""
    try:
        data = read_json(marker)
    except (CorruptFile, OSError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("path"), str) or finite(data.get("at")) is None:
        return None
    if not same_file(data["path"], path):
        return None
    return Removal(data["path"], float(data["at"]))


def clear_removal(marker: Path) -> None:
    """Forget a noted removal (the hook is back, or a new run checks it for itself)."""
    try:
        os.unlink(marker)
    except OSError:
        pass  # gone already, or a folder planted there: never read as a removal (removal_of)
