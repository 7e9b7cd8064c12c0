"""The ladder: scripted histories of a task, an injected clock, the real fleet ledger; no processes."""

from __future__ import annotations

import math

import pytest

from genesis import exitcodes
from genesis.config import ConfigError, resolve
from genesis.fleet.ladder import (LadderPolicy, Strategy, backoff, child_settings, next_rung, policy_of,
                                  strategies)
from genesis.fleet.ledger import Attempt, FleetLedger, TaskRow

TASK = "add-login-1a2b3c"
POLICY = LadderPolicy(max_task_restarts=3, max_failed_tasks=3, backoff_first=10, strategies=2)


class Monitor:
    """What the monitor does with a rung, in the fleet ledger (as E's monitor does)."""

    def __init__(self, led: FleetLedger, policy: LadderPolicy, agents: tuple[str, ...]):
        self.led, self.policy, self.agents = led, policy, agents
        self.now = 1000.0

    def launch(self, kind: str, reason: str) -> Attempt:
        row = self.led.task(TASK)
        self.now = max(self.now, row.not_before)
        self.led.set_state(TASK, "running", now=self.now)
        return self.led.begin_attempt(TASK, kind, reason, self.agents[row.strategy], f"run-{self.now:g}", self.now)

    def end(self, attempt: Attempt, exit_code: int, outcome: str, after: float = 30.0):
        self.now += after
        self.led.end_attempt(TASK, attempt.attempt, exit_code, outcome, self.now)
        rung = next_rung(self.led.task(TASK), self.led.attempts(TASK), self.policy, self.now)
        state = {"restart": "restarting", "escalate": "escalated", "fail": "failed", "resume": "waiting"}
        if rung.action in state:
            self.led.set_state(TASK, state[rung.action], rung.reason, now=self.now, strategy=rung.strategy,
                               restarts=rung.restarts, escalations=rung.escalations, not_before=rung.not_before)
        return rung


@pytest.fixture
def led(tmp_path):
    with FleetLedger.open(tmp_path / "fleet" / "ledger.sqlite3", clock=lambda: 1000.0) as opened:
        opened.upsert_task(TaskRow(TASK, "add login", "queued", created=1000.0))
        yield opened


def climb(monitor: Monitor, outcome_of=lambda n: ("failed", 1)) -> list:
    """Launch and end attempts until the ladder says fail; the rungs taken."""
    rungs, kind, reason = [], "start", "queued"
    for n in range(1, 40):
        attempt = monitor.launch(kind, reason)
        outcome, code = outcome_of(n)
        rung = monitor.end(attempt, code, outcome)
        rungs.append(rung)
        if rung.action == "fail":
            return rungs
        kind = {"restart": "restart", "escalate": "escalate", "resume": "resume"}[rung.action]
        reason = rung.reason
    raise AssertionError("the ladder never ended")


def test_an_always_failing_task_climbs_the_whole_ladder_each_step_in_its_history(led):
    # The configured agent, then the fallback agent: 3 restarts each, one escalation, then failure.
    monitor = Monitor(led, POLICY, ("claude -p", "codex exec"))
    rungs = climb(monitor)
    assert [r.action for r in rungs] == ["restart"] * 3 + ["escalate"] + ["restart"] * 3 + ["fail"]
    history = led.attempts(TASK)
    assert [(a.attempt, a.kind, a.agent, a.outcome) for a in history] == [
        (1, "start", "claude -p", "failed"), (2, "restart", "claude -p", "failed"),
        (3, "restart", "claude -p", "failed"), (4, "restart", "claude -p", "failed"),
        (5, "escalate", "codex exec", "failed"), (6, "restart", "codex exec", "failed"),
        (7, "restart", "codex exec", "failed"), (8, "restart", "codex exec", "failed")]
    assert [a.strategy for a in history] == [0] * 4 + [1] * 4
    # Restart n waited 10 * 2^(n-1) s after the attempt before it ended.
    assert [b.started - a.ended for a, b in zip(history, history[1:])] == [10, 20, 40, 10, 10, 20, 40]
    assert "restart 1 of 3" in history[1].reason and "escalation 1 of 3" in history[4].reason
    row = led.task(TASK)
    assert (row.state, row.strategy, row.escalations, row.restarts, row.attempts) == ("failed", 1, 1, 3, 8)
    assert "no strategy left" in row.reason and "failed permanently" in row.reason


def test_escalations_stop_at_max_failed_tasks_even_with_strategies_left(led):
    policy = LadderPolicy(max_task_restarts=1, max_failed_tasks=2, backoff_first=5, strategies=5)
    rungs = climb(Monitor(led, policy, ("a", "b", "c", "d", "e")))
    assert [r.action for r in rungs] == ["restart", "escalate", "restart", "escalate", "restart", "fail"]
    assert "2 escalations spent" in rungs[-1].reason
    assert [a.agent for a in led.attempts(TASK)] == ["a", "a", "b", "b", "c", "c"]


