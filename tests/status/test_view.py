"""`genesis status` of one project, read from a real ledger and the loop's real state files."""

from __future__ import annotations

import calendar
import io
import json
import os
from pathlib import Path

import pytest
from helpers.nights import first_hour

from genesis import exitcodes
from genesis.ledger.store import Ledger, iso
from genesis.loop.breaker import BreakerState
from genesis.status.screen import run_status
from genesis.status.view import Beat, Breaker, LastRun, Phase, Wait, build, describe, layout_of
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))   # 01:30 UTC; local time is UTC (see utc)
RUN = "20251121T003000Z-4242"
HOSTILE = "[bold red]not markup[/bold red] \x1b[31mred\x1b[0m"


pytestmark = pytest.mark.usefixtures("utc")


def yesterday(led: Ledger) -> None:
    """An earlier run of the project: none of it counts in tonight's run."""
    led.record("old", "loop_start", at=T0 - 9000, project="/p", pid=1)
    led.record("old", "phase_start", at=T0 - 8000, iteration=1, phase="Builder", epoch=T0 - 8000, log="x")
    led.record("old", "phase_end", at=T0 - 6000, iteration=1, phase="Builder", status="exited", returncode=0,
               ending="finished", duration=2000.0, cost_usd=5.0, input_tokens=1000, output_tokens=100)
    led.record("old", "loop_end", at=T0 - 5900, reason="reached GENESIS_MAX_ITERATIONS=1", exit_code=0)


def tonight(led: Ledger, run_id: str = RUN) -> None:
    """Iteration 1 of a run started at 00:30: the Builder finished with a commit, the Criticizer
    got stuck (an incident, a retry's wait), and its retry runs since 01:28."""
    rec = lambda what, minutes, **kw: led.record(run_id, what, at=T0 + minutes * 60, **kw)  # noqa: E731
    first_hour(led, run_id, T0)
    rec("health", -20, iteration=1, phase="Criticizer", classification="stuck", stall_score=1.0, reason="silent")
    rec("incident", -15, iteration=1, phase="Criticizer", id="inc-1", kind="stuck")
    rec("phase_end", -15, iteration=1, phase="Criticizer", status="stuck", returncode=None, ending="stuck",
        duration=14 * 60.0, detail=HOSTILE, cost_usd=0.21, input_tokens=30_000, output_tokens=1_200)
    rec("retry", -15, iteration=1, phase="Criticizer", count=1, reason="no heartbeat for 600s")
    rec("wait_start", -15, kind="retry", until=T0 - 14.5 * 60, seconds=30, phase="Criticizer", iteration=1)
    rec("wait_end", -14.5, kind="retry", epoch=T0 - 14.5 * 60, waited=30.0, how="done")
    rec("phase_start", -2, iteration=1, phase="Criticizer", epoch=T0 - 120, log="c.log", attempt=1)


def running(project: Path, led_events=tonight):
    """The project's loop, mid-phase: a held lock, the ledger, a heartbeat, a health snapshot, a
    HALF_OPEN breaker. Returns the lock's descriptor (closing it ends the 'loop')."""
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    with Ledger.open(lay.ledger_file) as led:
        yesterday(led)
        led_events(led)
    lay.heartbeat_dir.mkdir(parents=True, exist_ok=True)
    write_json(lay.heartbeat_file("Criticizer"), {"agent": "Criticizer", "timestamp": iso(T0 - 4), "epoch": T0 - 4,
                                                  "tool": "Bash", "event": "PreToolUse", "session_id": "s",
                                                  "pid": 99, "run_id": RUN})
    write_json(lay.health_file("Criticizer"), {
        "run_id": RUN, "phase": "Criticizer", "iteration": 1, "at": iso(T0 - 2), "classification": "slow",
        "stall_score": 0.55, "idle": 33.0, "last_event": "PreToolUse Bash 4s ago", "severity": "ok",
        "last_progress": 40.0, "tool_in_flight": "Bash: pytest -x (since 01:29:56)", "turns": 7,
        "last_action": "Bash", "tool_calls": 9, "fingerprint": "abc", "reason": "silent for half the window"})
    lay.orchestrator.mkdir(exist_ok=True)
    state = BreakerState(state="HALF_OPEN", no_progress_count=3, last_iteration=1, updated_at=iso(T0 - 100))
    lay.breaker_file.write_text(json.dumps(state.to_json()))
    return fd


