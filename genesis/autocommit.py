"""Auto-commit after a phase, so that work survives a later kill; push only if asked."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CommitResult", "UserChanges", "commit", "user_changes"]

GIT_TIMEOUT = 120


@dataclass(frozen=True)
class CommitResult:
    committed: bool
    sha: str = ""
    pushed: bool | None = None     # None: not asked to push
    error: str = ""


def _git(project: Path, *args: str, identity: bool = False, stdin: str | None = None,
         literal: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = ["-c", "user.name=Genesis", "-c", "user.email=genesis@localhost"] if identity else []
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    if literal:
        env["GIT_LITERAL_PATHSPECS"] = "1"  # a file named '*' is that file, not every file
    return subprocess.run(["git", *prefix, *args], cwd=project, capture_output=True, text=True,
                          timeout=GIT_TIMEOUT, env=env, input=stdin,
                          stdin=subprocess.DEVNULL if stdin is None else None)


def _unstage(project: Path, paths: list[str]) -> None:
    """Take paths back out of the index (as they are in HEAD), read NUL-separated from stdin."""
    if paths:
        _git(project, "reset", "-q", "--pathspec-from-file=-", "--pathspec-file-nul",
             stdin="\0".join(paths), literal=True)


def commit(project: Path, message: str, excluded: list[str], push: bool,
           keep_out: list[str] = (), tracked_only: bool = False) -> CommitResult:
    """Stage everything but Genesis's files and `keep_out` and commit it; nothing to commit
    is not an error.

    Genesis's files are kept out by info/exclude (see layout.ensure_git_excludes); if the
    user tracks one anyway, its changes are unstaged again before the commit. `keep_out`
    are the user's own untracked files, found at the run's start: never the agent's work.
    `tracked_only` stages changes to tracked files only.
    """
    try:
        added = _git(project, "add", "-u" if tracked_only else "-A", "--", ".")
        if added.returncode == 0:
            _unstage(project, [p.lstrip("/").rstrip("/*") for p in excluded] + list(keep_out))
        if added.returncode != 0:
            return CommitResult(False, error=f"git add failed: {added.stderr.strip()[-300:]}")
        if _git(project, "diff", "--cached", "--quiet").returncode == 0:
            return CommitResult(False)
        has_identity = _git(project, "config", "user.email").stdout.strip() != ""
        done = _git(project, "commit", "-q", "-m", message, identity=not has_identity)
        if done.returncode != 0:
            return CommitResult(False, error=f"git commit failed: {(done.stderr or done.stdout).strip()[-300:]}")
        sha = _git(project, "rev-parse", "--short", "HEAD").stdout.strip()
        if not push:
            return CommitResult(True, sha)
        pushed = _git(project, "push", "-q")
        if pushed.returncode != 0:
            return CommitResult(True, sha, False, f"git push failed: {pushed.stderr.strip()[-300:]}")
        return CommitResult(True, sha, True)
    except subprocess.TimeoutExpired as exc:
        return CommitResult(False, error=f"git timed out after {GIT_TIMEOUT}s: {' '.join(exc.cmd[:3])}")


@dataclass(frozen=True)
class UserChanges:
    changed: tuple[str, ...]      # tracked files changed or staged
    untracked: tuple[str, ...]    # files git does not track and does not ignore


def user_changes(project: Path) -> UserChanges:
    """What in the work tree is not committed (Genesis's own files are excluded by git)."""
    done = _git(project, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=dirty")
    if done.returncode != 0:
        raise RuntimeError(f"git status failed: {done.stderr.strip()[-300:]}")
    changed: list[str] = []
    untracked: list[str] = []
    skip = False
    for entry in done.stdout.split("\0"):
        if skip:  # the source path of a rename or copy
            skip = False
            continue
        if len(entry) > 3:
            (untracked if entry.startswith("??") else changed).append(entry[3:])
            skip = entry[0] in "RC"
    return UserChanges(tuple(changed), tuple(untracked))
