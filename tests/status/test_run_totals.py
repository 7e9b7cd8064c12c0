"""`genesis status` totals the run, never a calendar day: a night that crosses midnight is one
run whatever the reader's zone, and another run of the project is not counted in it."""

from __future__ import annotations

import calendar
import io
import json
import os
import time

import pytest

from genesis import exitcodes
from genesis.ledger.store import Ledger
from genesis.status.screen import run_status
from genesis.status.view import build, layout_of
from genesis.store.looplock import hold

CET = "CET-1CEST,M3.5.0,M10.5.0/3"         # Paris: UTC+1 in November
NEW_YORK = "EST5EDT,M3.2.0,M11.1.0"        # UTC-5 in November
START = float(calendar.timegm((2025, 11, 20, 21, 41, 0)))   # 22:41 CET on the 20th
NOW = float(calendar.timegm((2025, 11, 21, 2, 0, 0)))       # 03:00 CET on the 21st
RUN = "20251120T214100Z-4242"
EARLIER = "20251120T120000Z-1111"


def minutes(m: float) -> float:
    return START + m * 60


@pytest.fixture
def zone(monkeypatch):
    """Sets the reader's zone (TZ) for the test; the machine's is back at its end."""
    def set_(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()
    monkeypatch.setenv("COLUMNS", "250")
    yield set_
    monkeypatch.undo()
    time.tzset()


def earlier_run(led: Ledger) -> None:
    """The project's afternoon run: a commit, an incident, a failed phase, $5 (none of it tonight's)."""
    rec = lambda what, at, **kw: led.record(EARLIER, what, at=at, **kw)  # noqa: E731
    t = float(calendar.timegm((2025, 11, 20, 12, 0, 0)))
    rec("loop_start", t, project="/p", pid=1111)
    rec("iteration_start", t, iteration=1)
    rec("phase_start", t + 60, iteration=1, phase="Builder", epoch=t + 60, log="b.log")
    rec("phase_end", t + 600, iteration=1, phase="Builder", status="exited", returncode=2, ending="failed",
        duration=540.0, cost_usd=5.0)
    rec("phase_work", t + 600, iteration=1, phase="Builder", commits=[{"sha": "0ld0ld0", "subject": "old"}],
        tasks_done=["An old task"])
    rec("incident", t + 600, iteration=1, phase="Builder", id="inc-old", kind="failed")
    rec("loop_end", t + 700, reason="circuit breaker OPEN", exit_code=3)


def night(led: Ledger) -> None:
    """Tonight from 22:41 CET: four abnormal phases and two incidents, all before midnight; a
    commit and a ticked task after it; the Planner running since 02:55."""
    rec = lambda what, m, **kw: led.record(RUN, what, at=minutes(m), **kw)  # noqa: E731
    rec("loop_start", 0, project="/p", pid=4242)
    rec("iteration_start", 0, iteration=1)
    for i, (phase, ending) in enumerate((("Builder", "stuck"), ("Builder", "failed"), ("Criticizer", "limit"),
                                         ("Criticizer", "overtime"))):
        rec("phase_start", 1 + i * 15, iteration=1, phase=phase, epoch=minutes(1 + i * 15), log="x.log", attempt=0)
        rec("phase_end", 10 + i * 15, iteration=1, phase=phase, status=ending, returncode=None, ending=ending,
            duration=540.0, cost_usd=0.25)
    rec("incident", 10, iteration=1, phase="Builder", id="inc-1", kind="stuck")
    rec("retry", 10, iteration=1, phase="Builder", count=1, reason="no heartbeat for 600s")
    rec("incident", 55, iteration=1, phase="Criticizer", id="inc-2", kind="overtime")
    rec("iteration_end", 70, iteration=1, progress=False, breaker="CLOSED", no_progress=1)
    rec("iteration_start", 71, iteration=2)
    rec("phase_start", 90, iteration=2, phase="Builder", epoch=minutes(90), log="b.log", attempt=0)   # 00:11 CET
    rec("phase_end", 120, iteration=2, phase="Builder", status="exited", returncode=0, ending="finished",
        duration=1800.0, cost_usd=1.5)
    rec("phase_work", 120, iteration=2, phase="Builder", commits=[{"sha": "a1b2c3d", "subject": "Add /health"}],
        tasks_done=["Add /health"])
    rec("phase_start", 254, iteration=2, phase="Planner", epoch=minutes(254), log="p.log", attempt=0)  # 02:55 CET


def ledger_of(project, *fill) -> None:
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    with Ledger.open(lay.ledger_file) as led:
        for f in fill:
            f(led)


def running_totals(project, tz_set, tz: str):
    tz_set(tz)
    lay = layout_of(project)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    try:
        st = build(lay, now=NOW)
        out = io.StringIO()
        code = run_status(project, out=out, clock=lambda: NOW)
        doc_out = io.StringIO()
        run_status(project, out=doc_out, clock=lambda: NOW, as_json=True)
    finally:
        os.close(fd)
    assert code == exitcodes.OK
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("Totals")]
    return st.totals, line, json.loads(doc_out.getvalue())["totals"]


