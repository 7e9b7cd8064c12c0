"""10. The ledger: the cost of one write (an event and its projection, one transaction), alone
and while a reader polls it the way `genesis status --watch` does."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PY, Row

POLLER = """
import sqlite3, sys, time
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, isolation_level=None)
while True:
    conn.execute("SELECT * FROM events ORDER BY id DESC LIMIT 20").fetchall()
    conn.execute("SELECT COUNT(*), SUM(cost_usd) FROM phases").fetchall()
    time.sleep(0.01)
"""


def _writes(path: Path, n: int) -> tuple[float, ...]:
    from genesis.ledger.store import Ledger

    samples = []
    with Ledger.open(path) as led:
        led.record("bench", "loop_start")
        for i in range(n):
            started = time.perf_counter()
            led.record("bench", "phase_end", iteration=1, phase="Builder", status="exited", returncode=0,
                       ending="finished", detail="finished", n=i)
            samples.append((time.perf_counter() - started) * 1000)
    return tuple(samples)


def run(n: int = 500) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    with tempfile.TemporaryDirectory() as tmp:
        alone = _writes(Path(tmp) / "alone.sqlite3", n)
        path = Path(tmp) / "read.sqlite3"
        from genesis.ledger.store import Ledger

        Ledger.open(path).close()
        poller = subprocess.Popen([PY, "-c", POLLER, str(path)])
        try:
            time.sleep(0.3)
            polled = _writes(path, n)
        finally:
            poller.kill()
            poller.wait()
    return [Row("ledger write (one event)", "ms", alone, target="median < 5 ms", met=_median(alone) < 5.0,
                note="WAL, synchronous=NORMAL"),
            Row("ledger write, a reader polling at 100 Hz", "ms", polled, target="median < 5 ms",
                met=_median(polled) < 5.0, note="readers never block the writer")]


def _median(samples: tuple[float, ...]) -> float:
    return sorted(samples)[len(samples) // 2]
