"""What Genesis keeps of a project: its private state folder and the ledger's events."""

from __future__ import annotations

from pathlib import Path

__all__ = ["state_of", "events_of"]


def state_of(project: Path) -> Path:
    """Genesis's private state folder for a plain (non-worktree) repository: <git dir>/genesis."""
    return project / ".git" / "genesis"


def events_of(project: Path, run_id: str | None = None, kind: str | None = None) -> list[dict]:
    """Every event in the project's ledger (of one run, of one kind), oldest first; none without a ledger."""
    from genesis.ledger.store import Ledger

    path = state_of(project) / "ledger.sqlite3"
    if not path.exists():
        return []
    with Ledger.open(path, readonly=True) as led:
        return [e for e in led.events(run_id) if kind is None or e["event"] == kind]
