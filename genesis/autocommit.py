"""Auto-commit after a phase, so that work survives a later kill; push only if asked."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CommitResult", "commit"]

GIT_TIMEOUT = 120


@dataclass(frozen=True)
class CommitResult:
    committed: bool
    sha: str = ""
    pushed: bool | None = None     # None: not asked to push
    error: str = ""


def _git(project: Path, *args: str, identity: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = ["-c", "user.name=Genesis", "-c", "user.email=genesis@localhost"] if identity else []
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    return subprocess.run(["git", *prefix, *args], cwd=project, capture_output=True, text=True,
                          timeout=GIT_TIMEOUT, env=env, stdin=subprocess.DEVNULL)


def commit(project: Path, message: str, excluded: list[str], push: bool) -> CommitResult:
    """Stage everything but Genesis's files and commit it; nothing to commit is not an error.

    Genesis's files are kept out by info/exclude (see layout.ensure_git_excludes); if the
    user tracks one anyway, its changes are unstaged again before the commit.
    """
    try:
        added = _git(project, "add", "-A", "--", ".")
        if added.returncode == 0 and excluded:
            _git(project, "reset", "-q", "--", *[p.lstrip("/").rstrip("/*") for p in excluded])
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
