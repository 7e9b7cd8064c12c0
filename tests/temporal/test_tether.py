"""A loop tethered to its worker: stopped before a retry of its attempt can start elsewhere.
The decision replayed on recorded leases (pure), the grace against the heartbeat timeout, and
the tether itself on real processes: a worker SIGKILLed, a loop's whole tree ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from genesis.procs.proctree import ProcId, identify
from genesis.temporal import adoption, tether
from genesis.loop import workerlink
from genesis.loop.workerlink import LIVE_FLOOR, Lease

LOOP, WORKER = 4242, ProcId(77, 1000.0)


def test_the_grace_ends_the_loop_before_the_soonest_retry_elsewhere():
    # H = 60 s (the SDK then sends a heartbeat every 48 s), S = 300 s: the defaults.
    assert tether.retry_after(60, 300, pinned=False) == pytest.approx(11.0)
    assert tether.grace(60, 300, pinned=False) == pytest.approx(8.75)
    assert tether.grace(60, 300, pinned=True) == pytest.approx(308.75)
    # Past THROTTLE_MAX, the throttle stops growing with H.
    assert tether.retry_after(600, 300, pinned=False) == pytest.approx(600 - 60 - 1)
    for beat in (20, 60, 120, 3600):
        for pinned in (False, True):
            stopped_by = tether.grace(beat, 300, pinned) + tether.LOOK_EVERY + tether.STOP_GRACE
            # the server's last heartbeat may be the SDK's throttle and one renewal older than the
            # lease; a retry starts H after it at the soonest (plus S when pinned)
            soonest = -min(0.8 * beat, tether.THROTTLE_MAX) - tether.RENEW_EVERY + beat + (300 if pinned else 0)
            assert stopped_by <= soonest


def replay(leases: list[tuple[float, Lease | None, bool]], limit: float, since: float = 0.0) -> tuple[float, str]:
    """The tether's looks, each (now, the lease it read, its worker alive): when it stopped the loop, and why."""
    for now, lease, worker_alive in leases:
        why = tether.verdict(lease, LOOP, worker_alive, since, now, limit)
        if why:
            return now, why
    return -1.0, ""


def test_a_renewed_lease_keeps_the_loop():
    looks = [(t / 4, Lease(LOOP, WORKER, float(int(t / 4))), True) for t in range(200)]
    assert replay(looks, limit=8.75) == (-1.0, "")


def test_a_dead_worker_stops_its_loop_once_the_lease_is_grace_old():
    looks = [(t / 4, Lease(LOOP, WORKER, 10.0), t / 4 < 10.5) for t in range(40, 120)]
    at, why = replay(looks, limit=8.75)
    assert at == 18.75 and "is gone" in why and "8.75" in why


def test_a_dead_worker_with_a_grace_below_zero_stops_its_loop_at_once():
    looks = [(t / 4, Lease(LOOP, WORKER, 10.0), t / 4 < 10.5) for t in range(40, 120)]
    assert replay(looks, limit=-1.5)[0] == 10.5


def test_a_live_but_silent_worker_stops_its_loop_past_the_grace_and_never_before_the_floor():
    looks = [(t / 4, Lease(LOOP, WORKER, 10.0), True) for t in range(40, 120)]
    at, why = replay(looks, limit=8.75)
    assert at == 18.75 and "renewed nothing" in why
    assert replay(looks, limit=-1.5)[0] == 10.0 + LIVE_FLOOR


def test_a_restarted_worker_renewing_in_time_keeps_the_loop():
    old, new = WORKER, ProcId(88, 2000.0)
    looks = [(t, Lease(LOOP, old, 10.0), False) for t in (11.0, 12.0, 15.0)] + \
        [(t, Lease(LOOP, new, t - 0.5), True) for t in (16.0, 30.0, 400.0)]
    assert replay(looks, limit=308.75) == (-1.0, "")


def test_a_lease_of_another_loop_counts_as_none_from_the_launch():
    other = Lease(LOOP + 1, WORKER, 100.0)
    looks = [(t, other, True) for t in (101.0, 104.0, 108.0, 109.0)]
    at, why = replay(looks, limit=8.75, since=100.0)
    assert at == 109.0 and "no worker follows it" in why


def test_a_lease_is_read_back_as_written_and_a_bad_one_as_none(tmp_path):
    (tmp_path / "children").mkdir()
    tether.renew(tmp_path, "t-abc123", LOOP, WORKER, 12.5)
    assert workerlink.read_lease(tmp_path, "t-abc123") == Lease(LOOP, WORKER, 12.5)
    workerlink.lease_file(tmp_path, "t-abc123").write_text('{"loop": "x"}')
    assert workerlink.read_lease(tmp_path, "t-abc123") is None
    assert workerlink.read_lease(tmp_path, "t-none00") is None


TREE = """
import subprocess, sys, time
kid = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                        "time.sleep(120)"], start_new_session=True)
print(kid.pid, flush=True)
time.sleep(120)
"""


def test_the_tether_ends_the_loops_whole_tree_once_its_worker_is_killed(tmp_path):
    """A real worker stand-in renews the lease; SIGKILLed, the tether (a process of its own)
    marks the launch stopping and ends the loop and its grandchild (in a session of its own,
    deaf to SIGTERM); an unrelated process is left alone."""
    fleet_dir = tmp_path
    (fleet_dir / "children").mkdir()
    loop = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    worker = subprocess.Popen([sys.executable, "-c", RENEWER, str(fleet_dir), str(loop.pid)], start_new_session=True)
    held = None
    try:
        grandchild = int(loop.stdout.readline())
        loop_id, worker_id = identify(loop.pid), identify(worker.pid)
        adoption.record_launch(fleet_dir, "t-abc123", loop.pid, "f/t", 1)
        deadline = time.monotonic() + 20
        while workerlink.read_lease(fleet_dir, "t-abc123") is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        held = tether.start(loop_id, fleet_dir, "t-abc123", 1.0, time.time())
        time.sleep(2.5)   # the lease renewed: the loop stays
        assert loop.poll() is None and held.poll() is None
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        killed_at = workerlink.read_lease(fleet_dir, "t-abc123").at
        assert loop.wait(timeout=30) is not None
        held.wait(timeout=30)
        assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
        assert bystander.poll() is None
        record = adoption.read_launch(fleet_dir, "t-abc123")
        assert record["stopping"] is True
        done = tether.record_file(fleet_dir, "t-abc123")
        what = json.loads(done.read_text())
        assert what["loop"] == loop.pid and "is gone" in what["why"] and what["processes"] >= 2
        assert what["began"] - killed_at >= 1.0   # the grace was waited out, counted from the last renewal
        assert worker_id is not None
    finally:
        for proc in (loop, bystander, worker, held):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


RENEWER = """
import os, sys, time
from pathlib import Path
from genesis.procs.proctree import identify
from genesis.temporal import tether
me = identify(os.getpid())
while True:
    tether.renew(Path(sys.argv[1]), "t-abc123", int(sys.argv[2]), me, time.time())
    time.sleep(0.2)
"""
