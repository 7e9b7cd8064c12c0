"""The stop flag: the file GENESIS_STOP_FLAG names, in which `false` stops the loop at its next
step (the bash loop reads it itself; Genesis's steps, a fleet and the Temporal home read it
here). Apart from preflight.py, so that a step that only reads it imports no more than this."""

from __future__ import annotations

from pathlib import Path

from genesis.store.atomicio import CorruptFile, read_bytes

__all__ = ["read_flag"]


def read_flag(path: Path) -> str | None:
    """The flag's word, lowercased; None when there is none to read."""
    try:
        return read_bytes(path, 64).decode("utf-8", "replace").strip().lower()
    except (CorruptFile, OSError):  # missing, too large, a FIFO or a symlink: not a "false"
        return None
