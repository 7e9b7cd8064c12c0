"""The night read back from a real ledger: a recorded night's events become the report's model and KPIs."""

from __future__ import annotations

import calendar
import sqlite3
import time
from pathlib import Path

import pytest

from genesis.health.capture import Incident
from genesis.health.incidents import write
from genesis.ledger.schema import MIGRATIONS
from genesis.ledger.store import Ledger
from genesis.reporting.load import MAX_FORENSICS, UnknownRun, night, open_view, pick_run, run_events
from genesis.reporting.model import AlertRow, BreakerChange, CommitRow, Kpis, WaitRow
from genesis.reporting.text import render_text
from genesis.store.layout import Layout

RUN = "20251121T000000Z-4242"
T0 = float(calendar.timegm((2025, 11, 21, 0, 0, 0)))
M = 60.0
LIMIT = "You've hit your 5-hour limit · resets 5:13am"
STUCK = "no heartbeat for 95s (last tool: Bash pytest -x)"


def at(minutes: float) -> float:
    return T0 + minutes * M


def ticket(n: int, *, final: bool = False, severity: str = "high", cause: str = "Builder stuck") -> dict:
    return {"ticket_id": f"{n:032x}", "run_id": RUN, "severity": severity, "cause": cause,
            "kind": "loop_end" if final else "incident", "final": final}


