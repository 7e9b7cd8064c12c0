"""Staleness on an injected clock: no sleeping, every edge of the window."""

import pytest

from genesis.health.watchdog import Watchdog

WALL0 = 1_800_000_000.0


def dog(stale=900.0, interval=60.0):
    return Watchdog(stale_after=stale, interval=interval, started_mono=0.0, started_wall=WALL0)


def checks(d, start, end, epoch=None, **kw):
    """Checks every interval from `start` to `end` (inclusive), as the watcher makes them;
    the verdict of the last one. Stops early at the first stale verdict."""
    t, verdict = start, None
    while t <= end:
        verdict = d.observe(epoch, t, WALL0 + t, **kw)
        if verdict.stale:
            return verdict
        t += d.interval
    return verdict


def test_no_heartbeat_counts_from_the_agent_start_not_healthy_forever():
    d = dog()
    assert not checks(d, 60, 900).stale
    v = d.observe(None, 960, WALL0 + 960)
    assert v.stale and v.idle == 960


def test_fresh_heartbeats_keep_it_alive_and_their_age_is_back_dated():
    d = dog()
    for t in range(60, 3000, 60):
        # each check sees a heartbeat written 10 s before it
        assert not d.observe(WALL0 + t - 10, t, WALL0 + t).stale
    assert d.last_activity == 2940 - 10


def test_stale_exactly_one_window_after_the_last_heartbeat():
    d = dog()
    d.observe(WALL0 + 100, 120, WALL0 + 120)   # heartbeat at t=100
    assert d.last_activity == 100
    assert not checks(d, 180, 1000, WALL0 + 100).stale  # idle 900 at t=1000: not yet
    v = d.observe(WALL0 + 100, 1060, WALL0 + 1060)
    assert v.stale and v.idle == 960


def test_a_heartbeat_from_before_the_start_counts_as_the_start():
    d = dog()
    v = d.observe(WALL0 - 5000, 60, WALL0 + 60)
    assert d.last_activity == 0 and not v.stale
    assert d.last_beat is None  # not this phase's: it does not bound output as a sign of life
    assert checks(d, 120, 960, WALL0 - 5000).stale


@pytest.mark.fault(4)
def test_a_future_timestamp_is_counted_as_now_with_a_warning_never_fresh_forever():
    d = dog()
    v = d.observe(WALL0 + 99_999, 60, WALL0 + 60)
    assert d.last_activity == 60
    assert any("in the future" in n for n in v.notes)
    # the same future heartbeat seen again is not new activity
    v = checks(d, 120, 1020, WALL0 + 99_999)
    assert v.stale and v.idle == 960


@pytest.mark.fault(5)
def test_a_suspend_restarts_the_window_instead_of_killing_at_wake():
    d = dog()
    d.observe(WALL0 + 50, 60, WALL0 + 60)
    # the machine sleeps for 5 hours: the monotonic clock moved 60 s, the wall clock 5 h
    v = d.observe(WALL0 + 50, 120, WALL0 + 120 + 5 * 3600)
    assert not v.stale and v.idle == 0
    assert any("suspend or clock jump" in n for n in v.notes)
    # one fresh window after waking, then stale as usual
    for t in range(180, 1021, 60):
        assert not d.observe(WALL0 + 50, t, WALL0 + t + 5 * 3600).stale
    assert d.observe(WALL0 + 50, 1080, WALL0 + 1080 + 5 * 3600).stale


@pytest.mark.fault(5)
def test_a_wall_clock_moved_backwards_restarts_the_window():
    d = dog()
    v = d.observe(None, 60, WALL0 - 3600)
    assert any("backwards" in n for n in v.notes) and d.last_activity == 60


def test_agent_output_counts_as_a_sign_of_life():
    d = dog(stale=10, interval=1)
    for t in range(1, 30):
        assert not d.observe(None, t, WALL0 + t, output_grew=True).stale
    v = checks(d, 30, 40)
    assert v.stale and v.idle == 11


# --- output is a sign of life only up to a bound once the agent has beaten ----------------

@pytest.mark.fault(34)
def test_once_it_has_beaten_output_keeps_an_agent_alive_one_window_past_its_last_heartbeat():
    d = dog(stale=10, interval=1)
    checks(d, 1, 5)
    assert not d.observe(WALL0 + 5, 6, WALL0 + 6).stale  # one heartbeat, at t=5
    assert d.last_beat == 5
    # then only output, at every check: it counts up to t=15 (one window after the beat)
    v = checks(d, 7, 100, output_grew=True)
    assert v.stale and v.output_ignored
    assert d.last_activity == 15
    assert v.idle == 11  # stale at t=26: two windows and one check after the last tool call