def test_a_loop_mid_phase_shows_its_phase_heartbeat_health_breaker_and_its_run_s_totals(project):
    fd = running(project)
    try:
        st = build(layout_of(project), now=T0)
    finally:
        os.close(fd)
    assert (st.running, st.run_id, st.pid, st.started) == (True, RUN, os.getpid(), T0 - 3600)
    assert st.project == project.resolve()
    assert st.iteration == 1
    assert st.phase == Phase(1, "Criticizer", 1, T0 - 120)
    assert st.beat == Beat(T0 - 4, "PreToolUse", "Bash")
    assert (st.health.classification, st.health.stall_score, st.health.turns, st.health.at) == \
        ("slow", 0.55, 7, T0 - 2)
    assert st.health.tool_in_flight == "Bash: pytest -x (since 01:29:56)"
    assert st.breaker == Breaker("HALF_OPEN", 3, None)
    assert st.wait is None
    t = st.totals
    assert (t.run_id, t.current, t.since, t.until) == (RUN, True, T0 - 3600, None)
    # The earlier run's phase (cost 5.0) is not this run's; the retry that runs is.
    assert (t.iterations, t.phases, t.finished, t.abnormal) == (1, 3, 1, 1)
    assert t.endings == (("finished", 1), ("stuck", 1))
    assert t.cost_usd == pytest.approx(1.05)
    assert (t.input_tokens, t.output_tokens) == (150_000, 10_700)
    assert (t.commits, t.incidents, t.retries, t.waits, t.waited, t.tasks_done) == (1, 1, 1, 1, 30.0, 1)
    assert st.recent[-1].text == "iteration 1 Criticizer started (retry 1)"
    assert st.recent[-1].at == T0 - 120
    assert [line.kind for line in st.recent][:2] == ["phase_start", "health"]   # the last 8, oldest first
    assert len(st.recent) == 8
    assert st.last_run == LastRun(RUN, T0 - 3600, None, "", None)


def test_the_running_loop_is_shown_on_the_screen_and_exits_0(project):
    fd = running(project)
    out = io.StringIO()
    try:
        code = run_status(project, out=out, clock=lambda: T0)
    finally:
        os.close(fd)
    text = out.getvalue()
    assert code == exitcodes.OK
    assert "RUNNING  run 20251121T003000Z-4242" in text
    assert "iteration 1 · Criticizer (retry 1) · running" in text
    assert "recovering: retry 1 after a stall" in text
    assert "Bash: pytest -x (since 01:29:56)" in text
    assert "Today" not in text
    assert "HALF_OPEN · 3 iterations without progress" in text
    assert "Totals     this run, since 00:30 UTC: 1 iteration · 3 phases run: 1 finished, 1 abnormal · $1.05 · " \
        "tokens 150.0k in, 10.7k out · 1 commit · 1 task done · 1 incident · 1 retry · 1 wait (30s)" in text
    # An agent's words are shown as they are: no markup applied, no escape code passed through.
    assert "Criticizer: stuck after 14m00s: [bold red]not markup[/bold red] red" in text
    assert "\x1b" not in text and "[31m" not in text


def test_a_phase_s_leftovers_from_an_earlier_attempt_are_not_its_own(project):
    fd = running(project)
    lay = layout_of(project)
    write_json(lay.health_file("Criticizer"), {"run_id": RUN, "phase": "Criticizer", "iteration": 1,
                                               "at": iso(T0 - 600), "classification": "stuck", "stall_score": 1.0})
    beat = json.loads(lay.heartbeat_file("Criticizer").read_text())
    write_json(lay.heartbeat_file("Criticizer"), {**beat, "run_id": "another-run"})
    try:
        st = build(lay, now=T0)
    finally:
        os.close(fd)
    assert st.phase == Phase(1, "Criticizer", 1, T0 - 120)
    assert (st.health, st.beat) == (None, None)


def waiting(led: Ledger) -> None:
    tonight(led)
    led.record(RUN, "phase_end", at=T0 - 60, iteration=1, phase="Criticizer", status="exited", returncode=1,
               ending="limit", duration=60.0, detail="You've hit your limit · resets 2am")
    led.record(RUN, "wait_start", at=T0 - 30, kind="limit", until=T0 + 600, seconds=630, phase="Criticizer",
               iteration=1, reason="usage limit, resets 02:00")