def record_night(led: Ledger, logs: Path, incident_id: str, stale: str = "stuck", stalled: str = "stuck") -> None:
    """Two iterations as the loop records them. Iteration 1: the Builder gets stuck (an
    incident, killed, a ticket told), is retried after a retry wait and finishes with a commit
    and a task; the Criticizer is warned stuck, recovers by itself, then meets a usage limit,
    waits it out and finishes; the Planner is skipped. Iteration 2: the Builder commits, the
    others are skipped, the breaker goes HALF_OPEN; the loop's end is told. `stale` and
    `stalled`: the words for the stuck state (the watcher's and the health judgment's)."""
    def r(event: str, minutes: float, /, **detail) -> None:
        led.record(RUN, event, at=at(minutes), **detail)

    r("loop_start", 0, project="/srv/shop", pid=4242)
    r("reap", 0.1, when="before Builder", pids=[111, 112], why=["marker", "marker"], survivors=[])
    r("iteration_start", 0.2, iteration=1)
    r("phase_start", 1, iteration=1, phase="Builder", log=str(logs / "b0.log"), epoch=at(1), attempt=0)
    r("health", 5, iteration=1, phase="Builder", classification=stalled, stall_score=0.8, reason="silent")
    r("incident", 11, iteration=1, phase="Builder", id=incident_id, kind=stale, reason=STUCK, silent_for=95.0)
    r("phase_end", 11.1, iteration=1, phase="Builder", pid=900, status=stale, returncode=None, killed=3,
      detail=STUCK, ending=stale, started=at(1), attempt=0)
    r("alert", 11.2, ticket=ticket(1), decision="intervene", why="stuck", by="rules", delivered=["webhook"])
    r("retry", 11.3, iteration=1, phase="Builder", type=stalled, count=1, reason=STUCK, old_cmd="c", new_cmd="c")
    r("wait_start", 11.4, kind="retry", until=at(12.4), seconds=60.0, iteration=1, phase="Builder",
      reason=f"{stalled}: retry 1")
    r("wait_end", 12.4, kind="retry", epoch=at(12.4), waited=60.0, how="done", iteration=1, phase="Builder")
    r("phase_start", 12.5, iteration=1, phase="Builder", log=str(logs / "b1.log"), epoch=at(12.5), attempt=1)
    # The retry's first judgment: healthy, which is no recovery of the killed attempt's warning.
    r("health", 13, iteration=1, phase="Builder", classification="healthy", stall_score=0.0, reason="")
    r("phase_end", 30, iteration=1, phase="Builder", pid=901, status="exited", returncode=0, killed=0,
      detail="finished", ending="finished", started=at(12.5), attempt=1, cost_usd=0.5, num_turns=12,
      input_tokens=1000, output_tokens=200)
    r("phase_work", 30.1, iteration=1, phase="Builder", files_changed=2, tasks_done=["Add a /health endpoint"],
      commits=[{"sha": "a1b2c3d", "at": at(29.9), "subject": "Add /health endpoint"}])
    r("reap", 30.2, when="after Builder", pids=[113], why=["marker"], survivors=[])
    r("phase_start", 31, iteration=1, phase="Criticizer", log=str(logs / "c0.log"), epoch=at(31), attempt=0)
    r("health", 33, iteration=1, phase="Criticizer", classification=stalled, stall_score=0.7, reason="quiet")
    r("health", 34, iteration=1, phase="Criticizer", classification="healthy", stall_score=0.1, reason="")
    r("phase_end", 35, iteration=1, phase="Criticizer", pid=902, status="exited", returncode=1, killed=0,
      detail=LIMIT, ending="limit", started=at(31), attempt=0)
    r("phase_work", 35.05, iteration=1, phase="Criticizer", files_changed=0, tasks_done=[], commits=[])
    r("alert", 35.1, ticket=ticket(2, severity="medium", cause="usage limit"), decision="dismiss",
      why="a limit is waited out", by="rules")
    r("wait_start", 35.2, kind="limit", until=at(95), seconds=3570.0, iteration=1, phase="Criticizer", reason=LIMIT)
    r("wait_end", 95, kind="limit", epoch=at(95), waited=3570.0, how="done", iteration=1, phase="Criticizer")
    r("phase_start", 95.1, iteration=1, phase="Criticizer", log=str(logs / "c1.log"), epoch=at(95.1), attempt=0)
    r("phase_end", 100, iteration=1, phase="Criticizer", pid=903, status="exited", returncode=0, killed=0,
      detail="finished", ending="finished", started=at(95.1), attempt=0, cost_usd=0.1, num_turns=3,
      input_tokens=300, output_tokens=50)
    r("phase_skip", 100.1, iteration=1, phase="Planner", why="a task is open")
    r("iteration_end", 100.2, iteration=1, progress=True, breaker="CLOSED", no_progress=0)
    r("iteration_start", 101, iteration=2)
    r("phase_start", 102, iteration=2, phase="Builder", log=str(logs / "b2.log"), epoch=at(102), attempt=0)
    r("phase_end", 110, iteration=2, phase="Builder", pid=904, status="exited", returncode=0, killed=0,
      detail="finished", ending="finished", started=at(102), attempt=0, cost_usd=0.25, num_turns=5,
      input_tokens=500)  # no output tokens reported
    r("phase_work", 110.05, iteration=2, phase="Builder", files_changed=1, tasks_done=[],
      commits=[{"sha": "e5f6a7b", "at": at(109.9), "subject": "Tidy the handler"}])
    r("phase_skip", 110.1, iteration=2, phase="Criticizer", why="nothing to review")
    r("phase_skip", 110.2, iteration=2, phase="Planner", why="a task is open")
    r("iteration_end", 111, iteration=2, progress=False, breaker="HALF_OPEN", no_progress=3)
    r("alert", 111.5, ticket=ticket(3, final=True, severity="low", cause="the loop ended"), decision="intervene",
      why="the end is always told", by="rules", delivered=["webhook", "ntfy"])
    r("loop_end", 112, reason="stopped: the iteration limit (2) was reached", exit_code=0)


