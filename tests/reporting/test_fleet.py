"""`genesis report` on a fleet: each task with its attempts, escalations, time, cost and merged
commits; seed 000's KPIs over the fleet, each from its definition; the text, JSON and HTML as
the command prints and writes them, from a real fleet ledger and real child ledgers."""

from __future__ import annotations

import calendar
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.git import git
from helpers.nights import first_hour
from helpers.state import state_of

from genesis.cli import cli
from genesis.config import default_layout
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.ledger.store import Ledger
from genesis.reporting.fleet import fleet_ledger_of, kpi_rows, load

T0 = float(calendar.timegm((2025, 11, 21, 1, 0, 0)))
MIN = 60.0

pytestmark = pytest.mark.usefixtures("utc")


def invoke(project: Path, *args: str):
    return CliRunner().invoke(cli, ["--project", str(project), "report", *args], catch_exceptions=False)


def attempt(led: FleetLedger, tid: str, kind: str, agent: str, run_id: str, start: float, end: float | None,
            outcome: str | None = None, exit_code: int | None = None, cost: float | None = None,
            failed_at: float | None = None, healthy_at: float | None = None, why: str = "") -> None:
    """One attempt of a task as the monitor records it: launched, seen healthy, its end detected
    (why: how it ended, in its own words)."""
    a = led.begin_attempt(tid, kind, f"{kind} of {tid}", agent, run_id, start)
    if healthy_at is not None:
        led.record("child_healthy", tid, now=healthy_at, run_id=run_id, attempt=a.attempt)
    if end is not None:
        led.end_attempt(tid, a.attempt, exit_code, outcome or "failed", end)
        detail = {"run_id": run_id, "attempt": a.attempt, "exit_code": exit_code, "outcome": outcome, "reason": why}
        if cost is not None:
            detail["cost_usd"] = cost
        if failed_at is not None:
            detail["ended_at"] = failed_at
        led.record("child_end", tid, now=end, **detail)


def child_ledger(project: Path, tid: str, run_id: str) -> Path:
    """A running task's real worktree whose child's ledger reports the cost (the monitor has
    recorded none yet: the child runs)."""
    where = project.parent / "worktrees" / tid
    git(project, "worktree", "add", "-q", "-b", f"genesis/task/{tid}", str(where))
    lay = default_layout(where)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    with Ledger.open(lay.ledger_file) as led:
        first_hour(led, run_id, T0 + 60 * MIN)  # a Builder that cost $0.84, then a Criticizer running
    return where


def fleet_night(project: Path) -> None:
    """Four tasks at parallel 2: one merged at once, one merged after a restart, one that climbed
    the ladder to a permanent failure, one still running."""
    with FleetLedger.open(fleet_ledger_of(state_of(project))) as led:
        led.record("fleet_start", now=T0, run_id="fleet-1", parallel=2, pid=4242)
        led.upsert_task(TaskRow("add-health-aaaaaa", "Add /health", "merged", merged_sha="1" * 40,
                                created=T0, updated=T0))
        attempt(led, "add-health-aaaaaa", "start", "claude", "c-1", T0, T0 + 20 * MIN, "verified", 0, cost=0.50,
                healthy_at=T0 + 1 * MIN)
        led.record("merged", "add-health-aaaaaa", now=T0 + 21 * MIN, sha="1" * 40, commits=["a" * 40, "b" * 40])
        led.set_state("add-health-aaaaaa", "merged", merged_sha="1" * 40)

        led.upsert_task(TaskRow("add-ready-bbbbbb", "Add /ready", "queued", created=T0 + 1, updated=T0))
        # Fails at +10 min, seen 4 s later; the restart runs healthy 30 s after that.
        attempt(led, "add-ready-bbbbbb", "start", "claude", "c-2", T0, T0 + 10 * MIN + 4, "failed", 1, cost=0.40,
                failed_at=T0 + 10 * MIN)
        attempt(led, "add-ready-bbbbbb", "restart", "claude", "c-3", T0 + 11 * MIN, T0 + 30 * MIN, "verified", 0,
                cost=0.60, healthy_at=T0 + 10 * MIN + 34)
        led.record("merged", "add-ready-bbbbbb", now=T0 + 31 * MIN, sha="2" * 40, commits=["c" * 40])
        led.set_state("add-ready-bbbbbb", "merged", merged_sha="2" * 40, attempts=2, restarts=1)

        led.upsert_task(TaskRow("fix-login-cccccc", "Fix the login", "queued", created=T0 + 2, updated=T0))
        # Fails at +5 min, seen 2 s later; the restart fails too (seen 6 s late), then the escalation.
        attempt(led, "fix-login-cccccc", "start", "claude", "c-4", T0, T0 + 5 * MIN + 2, "failed", 3, cost=0.10,
                failed_at=T0 + 5 * MIN, why="first: breaker OPEN")
        attempt(led, "fix-login-cccccc", "restart", "claude", "c-5", T0 + 6 * MIN, T0 + 9 * MIN + 6, "failed", 3,
                cost=0.20, failed_at=T0 + 9 * MIN, healthy_at=T0 + 5 * MIN + 62, why="second: breaker OPEN again")
        attempt(led, "fix-login-cccccc", "escalate", "codex exec", "c-6", T0 + 10 * MIN, T0 + 15 * MIN, "failed",
                1, cost=0.30, healthy_at=T0 + 9 * MIN + 36, why="third: the agent crashed")
        led.record("failed_permanently", "fix-login-cccccc", now=T0 + 15 * MIN, reason="ladder spent")
        led.set_state("fix-login-cccccc", "failed", reason="the ladder is spent: exit 1", attempts=3, restarts=1,
                      escalations=1, strategy=1)

    worktree = child_ledger(project, "add-docs-dddddd", "c-7")
    with FleetLedger.open(fleet_ledger_of(state_of(project))) as led:
        led.upsert_task(TaskRow("add-docs-dddddd", "Add the docs", "running", worktree=str(worktree),
                                branch="genesis/task/add-docs-dddddd", created=T0 + 3, updated=T0))
        attempt(led, "add-docs-dddddd", "start", "claude", "c-7", T0 + 40 * MIN, None)


