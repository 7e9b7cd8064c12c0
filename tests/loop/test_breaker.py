"""The circuit breaker: transitions (pure, injected time) and its state file (real files)."""

import json
import os
import subprocess
import sys

import pytest

from genesis.loop import breaker
from genesis.loop.breaker import CLOSED, HALF_OPEN, OPEN, BreakerLocked, BreakerState, BreakerStore, record

NOW = 1_800_000_000.0


def run(progress: list[bool], warn=3, stop=5) -> BreakerState:
    state = BreakerState()
    for i, p in enumerate(progress, 1):
        state = record(state, i, p, NOW + i, warn, stop)
    return state


@pytest.mark.fault(16)
def test_half_open_at_the_warning_threshold_and_open_at_the_stop_threshold():
    assert run([False] * 2).state == CLOSED
    assert run([False] * 3).state == HALF_OPEN
    assert run([False] * 4).state == HALF_OPEN
    s = run([False] * 5)
    assert s.state == OPEN and s.no_progress_count == 5 and s.opened_at is not None


@pytest.mark.fault(16)
def test_n_minus_one_idle_iterations_then_progress_closes_and_resets_the_counter():
    s = run([False] * 4 + [True])
    assert s.state == CLOSED and s.no_progress_count == 0 and s.last_progress_iteration == 5
    assert run([False] * 4 + [True] + [False] * 4).state == HALF_OPEN  # not OPEN: counter was reset


def test_history_records_each_transition_once_with_reason():
    s = run([True, False, False, False, False, False])
    assert [(t.from_state, t.to_state, t.iteration) for t in s.history] == [
        (CLOSED, HALF_OPEN, 4), (HALF_OPEN, OPEN, 6)]
    assert s.history[-1].reason == "5 iterations without progress"


def test_the_repository_fingerprint_is_kept_when_it_opens():
    s = BreakerState()
    for i in range(1, 6):
        s = record(s, i, False, NOW, 3, 5, fingerprint={"head": "abc", "digest": str(i)})
    assert s.state == OPEN and s.opened_fingerprint == {"head": "abc", "digest": "5"}
    closed = breaker.close(s, NOW, "repository changed")
    assert closed.state == CLOSED and closed.opened_fingerprint is None
    assert closed.history[-1].reason == "repository changed"


