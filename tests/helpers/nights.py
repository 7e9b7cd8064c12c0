"""Hand-built nights for the report tests: a typical one, one still running, a long one.

Times are minutes after T0 (01:30 UTC); the tests that print clock times run in UTC (the
`utc` fixture of tests/reporting/conftest.py).
"""

from __future__ import annotations

import calendar
import dataclasses

from genesis.reporting.model import (AlertRow, BreakerChange, CommitRow, IncidentRow, IterationRow, Kpis, Night,
                                     PhaseRow, WaitRow)

__all__ = ["T0", "M", "HOSTILE", "at", "typical_night", "running_night", "many_night"]

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))   # 01:30 UTC
M = 60.0
HOSTILE = "<script>alert(1)</script> [bold red]not markup[/bold red] \x1b[31mred\x1b[0m & \"quotes\""


def at(minutes: float) -> float:
    return T0 + minutes * M


def typical_night(reason: str = "no heartbeat for 600s (last tool: Bash pytest -x)") -> Night:
    """Three iterations: a stuck Criticizer (an incident, retried), a usage-limit wait, a breaker change,
    a failed Builder, one commit, one task done, reported costs."""
    it1 = (
        PhaseRow(1, "Builder", 0, at(0), at(22), "finished", 0, "finished", cost_usd=0.84, turns=31,
                 input_tokens=120_000, output_tokens=9_500, commits=("a1b2c3d",), files_changed=3,
                 tasks_done=("Add a /health endpoint with a test",)),
        PhaseRow(1, "Criticizer", 0, at(22), at(32), "stuck", None, reason, cost_usd=0.21, turns=6,
                 input_tokens=30_000, output_tokens=1_200, killed=3),
        PhaseRow(1, "Criticizer", 1, at(32), at(35), "finished", 0, "finished", cost_usd=0.10, turns=4,
                 input_tokens=15_000, output_tokens=800),
    )
    it2 = (
        PhaseRow(2, "Builder", 0, at(36), at(38), "limit", 1, "You've hit your 5-hour limit · resets 5:13am"),
        PhaseRow(2, "Builder", 0, at(223), at(250), "finished", 0, "finished", cost_usd=0.55, turns=20,
                 input_tokens=80_000, output_tokens=6_000),
        PhaseRow(2, "Criticizer", 0, at(250), at(256), "finished", 0, "finished", cost_usd=0.08, turns=3),
    )
    it3 = (
        PhaseRow(3, "Builder", 0, at(257), at(270), "failed", 2, "exited with status 2: npm ERR! missing script"),
        PhaseRow(3, "Criticizer", 0, at(270), at(276), "finished", 0, "finished"),
        PhaseRow(3, "Planner", 0, at(276), at(280), "finished", 0, "finished", cost_usd=0.05),
    )
    return Night(
        run_id="20251121-013000-4f2a", project="/srv/shop", started=T0, ended=at(281),
        reason="stopped: the iteration limit (3) was reached", exit_code=0, running=False,
        iterations=(
            IterationRow(1, at(0), at(35), True, "CLOSED", 0, it1, skipped=("Planner",)),
            IterationRow(2, at(36), at(256), False, "CLOSED", 1, it2, skipped=("Planner",)),
            IterationRow(3, at(257), at(280), False, "HALF_OPEN", 2, it3),
        ),
        waits=(WaitRow("limit", at(38), at(223), at(223), "You've hit your 5-hour limit · resets 5:13am",
                       iteration=2, phase="Builder"),),
        incidents=(IncidentRow("inc-0001", at(32), 1, "Criticizer", "stuck", reason,
                               forensics="process tree:\n  1234 claude\n    1240 pytest -x  <- no output for 600s\n"),),
        breaker_changes=(BreakerChange(at(280), 3, "CLOSED", "HALF_OPEN", 2),),
        alerts=(AlertRow("T-0001", at(33), "medium", "Criticizer stuck on a hung pytest", "dismiss",
                         delivered=("ntfy",)),),
        commits=(CommitRow("a1b2c3d", at(21), "Add /health endpoint", 1, "Builder"),),
        kpis=Kpis(mttd_seconds=620.0, mttr_seconds=180.0, false_positive_rate=None, retries_per_phase=0.125,
                  escalation_rate=0.0, detections=1, recoveries=1, warnings=0, tickets=1),
        reaped=2,
    )


def running_night(now_minutes: float = 40) -> Night:
    """A night still going: iteration 2's Builder is running."""
    night = typical_night()
    it1 = night.iterations[0]
    it2 = IterationRow(2, at(36), None, None, None, 0,
                       (PhaseRow(2, "Builder", 0, at(36), None, "running", None, ""),))
    return dataclasses.replace(night, ended=None, reason="", exit_code=None, running=True, iterations=(it1, it2),
                               waits=(), breaker_changes=(), alerts=(), commits=night.commits[:1])


def many_night(iterations: int = 30, phases: tuple[str, ...] = ("Builder", "Criticizer", "Planner")) -> Night:
    """A long night: every phase of every iteration finished, five minutes each."""
    rows, start = [], T0
    for i in range(1, iterations + 1):
        ps = tuple(PhaseRow(i, name, 0, start + k * 300, start + (k + 1) * 300, "finished", 0, "finished")
                   for k, name in enumerate(phases))
        rows.append(IterationRow(i, start, start + len(phases) * 300, True, "CLOSED", 0, ps))
        start += len(phases) * 300
    return Night(run_id="long", project="/srv/shop", started=T0, ended=start, reason="done", exit_code=0,
                 running=False, iterations=tuple(rows))