def test_each_task_with_its_attempts_time_cost_and_merged_commits(project):
    fleet_night(project)
    r = load(fleet_ledger_of(state_of(project)), project, running=True, now=T0 + 70 * MIN)
    tasks = {t.id: t for t in r.tasks}
    assert [t.id for t in r.tasks] == ["add-health-aaaaaa", "add-ready-bbbbbb", "fix-login-cccccc",
                                       "add-docs-dddddd"]
    health, ready, login, docs = (tasks[k] for k in ("add-health-aaaaaa", "add-ready-bbbbbb",
                                                      "fix-login-cccccc", "add-docs-dddddd"))
    assert (health.attempts, health.seconds, health.cost_usd, health.commits) == (1, 1200.0, 0.5, ("a" * 40, "b" * 40))
    assert (ready.attempts, ready.restarts, ready.seconds, ready.cost_usd) == (2, 1, 604.0 + 1140.0, 1.0)
    assert (login.state, login.escalations, login.agent, round(login.cost_usd, 2)) == ("failed", 1, "codex exec", 0.6)
    assert [a.kind for a in login.history] == ["start", "restart", "escalate"]
    # The running child's cost is its own ledger's (no end recorded by the monitor yet); its time runs to now.
    assert (docs.cost_usd, docs.seconds) == (0.84, 30 * MIN)
    assert (r.parallel, r.run_id, r.running, r.ended) == (2, "fleet-1", True, None)
    assert round(r.cost_usd, 2) == 2.94  # 0.50 + 1.00 + 0.60 + 0.84


def test_seed_000_kpis_over_the_fleet_each_from_its_definition(project):
    fleet_night(project)
    k = load(fleet_ledger_of(state_of(project)), project, running=True, now=T0 + 70 * MIN).kpis
    assert (k.tasks, k.completed, k.completed_clean, k.completion_rate) == (4, 2, 2, 0.5)
    # Three abnormal ends, detected 4, 2 and 6 s after the child's own end (the escalation's end
    # has no recorded child end: it is not a detection).
    assert (k.detections, k.mttd_seconds) == (3, 4.0)
    # Recoveries: 30 s (add-ready), 60 s and 30 s (fix-login's restart and escalation).
    assert (k.recoveries, k.mttr_seconds) == (3, 40.0)
    assert (k.retries, k.retries_per_task, k.restarts_of_healthy, k.false_positive_rate) == (3, 0.75, 0, 0.0)
    assert (k.escalated, k.escalation_rate, k.failed, k.final_failure_rate) == (1, 0.25, 1, 0.25)
    assert (round(k.retry_cost_usd, 2), round(k.cost_per_retry_usd, 4)) == (1.1, round(1.1 / 3, 4))
    # Records: 14 events and 7 attempts begun (6 ended), over the 70 minutes of the fleet so far.
    assert k.writes == 14 + 7 + 6 and k.span_seconds == 70 * MIN
    assert k.ledger_writes_per_second == pytest.approx(27 / 4200)
    rows = {name: value for name, value, _ in kpi_rows(k)}
    assert rows == {"completion rate": "50%", "MTTD": "4s", "MTTR": "40s", "false-positive rate": "0%",
                    "retries per task": "0.75", "escalation rate": "25%", "final failure rate": "25%",
                    "cost per retry": "$0.37", "ledger writes/s": "0.00643"}


