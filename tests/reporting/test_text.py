"""The terminal morning report: what a user must see after a night, from hand-built records."""

from __future__ import annotations

import calendar
import dataclasses
import time

import pytest

from genesis.reporting.model import (AlertRow, BreakerChange, CommitRow, IncidentRow, IterationRow, Kpis, Night,
                                     PhaseRow, WaitRow)
from genesis.reporting.text import render_text

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))   # 01:30 UTC
M = 60.0
HOSTILE = "<script>alert(1)</script> [bold red]not markup[/bold red] \x1b[31mred\x1b[0m & \"quotes\""


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Local time is UTC, so the clock times the report prints are known."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def at(minutes: float) -> float:
    return T0 + minutes * M


def typical_night(reason: str = "no heartbeat for 600s (last tool: Bash pytest -x)") -> Night:
    """Three iterations: a stuck Criticizer (an incident, retried), a usage-limit wait, a breaker change,
    a failed Builder, one commit, one task done, reported costs."""
    it1 = (
        PhaseRow(1, "Builder", 0, at(0), at(22), "finished", 0, "finished", cost_usd=0.84, turns=31,
                 input_tokens=120_000, output_tokens=9_500, commits=("a1b2c3d",), files_changed=3,
                 tasks_done=("Add a /health endpoint with a test",)),
        PhaseRow(1, "Criticizer", 0, at(22), at(32), "stale", None, reason, cost_usd=0.21, turns=6,
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
        incidents=(IncidentRow("inc-0001", at(32), 1, "Criticizer", "stale", reason,
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


def section(text: str, title: str) -> str:
    """The lines of one section: from its title to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


def flat(text: str) -> str:
    """Text with its wrapping undone: every run of whitespace one space."""
    return " ".join(text.split())


def table_rows(text: str) -> list[str]:
    """The iteration table's rows: from below its rule to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("───")) + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return lines[start:end]


def table_row(text: str, iteration: int) -> list[str]:
    """The iteration table's row for an iteration, split on its column gaps."""
    for line in table_rows(text):
        if line.split()[0] == str(iteration):
            return [c.strip() for c in line.strip().split("  ") if c.strip()]
    raise AssertionError(f"no row for iteration {iteration} in:\n{text}")


def test_header_says_which_run_when_and_how_it_ended():
    text = render_text(typical_night())
    assert text.splitlines()[:4] == [
        "Genesis run 20251121-013000-4f2a · /srv/shop",
        "started 2025-11-21 01:30 · ended 2025-11-21 06:11 after 4h41m · exit 0",
        "stopped: the iteration limit (3) was reached",
        "3 iterations · 9 phases, 3 abnormal · 1 commit · 1 task done · $1.83 · 2 leftover processes ended"]


def test_one_table_row_per_iteration_with_each_phase_outcome():
    text = render_text(typical_night())
    header = next(line for line in text.splitlines() if line.strip().startswith("iter"))
    assert header.split() == ["iter", "Builder", "Criticizer", "Planner", "time", "progress", "breaker", "commits",
                              "tasks"]
    assert table_row(text, 1) == ["1", "ok", "stuck, ok", "skipped", "35m00s", "yes", "CLOSED", "1", "1"]
    assert table_row(text, 2) == ["2", "limit, ok", "ok", "skipped", "3h40m", "no", "CLOSED (1)", "-", "-"]
    assert table_row(text, 3) == ["3", "exit 2", "ok", "ok", "23m00s", "no", "HALF_OPEN (2)", "-", "-"]


def test_abnormal_phases_name_iteration_phase_label_duration_and_reason():
    part = section(render_text(typical_night()), "abnormal phases")
    assert part.splitlines()[:3] == [
        "abnormal phases (3)",
        "iteration 1 Criticizer: stuck after 10m00s; 3 processes ended",
        "    no heartbeat for 600s (last tool: Bash pytest -x)"]
    assert ("iteration 2 Builder: usage limit after 2m00s You've hit your 5-hour limit · resets 5:13am "
            "iteration 3 Builder: exited with an error (exit 2) after 13m00s "
            "exited with status 2: npm ERR! missing script") in flat(part)


def test_tasks_commits_costs_waits_incidents_breaker_alerts():
    text = render_text(typical_night())
    assert "Add a /health endpoint with a test" in section(text, "tasks done (1)")
    commits = section(text, "commits (1)")
    assert "a1b2c3d" in commits and "Add /health endpoint (iteration 1 Builder)" in commits
    costs = section(text, "cost and tokens")
    assert "total: $1.83" in costs
    assert "tokens: in 245,000, out 17,500" in costs
    assert "turns: 64" in costs
    assert "by phase: Builder $1.39, Criticizer $0.39, Planner $0.05" in costs
    waits = section(text, "waits (1)")
    assert "usage limit" in waits and "02:08-05:13 (3h05m)" in waits
    assert "iteration 2 Builder: You've hit your 5-hour limit" in waits
    incidents = section(text, "incidents (1")
    assert "genesis incidents show ID" in incidents
    assert "inc-0001 02:02 iteration 1 Criticizer stale no heartbeat for 600s" in flat(incidents)
    assert "CLOSED -> HALF_OPEN (2 iterations without progress)" in section(text, "breaker changes")
    alerts = section(text, "alerts (1)")
    assert "T-0001" in alerts and "dismiss" in alerts and "Criticizer stuck on a hung pytest (sent: ntfy)" in alerts


def test_kpis_show_values_and_n_a_for_what_could_not_be_computed():
    kpis = section(render_text(typical_night()), "health KPIs").splitlines()[1:]
    values = {line.split("  ")[0]: line.split("  ")[1:] for line in kpis}
    row = {name: [c.strip() for c in cells if c.strip()] for name, cells in values.items()}
    assert row["MTTD"][0] == "10m20s"
    assert row["MTTR"][0] == "3m00s"
    assert row["false-positive rate"][0] == "n/a"
    assert row["retries per phase"][0] == "0.12"
    assert row["escalation rate"][0] == "0%"
    assert "1 detection)" in row["MTTD"][1] and "1 ticket raised" in row["escalation rate"][1]


def test_a_running_night_says_so_and_shows_the_running_phase():
    text = render_text(running_night())
    assert text.splitlines()[1] == "started 2025-11-21 01:30 · still running"
    assert text.splitlines()[2].startswith("2 iterations")
    assert table_row(text, 2)[:2] == ["2", "running"]
    assert table_row(text, 2)[-5:] == ["running", "-", "-", "-", "-"]
    assert "running" not in section(text, "abnormal phases")


def test_unreported_costs_say_so_and_empty_sections_are_left_out():
    night = many_night(iterations=2)
    text = render_text(night)
    costs = section(text, "cost and tokens")
    assert "total: not reported" in costs and "tokens: in not reported, out not reported" in costs
    assert "turns: not reported" in costs
    lines = text.splitlines()
    titles = [lines[i + 1].split(" (")[0] for i, line in enumerate(lines[:-1]) if not line.strip()]
    assert titles[0].split()[0] == "iter" and titles[1:] == ["cost and tokens", "health KPIs"]
    assert [line.split()[1] for line in section(text, "health KPIs").splitlines()[1:3]] == ["n/a", "n/a"]


def test_thirty_iterations_are_thirty_rows_within_the_width():
    text = render_text(many_night(30), width=100)
    assert [int(line.split()[0]) for line in table_rows(text)] == list(range(1, 31))
    assert max(len(line) for line in text.splitlines()) <= 100


def test_hostile_text_is_printed_literally_and_without_escape_codes():
    text = flat(render_text(typical_night(reason=HOSTILE)))
    assert "\x1b" not in text
    assert "[bold red]not markup[/bold red]" in text
    assert "<script>alert(1)</script>" in text
    assert "?[31mred?[0m" in text


def test_a_killed_loop_has_no_end_and_says_so():
    night = dataclasses.replace(typical_night(), ended=None, reason="", exit_code=None)
    assert render_text(night).splitlines()[1] == (
        "started 2025-11-21 01:30 · no end recorded (the loop was killed, or its ledger lost the end)")


def test_no_escape_codes_even_when_the_caller_has_a_terminal(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    text = render_text(typical_night())
    assert "\x1b" not in text


def test_local_time_follows_the_timezone(monkeypatch):
    monkeypatch.setenv("TZ", "CET-1")   # POSIX form: needs no tz database
    time.tzset()
    assert "started 2025-11-21 02:30" in render_text(typical_night())
