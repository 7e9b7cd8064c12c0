"""The ladder of a task (seed 000, section 3.3), as a pure decision.

A child that ends abnormally is restarted with the same settings up to max_task_restarts
times, with a doubling backoff; then escalated to the next strategy (another agent
command, the fallback agent, longer windows), its restarts counted again from 0, up to
max_failed_tasks escalations while a strategy is left; then the task fails permanently.

The decision is a function of the task's retry history, read from the fleet ledger: a
monitor started again continues the ladder where it was. Only attempts that ended
"failed" climb it: a usage limit, an outage or a stop never spends a restart. An attempt that
ended with POLICY_REFUSED (the model's safeguards refused the task's request, which the same
agent would be refused again) spends no restart either: it goes straight to the next strategy
whose agent command differs from the refused one (its restarts would be refused alike).

Workflow code: the fleet on Temporal runs this module inside its workflows
(`temporal/workflows.py`), replayed from their histories. A change to what it decides is a
change to those workflows: from the first release on, it follows their patch cycle
(docs/maintainers/temporal.md), and `tests/temporal/test_replay.py` keeps passing.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from genesis import exitcodes
from genesis.config import Config
from genesis.durations import written
from genesis.fleet.ledger import TERMINAL, Attempt, TaskRow

__all__ = ["Strategy", "strategies", "child_settings", "Rung", "LadderPolicy", "policy_of", "next_rung",
           "backoff", "ACTIONS"]

LONGER_FACTOR = 2.0
BACKOFF_CAP = 300.0
# restart / escalate / fail climb the ladder; resume relaunches after an end that was no
# failure (limit, outage, stop); none: nothing to do (terminal, running, verified, config).
ACTIONS = ("restart", "escalate", "fail", "resume", "none")


@dataclass(frozen=True)
class Strategy:
    name: str                                # configured, fallback, longer, or the command as written
    agent_cmd: tuple[str, ...] | None        # None: the configured agent command
    window_factor: float                     # the stale and runtime windows are multiplied by this


def strategies(cfg: Config) -> tuple[Strategy, ...]:
    """Index 0: the configured agent; then GENESIS_FLEET_ESCALATION's entries in order
    (fallback left out while GENESIS_FALLBACK_AGENT_CMD is unset). Each is a real change: an
    entry that would run what an earlier one runs (the fallback set to the configured agent,
    a command written twice) is left out."""
    found = [Strategy("configured", None, 1.0)]
    for entry in cfg.fleet_escalation:
        if entry == "fallback":
            if cfg.fallback_agent_cmd:
                found.append(Strategy("fallback", tuple(cfg.fallback_agent_cmd), 1.0))
        elif entry == "longer":
            found.append(Strategy("longer", None, LONGER_FACTOR))
        else:
            found.append(Strategy(entry, tuple(shlex.split(entry)), 1.0))
    runs = [(tuple(s.agent_cmd or cfg.agent_cmd), s.window_factor) for s in found]
    return tuple(s for i, s in enumerate(found) if runs[i] not in runs[:i])


def child_settings(strategy: Strategy, cfg: Config) -> dict[str, str]:
    """The settings a child of this strategy gets on top of the fleet's (its --set values).
    When the fallback agent is one of the ladder's strategies, a child's own retry of a stuck
    phase runs its strategy's agent, not the fallback: escalating to the fallback is then a real
    change, not what the child already tried."""
    settings: dict[str, str] = {}
    if any(s.name == "fallback" for s in strategies(cfg)):
        settings["GENESIS_FALLBACK_AGENT_CMD"] = ""
    if strategy.agent_cmd is not None:
        settings["GENESIS_AGENT_CMD"] = shlex.join(strategy.agent_cmd)
    if strategy.window_factor != 1.0:
        settings["HEARTBEAT_STALE"] = written(cfg.stale_after * strategy.window_factor)
        settings["AGENT_MAX_RUNTIME"] = written(cfg.max_runtime * strategy.window_factor)
        if cfg.tool_silent > 0:
            settings["TOOL_SILENT"] = written(cfg.tool_silent * strategy.window_factor)
    return settings


@dataclass(frozen=True)
class LadderPolicy:
    max_task_restarts: int
    max_failed_tasks: int
    backoff_first: float
    strategies: int                          # how many strategies there are (index 0 included)
    backoff_cap: float = BACKOFF_CAP
    agents: tuple[str, ...] = ()             # each strategy's agent command (a refusal skips the same one);
                                             # (): unknown, a refusal goes to the next strategy


def refusal_target(current: int, policy: LadderPolicy) -> int | None:
    """The strategy a refused task escalates to: the next one whose agent differs from the
    current's (the next one when the agents are unknown); None: no strategy left."""
    for index in range(current + 1, policy.strategies):
        if len(policy.agents) != policy.strategies or policy.agents[index] != policy.agents[current]:
            return index
    return None