@pytest.fixture
def recorded(tmp_path):
    """The night in a real ledger, a real incident file pair, and the stuck Builder's transcript."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "b0.log").write_text("reading tests\n\x1b[31mrunning pytest -x\x1b[0m\n\ncollected 12 items\n"
                                 "tests/test_api.py::test_health\n")
    (logs / "b1.log").write_text("all green\n")  # a finished phase shows no tail
    # c0.log (the limit) is gone: an abnormal phase without its log has no tail, and no error
    incidents = tmp_path / "state" / "incidents"
    inc = Incident(at=at(11), kind="stuck", reason=STUCK, phase="Builder", iteration=1, run_id=RUN,
                   project="/srv/shop", processes=(), ports=(), tool_in_flight={"tool": "Bash", "command": "pytest -x"},
                   tool_calls=(), heartbeat={"epoch": at(11) - 95}, transcript=("collected 12 items",),
                   git_status=(" M app.py",))
    ident = write(inc, incidents).stem
    led = Ledger.open(tmp_path / "ledger.sqlite3")
    record_night(led, logs, ident)
    yield led, incidents, ident
    led.close()


def test_iterations_hold_their_phases_in_order_and_the_skipped_ones(recorded):
    led, incidents, _ = recorded
    n = night(led, RUN, incidents_dir=incidents)
    assert (n.run_id, n.project, n.started, n.ended, n.exit_code, n.running) == \
        (RUN, "/srv/shop", at(0), at(112), 0, False)
    assert n.reason == "stopped: the iteration limit (2) was reached"
    assert [(it.iteration, it.started, it.ended, it.progress, it.breaker, it.no_progress) for it in n.iterations] == \
        [(1, at(0.2), at(100.2), True, "CLOSED", 0), (2, at(101), at(111), False, "HALF_OPEN", 3)]
    assert [[(p.phase, p.attempt, p.ending) for p in it.phases] for it in n.iterations] == [
        [("Builder", 0, "stuck"), ("Builder", 1, "finished"), ("Criticizer", 0, "limit"),
         ("Criticizer", 0, "finished")],
        [("Builder", 0, "finished")]]
    assert [it.skipped for it in n.iterations] == [("Planner",), ("Criticizer", "Planner")]


def test_each_phase_row_carries_its_ending_figures_and_work(recorded, tmp_path):
    led, incidents, _ = recorded
    stuck, retried, limited, reviewed, built = night(led, RUN, incidents_dir=incidents).phases
    assert (stuck.started, stuck.ended, stuck.ending, stuck.exit_code, stuck.reason, stuck.killed) == \
        (at(1), at(11.1), "stuck", None, STUCK, 3)
    assert (stuck.cost_usd, stuck.turns, stuck.input_tokens, stuck.output_tokens) == (None, None, None, None)
    assert stuck.abnormal and stuck.log == str(tmp_path / "logs" / "b0.log")
    assert (retried.attempt, retried.exit_code, retried.reason, retried.killed) == (1, 0, "finished", 0)
    assert (retried.cost_usd, retried.turns, retried.input_tokens, retried.output_tokens) == (0.5, 12, 1000, 200)
    assert (retried.commits, retried.files_changed, retried.tasks_done) == \
        (("a1b2c3d",), 2, ("Add a /health endpoint",))
    assert (limited.ending, limited.exit_code, limited.reason, limited.commits, limited.tasks_done) == \
        ("limit", 1, LIMIT, (), ())
    assert (reviewed.started, reviewed.ended, reviewed.cost_usd) == (at(95.1), at(100), 0.1)
    assert (built.commits, built.input_tokens, built.output_tokens) == (("e5f6a7b",), 500, None)


def test_an_abnormal_phase_shows_its_transcripts_last_lines_where_the_log_is(recorded):
    led, incidents, _ = recorded
    phases = night(led, RUN, incidents_dir=incidents).phases
    # The last three lines, escapes gone, blank ones left out.
    assert phases[0].tail == ("collected 12 items", "tests/test_api.py::test_health")
    assert phases[1].tail == ()   # finished: its log exists but is not shown
    assert phases[2].tail == ()   # a limit, but its log is gone


def test_waits_commits_breaker_changes_alerts_and_reaped_processes(recorded):
    led, incidents, _ = recorded
    n = night(led, RUN, incidents_dir=incidents)
    assert n.waits == (WaitRow("retry", at(11.4), at(12.4), at(12.4), "stuck: retry 1", 1, "Builder"),
                       WaitRow("limit", at(35.2), at(95), at(95), LIMIT, 1, "Criticizer"))
    assert n.commits == (CommitRow("a1b2c3d", at(29.9), "Add /health endpoint", 1, "Builder"),
                         CommitRow("e5f6a7b", at(109.9), "Tidy the handler", 2, "Builder"))
    # CLOSED after iteration 1 was the breaker's state already: only the change is listed.
    assert n.breaker_changes == (BreakerChange(at(111), 2, "CLOSED", "HALF_OPEN", 3),)
    assert n.alerts == (AlertRow(f"{1:032x}", at(11.2), "high", "Builder stuck", "intervene", ("webhook",),
                                 why="stuck", by="rules", kind="incident"),
                        AlertRow(f"{2:032x}", at(35.1), "medium", "usage limit", "dismiss", (),
                                 why="a limit is waited out", by="rules", kind="incident"),
                        AlertRow(f"{3:032x}", at(111.5), "low", "the loop ended", "intervene", ("webhook", "ntfy"),
                                 why="the end is always told", by="rules", final=True, kind="loop_end"))
    assert n.final_alert == n.alerts[-1]
    assert n.reaped == 3
    assert n.tasks_done == ("Add a /health endpoint",)
    assert n.cost_usd == pytest.approx(0.85)
    assert n.tokens == (1800, 250)
    assert [(p.phase, p.ending) for p in n.abnormal] == [("Builder", "stuck"), ("Criticizer", "limit")]


def test_the_incident_carries_its_forensics_text(recorded):
    led, incidents, ident = recorded
    (inc,) = night(led, RUN, incidents_dir=incidents).incidents
    assert (inc.id, inc.at, inc.iteration, inc.phase, inc.kind, inc.reason) == \
        (ident, at(11), 1, "Builder", "stuck", STUCK)
    assert inc.forensics == (incidents / f"{ident}.txt").read_text()
    assert inc.forensics.startswith(f"Genesis incident {ident}") and "pytest -x" in inc.forensics
    # Without the folder (or once the file is gone) the row stays, its text is empty.
    assert night(led, RUN).incidents[0].forensics == ""
    (incidents / f"{ident}.txt").unlink()
    assert night(led, RUN, incidents_dir=incidents).incidents[0].forensics == ""


def test_a_huge_incident_text_is_cut(tmp_path):
    ident = "20251121T001100Z-Builder-i1"
    folder = tmp_path / "incidents"
    folder.mkdir(mode=0o700)
    (folder / f"{ident}.txt").write_text("x" * (MAX_FORENSICS + 5000))
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        led.record(RUN, "loop_start", at=at(0))
        led.record(RUN, "incident", at=at(11), iteration=1, phase="Builder", id=ident, kind="stuck", reason="r")
        text = night(led, RUN, incidents_dir=folder).incidents[0].forensics
    assert text.startswith("x" * MAX_FORENSICS) and text.endswith("\n... (cut)")
    assert len(text) == MAX_FORENSICS + len("\n... (cut)")


def test_the_health_kpis_of_the_night(recorded):
    led, incidents, _ = recorded
    k = night(led, RUN, incidents_dir=incidents).kpis
    assert k == Kpis(
        mttd_seconds=95.0,                        # the incident's silent_for
        mttr_seconds=at(30) - at(11),             # the incident -> the retried Builder's finish
        false_positive_rate=0.5,                  # the Criticizer's warning recovered, the Builder's did not
        retries_per_phase=1 / 5,
        escalation_rate=0.5,                      # delivered, dismissed; the loop's end is not counted
        detections=1, recoveries=1, warnings=2, tickets=2, reached=1, intervened=1)


def version_1_ledger(path: Path) -> Ledger:
    """A ledger as Genesis wrote it at schema version 1 (the projection into the tables is
    unchanged since): the events and tables in that version's words."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    for sql in MIGRATIONS[0]:
        conn.execute(sql)
    conn.execute("PRAGMA user_version = 1")
    return Ledger(conn, path, time.time)


