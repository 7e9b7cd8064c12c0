"""`genesis report` from the command line: which runs it picks, and what it prints and writes,
read from a real ledger in a real git project."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import paths
from helpers.state import state_of

from genesis.cli import cli
from genesis.ledger.store import Ledger
from genesis.reporting.command import since_epoch
from genesis.store.looplock import hold

H = 3600.0


def invoke(project: Path, *args: str):
    return CliRunner().invoke(cli, ["--project", str(project), "report", *args], catch_exceptions=False)


def ledger(project: Path) -> Ledger:
    return Ledger.open(state_of(project) / "ledger.sqlite3")


def record_run(project: Path, run_id: str, start: float, *, endings: tuple[str, ...] = ("finished",),
               end: bool = True) -> list[str]:
    """One run of one iteration whose phases end as given, ten minutes after it started (or with
    no end recorded); returns the kinds of the events recorded, in order."""
    kinds = []
    with ledger(project) as led:
        def r(event: str, offset: float, /, **detail) -> None:
            led.record(run_id, event, at=start + offset, **detail)
            kinds.append(event)

        r("loop_start", 0, project=str(project), pid=4242)
        r("iteration_start", 1, iteration=1)
        for n, (name, ending) in enumerate(zip(("Builder", "Criticizer", "Planner"), endings)):
            r("phase_start", 10 + 100 * n, iteration=1, phase=name, epoch=start + 10 + 100 * n, attempt=0)
            r("phase_end", 90 + 100 * n, iteration=1, phase=name, status="exited", ending=ending,
              returncode=0 if ending == "finished" else 1, detail=ending, cost_usd=0.25, input_tokens=100,
              output_tokens=10, num_turns=2)
        if end:
            r("iteration_end", 590, iteration=1, progress=True, breaker="CLOSED", no_progress=0)
            r("loop_end", 600, reason="done: every task is ticked", exit_code=0)
    return kinds


def header(run_id: str, project: Path) -> str:
    return f"Genesis run {run_id} · {project}"


def test_the_report_shows_the_latest_run(project):
    record_run(project, "run-a", time.time() - 5 * H)
    record_run(project, "run-b", time.time() - 2 * H, endings=("finished", "failed"))
    result = invoke(project)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == header("run-b", project)
    assert "run-a" not in result.stdout
    assert "done: every task is ticked" in result.stdout


def test_the_report_through_the_installed_entry_point(project):
    record_run(project, "run-a", time.time() - H)
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    done = subprocess.run([sys.executable, "-m", "genesis", "--project", str(project), "report"], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == header("run-a", project)


def test_run_id_picks_another_run_and_an_unknown_one_is_an_error(project):
    record_run(project, "run-a", time.time() - 5 * H)
    record_run(project, "run-b", time.time() - 2 * H)
    older = invoke(project, "--run-id", "run-a")
    assert older.exit_code == 0, older.output
    assert older.stdout.splitlines()[0] == header("run-a", project)
    unknown = invoke(project, "--run-id", "run-c")
    assert unknown.exit_code == 1
    assert "run-c" in unknown.stderr and f"--project {project.resolve()} report --list`" in unknown.stderr
    malformed = invoke(project, "--run-id", "../run-a")
    assert malformed.exit_code == 2 and "a run id is" in malformed.stderr


def test_list_shows_one_line_per_run_in_start_order_and_how_each_ended(project, tz):
    tz("UTC")
    start = float(calendar.timegm((2026, 11, 20, 22, 0, 0)))
    # Recorded out of order: the list follows when each run started.
    record_run(project, "run-late", start + 2 * H, endings=("finished",), end=False)
    record_run(project, "run-early", start, endings=("finished", "stuck", "finished"))
    record_run(project, "run-mid", start + H, endings=("finished", "failed"), end=False)
    fd = hold(state_of(project) / "loop.lock", state_of(project) / "loop.json", "run-late")
    try:
        listed = invoke(project, "--list")
        running = invoke(project)
    finally:
        os.close(fd)
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.splitlines() == [
        "run-early  started 2026-11-20 22:00 UTC  3 phase(s), 2 finished  10m00s, exit 0: done: every task is ticked",
        "run-mid  started 2026-11-20 23:00 UTC  2 phase(s), 1 finished  no end recorded",
        "run-late  started 2026-11-21 00:00 UTC  1 phase(s), 1 finished  running",
    ]
    assert running.stdout.splitlines()[0] == header("run-late", project)
    assert "still running" in running.stdout
    # Once the loop has let go of its lock the same run has no end recorded.
    assert invoke(project, "--list").stdout.splitlines()[2].endswith("  no end recorded")


def test_since_a_duration_reports_each_run_started_since_then(project):
    now = time.time()
    record_run(project, "run-old", now - 3 * H)
    record_run(project, "run-new", now - 1 * H)
    recent = invoke(project, "--since", "2h")
    assert recent.exit_code == 0, recent.output
    assert header("run-new", project) in recent.stdout and "run-old" not in recent.stdout
    both = invoke(project, "--since", "4h")
    headers = [line for line in both.stdout.splitlines() if line.startswith("Genesis run ")]
    assert headers == [header("run-old", project), header("run-new", project)]
    listed = invoke(project, "--list", "--since", "2h")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["run-new"]


def test_since_a_local_date_and_time(project, tz):
    tz("IST-5:30")  # UTC+5:30: a date read as UTC would pick neither run below
    cut = float(calendar.timegm((2026, 11, 20, 16, 30, 0)))  # 22:00 local
    record_run(project, "run-before", cut - 30 * 60)
    record_run(project, "run-after", cut + 15 * 60)
    for when in ("2026-11-20 22:00", "2026-11-20T22:00", "2026-11-20 21:59:59"):
        result = invoke(project, "--since", when)
        assert result.exit_code == 0, (when, result.output)
        assert header("run-after", project) in result.stdout and "run-before" not in result.stdout, when
    whole_day = invoke(project, "--since", "2026-11-20")
    assert header("run-before", project) in whole_day.stdout and header("run-after", project) in whole_day.stdout


def test_a_bad_since_is_a_usage_error_naming_the_forms_it_takes(project):
    record_run(project, "run-a", time.time() - H)
    result = invoke(project, "--since", "yesterday-ish")
    assert result.exit_code == 2
    assert "yesterday-ish" in result.stderr
    assert "90m, 12h, 2d" in result.stderr and "2026-11-20 22:00" in result.stderr
    assert result.stdout == ""


def test_no_run_since_then_is_an_error(project):
    record_run(project, "run-a", time.time() - 3 * H)
    result = invoke(project, "--since", "30m")
    assert result.exit_code == 1
    assert "no Genesis run started since" in result.stderr
    listed = invoke(project, "--list", "--since", "30m")
    assert listed.exit_code == 1 and "since then" in listed.stderr


def test_json_holds_each_runs_phases_totals_and_every_event_in_order(project, tmp_path):
    now = time.time()
    kinds_a = record_run(project, "run-a", now - 2 * H, endings=("finished", "stuck"))
    with ledger(project) as led:  # another run's event between run-a's: it stays out of run-a's list
        led.record("run-b", "loop_start", at=now - 1.5 * H, project=str(project))
        led.record("run-a", "phase_work", at=now - 2 * H + 95, iteration=1, phase="Builder", files_changed=1,
                   tasks_done=["Add a /health endpoint"], commits=[{"sha": "a1b2c3d", "subject": "health"}])
    kinds_a.append("phase_work")
    page = tmp_path / "night.html"
    result = invoke(project, "--since", "3h", "--json", "--html", str(page))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # nothing else on stdout, not even where the page went
    assert [r["run_id"] for r in data["runs"]] == ["run-a", "run-b"]
    run = data["runs"][0]
    assert [[(p["phase"], p["ending"]) for p in it["phases"]] for it in run["iterations"]] == \
        [[("Builder", "finished"), ("Criticizer", "stuck")]]
    assert run["iterations"][0]["phases"][0]["commits"] == ["a1b2c3d"]
    assert (run["cost_usd"], run["input_tokens"], run["output_tokens"], run["abnormal"], run["tasks_done"]) == \
        (0.5, 200, 20, 1, ["Add a /health endpoint"])
    assert (run["exit_code"], run["reason"], run["project"]) == (0, "done: every task is ticked", str(project))
    assert [e["event"] for e in run["events"]] == kinds_a
    assert {e["run_id"] for e in run["events"]} == {"run-a"}
    seqs = [e["seq"] for e in run["events"]]
    assert seqs == sorted(seqs)
    assert [e["event"] for e in data["runs"][1]["events"]] == ["loop_start"]
    assert page.read_text().startswith("<!DOCTYPE html>")


def test_html_writes_the_page_and_says_where(project, tmp_path):
    record_run(project, "run-a", time.time() - H, endings=("finished", "failed"))
    page = tmp_path / "night.html"
    result = invoke(project, "--html", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "run-a" in text and text.rstrip().endswith("</html>")
    assert result.stdout.splitlines()[0] == header("run-a", project)  # the terminal report as well
    assert result.stdout.splitlines()[-1] == f"HTML report: {page}"


def test_an_html_file_that_cannot_be_written_is_said_not_a_crash(project, tmp_path):
    record_run(project, "run-a", time.time() - H)
    page = tmp_path / "no such folder" / "night.html"
    result = invoke(project, "--html", str(page))
    assert not isinstance(result.exception, OSError), "".join(traceback.format_exception(result.exception))
    if result.exit_code == 0:  # the folder made for it
        assert page.read_text().startswith("<!DOCTYPE html>")
    else:
        assert str(page) in result.stderr and "Traceback" not in result.output
    folder = invoke(project, "--html", str(tmp_path))
    assert folder.exit_code == 2 and "directory" in folder.stderr


def test_two_runs_with_since_and_html_make_one_page_with_both(project, tmp_path):
    now = time.time()
    record_run(project, "run-a", now - 3 * H)
    record_run(project, "run-b", now - 1 * H, endings=("finished", "stuck"))
    page = tmp_path / "nights.html"
    result = invoke(project, "--since", "4h", "--html", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert "run-a" in text and "run-b" in text and text.index("run-a") < text.index("run-b")
    # One page: one document, one body, both runs inside it.
    assert (text.count("<!DOCTYPE"), text.count("<html"), text.count("<body"), text.count("</body>"),
            text.count("</html>")) == (1, 1, 1, 1, 1)
    assert text.index("<body") < text.index("run-a") and text.index("run-b") < text.index("</body>")


def test_no_ledger_is_an_error_saying_no_loop_has_run(project, tmp_path):
    page = tmp_path / "night.html"
    for args in ((), ("--list",), ("--since", "2h"), ("--json",), ("--html", str(page))):
        result = invoke(project, *args)
        assert result.exit_code == 1, args
        assert "no loop has run in this project yet" in result.stderr, args
    assert not page.exists()
    assert not (state_of(project) / "ledger.sqlite3").exists()  # a view never creates the ledger


NOW = float(calendar.timegm((2026, 11, 21, 7, 30, 0)))


@pytest.mark.parametrize("text, back", [
    ("90m", 90 * 60), ("12h", 12 * H), ("2d", 48 * H), ("1.5h", 1.5 * H), (" 30M ", 30 * 60), ("0m", 0),
])
def test_since_a_duration_counts_back_from_now(text, back):
    assert since_epoch(text, NOW) == NOW - back


@pytest.mark.parametrize("text, local", [
    ("2026-11-20", (2026, 11, 20, 0, 0, 0)),
    ("2026-11-20 22:00", (2026, 11, 20, 22, 0, 0)),
    ("2026-11-20T22:00", (2026, 11, 20, 22, 0, 0)),
    ("2026-11-20 22:00:30", (2026, 11, 20, 22, 0, 30)),
    ("2026-11-20T22:00:30", (2026, 11, 20, 22, 0, 30)),
])
def test_since_a_date_is_local_time(text, local, tz):
    tz("XYZ+3")  # UTC-3
    assert since_epoch(text, NOW) == calendar.timegm(local) + 3 * H


@pytest.mark.parametrize("text", ["yesterday-ish", "", "2h ago", "-2h", "12", "2w", "2026-13-01", "20/11/2026"])
def test_since_anything_else_is_refused_with_the_forms_it_takes(text):
    with pytest.raises(ValueError, match=r"90m, 12h, 2d.*2026-11-20"):
        since_epoch(text, NOW)
