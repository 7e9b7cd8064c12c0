"""Cascades: scripted failure times, an injected clock; no processes, no sleeps."""

from __future__ import annotations

import pytest

from genesis.config import resolve
from genesis.fleet.cascade import CascadeGate, CascadePolicy, cascade, failed_within, policy_of
from genesis.fleet.ledger import FleetEvent

POLICY = CascadePolicy(percent=30, window=300)
NOW = 10_000.0


def test_more_than_30_percent_is_a_cascade_exactly_30_is_not():
    assert not cascade([NOW - 5, NOW - 4, NOW - 3], 10, NOW, POLICY)           # 3 of 10: exactly 30%
    assert cascade([NOW - 5, NOW - 4, NOW - 3, NOW - 2], 10, NOW, POLICY)      # 4 of 10
    assert not cascade([NOW - 1] * 6, 20, NOW, POLICY)                         # 6 of 20: 30%
    assert cascade([NOW - 1] * 7, 20, NOW, POLICY)                             # 7 of 20: 35%


def test_only_failures_within_the_window_count():
    old = [NOW - 301, NOW - 300, NOW - 400]  # the window is (now - 300, now]
    assert failed_within(old + [NOW - 299, NOW], NOW, 300) == 2
    assert not cascade(old + [NOW - 10], 4, NOW, POLICY)
    assert cascade(old + [NOW - 10, NOW - 299], 4, NOW, POLICY)
    assert not cascade([NOW + 5, NOW + 6], 2, NOW, POLICY)  # not yet (a clock read before the failures)


def test_one_child_is_no_cascade_nor_one_task_failing_again_and_again():
    assert not cascade([NOW - 1], 1, NOW, POLICY)                                   # 100% of one child
    again = [(NOW - 250, "a"), (NOW - 200, "a"), (NOW - 120, "a"), (NOW - 40, "a")]
    assert failed_within(again, NOW, 300) == 1
    assert not cascade(again, 3, NOW, POLICY)
    assert cascade(again + [(NOW - 1, "b")], 3, NOW, POLICY)                      # two of three children
    assert cascade([NOW - 1, NOW - 2], 0, NOW, POLICY)  # a failed child ran: never fewer than the failures


def test_a_percent_of_0_turns_it_off():
    assert not cascade([NOW - 1] * 50, 50, NOW, CascadePolicy(percent=0, window=300))


def test_twenty_children_ten_killed_at_once_pause_within_one_check_with_one_alert():
    gate = CascadeGate(POLICY)
    failures: list = []
    steps = [gate.observe(NOW - 2, failures, 20)]
    failures += [(NOW - 1.5, f"task-{n}") for n in range(10)]  # killed between two checks, 2 s apart
    steps.append(gate.observe(NOW, failures, 20))
    for t in range(1, 30):  # the checks after it, while paused
        steps.append(gate.observe(NOW + 2 * t, failures, 10))
    assert [s.action for s in steps].count("pause") == 1 and steps[1].action == "pause"
    assert steps[1].event == "cascade_pause" and steps[0].event is None
    assert "10 of 20 children failed" in steps[1].reason
    assert not gate.allows_restart and gate.state == "paused"


