"""Hand-built nights for the report tests: a typical one, one still running, a long one.

Times are minutes after T0 (01:30 UTC); the tests that print clock times run in UTC (the
`utc` fixture of tests/reporting/conftest.py).
"""

from __future__ import annotations

import calendar
import dataclasses

from genesis.reporting.model import (AlertRow, BreakerChange, CommitRow, IncidentRow, IterationRow, Kpis, Night,
                                     PhaseRow, WaitRow)
from genesis.reporting.tasks import Step, TaskRow

__all__ = ["T0", "M", "HOSTILE", "at", "typical_night", "running_night", "many_night", "midnight_night",
           "midnight_tasks"]

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


def midnight_night() -> Night:
    """A night across midnight (22:30 to 03:13 UTC) with every mark the timeline draws: a stuck
    Criticizer with its own transcript tail, the retry's wait, a usage-limit wait, a failed Builder,
    a breaker change, alerts with the triage's reasons, costs per phase."""
    base = float(calendar.timegm((2025, 11, 20, 22, 30, 0)))

    def t(minutes: float) -> float:
        return base + minutes * M

    stuck = "no heartbeat for 600s (last tool: Bash pytest -x)"
    it1 = (
        PhaseRow(1, "Builder", 0, t(0), t(22), "finished", 0, "finished", cost_usd=0.84, turns=31,
                 input_tokens=120_000, output_tokens=9_500, commits=("a1b2c3d",), files_changed=3),
        PhaseRow(1, "Criticizer", 0, t(22), t(32), "stuck", None, stuck, cost_usd=0.21, turns=6, killed=3,
                 log="/srv/shop/.genesis/logs/20251120-223000-4f2a/001-Criticizer.log",
                 tail=("Running the test suite to check the /health endpoint", "tool: Bash pytest -x",
                       "tests/test_health.py::test_health ")),
        PhaseRow(1, "Criticizer", 1, t(33), t(38), "finished", 0, "finished", cost_usd=0.10, turns=4,
                 commits=("b2c3d4e",), tasks_done=("Add a /health endpoint with a test",)),
    )
    it2 = (
        PhaseRow(2, "Builder", 0, t(40), t(42), "limit", 1, "You've hit your 5-hour limit · resets 1:20am",
                 log="/srv/shop/.genesis/logs/20251120-223000-4f2a/002-Builder.log",
                 tail=("You've hit your 5-hour limit · resets 1:20am",)),
        PhaseRow(2, "Builder", 0, t(170), t(200), "finished", 0, "finished", cost_usd=0.55, turns=20,
                 commits=("c3d4e5f",)),
        PhaseRow(2, "Criticizer", 0, t(200), t(208), "finished", 0, "finished", cost_usd=0.08, turns=3,
                 commits=("d4e5f6a",), tasks_done=("Rate-limit the login form",)),
    )
    it3 = (
        PhaseRow(3, "Builder", 0, t(210), t(225), "failed", 2, "exited with status 2: npm ERR! missing script: lint",
                 cost_usd=0.31, log="/srv/shop/.genesis/logs/20251120-223000-4f2a/003-Builder.log",
                 tail=("> shop@1.4.0 lint", "npm ERR! missing script: lint", "npm ERR! A complete log of this run")),
        PhaseRow(3, "Criticizer", 0, t(225), t(232), "finished", 0, "finished", cost_usd=0.07),
        PhaseRow(3, "Planner", 0, t(232), t(237), "finished", 0, "finished", cost_usd=0.05, commits=("e5f6a7b",)),
    )
    it4 = (
        PhaseRow(4, "Builder", 0, t(240), t(275), "finished", 0, "finished", cost_usd=0.92, commits=("f6a7b8c",)),
        PhaseRow(4, "Criticizer", 0, t(275), t(282), "finished", 0, "finished", cost_usd=0.12, commits=("a7b8c9d",)),
    )
    return Night(
        run_id="20251120-223000-4f2a", project="/srv/shop", started=t(0), ended=t(283),
        reason="done: the work is finished (GENESIS_DONE_WHEN)", exit_code=0, running=False,
        iterations=(
            IterationRow(1, t(0), t(38), True, "CLOSED", 0, it1, skipped=("Planner",)),
            IterationRow(2, t(40), t(208), True, "CLOSED", 0, it2, skipped=("Planner",)),
            IterationRow(3, t(210), t(237), False, "HALF_OPEN", 1, it3),
            IterationRow(4, t(240), t(282), True, "CLOSED", 0, it4, skipped=("Planner",)),
        ),
        waits=(WaitRow("retry", t(32), t(33), t(33), "retrying the stuck Criticizer (1 retry left tonight)",
                       iteration=1, phase="Criticizer"),
               WaitRow("limit", t(42), t(170), t(170), "You've hit your 5-hour limit · resets 1:20am",
                       iteration=2, phase="Builder")),
        incidents=(IncidentRow("inc-0001", t(32), 1, "Criticizer", "stuck", stuck,
                               forensics="process tree:\n  1234 claude\n    1240 pytest -x  <- no output for 600s\n"),),
        breaker_changes=(BreakerChange(t(237), 3, "CLOSED", "HALF_OPEN", 1),
                         BreakerChange(t(282), 4, "HALF_OPEN", "CLOSED", 0)),
        alerts=(AlertRow("T-0001", t(32), "medium", "Criticizer stuck on a hung pytest", "dismiss",
                         delivered=("ntfy",), why="Genesis is retrying it: 1 retry left tonight", kind="retry",
                         iteration=1, phase="Criticizer"),
                AlertRow("T-0003", t(38), "low", "Criticizer recovered on retry", "dismiss", kind="resolved",
                         why="it resolves a stall that was told", iteration=1, phase="Criticizer"),
                AlertRow("T-0002", t(283), "low", "the loop ended: the work is finished", "dismiss",
                         delivered=("ntfy",), why="a normal end", final=True)),
        commits=(CommitRow("a1b2c3d", t(21), "Add /health endpoint", 1, "Builder"),
                 CommitRow("b2c3d4e", t(38), "genesis: iteration 1 Criticizer (retry 1)", 1, "Criticizer"),
                 CommitRow("c3d4e5f", t(199), "Rate-limit the login form", 2, "Builder"),
                 CommitRow("d4e5f6a", t(208), "genesis: iteration 2 Criticizer", 2, "Criticizer"),
                 CommitRow("e5f6a7b", t(237), "genesis: iteration 3 Planner", 3, "Planner"),
                 CommitRow("f6a7b8c", t(274), "Paginate the order history", 4, "Builder"),
                 CommitRow("a7b8c9d", t(282), "genesis: iteration 4 Criticizer", 4, "Criticizer")),
        kpis=Kpis(mttd_seconds=620.0, mttr_seconds=360.0, false_positive_rate=None, retries_per_phase=0.1,
                  escalation_rate=0.5, detections=1, recoveries=1, warnings=0, tickets=2),
        reaped=2,
    )