def test_output_after_the_bound_counts_again_once_a_heartbeat_comes():
    d = dog(stale=10, interval=1)
    checks(d, 1, 5)
    d.observe(WALL0 + 5, 6, WALL0 + 6)
    assert not checks(d, 7, 20, output_grew=True).stale
    assert d.observe(None, 21, WALL0 + 21, output_grew=True).output_ignored
    v = d.observe(WALL0 + 21.5, 22, WALL0 + 22, output_grew=True)  # a new tool call
    assert not v.stale and not v.output_ignored and d.last_activity == 22
    assert not checks(d, 23, 32, output_grew=True).stale  # counts again, for one window


def test_an_agent_that_never_beat_lives_on_its_output_to_the_runtime_cap():
    d = dog(stale=10, interval=1)
    v = checks(d, 1, 5000, output_grew=True)
    assert not v.stale and not v.output_ignored and d.last_beat is None


# --- a pause of the watcher is not charged to the agent -------------------------------------

@pytest.mark.fault(35)
def test_a_pause_of_the_watcher_itself_restarts_the_window():
    d = dog(stale=10, interval=1)
    d.observe(WALL0 + 1, 2, WALL0 + 2)
    # the watcher was SIGSTOPped for 20 s: both clocks moved on together, no heartbeat is new
    v = d.observe(WALL0 + 1, 22, WALL0 + 22)
    assert not v.stale and v.idle == 0
    assert v.notes == ("the watcher itself was paused for 20s; staleness window restarted",)
    assert not checks(d, 23, 32, WALL0 + 1).stale  # one fresh window
    assert d.observe(WALL0 + 1, 33, WALL0 + 33).stale


@pytest.mark.fault(35)
def test_a_gap_of_two_intervals_and_a_second_is_no_pause_and_charged_as_usual():
    d = dog(stale=10, interval=1)
    d.observe(WALL0 + 1, 2, WALL0 + 2)
    for t in (5, 8, 11):  # late checks (3 s apart: at the bound, not beyond)
        v = d.observe(WALL0 + 1, t, WALL0 + t)
        assert not v.notes
    assert not v.stale and v.idle == 10
    v = d.observe(WALL0 + 1, 14, WALL0 + 14)
    assert v.stale and not v.notes


@pytest.mark.fault(84)
def test_time_the_watcher_spent_in_its_own_work_is_no_pause_and_silence_counts_through_it():
    d = dog(stale=4, interval=1)
    d.observe(WALL0 + 1, 2, WALL0 + 2)
    # Each check's writes waited 5 s on a ledger another program held: slow checks, not a pause.
    v = d.observe(WALL0 + 1, 8, WALL0 + 8, own=5.0)
    assert not v.notes and v.stale and v.idle == 7
    # The same gap without that work is the watcher paused: the window restarts.
    d = dog(stale=4, interval=1)
    d.observe(WALL0 + 1, 2, WALL0 + 2)
    assert d.observe(WALL0 + 1, 8, WALL0 + 8).notes == ("the watcher itself was paused for 6s; staleness window "
                                                        "restarted",)


def test_a_pause_restarts_the_output_bound_too():
    d = dog(stale=10, interval=1)
    d.observe(WALL0 + 1, 2, WALL0 + 2)
    v = d.observe(None, 30, WALL0 + 30, output_grew=True)  # paused 28 s; the agent blocked on its pipe
    assert not v.stale and not v.output_ignored and d.last_beat == 30
    assert not checks(d, 31, 40, output_grew=True).stale


# --- a full disk: silence does not count while no heartbeat can be written -----------------

@pytest.mark.fault(32)
def test_silence_does_not_count_while_the_disk_is_full_and_counts_again_after():
    d = dog(stale=10, interval=1)
    d.observe(WALL0 + 1, 2, WALL0 + 2)
    assert not checks(d, 3, 500, WALL0 + 1, hold=True).stale
    assert d.last_activity == 500
    v = checks(d, 501, 600, WALL0 + 1)  # room again: one window from the last full check
    assert v.stale and v.idle == 11
