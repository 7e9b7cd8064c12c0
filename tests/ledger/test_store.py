"""The ledger: real SQLite files, real processes reading while the loop writes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from genesis.ledger import store
from genesis.ledger.legacy import import_events
from genesis.ledger.schema import VERSION
from genesis.ledger.store import Ledger, LedgerError

RUN = "run-1"


def night(led: Ledger) -> None:
    """A short night: two iterations, a stuck phase with an incident and a retry, a wait."""
    led.record(RUN, "loop_start", at=1000.0, project="/p", pid=42)
    led.record(RUN, "iteration_start", at=1001.0, iteration=1)
    led.record(RUN, "phase_start", at=1002.0, iteration=1, phase="Builder", log="/l/b.log", epoch=1002.0, attempt=0)
    led.record(RUN, "incident", at=1100.0, iteration=1, phase="Builder", id="inc-1", kind="stuck", reason="silent",
               silent_for=95.0)
    led.record(RUN, "phase_end", at=1101.0, iteration=1, phase="Builder", status="stuck", returncode=None,
               ending="stuck", detail="no heartbeat for 95s", killed=3)
    led.record(RUN, "retry", at=1102.0, iteration=1, phase="Builder", count=1, reason="stuck", old_cmd="a",
               new_cmd="a")
    led.record(RUN, "wait_start", at=1103.0, kind="retry", until=1113.0, iteration=1, phase="Builder", reason="r")
    led.record(RUN, "wait_end", at=1113.0, kind="retry", epoch=1113.0, waited=10.0, how="done")
    led.record(RUN, "phase_start", at=1114.0, iteration=1, phase="Builder", log="/l/b2.log", epoch=1114.0, attempt=1)
    led.record(RUN, "phase_end", at=1200.0, iteration=1, phase="Builder", status="exited", returncode=0,
               ending="finished", detail="finished", cost_usd=0.25, num_turns=7, input_tokens=900, output_tokens=80,
               attempt=1)
    led.record(RUN, "phase_work", at=1201.0, iteration=1, phase="Builder", files_changed=2, tasks_done=["add x"],
               commits=[{"sha": "abc1234", "at": 1200.5, "subject": "genesis: Builder"}])
    led.record(RUN, "iteration_end", at=1202.0, iteration=1, progress=True, breaker="CLOSED", no_progress=0)
    led.record(RUN, "iteration_start", at=1203.0, iteration=2)
    led.record(RUN, "iteration_end", at=1204.0, iteration=2, progress=False, breaker="HALF_OPEN", no_progress=1)


def test_a_new_ledger_is_wal_at_the_current_schema(tmp_path):
    with Ledger.open(tmp_path / "l.sqlite3") as led:
        assert led.query("PRAGMA journal_mode")[0][0] == "wal"
        assert led.query("PRAGMA user_version")[0][0] == VERSION


def test_events_land_in_the_tables_the_views_read(tmp_path):
    with Ledger.open(tmp_path / "l.sqlite3") as led:
        night(led)
        (run,) = led.runs()
        assert (run.run_id, run.started, run.project, run.pid, run.ended) == (RUN, 1000.0, "/p", 42, None)
        phases = [dict(r) for r in led.query("SELECT * FROM phases ORDER BY id")]
        assert [(p["attempt"], p["ending"], p["started"], p["ended"]) for p in phases] == \
            [(0, "stuck", 1002.0, 1101.0), (1, "finished", 1114.0, 1200.0)]
        done = phases[1]
        assert (done["cost_usd"], done["turns"], done["input_tokens"], done["output_tokens"]) == (0.25, 7, 900, 80)
        assert (json.loads(done["commits"]), done["files_changed"], json.loads(done["tasks_done"])) == \
            (["abc1234"], 2, ["add x"])
        assert [tuple(r) for r in led.query("SELECT sha, subject, iteration FROM commits")] == \
            [("abc1234", "genesis: Builder", 1)]
        assert [tuple(r) for r in led.query("SELECT kind, started, until, ended FROM waits")] == \
            [("retry", 1103.0, 1113.0, 1113.0)]
        assert [tuple(r) for r in led.query("SELECT id, kind, reason FROM incidents")] == [("inc-1", "stuck", "silent")]
        assert led.query("SELECT COUNT(*) FROM retries")[0][0] == 1
        assert [tuple(r) for r in led.query("SELECT iteration, before, after FROM breaker_changes")] == \
            [(2, "CLOSED", "HALF_OPEN")]  # CLOSED after iteration 1 was no change
        led.record(RUN, "loop_end", at=1300.0, reason="stopped", exit_code=130)
        run = led.runs()[0]
        assert (run.ended, run.reason, run.exit_code) == (1300.0, "stopped", 130)


def test_the_loops_end_closes_a_phase_and_a_wait_it_left_open(tmp_path):
    with Ledger.open(tmp_path / "l.sqlite3") as led:
        led.record(RUN, "loop_start", at=1.0)
        led.record(RUN, "phase_start", at=2.0, iteration=1, phase="Planner", epoch=2.0)
        led.record(RUN, "wait_start", at=3.0, kind="limit", until=99.0)
        led.record(RUN, "loop_end", at=4.0, reason="SIGTERM", exit_code=143)
        assert [tuple(r) for r in led.query("SELECT ending, ended FROM phases")] == [("interrupted", 4.0)]
        assert led.query("SELECT ended FROM waits")[0][0] == 4.0


def test_events_read_back_with_their_time_kind_and_detail_and_filters(tmp_path):
    with Ledger.open(tmp_path / "l.sqlite3") as led:
        night(led)
        led.record("run-2", "loop_start", at=5000.0)
        first = led.events(RUN)[0]
        assert {k: first[k] for k in ("run_id", "event", "epoch", "at", "project")} == \
            {"run_id": RUN, "event": "loop_start", "epoch": 1000.0, "at": "1970-01-01T00:16:40Z", "project": "/p"}
        assert [e["event"] for e in led.events(RUN, kinds=("retry", "incident"))] == ["incident", "retry"]
        assert {e["event"] for e in led.events(RUN, iteration=2)} == {"iteration_start", "iteration_end"}
        assert [e["event"] for e in led.events(limit=2, newest=True)] == ["iteration_end", "loop_start"]
        assert [r.run_id for r in led.runs(since=2000.0)] == ["run-2"]


def test_a_huge_detail_is_cut_not_refused(tmp_path):
    with Ledger.open(tmp_path / "l.sqlite3") as led:
        led.record(RUN, "phase_end", detail="x" * 200_000, phase="Builder", iteration=1)
        (e,) = led.events()
        assert e["cut"] is True and e["phase"] == "Builder" and e["detail"] == "(cut)"


@pytest.mark.fault(48)
def test_a_corrupt_ledger_is_kept_aside_and_a_new_one_started(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    path.write_bytes(b"this is not a database, it was overwritten by an agent\n" * 100)
    with pytest.raises(LedgerError, match="failed"):
        Ledger.open(path, readonly=True)  # a reader never moves files
    with Ledger.open(path) as led:
        led.record(RUN, "loop_start")
        kinds = [e["event"] for e in led.events()]
    kept = list(tmp_path.glob("ledger.sqlite3.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not a database")
    assert kinds == ["ledger_reset", "loop_start"]


@pytest.mark.fault(75)
def test_a_ledger_whose_tables_were_dropped_is_kept_aside_with_its_wal_and_a_new_one_started(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as led:
        led.record(RUN, "loop_start")
        with sqlite3.connect(path) as raw:  # an agent's DROP TABLE, while the loop holds the ledger open
            raw.execute("DROP TABLE events")
            raw.execute("DROP TABLE retries")
        assert (tmp_path / "ledger.sqlite3-wal").exists()
        with pytest.raises(LedgerError, match="damaged .*lacks its tables events, retries.*keeps it aside"):
            Ledger.open(path, readonly=True)  # a reader says it in one line, and moves nothing
        assert path.exists()
        with Ledger.open(path) as fresh:
            fresh.record(RUN, "loop_end")
            kinds = [e["event"] for e in fresh.events()]
            assert fresh.reset_note and "kept aside as" in fresh.reset_note
    (kept,) = [p for p in tmp_path.glob("ledger.sqlite3.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert (tmp_path / f"{kept.name}-wal").exists()  # its last events, kept with it
    assert kinds == ["ledger_reset", "loop_end"]
    with Ledger.open(path, readonly=True) as reader:
        assert reader.events(kinds=("ledger_reset",))[0]["why"].startswith("the ledger lacks its tables")


def test_a_ledger_from_a_newer_genesis_is_refused_not_guessed_at(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    Ledger.open(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {VERSION + 1}")
    with pytest.raises(LedgerError, match="newer Genesis"):
        Ledger.open(path)
    with pytest.raises(LedgerError, match="newer Genesis"):
        Ledger.open(path, readonly=True)


def test_an_older_ledger_is_migrated_when_opened_for_writing(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    sqlite3.connect(path).close()  # an empty database: schema 0
    with Ledger.open(path) as led:
        assert led.query("PRAGMA user_version")[0][0] == VERSION
        led.record(RUN, "loop_start")
        assert len(led.runs()) == 1


def test_the_old_events_log_is_brought_in_once_with_its_times(tmp_path):
    old = tmp_path / "events.jsonl"
    old.write_text("\n".join([
        json.dumps({"at": "2026-11-20T22:00:00Z", "run_id": "old", "event": "loop_start", "project": "/p"}),
        "not json",
        json.dumps({"at": "2026-11-20T23:00:00Z", "run_id": "old", "event": "loop_end", "exit_code": 0,
                    "reason": "done"}),
    ]) + "\n")
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        assert import_events(led, old) == 2
        (run,) = led.runs()
        assert (run.run_id, run.ended - run.started, run.reason) == ("old", 3600.0, "done")
    assert not old.exists() and (tmp_path / "events.jsonl.imported").exists()


def test_the_old_events_log_comes_in_with_the_stuck_state_under_its_one_name(tmp_path):
    old = tmp_path / "events.jsonl"
    said = [{"event": "loop_start", "project": "/p"},
            {"event": "health", "iteration": 1, "phase": "Builder", "classification": "stalled"},
            {"event": "phase_end", "iteration": 1, "phase": "Builder", "status": "stale", "ending": "stale"},
            {"event": "retry", "iteration": 1, "phase": "Builder", "type": "stalled", "reason": "stale heartbeat"},
            {"event": "wait_start", "kind": "retry", "reason": "stalled: retry 1"}]
    old.write_text("".join(json.dumps({"at": "2026-11-20T22:00:00Z", "run_id": "old", **e}) + "\n" for e in said))
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        assert import_events(led, old) == 5
        events = led.events("old")
        assert [tuple(r) for r in led.query("SELECT status, ending FROM phases")] == [("stuck", "stuck")]
        assert [tuple(r) for r in led.query("SELECT reason FROM waits")] == [("stuck: retry 1",)]
    assert [e.get("classification") or e.get("status") or e.get("type") for e in events[1:4]] == ["stuck"] * 3
    assert events[3]["reason"] == "stale heartbeat"  # a reason's own words stay


READER = textwrap.dedent("""
    import sqlite3, sys, time
    conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, isolation_level=None)
    conn.execute("BEGIN")
    before = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    print("holding", before, flush=True)
    sys.stdin.readline()  # hold the read transaction open until told
    print(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0], flush=True)
    conn.execute("COMMIT")
    print(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0], flush=True)