def test_no_restarts_and_no_escalations_fail_at_the_first_failure(led):
    policy = LadderPolicy(max_task_restarts=0, max_failed_tasks=0, backoff_first=5, strategies=3)
    assert [r.action for r in climb(Monitor(led, policy, ("a", "b", "c")))] == ["fail"]


def test_a_limit_an_outage_or_a_stop_never_spends_a_restart(led):
    ends = {2: ("limit", 20), 4: ("outage", 21), 5: ("stopped", 143)}
    monitor = Monitor(led, POLICY, ("claude -p", "codex exec"))
    rungs = climb(monitor, lambda n: ends.get(n, ("failed", 1)))
    actions = [r.action for r in rungs]
    # Three non-failures in between: three resumes, the same ladder otherwise.
    assert [a for a in actions if a != "resume"] == ["restart"] * 3 + ["escalate"] + ["restart"] * 3 + ["fail"]
    assert actions.count("resume") == 3
    history = led.attempts(TASK)
    assert sum(a.outcome == "failed" for a in history) == 8
    assert [a.kind for a in history[:6]] == ["start", "restart", "resume", "restart", "resume", "resume"]
    resumed = rungs[1]
    assert (resumed.action, resumed.strategy, resumed.not_before) == ("resume", 0, history[1].ended)
    assert "no restart spent" in resumed.reason


def test_a_restarted_monitor_continues_the_ladder_and_never_retries_a_terminal_task(tmp_path):
    path = tmp_path / "fleet" / "ledger.sqlite3"
    with FleetLedger.open(path) as led:
        led.upsert_task(TaskRow(TASK, "add login", "queued"))
        monitor = Monitor(led, POLICY, ("claude -p", "codex exec"))
        for kind in ("start", "restart", "restart"):
            monitor.end(monitor.launch(kind, ""), 1, "failed")
        before = next_rung(led.task(TASK), led.attempts(TASK), POLICY, monitor.now)
    assert (before.action, before.restarts) == ("restart", 3)
    with FleetLedger.open(path) as led:  # the monitor was killed and started again
        again = next_rung(led.task(TASK), led.attempts(TASK), POLICY, monitor.now + 3600)
        assert again == before  # the same step, the same time: from the history, not from memory
        monitor = Monitor(led, POLICY, ("claude -p", "codex exec"))
        monitor.now = before.not_before
        rung = monitor.end(monitor.launch("restart", again.reason), 1, "failed")
        assert (rung.action, rung.strategy) == ("escalate", 1)
        led.set_state(TASK, "failed", "failed permanently")
    with FleetLedger.open(path) as led:
        for state in ("failed", "merged", "ready", "needs-review"):
            led.set_state(TASK, state)
            rung = next_rung(led.task(TASK), led.attempts(TASK), POLICY, 10 ** 10)
            assert (rung.action, rung.not_before) == ("none", math.inf), state


def test_a_running_or_verified_task_is_not_on_the_ladder(led):
    row = led.task(TASK)
    assert next_rung(row, [], POLICY, 0).action == "none"
    led.begin_attempt(TASK, "start", "", "a", "r", 1.0)
    assert next_rung(led.task(TASK), led.attempts(TASK), POLICY, 2.0).action == "none"
    led.end_attempt(TASK, 1, 0, "verified", 3.0)
    assert next_rung(led.task(TASK), led.attempts(TASK), POLICY, 4.0).action == "none"
    other = Attempt("other-task", 1, "start", "", "a", 1.0, 2.0, 1, "failed", "r")
    assert next_rung(led.task(TASK), [other, *led.attempts(TASK)], POLICY, 4.0).action == "none"


REFUSED = exitcodes.POLICY_REFUSED


def test_a_policy_refusal_goes_at_once_to_the_next_strategy_with_another_agent(led):
    # configured, longer (the same agent: it would be refused alike), then another CLI.
    policy = LadderPolicy(3, 3, backoff_first=10, strategies=3, agents=("claude -p", "claude -p", "codex exec"))
    monitor = Monitor(led, policy, policy.agents)
    rung = monitor.end(monitor.launch("start", "queued"), REFUSED, "failed")
    assert (rung.action, rung.strategy, rung.restarts, rung.escalations) == ("escalate", 2, 0, 1)
    assert rung.not_before == monitor.now  # no backoff: the same request is not asked again
    assert "refused by the model's safeguards (exit 37)" in rung.reason and "another agent" in rung.reason
    attempt = monitor.launch("escalate", rung.reason)
    assert attempt.agent == "codex exec"
    # The other agent fails as any attempt does: restarts first, as the ladder says.
    assert monitor.end(attempt, 1, "failed").action == "restart"


def test_a_policy_refusal_with_no_other_agent_left_fails_the_task_for_good(led):
    policy = LadderPolicy(3, 3, backoff_first=10, strategies=2, agents=("claude -p", "claude -p"))
    monitor = Monitor(led, policy, policy.agents)
    rung = monitor.end(monitor.launch("start", "queued"), REFUSED, "failed")
    assert (rung.action, rung.restarts) == ("fail", 0)
    assert "no strategy with another agent is left" in rung.reason and "rephrase the task" in rung.reason
    assert led.task(TASK).state == "failed"