def test_a_restart_of_a_child_that_had_not_failed_is_a_false_positive(project):
    with FleetLedger.open(fleet_ledger_of(state_of(project))) as led:
        led.upsert_task(TaskRow("a-aaaaaa", "A", "running", created=T0, updated=T0))
        led.begin_attempt("a-aaaaaa", "start", "queued", "claude", "c-1", T0)   # never ended: still alive
        led.begin_attempt("a-aaaaaa", "restart", "stale sample", "claude", "c-2", T0 + 60)
    k = load(fleet_ledger_of(state_of(project)), project, running=False, now=T0 + 120).kpis
    assert (k.retries, k.restarts_of_healthy, k.false_positive_rate) == (1, 1, 1.0)
    assert (k.mttd_seconds, k.mttr_seconds, k.cost_per_retry_usd) == (None, None, None)


def told(project: Path, run_id: str, at: float, severity: str, cause: str) -> None:
    """An alert its deliverer recorded in the project's run ledger (where a fleet's go)."""
    ticket = {"ticket_id": f"{int(at):032x}", "severity": severity, "cause": cause, "kind": "fleet", "final": False}
    with Ledger.open(state_of(project) / "ledger.sqlite3") as led:
        led.record(run_id, "alert", at=at, ticket=ticket, decision="intervene", why="critical severity", by="rules",
                   delivered=["webhook"], failed={})


def test_genesis_report_on_a_fleet_prints_the_tasks_the_history_and_the_kpis(project, tmp_path):
    fleet_night(project)
    told(project, "fleet-1", T0 + 15 * MIN + 1, "critical", "task failed permanently: Fix the login")
    told(project, "someone-else", T0 + 15 * MIN + 2, "high", "a single loop's alert, not the fleet's")
    result = invoke(project)
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"Genesis fleet report: {project}" in out and "fleet fleet-1, parallel 2, started 2025-11-21 01:00 UTC" in out
    assert "4 tasks: 1 failed, 2 merged, 1 running" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("add-health-aaaaaa"))
    assert "merged" in line and "20m" in line and "$0.50" in line and "aaaaaaaaaaaa +1" in line
    # Each attempt with its own end (not the next one's reason), its cost and agent.
    assert "fix-login-cccccc:" in out
    assert "1. start 01:00 UTC-01:05 UTC exit 3 failed, agent claude, $0.10: first: breaker OPEN" in out
    assert "2. restart 01:06 UTC-01:09 UTC exit 3 failed, agent claude, $0.20: second: breaker OPEN again" in out
    assert "3. escalate 01:10 UTC-01:15 UTC exit 1 failed, agent codex exec, $0.30: third: the agent crashed" in out
    # The timeline, and the fleet's alerts from the project's ledger.
    assert re.search(r"^  01:15 UTC  fix-login-cccccc: failed permanently: ladder spent$", out, re.M), out
    assert re.search(r"^  01:21 UTC  add-health-aaaaaa: came home \(111111111111\)$", out, re.M)
    assert "alerts (1)" in out and "critical  intervene  task failed permanently: Fix the login (sent to webhook)" in out
    assert "a single loop's alert" not in out  # another run's, not the fleet's
    assert "seed 000" not in out and "KPI" not in out
    assert "fleet figures" in out and re.search(r"^completion rate +50% +tasks merged without escalation: 2 "
                                                        r"of 4 tasks", out, re.M) and re.search(r"^MTTD +4s ", out, re.M)
    assert "restarts of a child that had not failed: 0 of 3 restarts" in out
    doc = json.loads(invoke(project, "--json").output)
    assert doc["fleet"]["kpis"]["completion_rate"] == 0.5 and len(doc["fleet"]["tasks"]) == 4
    assert doc["fleet"]["tasks"][2]["history"][2]["kind"] == "escalate"
    page = tmp_path / "out" / "fleet.html"
    result = invoke(project, "--html", str(page))
    assert result.exit_code == 0 and f"HTML report: {page}" in result.output
    html = page.read_text()
    assert "Content-Security-Policy" in html and "Fleet figures" in html and "fix-login-cccccc" in html
    assert "seed 000" not in html and "Timeline" in html and "Alerts (1)" in html and "Attempts" in html
    assert "third: the agent crashed" in html