""")


@pytest.mark.fault(49)
def test_a_reader_holding_a_snapshot_never_blocks_the_writer(tmp_path, monkeypatch):
    """A `status --watch` or report in another process mid-read while the loop records events."""
    monkeypatch.setattr(store, "BUSY_TIMEOUT", 0.05)  # were the writer made to wait, it would fail at once
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as led:
        led.record(RUN, "loop_start")
        reader = subprocess.Popen([sys.executable, "-c", READER, str(path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert reader.stdout.readline().split() == ["holding", "1"]
            for n in range(300):  # enough to pass SQLite's automatic checkpoint (1000 pages) is not needed
                led.record(RUN, "health", iteration=1, phase="Builder", n=n)
            assert len(led.events()) == 301
            reader.stdin.write("go\n")
            reader.stdin.flush()
            in_snapshot, after = int(reader.stdout.readline()), int(reader.stdout.readline())
        finally:
            reader.kill()
            reader.wait()
    assert (in_snapshot, after) == (1, 301)  # the reader saw its snapshot, then everything


@pytest.mark.fault(49)
def test_a_writer_holding_the_ledger_too_long_is_an_error_the_loop_can_say(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "BUSY_TIMEOUT", 0.1)
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as led:
        hog = sqlite3.connect(path, isolation_level=None)
        hog.execute("BEGIN IMMEDIATE")  # another writer that never lets go
        try:
            with pytest.raises(LedgerError, match="held by another writer"):
                led.record(RUN, "loop_start")
        finally:
            hog.execute("ROLLBACK")
            hog.close()
        led.record(RUN, "loop_start")
        assert [e["event"] for e in led.events()] == ["loop_start"]
