"""Whose uncommitted work is it: the user's, or what Genesis's own last run left behind.

A run keeps the user's untracked files found at its start (never auto-committed), and
records, when a phase starts, after it and when the run ends, every other uncommitted path
with a digest of its content. A run that ends before its work is committed (auto-commit
off, a commit that failed, the loop killed) leaves that record behind; at the next start a
change whose path and content match it exactly is the agent's leftover, and any other
change is the user's: a path the user edited since no longer matches.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

from genesis.repo.autocommit import GIT_TIMEOUT, NO_MARKERS, user_changes
from genesis.repo.gitcmd import GitFailed
from genesis.repo.progress import HASH_LIMIT, file_digest
from genesis.store.atomicio import CorruptFile, finite, read_json, write_json

__all__ = ["Leftovers", "user_files", "remember", "recall", "leftovers_in", "MAX_PATHS", "HASH_BUDGET"]

MAX_PATHS = 10_000         # paths one record keeps; any more count as the user's at the next start
HASH_BUDGET = 256 << 20    # bytes read to hash one record's files; past it a file is known by size and mtime
RECORD_BYTES = 16 << 20    # the most a record file (or the user's list) may hold when read back
GONE = "gone"              # a tracked file deleted in the work tree


@dataclass(frozen=True)
class Leftovers:
    """What one run held uncommitted, not the user's, at one moment."""
    run_id: str
    when: str                      # "at its end: interrupted by SIGINT", "after Builder, iteration 3", ...
    at: float
    paths: Mapping[str, str]       # path: digest of its content (GONE: deleted)

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "when": self.when, "at": self.at, "paths": dict(self.paths)}

    @classmethod
    def from_json(cls, data: object) -> Leftovers | None:
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str) \
                or not isinstance(data.get("paths"), dict):
            return None
        paths = {p: d for p, d in data["paths"].items() if isinstance(p, str) and isinstance(d, str)}
        return cls(data["run_id"], str(data.get("when", "")), finite(data.get("at")) or 0.0, paths)


def user_files(path: Path) -> list[str]:
    """The user's untracked files found at the run's start (never committed as the agent's)."""
    try:
        data = read_json(path, limit=RECORD_BYTES)
    except CorruptFile:
        return []
    return [p for p in data if isinstance(p, str)] if isinstance(data, list) else []


def remember(project: Path, record: Path, run_id: str, when: str, users: Collection[str], now: float,
             markers: Mapping[str, str] = NO_MARKERS, timeout: float = GIT_TIMEOUT) -> str | None:
    """Record what the work tree holds uncommitted now, but the user's files; None, or what
    went wrong, said for the user (the run goes on either way)."""
    try:
        found = user_changes(project, markers=markers, timeout=timeout)
        theirs = set(users)
        paths = [p for p in dict.fromkeys((*found.changed, *found.untracked)) if p not in theirs][:MAX_PATHS]
        budget = [HASH_BUDGET]
        digests = {p: d for p in paths if (d := _digest(Path(project), p, budget)) is not None}
        write_json(record, Leftovers(run_id, when, now, digests).to_json())
    except (GitFailed, OSError) as exc:  # DiskFull is an OSError
        return (f"could not record the uncommitted work ({exc}); if this run ends before committing it, the "
                f"next start takes it as yours")
    return None


def recall(record: Path) -> Leftovers | None:
    """The last record of a run, or None (none, or unusable: then every change is the user's)."""
    try:
        return Leftovers.from_json(read_json(record, limit=RECORD_BYTES))
    except CorruptFile:
        return None


def leftovers_in(held: Leftovers, project: Path, paths: Sequence[str]) -> tuple[str, ...]:
    """Those of paths whose content is still exactly what the record holds: the agent's."""
    budget = [HASH_BUDGET]
    return tuple(p for p in paths if p in held.paths and _digest(Path(project), p, budget) == held.paths[p])


def _digest(project: Path, rel: str, budget: list[int]) -> str | None:
    """The path's content digest (GONE when deleted), or None for what cannot be told apart
    (a folder, a device, an unreadable file): never matched, so it stays the user's."""
    path = project / rel
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return GONE
    except OSError:
        return None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        return None
    limit = min(HASH_LIMIT, budget[0])
    if stat.S_ISREG(st.st_mode) and st.st_size <= limit:
        budget[0] -= st.st_size
    raw = file_digest(path, limit)
    return None if raw == b"unreadable" else hashlib.sha256(raw).hexdigest()
