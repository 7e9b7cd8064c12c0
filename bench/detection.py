"""2. Detection latency: from the moment the heartbeat is stale to the whole tree gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import HOOK, PY, Row

# Beats, then one last beat after DELAY (so runs sample every phase of the poll cycle),
# then hangs silently with a child.
AGENT = """\
for i in 1 2 3; do bash "$HOOK" Bash </dev/null; sleep 0.2; done
sleep "$DELAY"; bash "$HOOK" Bash </dev/null
sleep 600 &
exec "$PY" -c 'import time; time.sleep(600)'
"""


def worker(interval: float, stale: float, tmp: str, delay: str) -> None:
    """One supervised run in this process; prints the latency as JSON."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from genesis.health.heartbeat import read_heartbeat
    from genesis.procs.proctree import marked
    from genesis.watch.supervisor import AgentRun, Limits, supervise

    hb = Path(tmp) / "hb.json"
    run_id = f"bench-{os.getpid()}"
    env = {**os.environ, "HOOK": str(HOOK), "PY": PY, "DELAY": delay, "GENESIS_HEARTBEAT_FILE": str(hb),
           "GENESIS_RUN_ID": run_id}
    (Path(tmp) / "agent.sh").write_text(AGENT)
    run = AgentRun(("bash", str(Path(tmp) / "agent.sh"), "p"), Path(tmp), env, Path(tmp) / "log", hb, run_id)
    out = supervise(run, Limits(interval, stale, 3600, 1.0, count_output=False))
    gone = time.time()
    beat, _ = read_heartbeat(hb)
    left = marked({"GENESIS_RUN_ID": run_id})
    print(json.dumps({"status": out.status, "latency": gone - (beat.epoch + stale), "left": len(left)}))


def run(configs=((1.0, 3.0, 9), (10.0, 30.0, 5))) -> list[Row]:
    rows = []
    for interval, stale, runs in configs:
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for i in range(runs):  # in parallel: each run mostly waits
                d = Path(tmp) / str(i)
                d.mkdir()
                delay = f"{i * interval / runs:.3f}"  # spread the runs over the poll cycle
                procs.append(subprocess.Popen([PY, __file__, str(interval), str(stale), str(d), delay],
                                              stdout=subprocess.PIPE, text=True))
            results = [json.loads(p.communicate()[0]) for p in procs]
        assert all(r["status"] == "stuck" and r["left"] == 0 for r in results), results
        lat = tuple(r["latency"] for r in results)
        bound = interval + 1.0
        rows.append(Row(f"detection latency, check every {interval:g}s, stale after {stale:g}s", "s", lat,
                        target=f"<= {bound:g} s", met=max(lat) <= bound))
    return rows


if __name__ == "__main__":
    worker(float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4])
