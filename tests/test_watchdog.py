"""Staleness on an injected clock: no sleeping, every edge of the window."""

import pytest

from genesis.watchdog import Watchdog

WALL0 = 1_800_000_000.0


def dog(stale=900.0, interval=60.0):
    return Watchdog(stale_after=stale, interval=interval, started_mono=0.0, started_wall=WALL0)


def test_no_heartbeat_counts_from_the_agent_start_not_healthy_forever():
    d = dog()
    assert not d.observe(None, 60, WALL0 + 60).stale
    assert not d.observe(None, 900, WALL0 + 900).stale
    v = d.observe(None, 960, WALL0 + 960)
    assert v.stale and v.idle == 960


def test_fresh_heartbeats_keep_it_alive_and_their_age_is_back_dated():
    d = dog()
    for t in range(60, 3000, 60):
        # each poll sees a heartbeat written 10 s before it
        assert not d.observe(WALL0 + t - 10, t, WALL0 + t).stale
    assert d.last_activity == 2940 - 10


def test_stale_exactly_one_window_after_the_last_heartbeat():
    d = dog()
    d.observe(WALL0 + 100, 120, WALL0 + 120)   # heartbeat at t=100
    assert d.last_activity == 100
    assert not d.observe(WALL0 + 100, 1000, WALL0 + 1000).stale  # idle 900: not yet
    v = d.observe(WALL0 + 100, 1060, WALL0 + 1060)
    assert v.stale and v.idle == 960


def test_a_heartbeat_from_before_the_start_counts_as_the_start():
    d = dog()
    v = d.observe(WALL0 - 5000, 60, WALL0 + 60)
    assert d.last_activity == 0 and not v.stale
    assert d.observe(WALL0 - 5000, 960, WALL0 + 960).stale


@pytest.mark.fault(4)
def test_a_future_timestamp_is_counted_as_now_with_a_warning_never_fresh_forever():
    d = dog()
    v = d.observe(WALL0 + 99_999, 60, WALL0 + 60)
    assert d.last_activity == 60
    assert any("in the future" in n for n in v.notes)
    # the same future heartbeat seen again is not new activity
    assert d.observe(WALL0 + 99_999, 961, WALL0 + 961).stale


@pytest.mark.fault(5)
def test_a_suspend_restarts_the_window_instead_of_killing_at_wake():
    d = dog()
    d.observe(WALL0 + 50, 60, WALL0 + 60)
    # the machine sleeps for 5 hours: the monotonic clock moved 60 s, the wall clock 5 h
    v = d.observe(WALL0 + 50, 120, WALL0 + 120 + 5 * 3600)
    assert not v.stale and v.idle == 0
    assert any("suspend or clock jump" in n for n in v.notes)
    # one fresh window after waking, then stale as usual
    assert not d.observe(WALL0 + 50, 1020, WALL0 + 1020 + 5 * 3600).stale
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
    assert d.observe(None, 40, WALL0 + 40).stale