def schema_of(path: Path) -> int:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def test_a_night_an_older_genesis_recorded_reads_in_todays_words(recorded, tmp_path):
    """Version 1 called the stuck state stale (the watcher) and stalled (the health judgment,
    a retry, a failed phase); a view reads it as stuck, and the loop's next open upgrades it."""
    led, incidents, ident = recorded
    path = tmp_path / "old.sqlite3"
    old = version_1_ledger(path)
    record_night(old, tmp_path / "logs", ident, stale="stale", stalled="stalled")
    old.record("cut", "phase_failed", at=at(5), iteration=1, phase="Builder", kind="stalled", reason="r", retries=1)
    cut = '{"iteration": 1, "status": "stale", "detail": "a detail cut at its si'  # no JSON: kept as it is
    old.conn.execute("INSERT INTO events (run_id, at, kind, iteration, phase, detail) VALUES (?, ?, ?, ?, ?, ?)",
                     ("cut", at(6), "phase_end", 1, "Builder", cut))
    assert [p.ending for p in night(old, RUN).phases][0] == "stale"  # the old words, as written
    old.close()
    today, events = night(led, RUN, incidents_dir=incidents), led.events(RUN)

    with Ledger.open(path, readonly=True) as view:  # `genesis report` the morning after an upgrade
        assert night(view, RUN, incidents_dir=incidents) == today
        assert view.events(RUN) == events
        assert view.events("cut")[0]["kind"] == "stuck"
    assert schema_of(path) == 1  # a view never writes: the file is as it was

    with Ledger.open(path) as upgraded:  # the loop's next step upgrades it in place
        assert night(upgraded, RUN, incidents_dir=incidents) == today
        assert upgraded.events(RUN) == events
        assert upgraded.query("SELECT detail FROM events WHERE run_id = 'cut' AND kind = 'phase_end'")[0][0] == cut
        assert [tuple(r) for r in upgraded.query("SELECT status, ending FROM phases WHERE run_id = ? ORDER BY id",
                                                  (RUN,))][0] == ("stuck", "stuck")
    assert schema_of(path) == 2
    assert "stale" not in render_text(today) and "stalled" not in render_text(today)


