"""git in a test's project, with an identity of its own (the test's HOME has no ~/.gitconfig)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["git", "commit_file", "new_repo"]


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd`; its stdout (a failure fails the test)."""
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def commit_file(project: Path, name: str, text: str | None = None, message: str | None = None) -> str:
    """Commit file `name` (its content `text`, else its name) in project; the commit's sha."""
    (project / name).write_text(f"{name}\n" if text is None else text)
    git(project, "add", name)
    git(project, "commit", "-qm", message or name)
    return git(project, "rev-parse", "HEAD").strip()


def new_repo(root: Path) -> Path:
    """A real git work tree at root (made if need be) with one commit."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    commit_file(root, "README.md", "hello\n", "init")
    return root
