"""12. The morning: what a probe pays for `genesis status --json`, next to the plain screen,
and what the report costs, over the ledger of a long night (60 iterations, a stuck phase and
its retry in every tenth, alerts)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PY, Row, git_project

ITERATIONS = 60
HOUR = 3600.0


def _night(project: Path) -> None:
    from genesis.ledger.store import Ledger
    from genesis.status.view import layout_of

    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    start = time.time() - 9 * HOUR
    run = "20261124T000000Z-1"
    t = start
    with Ledger.open(lay.ledger_file) as led:
        led.record(run, "loop_start", at=t, project=str(project), pid=1, phases=["Builder", "Criticizer", "Planner"])
        for i in range(1, ITERATIONS + 1):
            led.record(run, "iteration_start", at=t, iteration=i)
            for phase in ("Builder", "Criticizer", "Planner"):
                attempts = 2 if phase == "Builder" and i % 10 == 0 else 1
                for attempt in range(attempts):
                    stuck = attempts == 2 and attempt == 0
                    led.record(run, "phase_start", at=t, iteration=i, phase=phase, epoch=t, log=f"{i}-{phase}.log",
                               attempt=attempt)
                    t += 120
                    led.record(run, "phase_end", at=t, iteration=i, phase=phase, status="stuck" if stuck else "exited",
                               returncode=None if stuck else 0, ending="stuck" if stuck else "finished",
                               duration=120.0, cost_usd=0.05, input_tokens=9000, output_tokens=700, started=t - 120,
                               attempt=attempt, tail=[f"line {n} of {phase}" for n in range(20)],
                               window="stale" if stuck else None)
                    if stuck:
                        led.record(run, "incident", at=t, iteration=i, phase=phase, id=f"inc-{i}", kind="stuck")
                        led.record(run, "retry", at=t, iteration=i, phase=phase, count=1, reason="stale")
                led.record(run, "phase_work", at=t, iteration=i, phase=phase,
                           commits=[{"sha": f"{i:07x}", "subject": f"work {i}"}], files_changed=1, tasks_done=[])
            led.record(run, "iteration_end", at=t, iteration=i, breaker="CLOSED", no_progress=0)
        led.record(run, "loop_end", at=t, reason="reached GENESIS_MAX_ITERATIONS=60", exit_code=0)


def _timed(argv: list[str], n: int) -> tuple[float, ...]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        samples.append((time.perf_counter() - started) * 1000)
    return tuple(samples)


def run(n: int = 10) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    with tempfile.TemporaryDirectory() as tmp:
        project = git_project(Path(tmp) / "night")
        _night(project)
        genesis = [PY, "-m", "genesis", "--project", str(project)]
        as_json = _timed(genesis + ["status", "--json"], n)
        plain = _timed(genesis + ["status"], n)
        page = _timed(genesis + ["report", "--html", str(Path(tmp) / "night.html")], max(3, n // 3))
        text = _timed(genesis + ["report"], max(3, n // 3))
    return [Row("genesis status (the screen, once)", "ms", plain, note=f"{ITERATIONS} iterations in the ledger"),
            Row("genesis status --json", "ms", as_json, target="median < 1000 ms (a probe every few seconds)",
                met=sorted(as_json)[len(as_json) // 2] < 1000, baseline="genesis status (the screen, once)"),
            Row("genesis report (text)", "ms", text, target="median < 5000 ms",
                met=sorted(text)[len(text) // 2] < 5000),
            Row("genesis report --html", "ms", page, target="median < 5000 ms",
                met=sorted(page)[len(page) // 2] < 5000, note="the per-task view reads TASKS.md's git history")]
