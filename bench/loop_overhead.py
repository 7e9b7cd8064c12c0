"""4. Loop overhead: from one phase's agent exit to the next phase's agent start (no pause),
with the shipped phases and triggers (each trigger is checked just before its phase), the
ledger written as the loop writes it; and how many ledger writes a phase costs."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from common import ROOT, Row, git_project


def run(iterations: int = 6) -> list[Row]:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # an alert may still be recorded
        project = git_project(Path(tmp) / "project")
        # One task awaiting review and none open: the shipped triggers run all three phases.
        (project / "TASKS.md").write_text("# Tasks\n- [?] a task that stays under review\n")
        subprocess.run(["git", "add", "TASKS.md"], cwd=project, check=True)
        subprocess.run(["git", "commit", "-qm", "tasks"], cwd=project, check=True)
        times = Path(tmp) / "times"
        agent = Path(tmp) / "agent.sh"
        agent.write_text('echo "start $EPOCHREALTIME" >> "$TIMES"\necho "end $EPOCHREALTIME" >> "$TIMES"\n')
        env = {**os.environ, "TIMES": str(times), "GENESIS_AGENT_CMD": f"bash {agent}", "ITERATION_PAUSE_SECONDS": "0",
               "CB_WARNING_THRESHOLD": "100", "CB_STOP_THRESHOLD": "100", "HEARTBEAT_CHECK_INTERVAL": "1",
               "HEARTBEAT_STALE": "30s", "REAP_PORTS": "8080", "NO_COLOR": "1"}
        subprocess.run(["bash", str(ROOT / "start-multi-agent-loop.sh"), "--project", str(project),
                        "--max-iterations", str(iterations)], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        marks = [line.split() for line in times.read_text().splitlines()]
        writes = ledger_writes(project)
    starts = [float(v.replace(",", ".")) for k, v in marks if k == "start"]
    ends = [float(v.replace(",", ".")) for k, v in marks if k == "end"]
    gaps = [starts[i + 1] - ends[i] for i in range(len(ends) - 1)]
    within = tuple(g for i, g in enumerate(gaps) if (i + 1) % 3)       # Builder->Criticizer, Criticizer->Planner
    across = tuple(g for i, g in enumerate(gaps) if (i + 1) % 3 == 0)  # Planner -> next iteration's Builder
    return [Row("loop overhead, phase to phase", "s", within, target="< 1 s", met=max(within) < 1.0),
            Row("loop overhead, across iterations (no pause)", "s", across, target="< 1 s",
                met=max(across) < 1.0, note="adds the progress check"),
            Row("ledger writes per phase", "events", writes, note="one transaction each; all events of the run "
                "over its phases")]


def ledger_writes(project: Path) -> tuple[float, ...]:
    """Events recorded per phase run, per iteration (the iteration's own events included)."""
    from genesis.ledger.store import Ledger

    with Ledger.open(project / ".git" / "genesis" / "ledger.sqlite3", readonly=True) as led:
        per = led.query("SELECT iteration, COUNT(*) FROM events WHERE iteration IS NOT NULL GROUP BY iteration")
        phases = dict(led.query("SELECT iteration, COUNT(*) FROM phases GROUP BY iteration"))
    return tuple(count / phases[it] for it, count in per if phases.get(it))
