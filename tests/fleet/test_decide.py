"""The fleet's rules as replays: scripted histories through decide(), no process, no clock, no sleep.

Each test scripts what a driver would observe (attempts ending, time passing, relaunches
asked), carries the fleet and the tasks' rows as a driver does, and checks the transitions,
alerts and holds that come out."""

from __future__ import annotations

import pytest

from genesis import exitcodes
from genesis.fleet import decide as d
from genesis.fleet import lifecycle
from genesis.fleet.cascade import CascadePolicy
from genesis.fleet.ladder import LadderPolicy
from genesis.fleet.ledger import Attempt, TaskRow
from genesis.fleet.lifecycle import Move, Task
from genesis.fleet.planning import outcome_of
from genesis.ledger.store import iso

T0 = 1_000_000.0
RULES = d.Rules(LadderPolicy(max_task_restarts=2, max_failed_tasks=1, backoff_first=10.0, strategies=2),
                CascadePolicy(percent=30, window=300, probe_after=60, probe_healthy=120), restart_every=5.0)


class Replay:
    """A minimal driver: the tasks' rows and attempts in memory, each effect applied as the
    monitor applies it (a row's state and fields, a failure, an alert)."""

    def __init__(self, tasks: int, rules: d.Rules = RULES):
        self.rules = rules
        self.fleet = d.Fleet.start(rules)
        self.rows = {f"t{n}": TaskRow(f"t{n}", f"task {n}", "queued", branch=f"genesis/task/t{n}")
                     for n in range(tasks)}
        self.attempts: dict[str, list[Attempt]] = {t: [] for t in self.rows}
        self.effects: list[d.Effect] = []
        self.states: list[tuple[str, str]] = []

    def apply(self, effects: list[d.Effect]) -> list[d.Effect]:
        self.effects += effects
        for effect in effects:
            if isinstance(effect, d.SetState):
                self.rows[effect.task_id] = TaskRow(**{**self.rows[effect.task_id].__dict__, **effect.fields,
                                                       "state": effect.state.value, "reason": effect.reason})
                self.states.append((effect.task_id, effect.state.value))
            elif isinstance(effect, d.Fail):
                row = self.rows[effect.task_id]
                self.rows[effect.task_id] = TaskRow(**{**row.__dict__, "state": lifecycle.step(row.state, Move.FAIL),
                                                       "reason": effect.reason})
                self.states.append((effect.task_id, "failed"))
        return effects

    def launch(self, task: str, at: float, kind: str = "start") -> None:
        row = self.rows[task]
        number = len(self.attempts[task]) + 1
        kind = "escalate" if row.state == "escalated" else kind
        self.attempts[task].append(Attempt(task, number, kind, row.reason, "agent", at, None, None, None, "",
                                           row.strategy))
        self.rows[task] = TaskRow(**{**row.__dict__, "state": lifecycle.step(row.state, Move.LAUNCH),
                                     "attempts": number})

    def running(self) -> int:
        return sum(1 for row in self.rows.values() if row.state == "running")

    def end(self, task: str, at: float, code: int | None, why: str = "", verified: bool = False,
            ran: int | None = None) -> list[d.Effect]:
        last = self.attempts[task][-1]
        verdict = outcome_of(code, verified, False, False, why)
        self.attempts[task][-1] = Attempt(**{**last.__dict__, "ended": at, "exit_code": code,
                                             "outcome": verdict.outcome})
        causes = tuple(e.verdict.reason for e in getattr(self, "_ends", {}).get(task, ()))
        event = d.ChildEnded(self.rows[task], tuple(self.attempts[task]), verdict, at, at,
                             ran if ran is not None else len(self.rows), causes=causes)
        self.__dict__.setdefault("_ends", {}).setdefault(task, []).append(event)
        self.fleet, effects = d.decide(self.fleet, event, self.rules)
        return self.apply(effects)

    def tick(self, now: float) -> list[d.Effect]:
        self.fleet, effects = d.decide(self.fleet, d.TimePassed(now, len(self.rows)), self.rules)
        return self.apply(effects)

    def relaunch(self, task: str, now: float) -> d.Effect:
        row = self.rows[task]
        kind = "escalate" if row.state == "escalated" else "restart"
        self.fleet, effects = d.decide(self.fleet, d.RelaunchDue(task, kind, now), self.rules)
        (effect,) = effects
        if isinstance(effect, d.Launch):
            self.launch(task, now, kind)
            self.fleet, _ = d.decide(self.fleet, d.Relaunched(task, now, effect.probe), self.rules)
        return effect

    def alerts(self) -> list[d.Alert]:
        return [e for e in self.effects if isinstance(e, d.Alert)]