def test_a_single_loop_run_after_the_fleet_is_what_report_shows(project):
    fleet_night(project)
    with Ledger.open(state_of(project) / "ledger.sqlite3") as led:
        first_hour(led, "20251121T050000Z-1", T0 + 5 * 3600)
    out = invoke(project).output
    assert "Genesis run 20251121T050000Z-1" in out and "fleet report" not in out


def test_task_text_from_the_agent_is_one_line_and_redacted(project):
    secret = "sk-ant-api03-" + "x" * 40
    with FleetLedger.open(fleet_ledger_of(state_of(project))) as led:
        led.record("fleet_start", now=T0, run_id="fleet-1", parallel=1, pid=1)
        led.upsert_task(TaskRow("x-aaaaaa", "Evil\x1b[31m task\nsecond line", "failed", created=T0, updated=T0,
                                reason=f"token {secret}"))
    out = invoke(project).output
    assert "\x1b" not in out and "sk-ant-api03-xxxx" not in out and "Evil task second line" in out


def test_each_merge_s_evidence_is_shown_green_red_with_its_tail_and_dropped_with_its_hunks(project, tmp_path):
    red = {"kind": "project", "command": "make test", "exit_code": 2, "seconds": 3.0, "timed_out": False, "error": ""}
    green = {**red, "exit_code": 0, "seconds": 4.0}
    with FleetLedger.open(fleet_ledger_of(state_of(project))) as led:
        led.record("fleet_start", now=T0, run_id="fleet-1", parallel=2, pid=4242)
        led.upsert_task(TaskRow("add-health-aaaaaa", "Add /health", "merged", created=T0, updated=T0))
        led.record("merge_red", "add-health-aaaaaa", now=T0 + 10 * MIN, attempt=1, to="task",
                   reason="the project's check `make test` exited 2 (after 3s)", checks=[red],
                   tail=["FAILED tests/test_health.py::test_ok"])
        led.record("merged", "add-health-aaaaaa", now=T0 + 30 * MIN, sha="1" * 40, commits=["a" * 40], checks=[green])
        led.upsert_task(TaskRow("add-ready-bbbbbb", "Add /ready", "needs-review", created=T0 + 1, updated=T0))
        led.record("needs_review", "add-ready-bbbbbb", now=T0 + 40 * MIN, outcome="dropped", reason="lost",
                   lost=["app.py line 3 (added by the task 'Add /health': 'ok')"])
    r = load(fleet_ledger_of(state_of(project)), project, running=False, now=T0 + 60 * MIN)
    health, ready = r.tasks
    assert [(m.result, m.checks, m.tail, m.to) for m in health.merges] == [
        ("red", ("the project's check `make test` exited 2 (after 3s)",), ("FAILED tests/test_health.py::test_ok",),
         "task"),
        ("green", ("the project's check `make test` exited 0 (after 4s)",), (), "")]
    assert [(m.result, m.lost) for m in ready.merges] == [
        ("dropped", ("app.py line 3 (added by the task 'Add /health': 'ok')",))]
    out = invoke(project).output
    assert "01:10 UTC red, not landed (back to its task): the project's check `make test` exited 2 (after 3s)" in out
    assert "      | FAILED tests/test_health.py::test_ok" in out
    assert "01:30 UTC green, landed: the project's check `make test` exited 0 (after 4s)" in out
    assert "01:40 UTC dropped lines, not landed: app.py line 3 (added by the task 'Add /health': 'ok')" in out
    assert re.search(r"^  01:10 UTC  add-health-aaaaaa: merge red, not landed: the project's check", out, re.M)
    assert re.search(r"^  01:30 UTC  add-health-aaaaaa: came home \(111111111111\), its checks green$", out, re.M)
    doc = json.loads(invoke(project, "--json").output)
    assert doc["fleet"]["tasks"][0]["merges"][0]["tail"] == ["FAILED tests/test_health.py::test_ok"]
    page = tmp_path / "fleet.html"
    invoke(project, "--html", str(page))
    html = page.read_text()
    assert "Merges" in html and "FAILED tests/test_health.py::test_ok" in html and "dropped lines" in html