def test_a_phase_end_without_its_start_is_a_row_of_its_own(tmp_path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        led.record(RUN, "loop_start", at=at(0))
        led.record(RUN, "iteration_start", at=at(1), iteration=1)
        led.record(RUN, "phase_start", at=at(2), iteration=1, phase="Builder", epoch=at(2), attempt=0)
        led.record(RUN, "phase_end", at=at(10), iteration=1, phase="Builder", status="exited", returncode=0,
                   ending="finished", detail="finished")
        # The watcher died before the Criticizer's start was recorded, then again for a
        # second Builder run whose start is lost too: the finished Builder must stay as it was.
        led.record(RUN, "phase_end", at=at(11), iteration=1, phase="Criticizer", pid=None, status="watcher_lost",
                   returncode=137, duration=0, killed=2, sigkilled=0, detail="the watcher died of signal 9")
        led.record(RUN, "phase_end", at=at(12), iteration=1, phase="Builder", pid=None, status="watcher_lost",
                   returncode=143, duration=0, killed=0, sigkilled=0, detail="the watcher died of signal 15")
        n = night(led, RUN)
    rows = [(p.phase, p.started, p.ended, p.ending, p.exit_code, p.reason, p.killed) for p in n.phases]
    assert rows == [("Builder", at(2), at(10), "finished", 0, "finished", 0),
                    ("Criticizer", at(11), at(11), "watcher_lost", 137, "the watcher died of signal 9", 2),
                    ("Builder", at(12), at(12), "watcher_lost", 143, "the watcher died of signal 15", 0)]
    assert [p.iteration for p in n.phases] == [1, 1, 1] and len(n.iterations) == 1


def test_a_loop_killed_mid_phase_leaves_the_phase_running_and_the_night_not(tmp_path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        led.record(RUN, "loop_start", at=at(0))
        led.record(RUN, "iteration_start", at=at(1), iteration=1)
        led.record(RUN, "phase_start", at=at(2), iteration=1, phase="Builder", epoch=at(2), attempt=0)
        dead = night(led, RUN, running=False, now=at(30))
        alive = night(led, RUN, running=True, now=at(30))
        led.record(RUN, "loop_end", at=at(40), reason="SIGTERM", exit_code=143)
        ended = night(led, RUN, running=True, now=at(50))  # a holder's word cannot revive an ended run
    (phase,) = dead.phases
    assert (phase.ending, phase.ended, phase.abnormal, phase.seconds) == ("running", None, False, None)
    assert (dead.running, dead.ended, dead.exit_code, dead.iterations[0].progress) == (False, None, None, None)
    assert alive.running is True
    assert ended.running is False and (ended.phases[0].ending, ended.phases[0].ended) == ("interrupted", at(40))


def test_phases_outside_any_recorded_iteration_are_kept_as_strays(tmp_path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        led.record(RUN, "loop_start", at=at(0))
        led.record(RUN, "iteration_start", at=at(1), iteration=1)
        led.record(RUN, "phase_start", at=at(2), iteration=1, phase="Builder", epoch=at(2))
        led.record(RUN, "phase_end", at=at(3), iteration=1, phase="Builder", status="exited", returncode=0,
                   ending="finished", detail="finished")
        led.record(RUN, "iteration_end", at=at(4), iteration=1, progress=True, breaker="CLOSED", no_progress=0)
        # Iteration 2's start was never recorded.
        led.record(RUN, "phase_start", at=at(5), iteration=2, phase="Planner", epoch=at(5))
        led.record(RUN, "phase_end", at=at(6), iteration=2, phase="Planner", status="exited", returncode=2,
                   ending="failed", detail="exited with status 2")
        n = night(led, RUN)
    assert [it.iteration for it in n.iterations] == [1, 0]
    stray = n.iterations[1]
    assert [(p.iteration, p.phase, p.ending) for p in stray.phases] == [(2, "Planner", "failed")]
    assert (stray.started, stray.ended, stray.progress) == (at(5), None, None)
    assert [p.phase for p in n.phases] == ["Builder", "Planner"] and len(n.abnormal) == 1


def test_another_runs_records_stay_out_of_the_night(recorded):
    led, incidents, _ = recorded
    led.record("other-run", "loop_start", at=at(200), project="/srv/other")
    led.record("other-run", "iteration_start", at=at(201), iteration=1)
    led.record("other-run", "phase_start", at=at(202), iteration=1, phase="Builder", epoch=at(202))
    led.record("other-run", "reap", at=at(203), when="x", pids=[1, 2, 3, 4])
    n = night(led, RUN, incidents_dir=incidents)
    assert len(n.phases) == 5 and n.reaped == 3
    other = night(led, "other-run")
    assert (other.project, len(other.phases), other.reaped, other.incidents, other.alerts) == \
        ("/srv/other", 1, 4, (), ())


def layout_at(tmp_path: Path) -> Layout:
    return Layout(tmp_path / "p", tmp_path / "p" / "logs", tmp_path / "p" / "stop", tmp_path / "state")


def test_pick_run_takes_the_latest_or_the_one_named(tmp_path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        led.record("first", "loop_start", at=at(0))
        led.record("second", "loop_start", at=at(60))
        assert pick_run(led, None) == "second"
        assert pick_run(led, "first") == "first"
        assert pick_run(led, "first", since=at(30)) == "first"  # a named run is taken whenever it started
        assert pick_run(led, None, since=at(-10)) == "second"
        with pytest.raises(UnknownRun, match=f"`.* --project {tmp_path} report --list` lists the runs"):
            pick_run(led, "third", project=tmp_path)
        with pytest.raises(UnknownRun, match="since then"):
            pick_run(led, None, since=at(120))


def test_a_view_without_a_ledger_says_no_loop_ran_and_creates_nothing(tmp_path):
    lay = layout_at(tmp_path)
    with pytest.raises(UnknownRun, match="no loop has run in this project yet"):
        open_view(lay)
    assert run_events(lay, RUN) == []
    assert not lay.ledger_file.exists() and not lay.state_dir.exists()


def test_run_events_are_one_runs_events_oldest_first(tmp_path):
    lay = layout_at(tmp_path)
    with Ledger.open(lay.ledger_file) as led:
        led.record(RUN, "loop_start", at=at(0))
        led.record("other", "loop_start", at=at(1))
        led.record(RUN, "iteration_start", at=at(2), iteration=1)
        led.record(RUN, "loop_end", at=at(3), reason="done", exit_code=0)
        via_ledger = run_events(lay, RUN, ledger=led)
    from_file = run_events(lay, RUN)
    assert [e["event"] for e in from_file] == ["loop_start", "iteration_start", "loop_end"]
    assert [e["epoch"] for e in from_file] == [at(0), at(2), at(3)]
    assert via_ledger == from_file
    assert run_events(lay, "nobody") == []


def test_a_view_never_writes_the_ledger(tmp_path):
    lay = layout_at(tmp_path)
    with Ledger.open(lay.ledger_file) as led:
        led.record(RUN, "loop_start", at=at(0))
    with open_view(lay) as view:
        with pytest.raises(Exception, match="readonly|read-only|cannot be written"):
            view.record(RUN, "loop_end", at=at(1), reason="x", exit_code=0)
        assert view.runs()[0].ended is None


def test_an_alert_carries_the_iteration_and_phase_its_ticket_names(tmp_path):
    """So the page shows each abnormal phase's own alert (html.py), never another attempt's."""
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        led.record(RUN, "loop_start", at=at(0), project="/srv/shop", pid=4242)
        led.record(RUN, "alert", at=at(1), ticket={**ticket(1), "kind": "retry", "iteration": 2, "phase": "Builder"},
                   decision="dismiss", why="retrying", by="rules", delivered=[])
        led.record(RUN, "alert", at=at(2), ticket={**ticket(2), "iteration": True, "phase": 7}, decision="dismiss",
                   why="odd", by="rules", delivered=[])
        n = night(led, RUN)
    assert [(a.iteration, a.phase) for a in n.alerts] == [(2, "Builder"), (None, None)]


def test_what_the_boxs_network_refused_is_summed_over_the_run_and_said_in_the_report(recorded):
    led, incidents, _ = recorded
    led.record(RUN, "network_refused", at=at(20), iteration=1, phase="Builder", total=3,
               refused=[["example.com", 443, 2], ["127.0.0.1", 8233, 1]])
    led.record(RUN, "network_refused", at=at(60), iteration=2, phase="Builder", total=2,
               refused=[["example.com", 443, 1], ["evil.example", 80, 1], ["bad row"]])
    n = night(led, RUN, incidents_dir=incidents)
    assert [(r.host, r.port, r.count) for r in n.refused] == [
        ("example.com", 443, 3), ("127.0.0.1", 8233, 1), ("evil.example", 80, 1)]
    assert ("network: 5 connections refused (example.com:443 x3, 127.0.0.1:8233, evil.example:80); "
            "GENESIS_NETWORK_ALLOW adds a host") in render_text(n)
