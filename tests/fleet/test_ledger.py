"""The fleet ledger: real SQLite files, a real process writing while others read."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from store.test_atomicio import on_small_disk

from genesis.fleet import ledger as fleet_ledger
from genesis.fleet.ledger import TERMINAL, FleetLedger, FleetLedgerError, TaskRow
from genesis.ledger.store import LedgerError


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def path(tmp_path):
    return tmp_path / "fleet" / "ledger.sqlite3"


def test_tasks_attempts_and_events_are_kept_and_read_back_after_a_reopen(path):
    clock = Clock()
    with FleetLedger.open(path, clock=clock) as led:
        led.upsert_task(TaskRow("add-x-abc123", "add x", "queued", branch="genesis/task/add-x-abc123"))
        clock.now = 1010.0
        row = led.set_state("add-x-abc123", "running", pid=4242, worktree="/w/add-x")
        assert (row.state, row.pid, row.worktree, row.created, row.updated) == ("running", 4242, "/w/add-x", 1000.0,
                                                                                 1010.0)
        first = led.begin_attempt("add-x-abc123", "start", "queued", "claude -p", "run-a", 1011.0)
        led.end_attempt("add-x-abc123", first.attempt, 1, "failed", 1050.0)
        second = led.begin_attempt("add-x-abc123", "restart", "attempt 1 failed", "claude -p", "run-b", 1060.0,
                                   strategy=0)
        led.record("fleet_start", run_id="fleet-1", parallel=3, pid=99, now=1000.0)
        led.record("child_end", "add-x-abc123", exit_code=1, outcome="failed", now=1050.0)
    assert (first.attempt, second.attempt) == (1, 2)

    with FleetLedger.open(path, readonly=True) as led:  # a monitor started again, or `fleet status`
        row = led.task("add-x-abc123")
        assert (row.state, row.attempts, row.run_id) == ("running", 2, "run-b")
        history = led.attempts("add-x-abc123")
        assert [(a.attempt, a.kind, a.outcome, a.exit_code, a.ended) for a in history] == [
            (1, "start", "failed", 1, 1050.0), (2, "restart", None, None, None)]
        assert led.fleet_run_id() == "fleet-1"
        assert [(e.kind, e.task_id, e.detail.get("outcome")) for e in led.events()] == [
            ("fleet_start", None, None), ("child_end", "add-x-abc123", "failed")]
        assert [e.kind for e in led.events("child_end")] == ["child_end"]
        seq = led.events()[0].seq
        assert [e.kind for e in led.events(after=seq)] == ["child_end"]
        assert led.task("nope") is None
        with pytest.raises(FleetLedgerError):
            led.record("x")


def test_an_attempt_keeps_its_first_ending_and_states_and_fields_are_checked(path):
    with FleetLedger.open(path, clock=Clock()) as led:
        led.upsert_task(TaskRow("t", "t", "queued"))
        a = led.begin_attempt("t", "start", "", "agent", "r", 1.0)
        led.end_attempt("t", a.attempt, 0, "verified", 2.0)
        led.end_attempt("t", a.attempt, 1, "failed", 3.0)  # a late second look changes nothing
        assert [(x.outcome, x.ended) for x in led.attempts("t")] == [("verified", 2.0)]
        with pytest.raises(ValueError):
            led.set_state("t", "exploded")
        with pytest.raises(TypeError):
            led.set_state("t", "running", colour="red")
        with pytest.raises(FleetLedgerError):
            led.set_state("missing", "running")
        with pytest.raises(ValueError):
            led.begin_attempt("t", "guess", "", "agent", "r", 1.0)
        with pytest.raises(ValueError):
            led.end_attempt("t", 1, 0, "fine", 1.0)
        assert TERMINAL == {"merged", "ready", "needs-review", "failed"}


def test_a_corrupt_ledger_is_kept_aside_and_a_new_one_started(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is no database, it was cut by a crash" * 100)
    with FleetLedger.open(path, clock=Clock()) as led:
        assert "kept aside" in led.reset_note
        led.upsert_task(TaskRow("t", "t", "queued"))
        assert [e.kind for e in led.events()] == ["ledger_reset"]
    kept = [p.name for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert len(kept) == 1 and (path.parent / kept[0]).read_bytes().startswith(b"this is no database")


def test_another_programs_sqlite_file_is_kept_aside_not_written_into(path):
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.commit()
    conn.close()
    with FleetLedger.open(path, clock=Clock()) as led:
        assert led.reset_note and led.tasks() == []
    kept = next(p for p in path.parent.iterdir() if ".corrupt-" in p.name and not p.name.endswith(("-wal", "-shm")))
    assert sqlite3.connect(kept).execute("SELECT body FROM notes").fetchall() == [("mine",)]


def test_a_reader_never_repairs_and_a_missing_ledger_says_so(path):
    with pytest.raises(FleetLedgerError, match="no fleet has run"):
        FleetLedger.open(path, readonly=True)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage" * 1000)
    with pytest.raises(LedgerError, match="cannot be read"):
        FleetLedger.open(path, readonly=True)
    assert path.read_bytes().startswith(b"garbage")  # left for the writer to keep aside


@pytest.mark.parametrize("where", ["ledger.sqlite3", "ledger.sqlite3-wal"])
def test_a_symlink_at_the_ledger_or_its_wal_is_refused_and_its_target_untouched(tmp_path, path, where):
    target = tmp_path / "elsewhere.txt"
    target.write_text("the user's file\n")
    path.parent.mkdir(parents=True)
    os.symlink(target, path.parent / where)
    with pytest.raises(FleetLedgerError, match="symlink"):
        FleetLedger.open(path)
    assert target.read_text() == "the user's file\n"
    assert (path.parent / where).is_symlink()


def test_events_are_bounded_the_oldest_going_first(path, monkeypatch):
    monkeypatch.setattr(fleet_ledger, "MAX_EVENTS", 50)
    monkeypatch.setattr(fleet_ledger, "PRUNE_EVERY", 10)
    with FleetLedger.open(path, clock=Clock()) as led:
        for n in range(200):
            led.record("tick", n=n)
        kept = [e.detail["n"] for e in led.events()]
    assert len(kept) <= 60 and kept[-1] == 199 and kept == sorted(kept)
    with FleetLedger.open(path, clock=Clock()) as led:
        led.record("big", text="x" * (fleet_ledger.MAX_DETAIL_CHARS * 2))
        assert len(str(led.events("big")[0].detail)) < fleet_ledger.MAX_DETAIL_CHARS


WRITER = textwrap.dedent("""
    import sys
    from genesis.fleet.ledger import FleetLedger, TaskRow
    led = FleetLedger.open(sys.argv[1])
    for n in range(int(sys.argv[2])):
        task = f"t{n % 50}"
        led.upsert_task(TaskRow(task, task, "running"))
        led.record("heartbeat", task, n=n)
    led.record("done")
    led.close()