# -- the ladder --------------------------------------------------------------------------------

def test_a_failing_task_restarts_twice_escalates_once_then_fails_with_its_cause_and_one_alert():
    fleet = Replay(1)
    at = T0
    fleet.launch("t0", at)
    seen = []
    for n in range(6):
        at += 100
        effects = fleet.end("t0", at, 1, "stuck: pytest hung for 15m" if n == 0 else "")
        row = fleet.rows["t0"]
        seen.append(row.state)
        if row.state == "failed":
            break
        assert row.not_before > at
        assert isinstance(fleet.relaunch("t0", row.not_before), d.Launch)
        at = row.not_before
    assert seen == ["restarting", "restarting", "escalated", "restarting", "restarting", "failed"]
    fail = next(e for e in effects if isinstance(e, d.Fail))
    # The cause, not the last attempt's bare exit.
    assert fail.reason.startswith("stuck: pytest hung for 15m; attempt 6 failed (exit 1) after 2 restarts")
    assert "failed permanently" in fail.reason
    (alert,) = fleet.alerts()
    assert alert.severity == "critical" and alert.cause == "task failed permanently: task 0"
    assert alert.what.startswith("stuck: pytest hung for 15m")


def test_an_end_that_is_no_failure_spends_no_rung():
    fleet = Replay(1)
    fleet.launch("t0", T0)
    for code, outcome in ((exitcodes.USAGE_LIMIT, "limit"), (exitcodes.API_OUTAGE, "outage")):
        effects = fleet.end("t0", T0 + 10, code)
        assert [(type(e), getattr(e, "state", None)) for e in effects] == [(d.SetState, Task.QUEUED)]
        assert fleet.rows["t0"].restarts == 0 and not fleet.fleet.failures
        fleet.launch("t0", T0 + 20, "resume")


def test_a_fleet_stopping_end_stops_every_launch_with_its_code():
    fleet = Replay(2)
    fleet.launch("t0", T0)
    effects = fleet.end("t0", T0 + 5, exitcodes.AGENT_FATAL, "the login was refused")
    assert d.StopLaunching(exitcodes.AGENT_FATAL, "the login was refused") in effects
    assert fleet.fleet.fatal == exitcodes.AGENT_FATAL
    assert fleet.relaunch("t1", T0 + 6) == d.Hold("t1", "", "")


def test_the_cause_is_the_newest_end_that_said_one():
    assert d.cause_of("exit 3", ["stuck: pytest hung", "exit 3"]) == "stuck: pytest hung"
    assert d.cause_of("vanished without a recorded end", ["exit 1"]) == "vanished without a recorded end"
    assert d.cause_of("the agent ran out of turns", ["stuck: pytest hung"]) == "the agent ran out of turns"


# -- the restart budget ------------------------------------------------------------------------

def test_the_restart_budget_holds_the_second_relaunch_within_its_period_across_tasks():
    fleet = Replay(3, d.Rules(RULES.ladder, CascadePolicy(percent=0, window=300), restart_every=60.0))
    for task in ("t0", "t1"):
        fleet.launch(task, T0)
        fleet.end(task, T0 + 1, 1)
    first = fleet.relaunch("t0", T0 + 20)
    second = fleet.relaunch("t1", T0 + 30)
    assert isinstance(first, d.Launch) and first.kind == "restart"
    assert isinstance(second, d.Hold) and second.kind == "budget_held"
    assert "the restart budget: next restart at" in second.reason
    assert isinstance(fleet.relaunch("t1", T0 + 80), d.Launch)


