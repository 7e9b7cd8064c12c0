"""The fleet's rules, written once: the fleet's state and an event in, its next state and effects out.

Nothing here starts a process, reads a file or a clock: a driver observes, calls decide(), and
turns the effects into what it has. Two drivers run it:

- the local monitor (fleet/monitor.py): effects become child processes, fleet ledger rows and
  events, console lines and alert tickets;
- the Temporal workflows (temporal/workflows.py): effects become signals, durable timers and
  home activities (the alert, the mark).

So one scripted history replays through both in milliseconds (tests/fleet/test_decide.py).

    event                                   effects
    ChildEnded (an attempt's end)       ->  SetState (lifecycle.step), Merge | Fail (+ Alert),
                                            StopLaunching (a fleet-stopping end), GateMoved (+ Alert)
    Failure (a child or agent died)     ->  counted toward the cascade
    ProbeEnded (the probe's task ended) ->  GateMoved (a resume, or a pause again)
    TimePassed (a check, a timer)       ->  GateMoved (a cascade pause, a probe, a resume)
    RelaunchDue (a rung's wait is over) ->  Launch | Hold (with its reason)
    Relaunched (the driver launched it) ->  the budget spent, the probe counted
    AgentRestartDue (a child's loop asks) -> Launch (the budget spent) | Hold (with its reason)
    MergeEnded (the merge queue)        ->  SetState, Alert (a task left for review)
    Stop (the user's stop)              ->  no launch from now on

Its leaves are the rules that were already pure: the ladder (ladder.next_rung), the cascade
gate (cascade.CascadeGate), the restart budget (budget.RestartBudget), what an end means
(planning.outcome_of); the task's states are fleet/lifecycle.py's.

What a driver may do that the other cannot is a named capability (CAPABILITIES), not a
difference found by reading both.

Workflow code: the Temporal workflows run this module inside their sandbox, replayed from
their histories: it decides, it issues no command of Temporal's itself.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Sequence, Union

from genesis.fleet import lifecycle
from genesis.fleet.budget import RestartBudget
from genesis.fleet.cascade import CascadeGate, CascadePolicy, GateStep
from genesis.fleet.ladder import LadderPolicy, Rung, next_rung
from genesis.fleet.ledger import Attempt, TaskRow
from genesis.fleet.lifecycle import Move, Task
from genesis.fleet.planning import Verdict
from genesis.ledger.store import iso

__all__ = ["Rules", "Fleet", "ChildEnded", "Failure", "ProbeEnded", "TimePassed", "RelaunchDue", "Relaunched",
           "AgentRestartDue", "MergeEnded", "Stop", "Event", "SetState", "Merge", "Fail", "Alert", "GateMoved",
           "StopLaunching", "Launch", "Hold", "Effect", "decide", "climb", "cause_of", "gate_effects", "merge_ended",
           "failed_alert", "review_alert", "cascade_alert", "CAPABILITIES", "PAUSE_HOLD"]

PAUSE_HOLD = "the cascade pause: no restart until a probe child succeeds"
# An end's reason that says no more than that it ended: a cause said earlier says more.
_BARE = ("exit ", "vanished without a recorded end", "ended without finishing its task")

# What one driver does that the other does not, by name (docs/maintainers/temporal.md says why).
CAPABILITIES = {
    "local": frozenset({
        "adopt",            # a restarted monitor takes over the children still running (no duplicate)
        "memory_floor",     # launches held below GENESIS_FLEET_MEMORY_FLOOR_MB (one machine's memory)
        "planner",          # the Planner runs once when nothing is open
        "fleet_file",       # several projects share one gate, budget, stagger and port slots
        "agent_deaths",     # agents killed inside running children are read from their ledgers (Failure),
                            # and their loops start an agent again only on the budget's go (AgentRestartDue)
    }),
    "temporal": frozenset({
        "placement",        # an attempt runs on any worker; pinned to its worktree's machine, moved when gone
        "infra_off_ladder",  # a machine's git failing before any agent ran waits and moves, no rung spent
        "pause_running",    # a cascade pauses the running task workflows too (signal), not only relaunches
        "account_hold",     # a usage limit holds every task of the account by one durable timer
        "asides_bounded",   # a loop that keeps stepping aside (its push refused) fails after ASIDES_MAX
    }),
}


@dataclass(frozen=True)
class Rules:
    """The fleet's settings the decisions read."""
    ladder: LadderPolicy
    cascade: CascadePolicy
    restart_every: float