def test_a_wait_is_shown_with_its_end_and_no_phase_runs(project):
    fd = running(project, waiting)
    lay = layout_of(project)
    write_json(lay.wait_file, {"run_id": RUN, "kind": "limit", "until": T0 + 600, "reason": "usage limit, resets 02:00",
                               "phase": "Criticizer", "iteration": 1, "attempt": 0})
    out = io.StringIO()
    try:
        st = build(lay, now=T0)
        code = run_status(project, out=out, clock=lambda: T0)
    finally:
        os.close(fd)
    assert st.running and st.phase is None and st.beat is None and st.health is None
    assert st.wait == Wait("limit", T0 + 600, "usage limit, resets 02:00", "Criticizer", 1)
    assert st.wait.label == "usage limit"
    # The limit's wait is counted in the run while it lasts (up to now).
    assert (st.totals.waits, st.totals.waited) == (2, 30.0 + 30.0)
    assert st.recent[-1].text == "waiting out a usage limit until 01:40:00 UTC"
    assert code == exitcodes.OK
    assert "iteration 1 · waiting out a usage limit" in out.getvalue()
    assert "usage limit · " in out.getvalue()
    assert " left · until 01:40:00 UTC · usage limit, resets 02:00" in out.getvalue()


def test_a_wait_file_of_another_run_is_not_this_run_s(project):
    fd = running(project)
    lay = layout_of(project)
    write_json(lay.wait_file, {"run_id": "other", "kind": "limit", "until": T0 + 600, "reason": "r"})
    try:
        assert build(lay, now=T0).wait is None
    finally:
        os.close(fd)


def test_a_loop_that_ended_says_how_and_when_and_exits_5(project):
    lay = layout_of(project)
    with Ledger.open(lay.ledger_file) as led:
        tonight(led)
        led.record(RUN, "loop_end", at=T0 - 60, reason="circuit breaker OPEN", exit_code=3)
    st = build(lay, now=T0)
    assert not st.running and st.phase is None and st.wait is None
    assert st.last_run == LastRun(RUN, T0 - 3600, T0 - 60, "circuit breaker OPEN", 3)
    # The phase the loop was stopped inside is counted as ended, abnormally.
    assert (st.totals.phases, st.totals.finished, st.totals.abnormal) == (3, 1, 2)
    assert (st.totals.current, st.totals.until) == (False, T0 - 60)
    assert st.recent[-1].text == "loop ended: circuit breaker OPEN (exit 3)"
    out = io.StringIO()
    assert run_status(project, out=out, clock=lambda: T0) == exitcodes.NOT_RUNNING
    text = out.getvalue()
    assert "NOT RUNNING  no loop is running on this project" in text
    assert f"{RUN}: started 2025-11-21 00:30 UTC, ended 2025-11-21 01:29 UTC after 59m00s: circuit breaker OPEN " \
        "(exit 3)" in text
    assert "Totals    last run, 00:30-01:29 UTC, ended: circuit breaker OPEN: 1 iteration · 3 phases run" in text


def test_a_killed_loop_is_said_to_have_no_end(project):
    lay = layout_of(project)
    with Ledger.open(lay.ledger_file) as led:
        tonight(led)
    st = build(lay, now=T0)
    assert not st.running and st.phase is None
    assert st.last_run == LastRun(RUN, T0 - 3600, None, "", None)
    out = io.StringIO()
    assert run_status(project, out=out, clock=lambda: T0) == exitcodes.NOT_RUNNING
    assert "no end recorded (the loop was killed" in out.getvalue()


def test_a_project_with_no_run_yet(project):
    st = build(layout_of(project), now=T0)
    assert (st.running, st.run_id, st.last_run, st.totals, st.recent) == (False, "", None, None, ())
    assert st.note == "no run recorded yet"
    out = io.StringIO()
    assert run_status(project, out=out, clock=lambda: T0) == exitcodes.NOT_RUNNING
    assert "Last run  no run recorded yet" in out.getvalue()
    assert not (project / ".git" / "genesis").exists()  # status wrote nothing


def test_a_loop_that_holds_its_lock_before_its_first_event_is_running(project):
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    try:
        st = build(lay, now=T0)
    finally:
        os.close(fd)
    assert (st.running, st.run_id, st.pid, st.phase) == (True, RUN, os.getpid(), None)
    assert st.note == "no run recorded yet"


