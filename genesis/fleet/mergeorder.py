"""The merge queue's order: merges that touch files no other queued merge touches go first.

A branch whose files are its own comes home without a conflict whatever else lands, so it
should not wait behind, or be replayed again after, one that shares its files with another.
Among the merges that share files, and among those that do not, the queue's order is kept.
Each merge's files are those its branch changed since it parted from the project branch
(`git diff --name-only target...branch`), TASKS.md aside (the replay drops a branch's edits of
it); a branch git cannot read sorts with the sharing ones. order() is pure, replayed in tests;
files_of() and arranged() run git.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from genesis.repo.gitcmd import GitFailed, GitTimeout, run_git
from genesis.repo.tasks import TASKS_FILE

__all__ = ["order", "files_of", "arranged", "GIT_TIMEOUT"]

GIT_TIMEOUT = 60.0


def order(queued: Sequence[tuple[str, frozenset[str] | None]]) -> list[str]:
    """The ids of queued merges (id, its files; None: unknown), the disjoint ones first."""
    seen: dict[str, int] = {}
    for _id, files in queued:
        for path in files or ():
            seen[path] = seen.get(path, 0) + 1
    alone = [i for i, files in queued if files is not None and all(seen[p] == 1 for p in files)]
    return alone + [i for i, _files in queued if i not in alone]


def files_of(project: Path, target: str, branch: str) -> frozenset[str] | None:
    """The files branch changed since it parted from target; None when git cannot tell."""
    if not branch:
        return None
    try:
        done = run_git(project, ["diff", "--name-only", "--no-renames", "-z", f"{target}...{branch}"],
                       timeout=GIT_TIMEOUT)
    except (GitFailed, GitTimeout, OSError):
        return None
    if done.returncode != 0:
        return None
    return frozenset(p for p in (os.fsdecode(x) for x in done.stdout.split(b"\0")) if p and p != TASKS_FILE)


def arranged(project: Path, target: str, queued: Sequence[tuple[str, str]]) -> list[str]:
    """The ids of queued merges (id, its branch) in the order to take them."""
    return order([(i, files_of(project, target, branch)) for i, branch in queued])
