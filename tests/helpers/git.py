"""git in a test's project, with an identity of its own (the test's HOME has no ~/.gitconfig)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["git"]


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd`; its stdout (a failure fails the test)."""
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout
