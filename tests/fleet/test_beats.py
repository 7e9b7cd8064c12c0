"""The children's heartbeats as the monitor sees them: real heartbeat files written by the
real hook, sightings counted in a real fleet ledger."""

from __future__ import annotations

import os
import subprocess

from genesis.fleet.beats import BeatBook, newest_beat
from genesis.fleet.ledger import FleetLedger
from genesis.health.heartbeat import hook_script


def beat(folder, phase: str) -> float:
    """The real hook writing the phase's heartbeat file, as an agent's tool call does; its epoch."""
    folder.mkdir(mode=0o700, exist_ok=True)
    subprocess.run(["bash", str(hook_script()), "load_beat"], stdin=subprocess.DEVNULL, check=True,
                   env={**os.environ, "GENESIS_HEARTBEAT_FILE": str(folder / f"{phase}.json")})
    return newest_beat(folder)


def test_the_newest_beat_of_any_phase_counts_and_health_files_and_symlinks_do_not(tmp_path):
    folder = tmp_path / "heartbeats"
    assert newest_beat(folder) is None                       # no folder yet: nothing seen
    first = beat(folder, "Builder")
    (folder / "Builder.health.json").write_text('{"epoch": 9999999999}')
    (folder / "Planted.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text('{"epoch": 9999999999}')
    assert newest_beat(folder) == first
    second = beat(folder, "Criticizer")
    assert second >= first and newest_beat(folder) == second


def test_a_beat_is_sighted_once_and_a_new_run_of_the_task_counts_afresh():
    book = BeatBook()
    assert book.sight("t1", "run-a", None, 10.0) is None
    assert book.sight("t1", "run-a", 5.0, 10.0) == ("t1", "run-a", 5.0, 10.0)
    assert book.sight("t1", "run-a", 5.0, 12.0) is None      # the same beat again: not new
    assert book.sight("t1", "run-b", 5.0, 12.0) == ("t1", "run-b", 5.0, 12.0)
    book.forget("t1")
    assert book.sight("t1", "run-a", 5.0, 13.0) is not None


def test_sightings_are_counted_per_task_with_the_worst_lag_and_a_new_run_starts_the_count(tmp_path):
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        led.note_beats([("t1", "run-a", 100.0, 101.0), ("t2", "run-x", 100.0, 100.5)])
        led.note_beats([("t1", "run-a", 103.0, 106.0)])
        led.note_beats([])
        got = led.beats()
        assert (got["t1"].seen, got["t1"].last_beat, got["t1"].lag_max) == (2, 103.0, 3.0)
        assert (got["t2"].seen, got["t2"].lag_max) == (1, 0.5)
        led.note_beats([("t1", "run-b", 200.0, 200.25)])
        assert (led.beats()["t1"].seen, led.beats()["t1"].lag_max, led.beats()["t1"].run_id) == (1, 0.25, "run-b")
    with FleetLedger.open(tmp_path / "ledger.sqlite3", readonly=True) as again:
        assert again.beats()["t2"].seen == 1
