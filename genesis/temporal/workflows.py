"""The fleet's decisions as Temporal workflows: deterministic code, no I/O of its own.

- FleetWorkflow, one per fleet: reads the queue (an activity at home), runs a TaskWorkflow per
  open task (at most `parallel` at once), brings each verified branch home through the merge
  queue (one merge at a time, once per task), marks a failed task, and ends with the local
  fleet's exit code (fleet/planning.fleet_exit).
- TaskWorkflow, one per task: its attempts (each one child loop, the `run_attempt` activity),
  where they run (pinned to the machine holding its worktree, moved to any machine when that
  one is gone), and the ladder (fleet/ladder.next_rung over its own attempts).
- AccountWorkflow, one per agent subscription: a usage limit met anywhere holds every task
  on that account by ONE durable timer to its reset.

Genesis's pure modules are imported passed through the sandbox: re-importing them per run
would be slow, and some of what they import reads files at import time. Not released yet:
the code has one path, and tests/temporal/histories/ are recorded from it (tests/temporal/
record_histories.sh). From the first release on, a change that adds, removes or reorders a
command follows Temporal's patch cycle (`workflow.patched()`, then `workflow.deprecate_patch()`,
then removal): fleets running across an upgrade replay their history against it, and the
replay test (tests/temporal/test_replay.py) is the guard (docs/maintainers/temporal.md).

The fleet's rules are the local monitor's, written once in fleet/decide.py (the ladder, the
cascade gate, the restart budget, the alerts' words; fleet/lifecycle.py's states): these
workflows are its Temporal driver, turning its effects into signals, durable timers and home
activities. What only this driver does is named in decide.CAPABILITIES["temporal"].
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, replace
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (ActivityError, ApplicationError, CancelledError, ChildWorkflowError,
                                   TimeoutError, TimeoutType)

with workflow.unsafe.imports_passed_through():
    from genesis import exitcodes
    from genesis.fleet import cascade, decide, ladder
    from genesis.fleet.budget import RestartBudget
    from genesis.fleet.ledger import Attempt, TaskRow
    from genesis.fleet.lifecycle import Task
    from genesis.fleet.planning import CEILINGS, fleet_exit
    from genesis.temporal.records import (AGENT_FAILED, FLEET_STOPPING, HELD, INFRA, PAUSED, PERMANENT,
                                          USAGE_LIMIT, AlertInput, AttemptInput, AttemptResult, FleetSpec, MarkInput,
                                          MergeInput, MergeOutcome, TaskFailed, TaskInput, TaskOutcome, TaskSpec,
                                          task_memo_key,
                                          any_queue, fleet_queue, host_queue, task_workflow_id)

__all__ = ["FleetWorkflow", "TaskWorkflow", "AccountWorkflow", "WORKFLOWS", "MEMO_KEY"]

MEMO_KEY = "genesis"
RETRY_FIRST = timedelta(seconds=1)    # a lost worker's attempt is tried again this soon
OUTAGE_WAIT = 60.0                    # seconds before an attempt that met an API outage resumes
LIMIT_FALLBACK = 300.0                # seconds held when a limit's reset time is unknown
HOME_TRIES = 20                       # tries of a home activity (merge, mark) before it gives up
HISTORY_BOUND = 10_000               # events: the account workflow continues as new past it (the cap is 51,200)
ASIDES_MAX = 10                       # attempts in a row whose loop stepped aside before the task needs a person
# An attempt whose loop stepped aside (its push refused) ends STEPPED_ASIDE. MONITOR_LOST is
# taken the same way: histories recorded before STEPPED_ASIDE existed hold it for a step
# aside, and replay must take the branch they took; a worker's child whose monitor is gone
# has stopped for another machine's loop just the same.
ASIDE_CODES = frozenset({exitcodes.STEPPED_ASIDE, exitcodes.MONITOR_LOST})
QUEUE_PERIOD = 60.0                   # seconds between two reads of the queue while tasks run (history size)
MOVES_KEPT = 50                       # the cascade gate's last moves in the fleet's memo
SPINS = 20                            # turns of the gate in a row without a wait (one relaunch each)
ALERT_TRIES = 2                       # an alert is best effort: never worth holding the fleet
PAUSE_REASON = "the cascade pause: no new attempt until a probe task succeeds"
INFRA_MOST = 300.0                    # seconds: at most this between two tries
INFRA_MAX = 15                        # such failures in a row (about an hour of them) before the task needs a person


@workflow.defn
class AccountWorkflow:
    """Every task on one agent subscription subscribes; a limit met by any of them holds all of
    them until its reset by one durable `workflow.sleep` (no agent request in between, never a
    failed attempt). Activities also query it just before starting an agent: signals arrive late.
    It lives across nights: it continues as new, carrying its subscribers, the limit's end and
    its count, when Temporal suggests it or its history passes HISTORY_BOUND events."""

    def __init__(self) -> None:
        self.subscribers: list[str] = []
        self.until = 0.0
        self.limits = 0
        self.bound = HISTORY_BOUND

    @workflow.signal
    def subscribe(self, workflow_id: str) -> None:
        if workflow_id not in self.subscribers:
            self.subscribers.append(workflow_id)

    @workflow.signal
    def unsubscribe(self, workflow_id: str) -> None:
        if workflow_id in self.subscribers:
            self.subscribers.remove(workflow_id)

    @workflow.signal
    def limit_met(self, until: float) -> None:
        self.until = max(self.until, until)

    @workflow.query
    def state(self) -> dict:
        return {"until": self.until, "subscribers": list(self.subscribers), "limits": self.limits}

    def _too_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > self.bound

    @workflow.run
    async def run(self, carried: dict | None = None) -> None:
        if carried:   # what the run before this one knew
            self.subscribers = [s for s in carried.get("subscribers", []) if s not in self.subscribers] + \
                self.subscribers
            self.until = max(self.until, float(carried.get("until", 0.0)))
            self.limits = int(carried.get("limits", 0))
            self.bound = int(carried.get("bound", HISTORY_BOUND))
        told = bool(carried and carried.get("holding"))   # the run before told the hold of this limit
        while True:
            await workflow.wait_condition(lambda: self.until > workflow.now().timestamp() or self._too_long())
            if self.until > workflow.now().timestamp():
                if not told:
                    self.limits += 1
                    workflow.upsert_memo({MEMO_KEY: {"until": self.until, "limits": self.limits}})
                    await self._tell("hold", self.until)
                    told = True
                while workflow.now().timestamp() < self.until and not self._too_long():
                    try:   # a later limit extends the one timer; a long history moves it to the next run
                        await workflow.wait_condition(self._too_long, timeout=timedelta(
                            seconds=self.until - workflow.now().timestamp()))
                    except asyncio.TimeoutError:
                        pass
                if workflow.now().timestamp() >= self.until:
                    await self._tell("release", self.until)
                    told = False
            if self._too_long() or not told and self.limits and self.limits % 50 == 0:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new({"subscribers": list(self.subscribers), "until": self.until,
                                          "limits": self.limits, "bound": self.bound, "holding": told})

    async def _tell(self, signal: str, until: float) -> None:
        for workflow_id in list(self.subscribers):
            try:
                await workflow.get_external_workflow_handle(workflow_id).signal(signal, until)
            except Exception:  # noqa: BLE001 - a subscriber that ended: nothing to hold
                self.unsubscribe(workflow_id)


def infra_wait(failures: int, first: float) -> float | None:
    """Seconds before the next try after `failures` failures in a row of a machine's git (first,
    doubling, at most INFRA_MOST); None past INFRA_MAX: the task needs a person."""
    if failures > INFRA_MAX:
        return None
    return min(INFRA_MOST, first * 2 ** (failures - 1))


def _attempt_dict(attempt: Attempt, extra: dict) -> dict:
    return {**asdict(attempt), **extra}


@workflow.defn
class TaskWorkflow:
    def __init__(self) -> None:
        self.paused = False
        self.pause_seq = 0          # the newest pause or resume known (signals and activities race)
        self.held_until = 0.0
        self.stopping = False
        self.host = ""
        self.row: TaskRow | None = None
        self.attempts: list[Attempt] = []
        self.details: list[dict] = []   # per attempt: host, Temporal's tries, fresh clone, adopted, lost
        self.running: workflow.ActivityHandle | None = None
        self.fleet_workflow = ""
        self.gated = True           # the fleet decides when a restart may start (until it is gone)
        self.granted = 0            # the newest attempt whose relaunch the fleet allowed
        self.held_told = 0          # the pause (its seq) already told to the fleet
        self.infra = 0              # failures in a row of a machine's git before any agent ran

    @workflow.signal
    def pause(self, seq: int) -> None:
        self._pause(seq, True)

    @workflow.signal
    def resume(self, seq: int) -> None:
        self._pause(seq, False)

    def _pause(self, seq: int, paused: bool) -> None:
        if seq > self.pause_seq:
            self.pause_seq, self.paused = seq, paused
            if self.gated and self.row is not None:   # a status shows the pause at once, an attempt running
                self._publish()

    @workflow.signal
    def go(self, attempt: int) -> None:
        """The fleet allows the relaunch after this attempt (the cascade gate, the restart budget)."""
        self.granted = max(self.granted, attempt)

    @workflow.signal
    def hold(self, until: float) -> None:
        self.held_until = max(self.held_until, until)

    @workflow.signal
    def release(self, until: float) -> None:
        if until >= self.held_until:
            self.held_until = 0.0

    @workflow.signal
    def stop(self) -> None:
        self.stopping = True
        if self.running is not None:
            self.running.cancel()

    @workflow.query
    def state(self) -> dict:
        return self._memo()

    def _now(self) -> float:
        return workflow.now().timestamp()

    def _memo(self) -> dict:
        return {"row": asdict(self.row) if self.row else None, "host": self.host, "paused": self.paused,
                "held_until": self.held_until,
                "attempts": [_attempt_dict(a, d) for a, d in zip(self.attempts, self.details)]}

    def _publish(self) -> None:
        """The task's row and attempts in its memo: `describe()` reads it with no worker running."""
        workflow.upsert_memo({MEMO_KEY: self._memo()})

    def _set(self, **changes) -> None:
        self.row = replace(self.row, updated=self._now(), **changes)

    def _begin(self, kind: str, strategy_name: str, reason: str) -> Attempt:
        number = len(self.attempts) + 1
        attempt = Attempt(self.row.id, number, kind, reason, strategy_name, self._now(), None, None, None, "",
                          self.row.strategy)
        self.attempts.append(attempt)
        self.details.append({"host": "", "tries": 0, "fresh_clone": False, "adopted": False, "lost": "",
                             "queue": ""})
        self._set(state=Task.RUNNING.value, attempts=number, reason="")
        self._publish()
        return attempt

    def _end(self, outcome: str, code: int | None, reason: str, run_id: str = "", **detail) -> None:
        last = self.attempts[-1]
        self.attempts[-1] = replace(last, ended=self._now(), exit_code=code, outcome=outcome, run_id=run_id or
                                    last.run_id, reason=reason or last.reason)
        self.details[-1].update(detail)

    @workflow.run
    async def run(self, inp: TaskInput) -> TaskOutcome:
        fleet, task = inp.fleet, inp.task
        me = workflow.info().workflow_id
        self.fleet_workflow = inp.fleet_workflow
        account = workflow.get_external_workflow_handle(fleet.account_workflow)
        await account.signal("subscribe", me)
        try:
            return await self._ladder(inp, fleet, task, me)
        finally:
            await account.signal("unsubscribe", me)

    async def _until_free(self) -> None:
        """Until the task may start an attempt: not paused, not held by a limit. A limit's hold ends
        by the account's release, or at the limit's end by a timer of its own (a release lost when
        the account workflow moved on must not hold it forever)."""
        while True:
            if self.gated and self.paused and not self.stopping:
                await self._held()
            await workflow.wait_condition(lambda: self.stopping or not self.paused)
            if self.stopping or self.held_until <= 0.0:
                return
            left = self.held_until - self._now()
            if left > 0:
                try:
                    await workflow.wait_condition(lambda: self.stopping or self.held_until <= 0.0,
                                                  timeout=timedelta(seconds=left))
                except asyncio.TimeoutError:
                    pass
            if 0.0 < self.held_until <= self._now():
                self.held_until = 0.0

    async def _held(self) -> None:
        """Paused by the fleet before an attempt: the row says so, and the fleet hears it once per
        pause (it may pick this task as the cascade's probe)."""
        if self.row is not None and (self.row.state, self.row.reason) != (Task.WAITING.value, PAUSE_REASON):
            self._set(state=Task.WAITING.value, reason=PAUSE_REASON)
            self._publish()
        if self.held_told != self.pause_seq:
            self.held_told = self.pause_seq
            await self._tell_fleet("held", 0.0)

    async def _tell_fleet(self, action: str, not_before: float) -> bool:
        """A failure, a relaunch to allow or a hold, told to the fleet; False when it is gone."""
        try:
            await workflow.get_external_workflow_handle(self.fleet_workflow).signal(
                "failed", TaskFailed(self.row.id, len(self.attempts), self._now(), action, not_before))
            return True
        except Exception:  # noqa: BLE001 - the fleet ended: nothing decides for it but the ladder
            self.gated = False
            return False

    async def _ladder(self, inp: TaskInput, fleet: FleetSpec, task: TaskSpec, me: str) -> TaskOutcome:
        spec = fleet.ladder
        policy = ladder.LadderPolicy(spec.max_task_restarts, spec.max_failed_tasks, spec.backoff_first,
                                     len(spec.strategies))
        self.row = TaskRow(task.task_id, task.text, Task.QUEUED.value, branch=task.branch, created=self._now(),
                           updated=self._now())
        kind, previous_end, hosts = "start", "", []
        asides = 0   # attempts in a row whose loop stepped aside (free, but never endless)
        while True:
            await self._until_free()
            if self.stopping:
                self._set(state=Task.QUEUED.value, reason="the fleet stopped")
                self._publish()
                return TaskOutcome(task.task_id, "stopped", "the fleet stopped", tuple(hosts))
            strategy = min(self.row.strategy, len(spec.strategies) - 1)
            attempt = self._begin(kind, spec.strategies[strategy], previous_end if kind != "start" else "")
            queue = host_queue(fleet.queue_prefix, self.host) if self.host else any_queue(fleet.queue_prefix)
            self.details[-1]["queue"] = queue
            self._publish()
            settings = (*fleet.overrides, *spec.settings[strategy])
            request = AttemptInput(inp.fleet_workflow, me, task, attempt.attempt, kind, strategy, fleet.remote_url,
                                   fleet.target, fleet.account_workflow, fleet.phases, fleet.iterations, settings,
                                   spec.factors[strategy], previous_end)
            try:
                self.running = workflow.start_activity(
                    "run_attempt", request, result_type=AttemptResult, task_queue=queue,
                    heartbeat_timeout=timedelta(seconds=fleet.heartbeat),
                    start_to_close_timeout=timedelta(seconds=fleet.attempt_timeout * spec.factors[strategy]),
                    schedule_to_start_timeout=timedelta(seconds=fleet.host_wait) if self.host else None,
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    retry_policy=RetryPolicy(maximum_attempts=fleet.infra_attempts, initial_interval=RETRY_FIRST,
                                             non_retryable_error_types=[AGENT_FAILED, USAGE_LIMIT, PERMANENT,
                                                                        PAUSED, FLEET_STOPPING]))
                result: AttemptResult = await self.running
                self.infra = 0
            except ActivityError as err:
                self.running = None
                asides = 0
                step = await self._failed(err, fleet, task, policy)
                if isinstance(step, TaskOutcome):
                    return step
                kind, previous_end = step
                continue
            self.running = None
            self.host = result.host
            hosts.append(result.host)
            self._end(result.outcome, result.exit_code, result.reason, result.run_id, host=result.host,
                      tries=result.activity_attempt, fresh_clone=result.fresh_clone, adopted=result.adopted,
                      lost=result.lost, cost=result.cost, tip=result.tip)
            if result.outcome == "verified":
                self._set(state="verified", reason=result.reason)
                self._publish()
                return TaskOutcome(task.task_id, "verified", result.reason, tuple(hosts))
            if result.outcome == "stopped" and not self.stopping:
                code = result.fleet_code if result.fleet_code is not None else \
                    result.exit_code if result.exit_code in CEILINGS else None
                if code is not None:   # a ceiling: the fleet launches nothing more and ends with its code
                    self._set(state=Task.QUEUED.value, reason=result.reason)
                    self._publish()
                    return TaskOutcome(task.task_id, "stopped", result.reason, tuple(hosts), fleet_code=code)
                if result.exit_code in ASIDE_CODES:   # it stepped aside: a new attempt, nothing spent
                    asides += 1
                    if asides >= ASIDES_MAX:
                        why = (f"its loop stepped aside {asides} times in a row: another loop keeps pushing "
                               f"{task.branch} (another fleet on this task?); see to it, then start the fleet again")
                        self._set(state=Task.FAILED.value, reason=why)
                        self._publish()
                        return TaskOutcome(task.task_id, "failed", why, tuple(hosts))
                    self._set(state=Task.WAITING.value, reason=result.reason)
                    self._publish()
                    kind, previous_end = "resume", f"stopped: {result.reason}"
                    continue
            if result.outcome == "stopped" or self.stopping:
                self._set(state=Task.QUEUED.value, reason=result.reason)
                self._publish()
                return TaskOutcome(task.task_id, "stopped", result.reason, tuple(hosts))
            # an outage: no failure, nothing spent; resumed after a while
            self._set(state=Task.WAITING.value, reason=result.reason)
            self._publish()
            await workflow.sleep(OUTAGE_WAIT)
            kind, previous_end = "resume", f"{result.outcome}: {result.reason}"

    async def _failed(self, err: ActivityError, fleet: FleetSpec, task: TaskSpec,
                      policy: ladder.LadderPolicy) -> TaskOutcome | tuple[str, str]:
        """What an attempt's error means: a new placement, a hold, the ladder, or the end."""
        cause = err.cause
        kind_of = cause.type if isinstance(cause, ApplicationError) else ""
        details = list(cause.details) if isinstance(cause, ApplicationError) else []
        info = details[0] if details and isinstance(details[0], dict) else {}
        if isinstance(cause, CancelledError) or self.stopping:
            self._end("stopped", None, "the fleet stopped")
            self._set(state=Task.QUEUED.value, reason="the fleet stopped")
            self._publish()
            return TaskOutcome(task.task_id, "stopped", "the fleet stopped")
        if isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START:
            gone = self.host
            self._end("stopped", None, f"its machine {gone} did not come back within {fleet.host_wait:g}s: moved "
                      f"to any machine, on a fresh clone of {task.branch}", host=gone)
            self.host = ""
            self._publish()
            return "resume", f"machine {gone} gone"
        if kind_of == INFRA:
            return await self._infra_failed(cause.message, fleet, task)
        self.infra = 0
        if kind_of == PAUSED:   # found paused before its agent started: nothing ran, nothing recorded
            self.attempts.pop()
            self.details.pop()
            self._pause(int(info.get("seq", self.pause_seq + 1)), True)
            self._set(attempts=len(self.attempts))
            self._publish()
            return "resume", "the fleet is paused"
        if info.get("host"):
            self.host = info["host"]
        if kind_of == USAGE_LIMIT:
            until = float(info.get("resets_at") or self._now() + LIMIT_FALLBACK)
            self._end("limit", info.get("exit_code"), f"usage limit until {until:.0f}", info.get("run_id", ""),
                      host=info.get("host", ""), tries=info.get("activity_attempt", 0))
            self.held_until = max(self.held_until, until)   # held at once; the account releases it
            self._set(state=Task.WAITING.value, reason="a usage limit: held until its reset")
            self._publish()
            await workflow.get_external_workflow_handle(fleet.account_workflow).signal("limit_met", until)
            return "resume", "usage limit"
        if kind_of in (FLEET_STOPPING, PERMANENT):
            code = info.get("exit_code")
            self._end("config", code, cause.message, info.get("run_id", ""), host=info.get("host", ""))
            self._set(state=Task.FAILED.value, reason=cause.message)
            self._publish()
            return TaskOutcome(task.task_id, "config" if kind_of == FLEET_STOPPING else "failed", cause.message,
                               fleet_code=code if kind_of == FLEET_STOPPING else None)
        # The child ended abnormally, or its worker was lost every time Temporal tried: the ladder.
        why = cause.message if cause is not None else str(err)
        if isinstance(cause, TimeoutError):
            why = f"its worker was lost {fleet.infra_attempts} times ({cause.type.name.lower()} timeout)"
        self._end("failed", info.get("exit_code"), info.get("reason") or why, info.get("run_id", ""),
                  host=info.get("host", self.host), tries=info.get("activity_attempt", 0),
                  cost=info.get("cost", 0.0), fresh_clone=bool(info.get("fresh_clone")),
                  adopted=bool(info.get("adopted")), lost=str(info.get("lost") or ""))
        cause = decide.cause_of(self.attempts[-1].reason, [a.reason for a in self.attempts[:-1]])
        rung, step = decide.climb(self.row, self.attempts, policy, self._now(), cause)
        self._set(strategy=rung.strategy, restarts=rung.restarts, escalations=rung.escalations,
                  reason=rung.reason)
        if isinstance(step, decide.Fail):
            self._set(state=Task.FAILED.value, reason=step.reason)
            self._publish()
            if self.gated:   # the cascade counts it
                await self._tell_fleet("fail", 0.0)
            raise ApplicationError(step.reason, type=PERMANENT, non_retryable=True)
        self._set(state=step.state.value, reason=step.reason, not_before=rung.not_before)
        self._publish()
        if self.gated and await self._tell_fleet(rung.action, rung.not_before):
            # The fleet allows it past the backoff, within its cascade gate and restart budget.
            attempt = len(self.attempts)
            await workflow.wait_condition(lambda: self.stopping or not self.gated or self.granted >= attempt)
            if self.stopping or self.granted >= attempt:
                return rung.action, why
        wait = rung.not_before - self._now()
        if wait > 0:
            await workflow.sleep(wait)   # the ladder's backoff: a durable timer
        return rung.action, why


    async def _infra_failed(self, message: str, fleet: FleetSpec, task: TaskSpec) -> tuple[str, str]:
        """A machine's clone, fetch or catch-up failed before any agent ran: nothing is spent (the
        attempt is taken back), the task is un-pinned (any machine, a fresh clone where it has
        none) and tried again after a growing durable wait; only a long run of them fails it."""
        self.infra += 1
        taken = self.attempts.pop()
        self.details.pop()
        self.host = ""
        wait = infra_wait(self.infra, fleet.infra_wait)
        if wait is None:
            why = (f"its worktree could not be prepared {self.infra} times in a row (last: {message}); check that "
                   f"every machine can fetch and push {task.branch}, then start the fleet again")
            self._set(state=Task.FAILED.value, attempts=len(self.attempts), reason=why)
            self._publish()
            raise ApplicationError(why, type=PERMANENT, non_retryable=True)
        self._set(state=Task.WAITING.value, attempts=len(self.attempts),
                  reason=f"{message}; tried again on any machine in {wait:g}s (not counted against the task)")
        self._publish()
        await workflow.sleep(wait)
        return taken.kind, taken.reason


