"""3. Kill time: a 200-process tree (own sessions, some ignoring SIGTERM) until all are gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from common import PY, Row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from genesis.procs.proctree import descendants, identify, kill_all, marked  # noqa: E402

WIDTHS = (5, 6, 6)  # 1 + 5 + 30 + 180 = 216 processes


def run(runs: int = 5, grace: float = 2.0) -> list[Row]:
    times, sizes = [], []
    for i in range(runs):
        marker = {"GENESIS_RUN_ID": f"bench-kill-{os.getpid()}-{i}"}
        root = subprocess.Popen([PY, str(Path(__file__).parent / "tree.py"), *map(str, WIDTHS)],
                                stdout=subprocess.PIPE, env={**os.environ, **marker}, start_new_session=True)
        assert root.stdout.readline().strip() == b"READY"
        ident = identify(root.pid)
        sizes.append(len(set(descendants(ident)) | set(marked(marker))))
        start = time.perf_counter()
        report = kill_all(lambda ident=ident, marker=marker: descendants(ident) + marked(marker), grace)
        times.append(time.perf_counter() - start)
        root.wait()
        assert report.survivors == () and marked(marker) == [], report
    bound = grace + 1.0
    return [Row(f"kill time, {min(sizes)}-process tree, grace {grace:g}s", "s", tuple(times),
                target=f"<= {bound:g} s", met=max(times) <= bound)]