# -- the cascade -------------------------------------------------------------------------------

@pytest.mark.fault(98)
def test_ten_of_twenty_children_failing_at_once_pause_the_fleet_with_one_alert_then_a_probe_resumes_it():
    fleet = Replay(20)
    for n in range(20):
        fleet.launch(f"t{n}", T0)
    paused_at = [n + 1 for n in range(10) if any(isinstance(e, d.GateMoved) for e in fleet.end(
        f"t{n}", T0 + 100, 1, "killed by SIGKILL (the OOM killer?)"))]
    assert paused_at == [7]  # at the end that passes 30% of the 20 that ran (6 is exactly 30%)
    assert fleet.fleet.gate.state == "paused"
    moves = [e.step.action for e in fleet.effects if isinstance(e, d.GateMoved)]
    assert moves == ["pause"]
    assert [a.about for a in fleet.alerts()] == ["cascade"]
    # Paused: no relaunch, whatever the budget.
    assert fleet.relaunch("t0", T0 + 200) == d.Hold("t0", d.PAUSE_HOLD, "")
    # The probe after probe_after: one relaunch, counted as the probe.
    fleet.tick(T0 + 161)
    assert fleet.fleet.gate.state == "probing"
    probe = fleet.relaunch("t0", T0 + 201)
    assert isinstance(probe, d.Launch) and probe.probe
    assert fleet.fleet.gate.probe_task == "t0"
    assert isinstance(fleet.relaunch("t1", T0 + 210), d.Hold)      # one probe at a time
    # The cause was fixed: the probe's task is verified, the fleet comes back.
    fleet.end("t0", T0 + 250, 0, verified=True)
    assert fleet.fleet.gate.state == "open" and fleet.rows["t0"].state == "merging"
    assert isinstance(fleet.relaunch("t1", T0 + 260), d.Launch)


def test_a_failed_probe_pauses_again_with_a_doubled_wait_and_a_probe_that_runs_healthy_resumes():
    fleet = Replay(4)
    for n in range(4):
        fleet.launch(f"t{n}", T0)
    for n in range(3):
        fleet.end(f"t{n}", T0 + 10, 1)
    fleet.tick(T0 + 71)
    fleet.relaunch("t0", T0 + 80)
    fleet.end("t0", T0 + 90, 1)
    gate = fleet.fleet.gate
    assert gate.state == "paused" and gate.failed_probes == 1 and gate.probe_wait() == 120
    fleet.tick(T0 + 90 + 121)
    assert fleet.fleet.gate.state == "probing"
    fleet.relaunch("t1", T0 + 215)
    fleet.tick(T0 + 215 + 121)
    assert fleet.fleet.gate.state == "open"
    assert [e.step.action for e in fleet.effects if isinstance(e, d.GateMoved)] == \
        ["pause", "probe", "probe_failed", "probe", "resume"]


def test_decide_changes_nothing_it_was_given():
    fleet = Replay(3)
    for n in range(3):
        fleet.launch(f"t{n}", T0)
    before = fleet.fleet
    gate_state = before.gate.state
    fleet.end("t0", T0 + 1, 1)
    fleet.end("t1", T0 + 2, 1)
    assert before.gate.state == gate_state == "open" and before.failures == ()
    assert fleet.fleet.gate.state == "paused"


# -- the merge queue ---------------------------------------------------------------------------

@pytest.mark.parametrize("outcome, state, alerts", [("merged", "merged", 0), ("ready", "ready", 0),
                                                    ("held", "merging", 0), ("conflict", "needs-review", 1)])
def test_a_merges_result_is_the_tasks_next_state(outcome, state, alerts):
    row = TaskRow("t0", "task 0", "merging", branch="genesis/task/t0")
    _, effects = d.decide(d.Fleet.start(RULES), d.MergeEnded(row, outcome, "tests failed", "main"), RULES)
    assert effects[0].state == state
    found = [e for e in effects if isinstance(e, d.Alert)]
    assert len(found) == alerts
    if alerts:
        assert found[0] == d.review_alert("t0", "task 0", "tests failed", "genesis/task/t0", "main")


# -- agent deaths --------------------------------------------------------------------------------

