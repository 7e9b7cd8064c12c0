"""Waits: planning a usage limit's, an outage's and a cooldown's, and sitting them out.

Real files in a real project's state folder; time is an injected clock, so a five-hour
wait takes no time and the countdown's decisions are exact.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from genesis import exitcodes
from genesis.agents.base import ApiError, Limit
from genesis.loop import breaker
from genesis.loop.step import Step
from genesis.loop.waiting import JITTER, backoff, known_limit, plan_cooldown, plan_limit, plan_outage, sit_out

RUN = "run-1"
NOW = 1_800_000_000.0


class FakeClock:
    """Wall and monotonic time that move only when the code under test sleeps."""

    def __init__(self, wall: float):
        self.t, self.start = wall, wall
        self.sleeps: list[float] = []

    def wall(self) -> float:
        return self.t

    def mono(self) -> float:
        return self.t - self.start

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def with_cfg(step: Step, **changes) -> Step:
    return Step(replace(step.cfg, **changes), step.layout, step.run_id, step.say)


def evs(step: Step, kind: str) -> list[dict]:
    return step.events(kinds=(kind,))


def test_backoff_doubles_to_its_cap_and_jitter_only_shortens():
    assert [backoff(n, 30, 900, rng=lambda: 0.0) for n in range(1, 8)] == [30, 60, 120, 240, 480, 900, 900]
    assert backoff(3, 30, 900, rng=lambda: 1.0) == pytest.approx(120 * (1 - JITTER))
    assert backoff(1, 30, 900, rng=lambda: 0.5) == pytest.approx(30 * (1 - JITTER / 2))


def test_a_limit_is_waited_to_its_reset_plus_the_margin_then_known(step):
    limit = Limit(NOW + 3600, "five_hour", "You've hit your 5-hour limit · resets 5:13am (UTC)")
    assert plan_limit(step, limit, "Builder", 2, NOW, rng=lambda: 0.0) == exitcodes.WAIT
    pending = json.loads(step.layout.wait_file.read_text())
    assert (pending["kind"], pending["until"], pending["phase"], pending["iteration"]) == \
        ("limit", NOW + 3600 + 60, "Builder", 2)
    # Until the reset (and its margin) has passed, the limit is known: no agent is started.
    assert known_limit(step, NOW + 3600 + 59).limit == limit
    assert known_limit(step, NOW + 3600 + 60) is None


def test_a_limit_beyond_the_longest_wait_stops_and_says_when_to_restart(step, said):
    limit = Limit(NOW + 3 * 86400, "seven_day", "You've hit your weekly limit · resets Nov 25, 11:24pm (UTC)")
    assert plan_limit(step, limit, "Builder", 1, NOW) == exitcodes.USAGE_LIMIT
    assert not step.layout.wait_file.exists()
    kind, message = said[-1]
    assert kind == "error" and "GENESIS_MAX_LIMIT_WAIT" in message and "Restart the loop after" in message
    assert evs(step, "limit_stop")[0]["resets_at"] == NOW + 3 * 86400


@pytest.mark.fault(73)
def test_a_reset_time_is_said_in_the_readers_zone_and_in_utc_only_where_that_zone_is_another(step, said, tz):
    """Where the local zone was UTC, the reset was said twice: "20:22 UTC (20:22 UTC)"."""
    limit = Limit(NOW + 3 * 86400, "seven_day", "You've hit your weekly limit · resets Jan 18, 8:00am (UTC)")
    tz("UTC")
    assert plan_limit(step, limit, "Builder", 1, NOW) == exitcodes.USAGE_LIMIT
    message = said[-1][1]
    assert "It resets at 2027-01-18 08:00 UTC, later than GENESIS_MAX_LIMIT_WAIT" in message, message
    assert "Restart the loop after 2027-01-18 08:00 UTC;" in message and "UTC (" not in message, message
    tz("JST-9")  # elsewhere, the local time and its zone, then UTC
    plan_limit(step, limit, "Builder", 1, NOW)
    assert "It resets at 2027-01-18 17:00 JST (2027-01-18 08:00 UTC), later than" in said[-1][1], said[-1][1]


def test_a_limit_weeks_away_ends_the_night_with_its_own_exit_and_the_date_whatever_the_longest_wait(step, said):
    # A monthly or credit-pool limit: no rolling window is longer than a week.
    step = with_cfg(step, max_limit_wait=60 * 86400.0)
    limit = Limit(NOW + 20 * 86400, "seven_day", "You've hit your weekly limit · resets Feb 4, 8:00am (UTC)")
    assert plan_limit(step, limit, "Builder", 1, NOW) == exitcodes.LIMIT_FAR
    assert not step.layout.wait_file.exists()
    kind, message = said[-1]
    assert kind == "error" and "a monthly or credit-pool limit, not a night's wait: stopping" in message
    assert "2027-02-04" in message and "Restart the loop after" in message
    stop = evs(step, "limit_stop")[0]
    assert (stop["resets_at"], stop["far"]) == (NOW + 20 * 86400, True)
    # Eight days away is still a limit of the longest wait's: a weekly one, waited or stopped as before.
    assert plan_limit(step, replace(limit, resets_at=NOW + 7 * 86400), "Builder", 1, NOW) == exitcodes.WAIT


def test_a_limit_with_no_reset_time_waits_an_hour(step):
    assert plan_limit(step, Limit(None, "", "You've hit your limit"), "Builder", 1, NOW,
                      rng=lambda: 0.0) == exitcodes.WAIT
    assert json.loads(step.layout.wait_file.read_text())["until"] == NOW + 3600 + 60


def phase_end(step: Step, ending: str, started: float) -> None:
    step.event("phase_end", iteration=1, phase="Builder", ending=ending, started=started)


def test_an_outage_backs_off_per_attempt_and_stops_after_its_maximum(step, said):
    err = ApiError(True, 529, "server_error", "API Error: 529 Overloaded")
    phase_end(step, "finished", NOW - 500)
    phase_end(step, "outage", NOW - 100)
    assert plan_outage(step, err, "Builder", 1, NOW, rng=lambda: 0.0) == exitcodes.WAIT
    assert json.loads(step.layout.wait_file.read_text())["until"] == NOW + 30
    phase_end(step, "outage", NOW + 40)
    assert plan_outage(step, err, "Builder", 1, NOW + 60, rng=lambda: 0.0) == exitcodes.WAIT
    pending = json.loads(step.layout.wait_file.read_text())
    assert (pending["attempt"], pending["until"]) == (2, NOW + 60 + 60)
    # The outage began with the first failing phase; past the maximum, the loop stops.
    assert plan_outage(step, err, "Builder", 1, NOW - 100 + 7200, rng=lambda: 0.0) == exitcodes.API_OUTAGE
    assert "GENESIS_MAX_OUTAGE_MINUTES" in said[-1][1]


def test_sitting_out_a_wait_counts_down_records_it_and_clears_it(step):
    plan_limit(step, Limit(NOW + 120, "five_hour", "limit"), "Builder", 3, NOW, rng=lambda: 0.0)
    clock = FakeClock(NOW)
    assert sit_out(step, lambda: False, clock, sleep=clock.sleep) == exitcodes.OK
    assert clock.t == NOW + 180 and max(clock.sleeps) <= 1.0
    start, end = evs(step, "wait_start")[0], evs(step, "wait_end")[0]
    assert (start["kind"], start["until"], start["phase"], start["iteration"]) == ("limit", NOW + 180, "Builder", 3)
    assert (end["how"], end["waited"]) == ("done", 180)
    assert not step.layout.wait_file.exists()
    assert sit_out(step, lambda: False, clock, sleep=clock.sleep) == exitcodes.OK  # nothing pending now
    assert len(evs(step, "wait_start")) == 1


def test_the_stop_flag_ends_a_wait_early(step):
    plan_limit(step, Limit(NOW + 3600, "five_hour", "limit"), "Builder", 1, NOW)
    clock = FakeClock(NOW)
    assert sit_out(step, lambda: clock.t >= NOW + 10, clock, sleep=clock.sleep) == exitcodes.OK
    assert clock.t == NOW + 10
    assert evs(step, "wait_end")[0]["how"] == "stopped"


def test_a_wait_past_the_runtime_ceiling_stops_at_once(step):
    plan_limit(step, Limit(NOW + 3600, "five_hour", "limit"), "Builder", 1, NOW)
    clock = FakeClock(NOW)
    assert sit_out(step, lambda: False, clock, ceiling=NOW + 1800, sleep=clock.sleep) == exitcodes.MAX_RUNTIME
    assert clock.sleeps == [] and not step.layout.wait_file.exists()


def test_another_runs_pending_wait_is_not_sat_out(step):
    plan_limit(step, Limit(NOW + 3600, "five_hour", "limit"), "Builder", 1, NOW)
    other = Step(step.cfg, step.layout, "run-2", step.say)
    clock = FakeClock(NOW)
    assert sit_out(other, lambda: False, clock, sleep=clock.sleep) == exitcodes.OK
    assert clock.sleeps == []


def test_a_cooldown_ends_in_a_trial_iteration(step):
    step = with_cfg(step, cb_cooldown=60.0, cb_max_trials=3)
    store = breaker.BreakerStore(step.layout.breaker_truth, lock_path=step.layout.breaker_lock)
    for n in range(1, 6):
        store.update(lambda s, n=n: breaker.record(s, n, False, NOW, 3, 5))
    assert plan_cooldown(step, 60.0, 5, NOW) == exitcodes.WAIT
    assert store.load()[0].retry_at is not None
    clock = FakeClock(NOW)
    assert sit_out(step, lambda: False, clock, sleep=clock.sleep) == exitcodes.OK
    state = store.load()[0]
    assert (state.state, state.trials) == (breaker.HALF_OPEN, 1)
    mirror = json.loads(step.layout.breaker_file.read_text())
    assert (mirror["state"], mirror["trials"]) == (breaker.HALF_OPEN, 1)


# A stop right behind the first can be delivered before the first one's handler drops the rest
# and handled after: CPython then prints "Signal 15 ignored due to race condition" and a
# traceback on the user's terminal, in the middle of the countdown's last line, if the rest are
# SIG_IGN. So they are dropped by a Python handler that does nothing, and a later one is quiet.
RACE = """
import os, signal, time
from {module} import {handler} as first, {error} as Stopped

