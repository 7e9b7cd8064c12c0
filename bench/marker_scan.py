"""16. Finding the agent's processes by their markers (procs/proctree.marked), which a phase's
watcher, the reaper and a lost loop's settling do: the CPU time of one scan of every process of
the user, reading each environment from /proc (Linux) against psutil's parsing, which it replaced.
The figure grows with the number of processes on the machine, printed beside it.

Usage: .venv/bin/python bench/marker_scan.py [N]   (N scans of each way, interleaved; default 20)
"""

from __future__ import annotations

import os
import sys
import time

import psutil
from common import Row

from genesis.procs import proctree

MARKERS = {"GENESIS_RUN_ID": "no-such-run"}


def _cpu_ms(scan) -> float:
    began = time.process_time()
    scan()
    return (time.process_time() - began) * 1000


def run(n: int = 20) -> list[Row]:
    uid = os.geteuid()
    proc, by_psutil = [], []
    for _ in range(n):
        proc.append(_cpu_ms(lambda: proctree.marked(MARKERS, uid)))
        by_psutil.append(_cpu_ms(lambda: proctree._marked_by_psutil(MARKERS, uid, False)))
    count = len(psutil.pids())
    return [Row("a marker scan, psutil's parsing", "ms", tuple(by_psutil), note=f"{count} processes"),
            Row("a marker scan, /proc read as it lies", "ms", tuple(proc), note=f"{count} processes",
                baseline="a marker scan, psutil's parsing")]


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
        print(f"{row.name}: median {row.median:.1f} {row.unit} ({row.note})")