def midnight_tasks() -> tuple[TaskRow, ...]:
    """midnight_night's TASKS.md items as reporting/tasks.py derives them from its commits."""
    base = float(calendar.timegm((2025, 11, 20, 22, 30, 0)))

    def step(minutes: float, iteration: int, phase: str, before: str, after: str) -> Step:
        return Step(base + minutes * M, iteration, phase, before, after)

    health = (step(21, 1, "Builder", "open", "review"), step(38, 1, "Criticizer", "review", "done"))
    login = (step(199, 2, "Builder", "open", "review"), step(208, 2, "Criticizer", "review", "done"))
    orders = (step(274, 4, "Builder", "open", "review"),)
    return (
        TaskRow("Add a /health endpoint with a test", "done", health[0], health[1], health[1], 1, 37 * M, 1.15,
                health),
        TaskRow("Rate-limit the login form", "done", login[0], login[1], login[1], 1, 38 * M, 0.63, login),
        TaskRow("Paginate the order history", "review", orders[0], None, None, 1, 35 * M, 0.92, orders),
        TaskRow("Send a receipt by mail after checkout", "open"),
    )


def first_hour(led, run_id: str, t0: float) -> None:
    """A run's ledger up to `t0`: started an hour before, its Builder finished with a commit,
    its Criticizer started 29 minutes before (what follows is each test's own)."""
    rec = lambda what, minutes, **kw: led.record(run_id, what, at=t0 + minutes * 60, **kw)  # noqa: E731
    rec("loop_start", -60, project="/p", pid=4242)
    rec("iteration_start", -60, iteration=1)
    rec("phase_start", -59, iteration=1, phase="Builder", epoch=t0 - 59 * 60, log="b.log", attempt=0)
    rec("phase_end", -30, iteration=1, phase="Builder", status="exited", returncode=0, ending="finished",
        duration=29 * 60.0, cost_usd=0.84, input_tokens=120_000, output_tokens=9_500)
    rec("phase_work", -30, iteration=1, phase="Builder", commits=[{"sha": "a1b2c3d", "subject": "Add /health"}],
        files_changed=2, tasks_done=["Add /health"])
    rec("phase_start", -29, iteration=1, phase="Criticizer", epoch=t0 - 29 * 60, log="c.log", attempt=0)
