"""git in a test's project, with an identity of its own (the test's HOME has no ~/.gitconfig)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["git", "commit_file"]


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd`; its stdout (a failure fails the test)."""
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def commit_file(project: Path, name: str) -> str:
    """Commit a new file `name` (its content its name) in project; the commit's sha."""
    (project / name).write_text(f"{name}\n")
    git(project, "add", name)
    git(project, "commit", "-qm", name)
    return git(project, "rev-parse", "HEAD").strip()
