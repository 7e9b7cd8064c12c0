"""16. Finding the agent's processes, as a phase's watcher, its companion, the reaper and a lost
loop's settling do. By their markers (procs/proctree.marked): the CPU time of one scan of every
process of the user, reading each environment from /proc (Linux) against psutil's parsing, which
it replaced. By descent (procs/proctree.descendant_pids, twice at every check of a watcher and once
at every check of a companion): one walk of a tree of six, through the kernel's lists of each
task's children against psutil's map of every process's parent, which it replaced. Both of the
replaced ways grow with the number of processes on the machine, printed beside them.

Usage: .venv/bin/python bench/marker_scan.py [N]   (N scans of each way, interleaved; default 20)
"""

from __future__ import annotations

import os
import subprocess
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
                baseline="a marker scan, psutil's parsing"), *_walks(n)]


def _walks(n: int) -> list[Row]:
    """A shell with five sleeping descendants (two levels), walked both ways."""
    tree = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60 & (sleep 60 & sleep 60 & wait) & wait"],
                            start_new_session=True)
    try:
        root = psutil.Process(tree.pid)
        for _ in range(100):   # until the shells have forked
            if len(root.children(recursive=True)) == 5:
                break
            time.sleep(0.02)
        kernel, parents = [], []
        for _ in range(n):
            kernel.append(_cpu_ms(lambda: proctree.descendant_pids(root)))
            parents.append(_cpu_ms(lambda: root.children(recursive=True)))
        count = len(psutil.pids())
    finally:
        os.killpg(tree.pid, 9)
        tree.wait()
    return [Row("a tree walk, psutil's parent map", "ms", tuple(parents), note=f"{count} processes"),
            Row("a tree walk, the kernel's child lists", "ms", tuple(kernel), note=f"{count} processes",
                baseline="a tree walk, psutil's parent map")]


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
        print(f"{row.name}: median {row.median:.1f} {row.unit} ({row.note})")
