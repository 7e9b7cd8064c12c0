"""Shared pieces of the benchmarks: a result row and a few helpers."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / "hooks" / "genesis-heartbeat.sh"
PY = sys.executable


@dataclass(frozen=True)
class Row:
    name: str
    unit: str
    samples: tuple[float, ...]
    target: str = ""
    met: bool | None = None          # None: no target
    baseline: str = ""               # the row this one is compared with
    note: str = ""
    ratio: float | None = field(default=None)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def git_project(path: Path) -> Path:
    path.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    (path / "README.md").write_text("bench\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=path, check=True, env=env)
    subprocess.run(["git", "config", "user.name", "b"], cwd=path, check=True)
    subprocess.run(["git", "config", "user.email", "b@b"], cwd=path, check=True)
    return path