for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, first)
try:
    signal.raise_signal(signal.SIGINT)
except Stopped as exc:
    print("stopped by", exc.signum)
print("dropped by a handler:", [callable(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)])
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.1)
print("still here")
"""


@pytest.mark.parametrize("module, handler, error", [("genesis.loop.waiting", "_raise", "_Stopped"),
                                                    ("genesis.watch.supervisor", "_raise_once", "Interrupted")])
def test_the_stop_signals_behind_the_first_are_dropped_by_a_quiet_handler_not_sig_ign(module, handler, error):
    done = subprocess.run([sys.executable, "-c", RACE.format(module=module, handler=handler, error=error)],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.splitlines() == ["stopped by 2", "dropped by a handler: [True, True]", "still here"]


def test_a_wait_is_extended_then_ended_by_the_requests_the_actions_leave(step):
    from genesis.actions import inbox

    plan_limit(step, Limit(NOW + 3600, "five_hour", "limit"), "Builder", 1, NOW, rng=lambda: 0.0)
    clock = FakeClock(NOW)
    folder = step.layout.state_dir / inbox.FOLDER

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.t == NOW + 5:
            inbox.submit(folder, inbox.Request("wait-extend", clock.t, "dashboard", seconds=600))
        if clock.t == NOW + 20:
            inbox.submit(folder, inbox.Request("wait-end", clock.t, "alert"))

    assert sit_out(step, lambda: False, clock, sleep=sleep) == exitcodes.OK
    assert clock.t == NOW + 20                             # ended at the first tick after the request
    assert evs(step, "wait_end")[0]["how"] == "done"       # the phase runs again, as after a wait sat out
    assert not step.layout.wait_file.exists() and not list(folder.iterdir())


def test_an_extension_moves_the_waits_end(step):
    from genesis.actions import inbox

    plan_limit(step, Limit(NOW + 100, "five_hour", "limit"), "Builder", 1, NOW, rng=lambda: 0.0)
    until = json.loads(step.layout.wait_file.read_text())["until"]
    inbox.submit(step.layout.state_dir / inbox.FOLDER, inbox.Request("wait-extend", NOW, "terminal", seconds=900))
    clock = FakeClock(NOW)
    assert sit_out(step, lambda: False, clock, sleep=clock.sleep) == exitcodes.OK
    assert clock.t == until + 900
