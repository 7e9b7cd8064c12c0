"""The terminal morning report: what a user must see after a night, from hand-built records."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
from helpers.nights import HOSTILE, many_night, running_night, typical_night

from genesis.reporting.text import render_text

pytestmark = pytest.mark.usefixtures("utc")


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


def cells(line: str) -> list[tuple[int, str]]:
    """A table line's cells (split on its column gaps), each with the column it starts at."""
    return [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", line)]


def table_row(text: str, iteration: int) -> list[str]:
    """The iteration table's row for an iteration, split on its column gaps; a cell's further
    lines (a phase run more than once) joined to it with ", "."""
    rows = table_rows(text)
    for n, line in enumerate(rows):
        if line.split()[0] == str(iteration):
            row = cells(line)
            for more in rows[n + 1:]:
                if more.split()[0].isdigit():
                    break
                for start, cell in cells(more):
                    k = next(k for k, (at, _) in enumerate(row) if at == start)
                    row[k] = (start, f"{row[k][1]}, {cell}")
            return [cell for _, cell in row]
    raise AssertionError(f"no row for iteration {iteration} in:\n{text}")


def test_header_says_which_run_when_and_how_it_ended():
    text = render_text(typical_night())
    assert text.splitlines()[:4] == [
        "Genesis run 20251121-013000-4f2a · /srv/shop",
        "started 2025-11-21 01:30 UTC · ended 2025-11-21 06:11 UTC after 4h41m · exit 0",
        "stopped: the iteration limit (3) was reached",
        "3 iterations · 9 phases, 3 abnormal · 1 commit · 1 task done · $1.83 · 2 leftover processes ended"]


def test_one_table_row_per_iteration_with_each_phase_outcome():
    text = render_text(typical_night())
    header = next(line for line in text.splitlines() if line.strip().startswith("iter"))
    assert header.split() == ["iter", "Builder", "Criticizer", "Planner", "time", "progress", "breaker", "commits",
                              "tasks"]
    assert table_row(text, 1) == ["1", "finished", "stuck, finished", "skipped", "35m00s", "yes", "CLOSED", "1", "1"]
    assert table_row(text, 2) == ["2", "usage limit, finished", "finished", "skipped", "3h40m", "no", "CLOSED (1)",
                                  "-", "-"]
    assert table_row(text, 3) == ["3", "exit 2", "finished", "finished", "23m00s", "no", "HALF_OPEN (2)", "-", "-"]
    assert all(len(line) <= 100 for line in table_rows(text))  # a retried phase adds a line, not width


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
    assert "usage limit" in waits and "02:08-05:13 UTC (3h05m)" in waits
    assert "iteration 2 Builder: You've hit your 5-hour limit" in waits
    incidents = section(text, "incidents (1")
    assert f"--project {typical_night().project} incidents show ID` prints one in full" in incidents
    assert "inc-0001 02:02 UTC iteration 1 Criticizer stuck no heartbeat for 600s" in flat(incidents)
    assert "CLOSED -> HALF_OPEN (2 iterations without progress)" in section(text, "breaker changes")
    alerts = section(text, "alerts (1)")
    assert "T-0001" in alerts and "dismiss" in alerts and "Criticizer stuck on a hung pytest" in alerts


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
    assert text.splitlines()[1] == "started 2025-11-21 01:30 UTC · still running"
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
    assert "[31m" not in text and "[0m" not in text and " red & " in text  # the escape code gone whole


def test_a_killed_loop_has_no_end_and_says_so():
    night = dataclasses.replace(typical_night(), ended=None, reason="", exit_code=None)
    assert render_text(night).splitlines()[1] == (
        "started 2025-11-21 01:30 UTC · no end recorded (the loop was killed, or its ledger lost the end)")


def test_no_escape_codes_even_when_the_caller_has_a_terminal(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    text = render_text(typical_night())
    assert "\x1b" not in text


def test_local_time_follows_the_timezone(monkeypatch):
    monkeypatch.setenv("TZ", "CET-1")   # POSIX form: needs no tz database
    time.tzset()
    assert "started 2025-11-21 02:30 CET" in render_text(typical_night())


def test_a_running_nights_report_says_how_long_it_has_run():
    from helpers.nights import at

    night = dataclasses.replace(running_night(), read_at=at(40) + 5)
    assert render_text(night).splitlines()[1] == "started 2025-11-21 01:30 UTC · still running, for 40m05s so far"
