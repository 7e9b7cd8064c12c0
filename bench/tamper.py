"""7. A careless agent: how fast the breaker file is back after `git clean -fdx`, and how long
a hung agent with a chatty child survives."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import HOOK, PY, ROOT, Row, git_project

CHECK = 1.0   # the watcher's check interval in the restore runs
WINDOW = 3.0  # the stale window in the chatty-child runs


def restore(iterations: int = 5) -> Row:
    """The real loop; in every iteration the Builder wipes the work tree's ignored files, then
    keeps working (silently) for 3 s. Measured: from the file vanishing to its return."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # an alert may still be recorded
        project = git_project(Path(tmp) / "project")
        subprocess.run([PY, "-m", "genesis", "--project", str(project), "hook", "install", "--scope", "local"],
                       check=True, stdout=subprocess.DEVNULL)
        breaker = project / "orchestrator" / ".circuit_breaker.json"
        gaps: list[float] = []
        stop = threading.Event()

        def watch() -> None:
            gone = None
            while not stop.is_set():
                exists = breaker.exists()
                now = time.monotonic()
                if not exists and gone is None:
                    gone = now
                elif exists and gone is not None:
                    gaps.append(now - gone)
                    gone = None
                time.sleep(0.002)

        script = "*:Builder=bash:git%20clean%20-fdxq+bash:sleep%203,*:*=idle"
        env = {**os.environ, "GENESIS_AGENT_CMD": f"{PY} -m genesis.demo.simagent --script '{script}'",
               "ITERATION_PAUSE_SECONDS": "0", "HEARTBEAT_CHECK_INTERVAL": str(CHECK),
               "HEARTBEAT_STALE": "30s", "CB_WARNING_THRESHOLD": "100", "CB_STOP_THRESHOLD": "100",
               "REAP_PORTS": "", "NO_COLOR": "1"}
        poller = threading.Thread(target=watch, daemon=True)
        poller.start()
        try:
            subprocess.run(["bash", str(ROOT / "start-multi-agent-loop.sh"), "--project", str(project),
                            "--max-iterations", str(iterations)], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        finally:
            stop.set()
            poller.join()
    return Row("breaker file back after an agent's git clean -fdx", "s", tuple(gaps),
               target=f"<= 1 check ({CHECK:g} s)", met=bool(gaps) and max(gaps) <= CHECK + 0.5,
               note=f"check every {CHECK:g}s; the watcher restores it mid-phase")


CHATTY = ('bash "$HOOK" Bash </dev/null\n'
          '(while true; do echo "still here"; sleep 0.3; done) &\n'
          'exec sleep 600\n')


def chatty_once(tmp: Path) -> float:
    sys.path.insert(0, str(ROOT))
    from genesis.watch.supervisor import AgentRun, Limits, supervise

    hb = tmp / "hb" / "Builder.json"
    hb.parent.mkdir(mode=0o700)
    (tmp / "agent.sh").write_text(CHATTY)
    env = {**os.environ, "HOOK": str(HOOK), "GENESIS_HEARTBEAT_FILE": str(hb), "GENESIS_RUN_ID": "bench-c"}
    out = supervise(AgentRun(("bash", str(tmp / "agent.sh")), tmp, env, tmp / "log", hb, "bench-c"),
                    Limits(0.5, WINDOW, 120.0, 1.0, count_output=True))
    assert out.status == "stuck", out
    return out.duration  # from the agent's start, which is when its only heartbeat came


def chatty(repeats: int = 3) -> Row:
    samples = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # an alert may still be recorded
            samples.append(chatty_once(Path(tmp)))
    return Row("hung agent with a chatty child: alive until killed", "s", tuple(samples),
               target=f"<= 2 windows + 1 check ({2 * WINDOW + 0.5:g} s)",
               met=max(samples) <= 2 * WINDOW + 0.5 + 0.5,
               note=f"stale window {WINDOW:g}s, check every 0.5s; output alone counts one window past the last beat")


def run(iterations: int = 5, repeats: int = 3) -> list[Row]:
    return [restore(iterations), chatty(repeats)]


if __name__ == "__main__":
    for row in run(3, 2):
        print(row.name, row.median, min(row.samples), max(row.samples), row.met)