@workflow.defn
class FleetWorkflow:
    def __init__(self) -> None:
        self.paused = False
        self.pause_seq = 0
        self.stopping = False
        self.tasks: dict[str, dict] = {}     # task id -> {text, state, reason, hosts, sha}
        self.children: list[str] = []
        self.fatal: int | None = None
        # The fleet-wide rules (patch GATED): what the task workflows told, what the gate did.
        self.gate: cascade.CascadeGate | None = None
        self.budget: RestartBudget | None = None
        self.rules: decide.Rules | None = None
        self.inbox: list[TaskFailed] = []          # told by the task workflows, not yet looked at
        self.ended: list[tuple[str, bool]] = []    # task workflows that ended (verified?), not yet looked at
        self.failures: list[tuple[float, str]] = []
        self.asks: list[TaskFailed] = []           # relaunches (and paused tasks) waiting for the gate
        self.lived: dict[str, list] = {}           # task -> [started, ended or None]: the cascade's count
        self.moves: list[list] = []                # the gate's moves: [at, event, reason, task]
        self.wakes = 0
        self.last_launch: float | None = None
        self.launching = asyncio.Lock()

    @workflow.signal
    async def pause(self) -> None:
        self.paused, self.pause_seq = True, self.pause_seq + 1
        await self._tell("pause", self.pause_seq)

    @workflow.signal
    async def resume(self) -> None:
        self.paused, self.pause_seq = False, self.pause_seq + 1
        await self._tell("resume", self.pause_seq)

    @workflow.signal
    async def stop(self) -> None:
        self.stopping = True
        self.wakes += 1
        await self._tell("stop")

    @workflow.signal
    def failed(self, note: TaskFailed) -> None:
        """A task workflow's abnormal end, relaunch to allow, or hold by the pause (TaskFailed)."""
        self.inbox.append(note)
        self.wakes += 1

    async def _tell(self, signal: str, *args) -> None:
        for child in list(self.children):
            if self.tasks.get(child.rpartition("/")[2], {}).get("state") in (Task.RUNNING.value, Task.QUEUED.value):
                try:
                    await workflow.get_external_workflow_handle(child).signal(signal, *args)
                except Exception:  # noqa: BLE001 - a child that ended meanwhile
                    pass

    @workflow.query
    def state(self) -> dict:
        return self._memo()

    def _memo(self) -> dict:
        memo = {"paused": self.paused, "pause_seq": self.pause_seq, "stopping": self.stopping, "fatal": self.fatal,
                "tasks": self.tasks}
        if self.gate is not None:
            memo["cascade"] = {"state": self.gate.state, "since": self.gate.since, "probe": self.gate.probe_task,
                               "failed_probes": self.gate.failed_probes, "moves": self.moves}
        return memo

    def _note(self, task_id: str, **changes) -> None:
        self.tasks[task_id] = {**self.tasks.get(task_id, {}), **changes, "updated": workflow.now().timestamp()}
        self._upsert(task_id)

    def _upsert(self, *task_ids: str) -> None:
        """The memo brought up to date. Each task's row under a key of its own: an upsert carries
        the fleet's header and the rows that changed, not every task's again (its history grows
        with the tasks, not with their square)."""
        header = {k: v for k, v in self._memo().items() if k != "tasks"}
        workflow.upsert_memo({MEMO_KEY: header, **{task_memo_key(t): self.tasks[t] for t in task_ids
                                                   if t in self.tasks}})

    @workflow.run
    async def run(self, spec: FleetSpec) -> dict:
        home = host_queue(spec.queue_prefix, spec.home)
        merge_queue = asyncio.Lock()        # one merge at a time, in the order tasks finish
        slots = asyncio.Semaphore(spec.parallel)
        running: set[asyncio.Task] = set()
        me = workflow.info().workflow_id
        self.gate = cascade.CascadeGate(cascade.CascadePolicy(
            spec.cascade_percent, spec.cascade_window, probe_after=spec.probe_after,
            probe_healthy=spec.probe_healthy))
        self.budget = RestartBudget(spec.restart_every)
        self.rules = decide.Rules(ladder.LadderPolicy(spec.ladder.max_task_restarts, spec.ladder.max_failed_tasks,
                                                      spec.ladder.backoff_first, len(spec.ladder.strategies)),
                                  self.gate.policy, spec.restart_every)
        keeper = asyncio.create_task(self._gatekeeper(spec))
        workflow.upsert_memo({MEMO_KEY: {**self._memo(), "project": spec.project, "target": spec.target}})

        async def one(task: TaskSpec) -> None:
            async with slots:
                await self._space(spec)
                if self.stopping or self.fatal is not None:
                    self._note(task.task_id, state=Task.QUEUED.value, reason="the fleet stopped" if self.stopping else
                               f"the fleet launches nothing more (exit {self.fatal})")
                    return
                self._note(task.task_id, state=Task.RUNNING.value)
                self.lived[task.task_id] = [workflow.now().timestamp(), None]
                outcome = await self._task(spec, task, me)
                self.lived[task.task_id][1] = workflow.now().timestamp()
                self.ended.append((task.task_id, outcome.state == "verified"))
                self.wakes += 1
            if outcome.state == "verified":
                self._note(task.task_id, state=Task.MERGING.value, hosts=list(outcome.hosts))
                async with merge_queue:
                    merged, why = await self._home(spec, task, "merge", MergeInput(spec.fleet_id, task, spec.target,
                                                                                   spec.remote_url),
                                                   MergeOutcome, spec.merge_timeout)
                if merged is None:
                    self._note(task.task_id, state=Task.MERGING.value if self.stopping else Task.NEEDS_REVIEW.value,
                               reason=why)
                    if not self.stopping:
                        await self._review_alert(spec, task, why)
                    return
                state = decide.merge_ended(decide.MergeEnded(TaskRow(task.task_id, task.text, Task.MERGING.value),
                                                             merged.outcome, merged.detail, spec.target))[0].state.value
                self._note(task.task_id, state=state, reason=merged.detail, sha=merged.sha)
                if state == Task.NEEDS_REVIEW.value:
                    await self._review_alert(spec, task, merged.detail or merged.outcome)
            elif outcome.state == "failed":
                _, why = await self._home(spec, task, "mark", MarkInput(task, spec.target, outcome.reason), str,
                                          120.0)
                self._note(task.task_id, state=Task.FAILED.value,
                           reason=outcome.reason + (f" (its [!] mark was not written: {why})" if why else ""))
                await self._effect(spec, decide.failed_alert(task.task_id, task.text, outcome.reason,
                                                             task.branch, "genesis fleet status"))
            elif outcome.state == "config":
                self.fatal = self.fatal or outcome.fleet_code
                self._note(task.task_id, state=Task.FAILED.value, reason=outcome.reason)
                await self.stop()
            else:
                if outcome.fleet_code is not None and self.fatal is None:   # a ceiling: nothing more launched
                    self.fatal = outcome.fleet_code
                self._note(task.task_id, state=Task.QUEUED.value, reason=outcome.reason)

        while True:
            found: list[TaskSpec] = [] if self.stopping or self.fatal is not None else await workflow.execute_activity(
                "open_tasks", spec.target, result_type=list[TaskSpec], task_queue=home,
                start_to_close_timeout=timedelta(seconds=120),
                retry_policy=RetryPolicy(maximum_attempts=HOME_TRIES, initial_interval=RETRY_FIRST))
            new = [t for t in found if t.task_id not in self.tasks]
            for task in new:
                self._note(task.task_id, text=task.text, branch=task.branch, state=Task.QUEUED.value, reason="",
                           hosts=[])
                job = asyncio.create_task(one(task))
                running.add(job)
                job.add_done_callback(running.discard)
            if not new and not running:
                break
            try:  # the queue is read again when every task has ended, or after a while (new tasks)
                await workflow.wait_condition(lambda: not running,
                                              timeout=timedelta(seconds=max(spec.check, QUEUE_PERIOD)))
            except asyncio.TimeoutError:
                pass
        keeper.cancel()
        code = fleet_exit([t["state"] for t in self.tasks.values()], fatal=self.fatal)
        return {"exit_code": code, "tasks": self.tasks}

    # -- the fleet-wide rules: the cascade gate, the restart budget, the stagger ------------------

    def _now(self) -> float:
        return workflow.now().timestamp()

    async def _space(self, spec: FleetSpec) -> None:
        """Launches (new tasks, relaunches) spaced by the stagger, by a durable timer."""
        async with self.launching:
            if self.last_launch is not None:
                wait = self.last_launch + spec.stagger - self._now()
                if wait > 0:
                    await workflow.sleep(wait)
            self.last_launch = self._now()

    async def _gatekeeper(self, spec: FleetSpec) -> None:
        """The local monitor's cascade gate and restart budget over what the task workflows tell:
        a cascade pauses every running task workflow (signal `pause`), lets one probe, and resumes
        them all (signal `resume`) when the probe succeeds; every relaunch waits for its `go`."""
        spins = 0
        while True:
            seen = self.wakes
            now = self._now()
            notes, self.inbox = self.inbox, []
            for note in notes:
                await self._told(note, now)
            ends, self.ended = self.ended, []
            for task_id, verified in ends:
                self.asks = [a for a in self.asks if a.task_id != task_id]
                for effect in self._decided(decide.ProbeEnded(task_id, verified, now)):
                    await self._effect(spec, effect, task_id)
            if self.fatal is not None and self.asks:   # it launches nothing more: they end, as queued
                asks, self.asks = self.asks, []
                for ask in asks:
                    await self._signal(ask.task_id, "stop")
            for effect in self._decided(decide.TimePassed(now, self._ran_within(now))):
                await self._effect(spec, effect)
            await self._grant(spec)
            due = self._next_due()
            if due is not None and due <= self._now() and spins < SPINS:
                spins += 1   # decided by time already (one relaunch per turn): the next turn at once
                continue
            spins = 0
            timeout = None if due is None else timedelta(seconds=max(0.001, due - self._now()))
            try:
                await workflow.wait_condition(lambda: self.wakes != seen, timeout=timeout)
            except asyncio.TimeoutError:
                pass

    def _decided(self, event: decide.Event) -> list[decide.Effect]:
        """decide() over the fleet's gate, budget and failure window (kept here, in the workflow)."""
        fleet = decide.Fleet(self.gate, self.budget, tuple(self.failures), self.stopping, self.fatal)
        after, effects = decide.decide(fleet, event, self.rules)
        self.gate, self.budget, self.failures = after.gate, after.budget, list(after.failures)
        return effects

    async def _effect(self, spec: FleetSpec, effect: decide.Effect, task_id: str | None = None) -> None:
        """A decision's effect as this driver makes it: a gate's move told to the task workflows,
        an alert through the home."""
        if isinstance(effect, decide.GateMoved):
            await self._move(spec, effect.step, task_id)
        elif isinstance(effect, decide.Alert):
            await self._alert(spec, effect)   # the core's Alert is the activity's input (AlertInput)

    async def _told(self, note: TaskFailed, now: float) -> None:
        if note.action != "held":
            self._decided(decide.Failure(note.at, note.task_id))
        if note.action in ("restart", "escalate"):
            self.asks = [a for a in self.asks if a.task_id != note.task_id] + [note]
            self._note(note.task_id, reason=f"its {note.action} waits for the fleet's restart budget and "
                                            f"cascade gate")
        elif note.action == "held":
            if self.gate.state == "open":
                if not self.paused:   # paused by a gate since opened: it may go on
                    await self._signal(note.task_id, "resume", self._next_seq())
            elif all(a.task_id != note.task_id for a in self.asks):
                self.asks.append(note)

    def _next_seq(self) -> int:
        self.pause_seq += 1
        return self.pause_seq

    async def _signal(self, task_id: str, signal: str, *args) -> None:
        try:
            await workflow.get_external_workflow_handle(
                next(c for c in self.children if c.rpartition("/")[2] == task_id)).signal(signal, *args)
        except Exception:  # noqa: BLE001 - a child that ended meanwhile
            pass

    def _ran_within(self, now: float) -> int:
        """Task workflows that ran within the cascade window: running now, or ended in it."""
        start = now - self.gate.policy.window
        return sum(1 for began, ended in self.lived.values() if began <= now and (ended is None or ended > start))

    def _may_relaunch(self) -> tuple[bool, bool]:
        """(relaunches allowed, the next one is the probe)."""
        probe = self.gate.state == "probing" and self.gate.probe_task is None
        return self.gate.allows_restart or probe, probe

    def _next_due(self) -> float | None:
        """When the gate or the budget may next decide something by time alone."""
        gate, now = self.gate, self._now()
        due = []
        if gate.state == "paused":
            due.append(gate.next_probe_at())
        elif gate.state == "probing" and gate.probe_task is not None:
            due.append(gate.since + gate.policy.probe_healthy)
        allowed, _ = self._may_relaunch()
        if allowed and not self.stopping and self.fatal is None:
            due += [max(a.not_before, self.budget.next_at(now)) for a in self.asks if a.action != "held"]
        return min(due) if due else None

    async def _grant(self, spec: FleetSpec) -> None:
        """One relaunch, when the gate and the budget allow it (one per turn: staggered). A paused
        task is the probe only when no relaunch waits (it spends nothing)."""
        allowed, probe = self._may_relaunch()
        if not allowed or self.stopping or self.fatal is not None:
            return
        now = self._now()
        ready = [a for a in self.asks if a.action != "held" and a.not_before <= now]
        go = self._decided(decide.RelaunchDue(ready[0].task_id, ready[0].action, now)) if ready else []
        if go and isinstance(go[0], decide.Launch):
            ask = ready[0]
            await self._space(spec)
            spends = True
        elif probe and not [a for a in self.asks if a.action != "held"] and self.asks:
            ask, spends = self.asks[0], False   # a task only paused: it spent nothing
        else:
            return
        self.asks.remove(ask)
        self._decided(decide.Relaunched(ask.task_id, self._now(), probe, ask.task_id, spends))
        if probe:
            self._moved("cascade_probe", "one task probes whether the cause is gone", ask.task_id)
            self._note(ask.task_id, paused=False, reason="the cascade's probe")
            await self._signal(ask.task_id, "resume", self._next_seq())
        if ask.action != "held":
            await self._signal(ask.task_id, "go", ask.attempt)

    def _moved(self, event: str, reason: str, task_id: str | None = None) -> None:
        self.moves = (self.moves + [[self._now(), event, reason, task_id]])[-MOVES_KEPT:]
        self._upsert()

    async def _move(self, spec: FleetSpec, step: cascade.GateStep, task_id: str | None = None) -> None:
        """What the gate decided, told to the task workflows and the memo (a probe is recorded when
        it launches)."""
        if step.event is None or step.action == "probe":
            if step.action == "probe":
                self._upsert()
            return
        self._moved(step.event, step.reason, task_id if step.action == "probe_failed" else None)
        live = [t for t, row in self.tasks.items() if row.get("state") == Task.RUNNING.value]
        if step.action in ("pause", "probe_failed"):
            for t in live:
                self.tasks[t] = {**self.tasks[t], "paused": True}
            await self._tell("pause", self._next_seq())
        elif step.action == "resume":
            self.asks = [a for a in self.asks if a.action != "held"]
            for t in live:
                self.tasks[t] = {**self.tasks[t], "paused": False}
            await self._tell("resume", self._next_seq())
        self._upsert(*live)

    async def _review_alert(self, spec: FleetSpec, task: TaskSpec, why: str) -> None:
        """As the local fleet: a task left for review is one high alert."""
        await self._effect(spec, decide.review_alert(task.task_id, task.text, why, task.branch, spec.target))

    async def _alert(self, spec: FleetSpec, alert: AlertInput) -> None:
        """The home's alert channels, best effort: an alert never fails nor holds the fleet for long."""
        try:
            await workflow.execute_activity(
                "alert", alert, task_queue=host_queue(spec.queue_prefix, spec.home),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=ALERT_TRIES, initial_interval=RETRY_FIRST))
        except ActivityError:
            pass

    async def _home(self, spec: FleetSpec, task: TaskSpec, name: str, arg, result_type, timeout: float):
        """A home activity (merge, mark) to its end: (its result, "") or (None, why it failed). Held by
        the user's checkout: a durable wait and a new try, for as long as the fleet runs. Any other
        failure is retried HOME_TRIES times by Temporal, then given back with its reason."""
        while True:
            try:
                # A merge or mark heartbeats: a home that died mid-way is known within a heartbeat.
                beat = timedelta(seconds=spec.home_heartbeat)
                done = await workflow.execute_activity(
                    name, arg, result_type=result_type, task_queue=host_queue(spec.queue_prefix, spec.home),
                    start_to_close_timeout=timedelta(seconds=timeout), heartbeat_timeout=beat,
                    retry_policy=RetryPolicy(maximum_attempts=HOME_TRIES, backoff_coefficient=1.0,
                                             initial_interval=timedelta(seconds=spec.home_retry),
                                             non_retryable_error_types=[HELD]))
                return done, ""
            except ActivityError as err:
                cause = err.cause
                why = f"{name} failed: {cause.message if cause is not None else err}"
                if not (isinstance(cause, ApplicationError) and cause.type == HELD):
                    return None, why
                self._note(task.task_id, reason=f"{name} held: {cause.message}")
                try:   # a stop ends the wait: the held work waits for the next start
                    await workflow.wait_condition(lambda: self.stopping, timeout=timedelta(seconds=spec.held_wait))
                except asyncio.TimeoutError:
                    continue
                return None, f"{name} held when the fleet stopped: {cause.message}"

    async def _task(self, spec: FleetSpec, task: TaskSpec, me: str) -> TaskOutcome:
        child_id = task_workflow_id(spec.fleet_id, task.task_id)
        self.children.append(child_id)
        try:
            return await workflow.execute_child_workflow(
                TaskWorkflow.run, TaskInput(spec, task, me), id=child_id,
                task_queue=fleet_queue(spec.queue_prefix))
        except ChildWorkflowError as err:
            cause = err.cause
            why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            return TaskOutcome(task.task_id, "failed", why)


WORKFLOWS = [FleetWorkflow, TaskWorkflow, AccountWorkflow]
