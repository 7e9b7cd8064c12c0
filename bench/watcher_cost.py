"""5. Watcher cost: CPU time the watcher itself uses while supervising a healthy agent,
sampling the agent's process tree at every check as the shipped defaults do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import HOOK, PY, Row

AGENT = 'end=$((SECONDS + {secs})); while ((SECONDS < end)); do bash "$HOOK" Bash </dev/null; sleep 5; done\n'


def worker(interval: float, secs: int, tmp: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from genesis.watch.supervisor import AgentRun, Limits, supervise

    hb = Path(tmp) / "hb.json"
    (Path(tmp) / "agent.sh").write_text(AGENT.format(secs=secs))
    env = {**os.environ, "HOOK": str(HOOK), "GENESIS_HEARTBEAT_FILE": str(hb), "GENESIS_RUN_ID": "bench-w"}
    cpu0, wall0 = time.process_time(), time.monotonic()
    out = supervise(AgentRun(("bash", str(Path(tmp) / "agent.sh"), "p"), Path(tmp), env, Path(tmp) / "log", hb,
                             "bench-w"), Limits(interval, max(interval * 3, 60), 3600, 1.0, tool_silent=300.0))
    print(json.dumps({"status": out.status, "cpu": time.process_time() - cpu0, "wall": time.monotonic() - wall0}))


def run(secs: int = 40, repeats: int = 3) -> list[Row]:
    rows = []
    for interval in (60.0, 1.0):
        shares = []
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for i in range(repeats):
                d = Path(tmp) / str(i)
                d.mkdir()
                procs.append(subprocess.Popen([PY, __file__, str(interval), str(secs), str(d)],
                                              stdout=subprocess.PIPE, text=True))
            for p in procs:
                r = json.loads(p.communicate()[0])
                assert r["status"] == "exited", r
                shares.append(100.0 * r["cpu"] / r["wall"])
        rows.append(Row(f"watcher CPU, check every {interval:g}s ({secs}s runs)", "% core", tuple(shares),
                        target="< 1 %", met=max(shares) < 1.0,
                        note=f"= {36 * statistics_median(shares):.1f} CPU-s per hour"))
    return rows


def statistics_median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


if __name__ == "__main__":
    worker(float(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