""")


def test_readers_read_while_a_process_writes_and_see_every_write_in_order(path, procs):
    with FleetLedger.open(path) as led:
        led.record("fleet_start", run_id="f")
    writer = procs([sys.executable, "-c", WRITER, str(path), "1500"], stderr=subprocess.PIPE, text=True)
    seen, reads, ended = 0, 0, False
    with FleetLedger.open(path, readonly=True) as reader:
        while not ended:  # reads until the writer has ended, then once more
            ended = writer.poll() is not None
            events = reader.events()  # never blocked, never an error, while the other process writes
            assert len(events) >= seen and [e.seq for e in events] == sorted(e.seq for e in events)
            seen = len(events)
            reads += 1
            reader.tasks()
        assert events[-1].kind == "done"
    assert writer.wait(timeout=60) == 0, writer.stderr.read()
    with FleetLedger.open(path, readonly=True) as reader:
        beats = [e.detail["n"] for e in reader.events("heartbeat")]
        assert beats == list(range(1500))  # none lost
        assert len(reader.tasks()) == 50
    assert reads > 1


def test_a_full_disk_is_disk_full_and_the_ledger_goes_on_once_there_is_room(tmp_path):
    out = on_small_disk(tmp_path, """
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.store.atomicio import DiskFull
led = FleetLedger.open(mnt / "ledger.sqlite3")
led.upsert_task(TaskRow("t", "t", "running"))
led.record("fleet_start", run_id="f")
fill()
out["full"] = None
for n in range(5000):
    try:
        led.record("heartbeat", "t", n=n, pad="p" * 2000)
    except DiskFull as exc:
        out["full"] = {"n": n, "message": str(exc)}
        break
os.remove(mnt / "filler")
led.set_state("t", "failed", "the disk was full")
led.close()
with FleetLedger.open(mnt / "ledger.sqlite3", readonly=True) as again:
    out["state"] = again.task("t").state
    out["kinds"] = sorted({e.kind for e in again.events()})
    out["beats"] = len(again.events("heartbeat"))
""", size="1m")
    assert out["full"] is not None and "no room to write" in out["full"]["message"]
    # The writes before the full disk are kept, the one refused is not, and the ledger writes again.
    assert out["beats"] == out["full"]["n"] and "fleet_start" in out["kinds"]
    assert out["state"] == "failed"


def test_a_first_fleets_ledger_without_the_beats_table_is_read_and_then_given_one(path):
    with FleetLedger.open(path) as led:
        led.record("fleet_start", run_id="f")
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE beats")
    with FleetLedger.open(path, readonly=True) as reader:
        assert reader.beats() == {} and reader.fleet_run_id() == "f"
    with FleetLedger.open(path) as led:  # kept, not set aside as damaged
        led.note_beats([("t1", "r", 1.0, 2.0)])
        assert led.beats()["t1"].seen == 1 and led.fleet_run_id() == "f"