def test_an_unreadable_ledger_is_said_not_fatal(project):
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True)
    lay.ledger_file.write_bytes(b"this is not a database" * 100)
    st = build(lay, now=T0)
    assert not st.running
    assert st.note.startswith("the ledger cannot be read")
    assert lay.ledger_file.read_bytes().startswith(b"this is not")  # a reader never moves it aside


def test_a_breaker_file_that_is_not_one_is_reported_and_left_alone(project):
    lay = layout_of(project)
    lay.orchestrator.mkdir()
    lay.breaker_file.write_text("{not json")
    st = build(lay, now=T0)
    assert st.breaker.state == "?" and "cannot be read" in st.breaker.problem
    assert lay.breaker_file.read_text() == "{not json"


def test_an_explicit_project_that_is_not_a_git_work_tree_is_refused(tmp_path):
    from genesis.repo.gitcmd import NotARepository

    with pytest.raises(NotARepository):
        run_status(tmp_path, out=io.StringIO())


def test_a_subdirectory_stands_for_its_project(project, monkeypatch):
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    out = io.StringIO()
    run_status(sub, out=out)
    assert f"genesis status · {project.resolve()}" in out.getvalue()
    monkeypatch.chdir(sub)
    out = io.StringIO()
    run_status(None, out=out)
    assert f"genesis status · {project.resolve()}" in out.getvalue()


FIELDS = ("iteration", "phase", "duration", "until", "waited", "stall_score", "pids", "commits", "tasks_done",
          "attempt", "status", "ending", "detail", "reason", "kind", "count", "how", "why", "what", "pid",
          "exit_code", "progress", "breaker", "returncode", "classification", "when", "ticket", "decision", "delivered")


def test_every_event_is_said_in_words_whatever_its_fields_hold():
    kinds = ("loop_start", "loop_end", "iteration_start", "iteration_end", "phase_start", "phase_end", "phase_skip",
             "health", "incident", "retry", "wait_start", "wait_end", "phase_work", "phase_failed", "reap", "tamper",
             "alert", "something_new")
    for kind in kinds:
        for junk in (None, "x", 1e308, -1e308, -1, [], {}, True, [1, 2]):
            assert isinstance(describe({"event": kind, **{f: junk for f in FIELDS}}), str)
    assert describe({"event": "phase_work", "iteration": 2, "phase": "Builder", "commits": [{"sha": "a"}],
                     "tasks_done": []}) == "iteration 2 Builder: 1 commit(s), 0 task(s) done"
    assert describe({"event": "ceiling", "iteration": 2}) == "iteration 2: ceiling"
    ticket = {"severity": "critical", "cause": "breaker OPEN"}
    assert describe({"event": "alert", "ticket": ticket, "decision": "intervene", "delivered": ["webhook"]}) == \
        "alert, critical: breaker OPEN: told (webhook)"
    assert describe({"event": "alert", "ticket": ticket, "decision": "intervene", "delivered": []}) == \
        "alert, critical: breaker OPEN: to tell, but no channel took it"
    assert describe({"event": "alert", "ticket": {**ticket, "severity": "low"}, "decision": "dismiss"}) == \
        "alert, low: breaker OPEN: dismissed by triage"
    assert describe({"event": "phase_end", "iteration": 1, "phase": "Builder", "status": "exited", "returncode": 2,
                     "ending": "failed", "duration": 61.0, "detail": "npm ERR!"}) == \
        "iteration 1 Builder: exited with an error (exit 2) after 1m01s: npm ERR!"


def test_times_no_clock_can_show_are_not_taken(project):
    fd = running(project)
    lay = layout_of(project)
    beat = json.loads(lay.heartbeat_file("Criticizer").read_text())
    write_json(lay.heartbeat_file("Criticizer"), {**beat, "epoch": 1e300})
    write_json(lay.wait_file, {"run_id": RUN, "kind": "limit", "until": 1e300, "reason": "r"})
    out = io.StringIO()
    try:
        st = build(lay, now=T0)
        run_status(project, out=out, clock=lambda: T0)
    finally:
        os.close(fd)
    assert (st.beat, st.wait) == (None, None)
    assert "Heartbeat  none yet this phase" in out.getvalue()