def test_store_round_trip_with_the_seed_fields(tmp_path):
    store = BreakerStore(tmp_path / "orchestrator" / ".circuit_breaker.json", clock=lambda: NOW)
    for i in range(1, 4):
        store.update(lambda s, i=i: record(s, i, False, NOW, 3, 5))
    data = json.loads(store.path.read_text())
    assert data["state"] == HALF_OPEN
    assert data["no_progress_count"] == 3
    assert data["last_progress_iteration"] == 0
    assert data["updated_at"] == "2027-01-15T08:00:00Z"
    assert data["history"][0]["to_state"] == HALF_OPEN
    assert [p.name for p in store.path.parent.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.fault(17)
def test_deleting_the_file_resets_the_breaker(tmp_path):
    store = BreakerStore(tmp_path / ".circuit_breaker.json")
    for i in range(1, 6):
        store.update(lambda s, i=i: record(s, i, False, NOW, 3, 5))
    assert store.load()[0].state == OPEN
    store.path.unlink()
    state, warning = store.load()
    assert state.state == CLOSED and state.no_progress_count == 0 and warning is None


@pytest.mark.parametrize("content", [b"", b"{trunc", b"[1, 2]", b'{"state": "AJAR"}',
                                     b'{"state": "OPEN", "no_progress_count": "five"}',
                                     b'{"state": "OPEN", "history": [1]}', b"\xff\xfe",
                                     b'{"state": "OPEN", "trials": -1}', b'{"state": "OPEN", "trials": "2"}',
                                     b'{"state": "OPEN", "trials": true}',
                                     b'{"state": "OPEN", "retry_at": "tomorrow"}',
                                     b'{"state": "OPEN", "retry_at": 1800000060}'])
@pytest.mark.fault(17)
def test_a_corrupt_file_is_kept_aside_and_the_fallback_is_a_fresh_closed_breaker(tmp_path, content):
    path = tmp_path / ".circuit_breaker.json"
    path.write_bytes(content)
    store = BreakerStore(path, clock=lambda: NOW)
    state, warning = store.load()
    assert state.state == CLOSED and state.no_progress_count == 0
    kept = tmp_path / ".circuit_breaker.json.corrupt-20270115T080000Z"
    assert kept.read_bytes() == content
    assert str(kept) in warning and "unusable" in warning
    assert not path.exists()


@pytest.mark.fault(17)
def test_a_symlink_at_the_state_path_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = tmp_path / ".circuit_breaker.json"
    os.symlink(victim, path)
    state, warning = BreakerStore(path, clock=lambda: NOW).load()
    assert state.state == CLOSED and "symlink" in warning
    assert victim.read_text() == "precious"


# --- recovery without a human: cooldown, then a trial iteration -------------------------

BASE = 60.0   # CB_COOLDOWN_MINUTES=1
TRIALS = 3    # CB_MAX_TRIALS


def opened(warn=3, stop=5) -> BreakerState:
    s = run([False] * stop, warn, stop)
    assert s.state == OPEN and s.trials == 0
    return s


def trial(s: BreakerState, now: float) -> BreakerState:
    """What the loop does with an OPEN breaker: plan the trial, wait, let one iteration through."""
    seconds = breaker.cooldown_seconds(s, BASE, TRIALS)
    assert seconds is not None
    s = breaker.plan_trial(s, now, seconds)
    assert breaker.retry_time(s) == now + seconds
    return breaker.start_trial(s, now + seconds, TRIALS)


def test_cooldown_then_a_trial_with_progress_closes_the_breaker():
    s = run([False] * 3)
    assert s.state == HALF_OPEN and breaker.cooldown_seconds(s, BASE, TRIALS) is None  # a warning only
    s = record(s, 4, False, NOW + 4, 3, 5)
    s = record(s, 5, False, NOW + 5, 3, 5)
    assert s.state == OPEN
    assert breaker.cooldown_seconds(s, BASE, TRIALS) == 60
    s = breaker.plan_trial(s, NOW + 5, 60)
    assert s.state == OPEN and s.retry_at == "2027-01-15T08:01:05Z" and breaker.retry_time(s) == NOW + 65
    s = breaker.start_trial(s, NOW + 65, TRIALS)
    assert s.state == HALF_OPEN and s.trials == 1 and s.retry_at is None
    assert s.no_progress_count == 5  # still past the stop threshold: only the trial's result counts
    last = s.history[-1]
    assert (last.from_state, last.to_state, last.iteration, last.at) == (OPEN, HALF_OPEN, 5, "2027-01-15T08:01:05Z")
    assert last.reason == "cooldown over: trial 1 of 3"
    s = record(s, 6, True, NOW + 70, 3, 5)
    assert s.state == CLOSED and s.trials == 0 and s.no_progress_count == 0 and s.retry_at is None
    assert s.opened_at is None and s.last_progress_iteration == 6
    assert [t.to_state for t in s.history] == [HALF_OPEN, OPEN, HALF_OPEN, CLOSED]
    # Closed for good: the next idle run needs the full thresholds again, and its trials start at 1.
    for i in range(7, 12):
        s = record(s, i, False, NOW + i * 100, 3, 5)
    assert s.state == OPEN and breaker.cooldown_seconds(s, BASE, TRIALS) == 60
    assert breaker.start_trial(s, NOW + 2000).history[-1].reason == "cooldown over: trial 1"


def test_each_failed_trial_reopens_with_a_doubled_cooldown_until_the_trials_are_spent():
    s = opened()
    now = NOW + 100
    waits = []
    for n in range(1, TRIALS + 1):
        waits.append(breaker.cooldown_seconds(s, BASE, TRIALS))
        s = trial(s, now)
        now += waits[-1]
        assert s.state == HALF_OPEN and s.trials == n
        s = record(s, 5 + n, False, now + 10, 3, 5, fingerprint={"digest": str(n)})
        assert s.state == OPEN and s.trials == n and s.no_progress_count == 5 + n
        assert s.opened_at == breaker.iso(now + 10) and s.opened_fingerprint == {"digest": str(n)}
        assert s.history[-1].reason == f"trial {n} made no progress ({5 + n} iterations without progress)"
        now += 10
    assert waits == [60, 120, 240]
    assert breaker.cooldown_seconds(s, BASE, TRIALS) is None  # the loop stops now
    assert breaker.cooldown_seconds(s, BASE, TRIALS + 1) == 480


def test_a_failed_trial_reopens_even_if_the_thresholds_were_raised_meanwhile():
    s = breaker.start_trial(opened(), NOW + 100, TRIALS)
    s = record(s, 6, False, NOW + 200, warn_at=10, stop_at=20)
    assert s.state == OPEN and s.trials == 1


def test_no_cooldown_or_trial_for_a_breaker_that_is_not_open():
    for s in (BreakerState(), run([False] * 3)):
        assert breaker.cooldown_seconds(s, BASE, TRIALS) is None
        assert breaker.plan_trial(s, NOW, 60) == s
        assert breaker.start_trial(s, NOW) == s  # reset while the loop waited: nothing to try
    assert breaker.retry_time(BreakerState()) is None


def test_closing_an_open_breaker_forgets_its_trials():
    s = record(breaker.start_trial(opened(), NOW + 100), 6, False, NOW + 200, 3, 5)
    s = breaker.plan_trial(s, NOW + 200, 120)
    closed = breaker.close(s, NOW + 300, "repository changed")
    assert closed.state == CLOSED and closed.trials == 0 and closed.retry_at is None


def test_store_round_trip_with_trials_and_retry_at(tmp_path):
    store = BreakerStore(tmp_path / ".circuit_breaker.json", clock=lambda: NOW)
    s = breaker.plan_trial(record(breaker.start_trial(opened(), NOW + 100), 6, False, NOW + 200, 3, 5),
                           NOW + 200, 120)
    store.update(lambda _old: s)
    data = json.loads(store.path.read_text())
    assert data["trials"] == 1 and data["retry_at"] == "2027-01-15T08:05:20Z"
    loaded, warning = store.load()
    assert warning is None and loaded == s and breaker.retry_time(loaded) == NOW + 320


def test_a_file_from_before_trials_loads_with_none_spent(tmp_path):
    path = tmp_path / ".circuit_breaker.json"
    path.write_text(json.dumps({"state": "OPEN", "no_progress_count": 5, "last_progress_iteration": 2,
                                "last_iteration": 7, "updated_at": "2027-01-15T08:00:00Z",
                                "opened_at": "2027-01-15T08:00:00Z", "opened_fingerprint": None,
                                "history": [], "version": 1}))
    state, warning = BreakerStore(path, clock=lambda: NOW).load()
    assert warning is None and state.state == OPEN and state.trials == 0 and state.retry_at is None
    assert breaker.cooldown_seconds(state, BASE, TRIALS) == 60


# --- the lock: bounded waits, and who holds it ------------------------------------------

HOLD = ("import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(600)\n")


@pytest.fixture
def holder(tmp_path, procs):
    """A real process holding the breaker's lock file, as a leftover would."""
    lock = tmp_path / "private" / "breaker.lock"
    lock.parent.mkdir(mode=0o700)
    script = tmp_path / "leftover-lock-holder.py"
    script.write_text(HOLD)
    proc = procs([sys.executable, str(script), str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "locked\n"
    return lock, proc


@pytest.mark.fault(27)
def test_a_held_lock_is_waited_on_for_the_timeout_then_named_with_its_holder(tmp_path, holder):
    lock, proc = holder
    path = tmp_path / "orchestrator" / ".circuit_breaker.json"
    store = BreakerStore(path, clock=lambda: NOW, lock_path=lock, timeout=0.3)
    store.path.parent.mkdir()
    for attempt in (lambda: store.update(lambda s: record(s, 1, False, NOW, 3, 5)), store.load, store.reset):
        with pytest.raises(BreakerLocked) as caught:
            attempt()
        exc = caught.value
        assert isinstance(exc, TimeoutError)
        assert exc.holders and exc.holders[0][0] == proc.pid
        message = str(exc)
        assert f"the circuit breaker's lock {lock} is still held after 0.3s" in message
        assert f"pid {proc.pid} (" in message and "leftover-lock-holder" in message
        assert f"kill {proc.pid}" in message
    assert not path.exists()
    proc.kill()
    proc.wait()
    state, _ = store.update(lambda s: record(s, 1, False, NOW, 3, 5))  # the kernel freed the lock
    assert state.no_progress_count == 1 and json.loads(path.read_text())["no_progress_count"] == 1


@pytest.mark.fault(27)
def test_lock_holders_names_the_process_that_holds_it(holder):
    lock, proc = holder
    found = breaker.lock_holders(lock)
    assert [pid for pid, _ in found] == [proc.pid]
    assert "leftover-lock-holder" in found[0][1]
    # Where /proc/locks is missing (macOS): the processes that have the file open.
    assert [pid for pid, _ in breaker._openers(lock, os.stat(lock))] == [proc.pid]


def test_the_lock_file_lives_where_it_is_told(tmp_path):
    path = tmp_path / "orchestrator" / ".circuit_breaker.json"
    lock = tmp_path / "state" / "breaker.lock"
    store = BreakerStore(path, lock_path=lock)
    store.update(lambda s: record(s, 1, True, NOW, 3, 5))
    assert lock.is_file() and path.is_file()
    assert sorted(p.name for p in path.parent.iterdir()) == [".circuit_breaker.json"]
    assert BreakerStore(path).lock_path == tmp_path / "orchestrator" / ".circuit_breaker.json.lock"


def test_a_symlink_planted_at_the_lock_path_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    lock = tmp_path / "breaker.lock"
    os.symlink(victim, lock)
    store = BreakerStore(tmp_path / ".circuit_breaker.json", lock_path=lock, timeout=0.3)
    with pytest.raises(OSError, match="is a symlink"):
        store.update(lambda s: record(s, 1, True, NOW, 3, 5))
    assert victim.read_text() == "precious"
    assert not (tmp_path / ".circuit_breaker.json").exists()