@dataclass(frozen=True)
class Fleet:
    """What the decisions carry from one event to the next. The gate and the budget are the
    leaves' own records, never changed in place: decide() returns new ones."""
    gate: CascadeGate
    budget: RestartBudget
    failures: tuple[tuple[float, str], ...] = ()   # (when, who): children that ended abnormally
    stopping: bool = False
    fatal: int | None = None                       # a child's end that stops every launch: its code

    @classmethod
    def start(cls, rules: Rules) -> "Fleet":
        return cls(CascadeGate(rules.cascade), RestartBudget(rules.restart_every))


# -- events ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChildEnded:
    """A task's attempt ended; verdict: what its end means (planning.outcome_of)."""
    row: TaskRow
    history: tuple[Attempt, ...]   # the task's attempts since its fresh start, the ended one included
    verdict: Verdict
    at: float                      # when it ended
    now: float
    ran: int                       # children that ran within the cascade window (cascade.cascade)
    who: str = ""                  # the task as the gate counts it ("" : its id)
    causes: tuple[str, ...] = ()   # the reasons its earlier attempts ended with, oldest first


@dataclass(frozen=True)
class Failure:
    """A child, or an agent inside a running child, ended abnormally (the OOM killer takes
    agents, not only child loops): it counts toward the cascade, judged at the next TimePassed."""
    at: float
    who: str


@dataclass(frozen=True)
class ProbeEnded:
    """The task of the cascade's probe ended (a driver that hears of ends apart from failures)."""
    who: str
    verified: bool
    now: float


@dataclass(frozen=True)
class TimePassed:
    now: float
    ran: int


@dataclass(frozen=True)
class RelaunchDue:
    """A task whose rung decided a relaunch, past its backoff, asks to go."""
    task_id: str
    kind: str                      # restart | escalate
    now: float


@dataclass(frozen=True)
class Relaunched:
    task_id: str
    now: float
    probe: bool                    # it is the cascade's probe
    who: str = ""
    spends: bool = True            # it spent the restart budget (a task only paused, never failed, spends none)


@dataclass(frozen=True)
class AgentRestartDue:
    """A running child's loop, whose agent died (a Failure), asks to start an agent again: that is
    a restart as much as a relaunch is, so the restart budget allows it, or holds it. The go is
    the restart: it spends the budget at once (the loop starts its agent when told)."""
    task_id: str
    now: float


@dataclass(frozen=True)
class MergeEnded:
    row: TaskRow
    outcome: str                   # merged | ready | held | conflict | ... (merging.MergeResult.outcome)
    detail: str
    target: str


@dataclass(frozen=True)
class Stop:
    pass


Event = Union[ChildEnded, Failure, ProbeEnded, TimePassed, RelaunchDue, Relaunched, AgentRestartDue, MergeEnded,
              Stop]


# -- effects --------------------------------------------------------------------------------

@dataclass(frozen=True)
class SetState:
    task_id: str
    state: Task
    reason: str
    fields: dict = field(default_factory=dict)   # the row's other fields (not_before, strategy, ...)


@dataclass(frozen=True)
class Merge:
    task_id: str


@dataclass(frozen=True)
class Fail:
    """Failed for good: its `[!]` mark on the project branch, its row, its alert."""
    task_id: str
    reason: str


@dataclass(frozen=True)
class Alert:
    about: str                     # a task id, or "cascade"
    severity: str                  # critical | high
    cause: str
    what: str
    action: str


@dataclass(frozen=True)
class GateMoved:
    step: GateStep


@dataclass(frozen=True)
class StopLaunching:
    code: int
    reason: str


@dataclass(frozen=True)
class Launch:
    task_id: str
    kind: str                      # restart | escalate | agent (an agent started again inside its running child)
    probe: bool


@dataclass(frozen=True)
class Hold:
    task_id: str
    reason: str
    kind: str                      # the ledger event to record ("" : none)