def test_the_probe_fails_the_fleet_stays_paused_then_a_healthy_probe_resumes_it():
    gate = CascadeGate(POLICY)
    failures = [(NOW - 1, "a"), (NOW - 1, "b"), (NOW - 1, "c")]
    assert gate.observe(NOW, failures, 5).action == "pause"
    assert gate.observe(NOW + 59, failures, 2).action == "none"               # probe_after is 60 s
    step = gate.observe(NOW + 60, failures, 2)
    assert (step.action, step.state, gate.allows_restart) == ("probe", "probing", False)
    gate.probe_started("a", NOW + 61)
    failures.append((NOW + 90, "a"))                                          # the probe ends abnormally
    step = gate.observe(NOW + 92, failures, 2)
    assert (step.action, step.state, step.event) == ("probe_failed", "paused", "cascade_probe_failed")
    assert "stay paused" in step.reason and "120s" in step.reason            # the next probe waits twice as long
    assert gate.observe(NOW + 92 + 119, failures, 2).action == "none"
    assert gate.observe(NOW + 92 + 120, failures, 2).action == "probe"
    gate.probe_started("b", NOW + 213)
    assert gate.observe(NOW + 213 + 119, failures, 3).action == "none"
    step = gate.observe(NOW + 213 + 120, failures, 3)                         # ran 120 s without failing
    assert (step.action, step.state, gate.allows_restart) == ("resume", "open", True)
    # The failures before the resume are spent: they never pause the fleet again.
    assert gate.observe(NOW + 340, failures, 3).action == "none"
    later = failures + [(NOW + 350, "d"), (NOW + 351, "e")]
    assert gate.observe(NOW + 352, later, 5).action == "pause"


def test_no_probe_launched_no_resume_however_long_the_gate_probes():
    gate = CascadeGate(POLICY)
    failures = [(NOW - 1, "a"), (NOW - 1, "b"), (NOW - 1, "c")]
    assert gate.observe(NOW, failures, 5).action == "pause"
    assert gate.observe(NOW + 60, failures, 2).action == "probe"
    # No probe could start (a usage limit, the memory floor, every task's wait ahead): nothing proved.
    for t in (NOW + 180, NOW + 181, NOW + 3600):
        step = gate.observe(t, failures, 2)
        assert (step.action, step.state, gate.allows_restart) == ("none", "probing", False)
    gate.probe_started("a", NOW + 4000)  # the healthy time counts from the probe's launch
    assert gate.observe(NOW + 4000 + 119, failures, 2).action == "none"
    assert gate.observe(NOW + 4000 + 120, failures, 2).action == "resume"


def test_a_verified_probe_resumes_at_once_and_a_failed_one_said_by_the_monitor_pauses():
    gate = CascadeGate(POLICY, state="probing", since=NOW)
    assert gate.probe_ended(True, NOW + 5).action == "resume"
    gate = CascadeGate(POLICY, state="probing", since=NOW, probe_task="x")
    assert gate.probe_ended(False, NOW + 5).action == "probe_failed" and gate.failed_probes == 1
    assert gate.probe_ended(True, NOW + 6).action == "none"                    # not probing: nothing to end


def test_a_restarted_monitor_rebuilds_the_gate_from_the_ledgers_events():
    def event(seq, kind, task=None):
        return FleetEvent(NOW + seq, kind, task, {}, seq)

    gate = CascadeGate.from_events(POLICY, [event(1, "launch", "a"), event(2, "cascade_pause")])
    assert (gate.state, gate.since) == ("paused", NOW + 2)
    gate = CascadeGate.from_events(POLICY, [event(3, "cascade_probe", "b"), event(2, "cascade_pause")])
    assert (gate.state, gate.probe_task) == ("probing", "b")
    gate = CascadeGate.from_events(POLICY, [event(2, "cascade_pause"), event(3, "cascade_probe", "b"),
                                            event(4, "cascade_probe_failed")])
    assert (gate.state, gate.failed_probes, gate.next_probe_at()) == ("paused", 1, NOW + 4 + 120)
    gate = CascadeGate.from_events(POLICY, [event(2, "cascade_pause"), event(3, "cascade_probe", "b"),
                                            event(5, "cascade_resume")])
    assert (gate.state, gate.counted_from, gate.allows_restart) == ("open", NOW + 5, True)


def test_the_policy_comes_from_the_knobs(project):
    assert policy_of(resolve(project, env={})) == POLICY
    cfg = resolve(project, env={"GENESIS_FLEET_CASCADE_PERCENT": "50", "GENESIS_FLEET_CASCADE_WINDOW_SECONDS": "60"})
    assert (policy_of(cfg).percent, policy_of(cfg).window) == (50, 60)
    with pytest.raises(ValueError):
        CascadeGate(POLICY, state="half-open")
