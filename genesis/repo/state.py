"""The repository's state: an operation left half done (merge, rebase, cherry-pick, revert,
bisect, am) and a detached HEAD, each named with the way out.

A night started in the middle of one would put its commits into it: inside a paused rebase,
on no branch, or over conflict markers. git says so by files in the work tree's own git
directory (a linked worktree has its own), found through `git rev-parse --git-path`.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from genesis.repo.gitcmd import GitFailed, run_git
from genesis.store.atomicio import CorruptFile, TooLarge, read_bytes

__all__ = ["RepoState", "repo_state", "way_out", "OPERATIONS", "OPERATION_NAMES", "GIT_BOUND"]

GIT_BOUND = 60.0    # seconds for each git call
TODO_BYTES = 1 << 20   # of sequencer/todo: its first command says what a multi-commit pick is

# What each in-progress operation leaves in the git directory, in the order they are named.
MARKERS = ("rebase-merge", "rebase-apply", "rebase-apply/applying", "MERGE_HEAD", "CHERRY_PICK_HEAD",
           "REVERT_HEAD", "sequencer/todo", "BISECT_LOG")
OPERATIONS = ("rebase", "am", "merge", "cherry-pick", "revert", "bisect")
OPERATION_NAMES = {"rebase": "a rebase", "am": "a `git am` (patches being applied)", "merge": "a merge",
                   "cherry-pick": "a cherry-pick", "revert": "a revert", "bisect": "a bisect"}

_WAY_OUT = {
    "rebase": ("resolve any conflicts, `git add` them and continue: {git} rebase --continue; or give it up: "
               "{git} rebase --abort"),
    "am": "resolve any conflicts, `git add` them and continue: {git} am --continue; or give it up: {git} am --abort",
    "merge": ("resolve the conflicts, `git add` them and conclude it: {git} merge --continue; or give it up: "
              "{git} merge --abort"),
    "cherry-pick": ("resolve any conflicts, `git add` them and continue: {git} cherry-pick --continue; or give "
                    "it up: {git} cherry-pick --abort"),
    "revert": ("resolve any conflicts, `git add` them and continue: {git} revert --continue; or give it up: "
               "{git} revert --abort"),
    "bisect": "end it (HEAD goes back to where it began): {git} bisect reset",
}


@dataclass(frozen=True)
class RepoState:
    operations: tuple[str, ...]    # in progress, from OPERATIONS
    branch: str | None             # the branch HEAD is on (None: detached)
    head: str | None               # HEAD's short sha (None: no commit yet, or not asked)

    @property
    def detached(self) -> bool:
        return self.branch is None


def repo_state(project: Path, timeout: float = GIT_BOUND) -> RepoState:
    """What is in progress in the work tree at project, and whether HEAD is on a branch.

    GitFailed (GitTimeout past timeout) when git cannot say.
    """
    project = Path(project)
    args = ["rev-parse"] + [arg for marker in MARKERS for arg in ("--git-path", marker)]
    done = run_git(project, args, timeout=timeout, limit=1 << 16)
    lines = done.text.splitlines()
    if done.returncode != 0 or len(lines) != len(MARKERS):
        raise GitFailed(f"git rev-parse --git-path failed in {project}: {done.stderr or 'no answer'}")
    where = {marker: project / line for marker, line in zip(MARKERS, lines)}  # relative ones are to project
    found = [name for name, present in (
        ("rebase", _is(where["rebase-merge"], stat.S_ISDIR)
         or (_is(where["rebase-apply"], stat.S_ISDIR) and not _is(where["rebase-apply/applying"]))),
        ("am", _is(where["rebase-apply/applying"])),
        ("merge", _is(where["MERGE_HEAD"])),
        ("cherry-pick", _is(where["CHERRY_PICK_HEAD"]) or _sequencer(where["sequencer/todo"]) == "cherry-pick"),
        ("revert", _is(where["REVERT_HEAD"]) or _sequencer(where["sequencer/todo"]) == "revert"),
        ("bisect", _is(where["BISECT_LOG"])),
    ) if present]
    on = run_git(project, ["symbolic-ref", "-q", "--short", "HEAD"], timeout=timeout, limit=1 << 16)
    if on.returncode not in (0, 1):
        raise GitFailed(f"git symbolic-ref HEAD failed in {project}: {on.stderr}")
    branch = on.text.strip() or None if on.returncode == 0 else None
    head = None
    if branch is None:
        sha = run_git(project, ["rev-parse", "--short", "--verify", "-q", "HEAD"], timeout=timeout, limit=1 << 16)
        head = sha.text.strip() or None if sha.returncode == 0 else None
    return RepoState(tuple(found), branch, head)


def way_out(operation: str, project: Path) -> str:
    """How to finish or give up an operation in progress, as commands runnable from anywhere."""
    return _WAY_OUT[operation].format(git=f"git -C {shlex.quote(str(project))}")


def _is(path: Path, kind=stat.S_ISREG) -> bool:
    """Whether git's marker is there, as git itself looks for it (never followed out of the git dir)."""
    try:
        return kind(os.lstat(path).st_mode)
    except OSError:
        return False


def _sequencer(todo: Path) -> str | None:
    """What a multi-commit cherry-pick or revert left to do (sequencer/todo), once it has no *_HEAD."""
    try:
        text = read_bytes(todo, TODO_BYTES)
    except TooLarge:
        text = b""
    except (CorruptFile, OSError):  # none, or not a file git wrote
        return None
    first = text.split(b"\n", 1)[0].split(maxsplit=1)
    return "revert" if first[:1] == [b"revert"] else "cherry-pick"