Effect = Union[SetState, Merge, Fail, Alert, GateMoved, StopLaunching, Launch, Hold]


# -- the alert builder: the words of the fleet's alerts, for both drivers -------------------

def failed_alert(task_id: str, text: str, reason: str, branch: str, status_cmd: str, worktree: str = "") -> Alert:
    kept = f"Its branch {branch} and worktree {worktree} are kept" if worktree else f"Its branch {branch} is kept"
    return Alert(task_id, "critical", f"task failed permanently: {text[:80]}", f"{reason}. {kept}",
                 f"look at its branch and the attempts (`{status_cmd}`), fix, then reopen the task")


def review_alert(task_id: str, text: str, why: str, branch: str, target: str) -> Alert:
    return Alert(task_id, "high", f"task needs review: {text[:80]}", f"{why}. Its branch {branch} is kept as it was",
                 f"merge {branch} into {target} by hand, then tick the task")


def cascade_alert(reason: str, status_cmd: str) -> Alert:
    return Alert("cascade", "critical", "cascade: many children failed at once",
                 f"{reason}. No restart until one probe child succeeds",
                 f"look at the children's logs (`{status_cmd}`) for a shared cause")


# -- the decisions --------------------------------------------------------------------------

def cause_of(reason: str, earlier: Sequence[str] = ()) -> str:
    """What made a task fail, in words: its last end's reason, unless that says no more than an
    exit (`exit 3`): then the newest earlier end that said its cause (a hung `pytest`)."""
    for said in (reason, *reversed(tuple(earlier))):
        if said and not said.startswith(_BARE):
            return said
    return reason


def climb(row: TaskRow, history: Sequence[Attempt], policy: LadderPolicy, now: float, cause: str
          ) -> tuple[Rung, Effect | None]:
    """The ladder's rung for a failed attempt, as the task's next state (or its failure; None:
    nothing to do, the rung says why)."""
    rung = next_rung(row, list(history), policy, now)
    why = f"{cause}; {rung.reason}"
    if rung.action in ("restart", "resume"):
        return rung, SetState(row.id, lifecycle.step(Task.RUNNING, Move.RESTART), why,
                              {"not_before": rung.not_before, "strategy": rung.strategy, "restarts": rung.restarts})
    if rung.action == "escalate":
        return rung, SetState(row.id, lifecycle.step(Task.RUNNING, Move.ESCALATE), why,
                              {"not_before": rung.not_before, "strategy": rung.strategy,
                               "restarts": rung.restarts, "escalations": rung.escalations})
    if rung.action == "fail":
        return rung, Fail(row.id, why)
    return rung, None


def decide(fleet: Fleet, event: Event, rules: Rules, status_cmd: str = "genesis fleet status"
           ) -> tuple[Fleet, list[Effect]]:
    """The fleet after event, and what the driver does about it (in order)."""
    gate = copy.copy(fleet.gate)
    budget = copy.copy(fleet.budget)
    effects: list[Effect] = []
    if isinstance(event, Stop):
        return replace(fleet, stopping=True), effects
    if isinstance(event, ChildEnded):
        return _ended(fleet, gate, budget, event, rules, status_cmd)
    if isinstance(event, TimePassed):
        failures = tuple(f for f in fleet.failures if f[0] > event.now - rules.cascade.window)
        if gate.state != "open" or failures:
            _moved(gate.observe(event.now, failures, event.ran), effects, status_cmd)
        return replace(fleet, gate=gate, failures=failures), effects
    if isinstance(event, RelaunchDue):
        probe = gate.state == "probing" and gate.probe_task is None
        if fleet.stopping or fleet.fatal is not None:
            effects.append(Hold(event.task_id, "", ""))
        elif not gate.allows_restart and not probe:
            effects.append(Hold(event.task_id, PAUSE_HOLD, ""))
        elif not budget.may_restart(event.now):
            effects.append(_budget_hold(event.task_id, budget, event.now))
        else:
            effects.append(Launch(event.task_id, event.kind, probe))
        return fleet, effects
    if isinstance(event, AgentRestartDue):
        # Neither the cascade's pause nor a stop holds it: the child runs on, and a pause whose
        # probe is a relaunch must not hold the children that never ended.
        if not budget.may_restart(event.now):
            return fleet, [_budget_hold(event.task_id, budget, event.now)]
        budget.spend(event.now)
        return replace(fleet, budget=budget), [Launch(event.task_id, "agent", False)]
    if isinstance(event, Failure):
        return replace(fleet, failures=fleet.failures + ((event.at, event.who),)), effects
    if isinstance(event, ProbeEnded):
        if gate.state == "probing" and gate.probe_task == event.who:
            _moved(gate.probe_ended(event.verified, event.now), effects, status_cmd)
        return replace(fleet, gate=gate), effects
    if isinstance(event, Relaunched):
        if event.spends:
            budget.spend(event.now)
        if event.probe:
            gate.probe_started(event.who or event.task_id, event.now)
        return replace(fleet, gate=gate, budget=budget), effects
    if isinstance(event, MergeEnded):
        return fleet, merge_ended(event)
    raise TypeError(f"not a fleet event: {event!r}")