def shown_at_3(project) -> str:
    """The screen's totals line at 03:00 CET, the loop running."""
    lay = layout_of(project)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    out = io.StringIO()
    try:
        run_status(project, out=out, clock=lambda: NOW)
    finally:
        os.close(fd)
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith(("Totals", "Today"))]
    return line


@pytest.mark.fault(87)
def test_fault_87_at_3_a_m_the_night_s_totals_are_its_run_s_not_since_midnight(project, zone):
    ledger_of(project, earlier_run, night)
    zone(CET)
    # Four abnormal phases and two incidents before midnight, read at 03:00: all are tonight's.
    assert "4 abnormal" in shown_at_3(project) and "2 incidents" in shown_at_3(project), shown_at_3(project)
    t, line, doc = running_totals(project, zone, CET)
    assert (t.run_id, t.current, t.since) == (RUN, True, START)
    assert (t.iterations, t.phases, t.finished, t.abnormal) == (2, 6, 1, 4)
    assert (t.incidents, t.retries, t.commits, t.tasks_done) == (2, 1, 1, 1)
    assert t.cost_usd == pytest.approx(2.5)
    assert line.startswith("Totals     this run, since 22:41 CET: 2 iterations · 6 phases run: 1 finished, "
                           "4 abnormal · $2.50 · 1 commit · 1 task done · 2 incidents · 1 retry · 0 waits"), line
    assert "midnight" not in line and "Today" not in line
    assert doc["scope"] == "this_run" and doc["since_epoch"] == START and doc["since"] == "2025-11-20T21:41:00Z"
    assert (doc["abnormal_phases"], doc["incidents"], doc["phases"]) == (4, 2, 6)
    assert doc["phases_by_ending"] == {"failed": 1, "finished": 1, "limit": 1, "overtime": 1, "stuck": 1}


def test_the_reader_s_zone_changes_how_the_times_read_never_what_is_counted(project, zone):
    ledger_of(project, earlier_run, night)
    paris, paris_line, paris_doc = running_totals(project, zone, CET)
    for tz, shown in ((NEW_YORK, "since 16:41 EST"), ("UTC", "since 21:41 UTC"), ("IST-5:30", "since 03:11 IST")):
        there, line, doc = running_totals(project, zone, tz)
        assert there == paris and doc == paris_doc, tz
        assert f"this run, {shown}: 2 iterations · 6 phases run: 1 finished, 4 abnormal" in line, line


def test_two_runs_of_one_project_each_counts_only_its_own(project, zone):
    zone(CET)
    ledger_of(project, earlier_run, night)
    with Ledger.open(layout_of(project).ledger_file) as led:
        led.record(RUN, "loop_end", at=minutes(329), reason="circuit breaker OPEN", exit_code=3)  # 04:10 CET
    st = build(layout_of(project), now=NOW + 3600 * 5)
    t = st.totals
    assert (t.run_id, t.current, t.since, t.until) == (RUN, False, START, minutes(329))
    # The Planner the loop ended inside is an abnormal end of tonight's; the afternoon's are not counted.
    assert (t.phases, t.finished, t.abnormal, t.incidents, t.commits) == (6, 1, 5, 2, 1)
    out = io.StringIO()
    assert run_status(project, out=out, clock=lambda: NOW + 3600 * 5) == exitcodes.NOT_RUNNING
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("Totals")]
    assert line.startswith("Totals    last run, 22:41-04:10 CET, ended: circuit breaker OPEN: 2 iterations · "
                           "6 phases run: 1 finished, 5 abnormal"), line


def test_a_run_longer_than_a_day_is_said_with_its_dates(project, zone):
    zone("UTC")
    ledger_of(project, night)
    with Ledger.open(layout_of(project).ledger_file) as led:
        led.record(RUN, "loop_end", at=START + 30 * 3600, reason="killed by hand", exit_code=143)
    out = io.StringIO()
    run_status(project, out=out, clock=lambda: START + 31 * 3600)
    assert "last run, 2025-11-20 21:41 UTC to 2025-11-22 03:41 UTC, ended: killed by hand" in out.getvalue()


def test_what_the_boxs_network_refused_in_the_run_is_a_line_of_status_and_its_json(project, zone):
    def refused(led: Ledger) -> None:
        led.record(RUN, "network_refused", at=minutes(10), iteration=1, phase="Builder", total=4,
                   refused=[["example.com", 443, 3], ["127.0.0.1", 8233, 1]])
    ledger_of(project, earlier_run, night, refused)
    t, _, doc = running_totals(project, zone, CET)
    assert [(r.host, r.port, r.count) for r in t.refused] == [("example.com", 443, 3), ("127.0.0.1", 8233, 1)]
    assert doc["network_refused"] == [{"host": "example.com", "port": 443, "count": 3},
                                      {"host": "127.0.0.1", "port": 8233, "count": 1}]
    lay = layout_of(project)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    out = io.StringIO()
    try:
        run_status(project, out=out, clock=lambda: NOW)
    finally:
        os.close(fd)
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("Network")]
    assert line.split(None, 1)[1] == ("4 connections refused (example.com:443 x3, 127.0.0.1:8233); "
                                      "GENESIS_NETWORK_ALLOW adds a host")