def test_agents_killed_inside_running_children_pause_the_fleet_as_child_deaths_do():
    fleet = Replay(20)
    for n in range(20):
        fleet.launch(f"t{n}", T0)
    for n in range(10):   # the OOM killer takes ten agents; their loops live on and restart them
        fleet.fleet, effects = d.decide(fleet.fleet, d.Failure(T0 + 100 + n / 10, f"t{n}"), RULES)
        assert effects == []
    fleet.tick(T0 + 102)
    assert fleet.fleet.gate.state == "paused"
    assert [a.about for a in fleet.alerts()] == ["cascade"]
    assert all(row.state == "running" for row in fleet.rows.values())   # no rung spent: the children live
    # Long after the window, a death no longer counts.
    late = Replay(20)
    late.fleet, _ = d.decide(late.fleet, d.Failure(T0, "t0"), RULES)
    late.fleet, _ = d.decide(late.fleet, d.Failure(T0 + 1, "t1"), RULES)
    late.tick(T0 + 400)
    assert late.fleet.gate.state == "open" and late.fleet.failures == ()


def test_after_the_users_stop_nothing_is_relaunched():
    fleet = Replay(1)
    fleet.launch("t0", T0)
    fleet.end("t0", T0 + 1, 1)
    fleet.fleet, effects = d.decide(fleet.fleet, d.Stop(), RULES)
    assert effects == [] and fleet.fleet.stopping
    assert fleet.relaunch("t0", T0 + 100) == d.Hold("t0", "", "")


def test_an_agent_started_again_inside_its_child_spends_the_restart_budget_a_relaunch_then_waits_for():
    """Ten agents killed at once: their loops live on, and each starts an agent again only on the
    budget's go, one a period, the oldest death first; a relaunch in between waits its turn too.
    Neither the cascade's pause nor a stop holds them: the children never ended."""
    rules = d.Rules(RULES.ladder, RULES.cascade, restart_every=60.0)
    fleet = Replay(20, rules)
    for n in range(20):
        fleet.launch(f"t{n}", T0)
    for n in range(10):
        fleet.fleet, _ = d.decide(fleet.fleet, d.Failure(T0 + 100, f"t{n}"), rules)
    fleet.tick(T0 + 101)
    assert fleet.fleet.gate.state == "paused"

    def ask(task: str, now: float) -> d.Effect:
        fleet.fleet, effects = d.decide(fleet.fleet, d.AgentRestartDue(task, now), rules)
        (effect,) = effects
        return effect

    assert ask("t0", T0 + 102) == d.Launch("t0", "agent", False)          # paused, yet the budget allows one
    held = ask("t1", T0 + 103)
    assert held == d.Hold("t1", f"the restart budget: next restart at {iso(T0 + 162)}", "budget_held")
    # A child that ended meanwhile waits for the same budget, and for the pause besides.
    fleet.end("t19", T0 + 110, 1)
    fleet.tick(T0 + 161)
    assert fleet.fleet.gate.state == "probing"
    assert fleet.relaunch("t19", T0 + 161).kind == "budget_held"
    # One a period: t1 at the next, then the relaunch (the probe) has to wait for the one after.
    assert ask("t1", T0 + 162) == d.Launch("t1", "agent", False)
    assert fleet.relaunch("t19", T0 + 170).kind == "budget_held"
    assert ask("t2", T0 + 200).kind == "budget_held"
    probe = fleet.relaunch("t19", T0 + 222)
    assert isinstance(probe, d.Launch) and probe.probe
    fleet.fleet, _ = d.decide(fleet.fleet, d.Stop(), rules)
    assert ask("t2", T0 + 282) == d.Launch("t2", "agent", False)           # a stop holds no running child
    # Without a budget (0 s), every loop starts its agent again at once.
    free = d.Rules(RULES.ladder, RULES.cascade, restart_every=0.0)
    unbound = d.Fleet.start(free)
    for n in range(3):
        unbound, effects = d.decide(unbound, d.AgentRestartDue(f"t{n}", T0), free)
        assert effects == [d.Launch(f"t{n}", "agent", False)]