def _ended(fleet: Fleet, gate: CascadeGate, budget: RestartBudget, event: ChildEnded, rules: Rules,
           status_cmd: str) -> tuple[Fleet, list[Effect]]:
    verdict, row, who = event.verdict, event.row, event.who or event.row.id
    effects: list[Effect] = []
    fatal, failures = fleet.fatal, fleet.failures
    if verdict.fleet_code is not None and fatal is None:
        fatal = verdict.fleet_code
        effects.append(StopLaunching(verdict.fleet_code, verdict.reason))
    if verdict.outcome == "verified":
        effects += [SetState(row.id, lifecycle.step(Task.RUNNING, Move.END_VERIFIED), "queued for the merge queue"),
                    Merge(row.id)]
    elif verdict.outcome in ("limit", "outage", "stopped", "config"):
        effects.append(SetState(row.id, lifecycle.step(Task.RUNNING, Move.END_FREE), verdict.reason))
    else:
        failures = failures + ((event.at, who),)
        _rung, step = climb(row, event.history, rules.ladder, event.now, cause_of(verdict.reason, event.causes))
        effects += [step] if step is not None else []
        if isinstance(step, Fail):
            effects.append(failed_alert(row.id, row.text, step.reason, row.branch, status_cmd, row.worktree))
        _moved(gate.observe(event.now, failures, event.ran), effects, status_cmd)
    if gate.state == "probing" and gate.probe_task == who:
        _moved(gate.probe_ended(verdict.outcome == "verified", event.now), effects, status_cmd)
    return replace(fleet, gate=gate, budget=budget, failures=failures, fatal=fatal), effects


def merge_ended(event: MergeEnded) -> list[Effect]:
    """A merge's result as the task's next state (and the alert of a task left for review)."""
    row = event.row
    if event.outcome in ("merged", "ready"):
        move = Move.MERGED if event.outcome == "merged" else Move.READY
        return [SetState(row.id, lifecycle.step(row.state, move), event.detail)]
    if event.outcome == "held":
        return [SetState(row.id, lifecycle.step(row.state, Move.MERGE_HELD), f"merge held: {event.detail}")]
    why = event.detail or event.outcome
    return [SetState(row.id, lifecycle.step(row.state, Move.REVIEW), why),
            review_alert(row.id, row.text, why, row.branch, event.target)]


def gate_effects(step: GateStep, status_cmd: str) -> list[Effect]:
    """What a move of the cascade gate makes a driver do: record and say it; a pause is also
    the fleet's one critical alert."""
    if step.event is None:
        return []
    return [GateMoved(step)] + ([cascade_alert(step.reason, status_cmd)] if step.action == "pause" else [])


def _moved(step: GateStep, effects: list[Effect], status_cmd: str) -> None:
    effects += gate_effects(step, status_cmd)


def _budget_hold(task_id: str, budget: RestartBudget, now: float) -> Hold:
    return Hold(task_id, f"the restart budget: next restart at {_iso(budget.next_at(now))}", "budget_held")


def _iso(at: float) -> str:
    return iso(at) if math.isfinite(at) else "never"
