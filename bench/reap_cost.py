"""6. Reap cost: `genesis reap` with 1,000 unrelated processes running, against none."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from common import PY, Row, git_project

GENESIS = [PY, "-m", "genesis"]


def _timed_reap(project: Path, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(GENESIS + ["--project", str(project), "reap"], capture_output=True, text=True)
        out.append(time.perf_counter() - start)
        assert done.returncode == 0 and "nothing to reap" in done.stdout, done.stdout + done.stderr
    return out


def run(runs: int = 10, crowd: int = 1000) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        project = git_project(Path(tmp) / "project")
        base = _timed_reap(project, runs)
        sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(crowd)]
        try:
            loaded = _timed_reap(project, runs)
            alive = sum(1 for s in sleepers if psutil.pid_exists(s.pid) and s.poll() is None)
            assert alive == crowd, f"reap touched unrelated processes: {crowd - alive} gone"
        finally:
            for s in sleepers:
                s.kill()
            for s in sleepers:
                s.wait()
    base_row = Row("reap: genesis reap, no extra processes", "s", tuple(base))
    return [base_row, Row(f"reap: genesis reap, {crowd} unrelated processes", "s", tuple(loaded),
                          baseline=base_row.name, ratio=Row("", "", tuple(loaded)).median / base_row.median,
                          note="all of them survive")]