def test_a_policy_refusal_of_the_last_agent_or_past_the_escalations_fails_the_task(led):
    policy = LadderPolicy(3, 1, backoff_first=10, strategies=3, agents=("a", "b", "c"))
    monitor = Monitor(led, policy, policy.agents)
    assert monitor.end(monitor.launch("start", ""), REFUSED, "failed").strategy == 1
    rung = monitor.end(monitor.launch("escalate", ""), REFUSED, "failed")
    assert rung.action == "fail" and "1 escalations spent" in rung.reason


def test_a_policy_refusal_with_the_agents_unknown_goes_to_the_next_strategy(led):
    # The fleet on Temporal builds its policy from the ladder's spec, without the agents.
    monitor = Monitor(led, POLICY, ("claude -p", "codex exec"))
    rung = monitor.end(monitor.launch("start", ""), REFUSED, "failed")
    assert (rung.action, rung.strategy) == ("escalate", 1)


def test_the_backoff_doubles_up_to_its_cap():
    policy = LadderPolicy(3, 3, backoff_first=100, strategies=1)
    assert [backoff(n, policy) for n in (1, 2, 3, 4)] == [100, 200, 300, 300]
    assert backoff(10 ** 6, policy) == 300


def test_the_strategies_come_from_the_agent_the_fallback_and_the_escalation_list(project):
    cfg = resolve(project, env={})
    assert strategies(cfg) == (Strategy("configured", None, 1.0), Strategy("longer", None, 2.0))  # no fallback set
    cfg = resolve(project, env={"GENESIS_FALLBACK_AGENT_CMD": "codex exec --full-auto",
                                "GENESIS_FLEET_ESCALATION": "fallback | longer|gemini -m 'pro 2' -y"})
    assert [(s.name, s.agent_cmd, s.window_factor) for s in strategies(cfg)] == [
        ("configured", None, 1.0), ("fallback", ("codex", "exec", "--full-auto"), 1.0), ("longer", None, 2.0),
        ("gemini -m 'pro 2' -y", ("gemini", "-m", "pro 2", "-y"), 1.0)]
    assert policy_of(cfg) == LadderPolicy(3, 3, 10.0, 4, agents=(
        "claude -p --dangerously-skip-permissions", "codex exec --full-auto",
        "claude -p --dangerously-skip-permissions", "gemini -m 'pro 2' -y"))
    # The fallback is a strategy of its own: no child's own retry runs it before the ladder does.
    alone = {"GENESIS_FALLBACK_AGENT_CMD": ""}
    longer = child_settings(strategies(cfg)[2], cfg)
    assert longer == {**alone, "HEARTBEAT_STALE": "30m", "AGENT_MAX_RUNTIME": "90m", "TOOL_SILENT": "10m"}
    assert child_settings(strategies(cfg)[3], cfg) == {**alone, "GENESIS_AGENT_CMD": "gemini -m 'pro 2' -y"}
    assert child_settings(strategies(cfg)[0], cfg) == alone
    assert child_settings(strategies(cfg)[1], cfg) == {**alone, "GENESIS_AGENT_CMD": "codex exec --full-auto"}
    # Each strategy is a real change: one that runs what an earlier one runs is left out.
    cfg = resolve(project, env={"GENESIS_AGENT_CMD": "claude -p", "GENESIS_FALLBACK_AGENT_CMD": "claude -p",
                                "GENESIS_FLEET_ESCALATION": "fallback|longer|claude -p|codex exec|codex exec"})
    assert [s.name for s in strategies(cfg)] == ["configured", "longer", "codex exec"]
    assert policy_of(cfg).strategies == 3
    # With no fallback strategy, a child's retry keeps the fallback agent the user set.
    cfg = resolve(project, env={"GENESIS_FALLBACK_AGENT_CMD": "codex exec --full-auto",
                                "GENESIS_FLEET_ESCALATION": "longer"})
    assert child_settings(strategies(cfg)[0], cfg) == {}


@pytest.mark.parametrize("key, value, said", [
    ("GENESIS_FLEET_ESCALATION", "fallback|'unclosed", "check its quotes"),
    ("GENESIS_FLEET_ESCALATION", "fallback|''", "no agent command"),
    ("GENESIS_FLEET_MAX_TASK_RESTARTS", "21", "at most 20"),
    ("GENESIS_FLEET_MAX_FAILED_TASKS", "-1", "at least 0"),
    ("GENESIS_FLEET_RESTART_BACKOFF_SECONDS", "soon", "is not a duration: write 90s, 15m or 2h"),
    ("GENESIS_FLEET_CASCADE_PERCENT", "130", "percentage from 0 to 100"),
    ("GENESIS_FLEET_CASCADE_WINDOW_SECONDS", "0", "at least 1"),
])
def test_a_wrong_fleet_setting_is_refused_with_what_it_accepts(project, key, value, said):
    with pytest.raises(ConfigError, match=said) as caught:
        resolve(project, env={key: value})
    assert key in str(caught.value)