def policy_of(cfg: Config) -> LadderPolicy:
    found = strategies(cfg)
    return LadderPolicy(cfg.fleet_max_task_restarts, cfg.fleet_max_failed_tasks, cfg.fleet_restart_backoff,
                        len(found), agents=tuple(shlex.join(s.agent_cmd or cfg.agent_cmd) for s in found))


@dataclass(frozen=True)
class Rung:
    action: str          # one of ACTIONS
    strategy: int        # the strategy the next attempt runs with
    not_before: float    # the next attempt not before (epoch); inf for none
    reason: str
    restarts: int = 0    # the task's counters once the step is taken (for its row)
    escalations: int = 0


def backoff(n: int, policy: LadderPolicy) -> float:
    """The wait before restart n (1, 2, ...): min(cap, first * 2^(n-1))."""
    return min(policy.backoff_cap, policy.backoff_first * 2.0 ** min(max(n - 1, 0), 64))


def next_rung(row: TaskRow, history: list[Attempt], policy: LadderPolicy, now: float) -> Rung:
    """What to do with the task now that its last attempt has ended. history: its attempts
    (others' are ignored), in any order."""
    mine = sorted((a for a in history if a.task_id == row.id), key=lambda a: a.attempt)
    escalations = sum(1 for a in mine if a.kind == "escalate")
    if row.state in TERMINAL:
        return Rung("none", row.strategy, math.inf, f"the task is {row.state}: never retried", row.restarts,
                    row.escalations)
    last = mine[-1] if mine else None
    if last is None or last.outcome is None:
        return Rung("none", row.strategy, math.inf, "no attempt has ended", row.restarts, row.escalations)
    since = (last.ended if last.ended is not None else now)
    # Failures at the current strategy: since its first attempt (the last escalation).
    first = max((i for i, a in enumerate(mine) if a.kind == "escalate"), default=0)
    failures = sum(1 for a in mine[first:] if a.outcome == "failed")
    restarts = max(failures - 1, 0)  # the first attempt at a strategy is no restart
    if last.outcome != "failed":
        if last.outcome in ("limit", "outage", "stopped"):
            return Rung("resume", row.strategy, since, f"attempt {last.attempt} ended {last.outcome}: no failure, "
                        f"no restart spent", row.restarts, row.escalations)
        return Rung("none", row.strategy, math.inf, f"attempt {last.attempt} ended {last.outcome}", row.restarts,
                    row.escalations)
    ended = f"attempt {last.attempt} failed" + (f" (exit {last.exit_code})" if last.exit_code is not None else "")
    if last.exit_code == exitcodes.POLICY_REFUSED:  # no exit 37 existed before: older histories replay alike
        return _after_refusal(row, last, policy, escalations, restarts, since)
    if restarts < policy.max_task_restarts:
        n = restarts + 1
        return Rung("restart", row.strategy, since + backoff(n, policy),
                    f"{ended}: restart {n} of {policy.max_task_restarts} in {backoff(n, policy):g}s", n, escalations)
    if escalations < policy.max_failed_tasks and row.strategy + 1 < policy.strategies:
        return Rung("escalate", row.strategy + 1, since + backoff(1, policy),
                    f"{ended} after {restarts} restarts: escalation {escalations + 1} of {policy.max_failed_tasks} "
                    f"(strategy {row.strategy + 1})", 0, escalations + 1)
    why = (f"{policy.max_failed_tasks} escalations spent" if escalations >= policy.max_failed_tasks
           else "no strategy left to escalate to")
    return Rung("fail", row.strategy, since, f"{ended} after {restarts} restarts; {why}: failed permanently",
                restarts, escalations)


def _after_refusal(row: TaskRow, last: Attempt, policy: LadderPolicy, escalations: int, restarts: int,
                   since: float) -> Rung:
    """A policy refusal: the next strategy with another agent, at once; none left: failed for good."""
    ended = f"attempt {last.attempt} was refused by the model's safeguards (exit {last.exit_code})"
    target = refusal_target(row.strategy, policy)
    if target is not None and escalations < policy.max_failed_tasks:
        return Rung("escalate", target, since, f"{ended}: the same agent would be refused again; escalation "
                    f"{escalations + 1} of {policy.max_failed_tasks} (strategy {target}, another agent)", 0,
                    escalations + 1)
    why = (f"{policy.max_failed_tasks} escalations spent" if escalations >= policy.max_failed_tasks
           else "no strategy with another agent is left")
    return Rung("fail", row.strategy, since, f"{ended}; {why}: failed permanently (another model or CLI, or "
                f"rephrase the task)", restarts, escalations)
