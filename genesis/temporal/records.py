"""What travels between the home driver, the workflows and the activities: frozen records,
the task-queue and workflow-id names, the error types.

Stdlib only: workflow code imports this inside Temporal's sandbox, where anything touching
the disk at import time fails every workflow of the module.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from genesis.fleet.decide import Alert

__all__ = ["fleet_queue", "any_queue", "host_queue", "home_host", "fingerprint", "fleet_workflow_id",
           "task_workflow_id", "account_workflow_id", "commit_key", "AGENT_FAILED", "USAGE_LIMIT", "PERMANENT",
           "PAUSED", "FLEET_STOPPING", "HELD", "INFRA", "LadderSpec", "FleetSpec", "TaskSpec", "AttemptInput",
           "AttemptResult", "TaskInput", "MergeInput", "MergeOutcome", "MarkInput", "TaskOutcome", "ENGINE_FILE",
           "TaskFailed", "AlertInput", "TASK_MEMO", "task_memo_key", "tasks_of_memo"]

ENGINE_FILE = "engine.json"   # <fleet dir>/engine.json at home: which engine runs the fleet, and where

# ApplicationError.type of an activity's failure, as workflow code reads it.
AGENT_FAILED = "AgentFailed"            # the child ended abnormally: the ladder's business, never Temporal's retry
USAGE_LIMIT = "UsageLimit"              # the account's limit: a shared durable wait, never a failed attempt
PERMANENT = "TaskFailedPermanently"     # the ladder is spent: never retried
PAUSED = "FleetPaused"                  # found paused just before an agent would start: nothing ran, nothing spent
FLEET_STOPPING = "FleetStopping"        # an end that would stop every child alike (trust, sandbox, disk)
HELD = "MergeHeld"                      # the user's checkout holds the merge: tried again later
INFRA = "Infrastructure"                # a machine's git (clone, fetch, catch-up) failed before any agent ran


def fleet_queue(prefix: str) -> str:
    """Workflow tasks: any worker (workflow code runs nothing of a machine's own)."""
    return f"{prefix}-fleet"


def any_queue(prefix: str) -> str:
    """An attempt of a task with no machine yet, or whose machine is gone: any worker, fresh clone."""
    return f"{prefix}-any"


def host_queue(prefix: str, host: str) -> str:
    """An attempt pinned to the machine holding the task's worktree, or the home's activities."""
    return f"{prefix}@{host}"


def home_host(project_fingerprint: str) -> str:
    return f"home-{project_fingerprint}"


def fingerprint(*parts: str) -> str:
    """A short stable name for what the parts say (a project: its remote's URL and target branch)."""
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:12]


def fleet_workflow_id(project_fingerprint: str) -> str:
    return f"genesis-fleet-{project_fingerprint}"


def task_workflow_id(fleet_id: str, task_id: str) -> str:
    return f"{fleet_id}/{task_id}"


TASK_MEMO = "task:"   # the fleet's memo: each task's row under "task:<task id>", beside the fleet's header


def task_memo_key(task_id: str) -> str:
    return f"{TASK_MEMO}{task_id}"


def tasks_of_memo(header: dict, memo: dict) -> dict:
    """The fleet's tasks from its whole memo: the rows under their own keys, over those an older
    fleet kept in its header's `tasks`."""
    rows = dict(header.get("tasks") or {}) if isinstance(header, dict) else {}
    rows.update({key[len(TASK_MEMO):]: row for key, row in memo.items()
                 if key.startswith(TASK_MEMO) and isinstance(row, dict)})
    return rows


def account_workflow_id(prefix: str, cli: str, account: str) -> str:
    """One per agent subscription and queue prefix (the workers that run it): never a
    machine-local path (two machines on one subscription must name the same workflow);
    `account` is the home's key's fingerprint or GENESIS_TEMPORAL_ACCOUNT, else the home
    machine's name (the limit is then per home: every machine of its fleets is taken to share it)."""
    return f"{prefix}-account-{cli}-{fingerprint(account)}"


def commit_key(task_workflow: str, attempt: int) -> str:
    """GENESIS_COMMIT_KEY of an attempt's child, the same for each of Temporal's tries of it: its
    auto-commits carry it (the loop adds the iteration and phase), so a try skips the phases an
    earlier try committed on the branch (loop/keyedtries.py)."""
    return f"{task_workflow}#{attempt}"


@dataclass(frozen=True)
class LadderSpec:
    """The ladder's knobs as the home read them (fleet/ladder.LadderPolicy's inputs)."""
    max_task_restarts: int
    max_failed_tasks: int
    backoff_first: float
    strategies: tuple[str, ...]       # names, index 0 the configured agent
    settings: tuple[tuple[tuple[str, str], ...], ...]   # each strategy's child settings (ladder.child_settings)
    factors: tuple[float, ...]        # each strategy's window factor (a longer heartbeat window for "longer")


@dataclass(frozen=True)
class TaskSpec:
    task_id: str
    text: str
    branch: str


@dataclass(frozen=True)
class FleetSpec:
    fleet_id: str
    project: str                      # the home checkout (named in messages only; no machine reads it but home)
    remote_url: str                   # what every machine clones from and pushes to
    target: str                       # the project branch the work comes home to
    queue_prefix: str
    home: str                         # the home's host name in queue names (home_host)
    account_workflow: str
    parallel: int                     # attempts at once across all machines
    heartbeat: float                  # seconds
    host_wait: float                  # seconds: schedule_to_start of a pinned attempt
    check: float                      # seconds between two reads of the queue
    stagger: float                    # seconds between two launches
    ladder: LadderSpec
    phases: tuple[str, ...]
    iterations: int
    overrides: tuple[tuple[str, str], ...]   # the fleet's --set values, given to every child
    attempt_timeout: float            # seconds: the bound on one child-loop attempt, start to close
    merge_timeout: float              # seconds: the bound on one merge (its tests included)
    infra_attempts: int = 3           # Temporal's own tries of an attempt whose worker was lost
    home_retry: float = 30.0          # seconds between two of Temporal's tries of a merge or mark that failed
    home_heartbeat: float = 60.0      # seconds: a merge or mark whose home went silent this long is tried again
    infra_wait: float = 10.0          # seconds before a task whose machine's git failed is tried again (doubling)
    held_wait: float = 60.0           # seconds: a durable wait before a held merge or mark is tried again
    # The fleet-wide rules of the local monitor (fleet/cascade, fleet/budget), from the home's Config.
    cascade_percent: float = 0.0      # GENESIS_FLEET_CASCADE_PERCENT (0: no cascade)
    cascade_window: float = 300.0     # seconds
    probe_after: float = 60.0         # seconds paused before the probe (CascadePolicy)
    probe_healthy: float = 120.0      # seconds a probe runs without failing to resume the fleet
    restart_every: float = 0.0        # GENESIS_FLEET_RESTART_EVERY_SECONDS (0: no bound)


@dataclass(frozen=True)
class TaskInput:
    fleet: FleetSpec
    task: TaskSpec
    fleet_workflow: str               # its parent, which decides its restarts (the cascade gate, the restart budget)


@dataclass(frozen=True)
class TaskFailed:
    """A task workflow's attempt that ended abnormally, told to its fleet: the cascade counts it; a
    restart or escalation then waits for the fleet's `go` (the gate and the budget allow it), and a
    task held by the cascade's pause (action "held") waits for the fleet's probe or resume."""
    task_id: str
    attempt: int                      # the attempt that ended (its `go` names it)
    at: float                         # when it ended (epoch, the task workflow's clock)
    action: str                       # restart | escalate | fail | held
    not_before: float = 0.0           # the ladder's backoff: no relaunch before this


# One alert ticket of the fleet, sent by the home's alert channels: the fleet core's own Alert
# (the same fields a recorded history holds), so the two drivers build it once.
AlertInput = Alert


@dataclass(frozen=True)
class AttemptInput:
    fleet_workflow: str
    task_workflow: str
    task: TaskSpec
    number: int                       # the task's attempt number (the ladder's), 1, 2, ...
    kind: str                         # start | restart | escalate | resume
    strategy: int
    remote_url: str
    target: str
    account_workflow: str
    phases: tuple[str, ...]
    iterations: int
    settings: tuple[tuple[str, str], ...]    # the fleet's --set values, then the strategy's
    window_factor: float
    previous_end: str = ""            # how the task's last attempt ended (for make_startable's commit)


@dataclass(frozen=True)
class AttemptResult:
    host: str
    outcome: str                      # verified | failed | limit | outage | stopped | config
    exit_code: int | None
    reason: str
    cost: float
    run_id: str
    seconds: float
    adopted: bool                     # a loop the machine's previous worker started was adopted
    fresh_clone: bool                 # the worktree was cloned from the remote for this attempt
    activity_attempt: int             # Temporal's attempt number (> 1: a lost worker's retry)
    tip: str                          # the task branch's tip as pushed
    resets_at: float = 0.0            # a limit: when it resets (epoch)
    lost: str = ""                    # a retry: what the lost try of this attempt last reported (its host, stage)
    fleet_code: int | None = None     # the verdict's fleet code: the fleet ends with it (a ceiling, 23 or 24)


@dataclass(frozen=True)
class MergeInput:
    fleet_id: str
    task: TaskSpec
    target: str
    remote_url: str


@dataclass(frozen=True)
class MergeOutcome:
    outcome: str                      # merged | conflict | tests_failed | ready
    sha: str
    detail: str
    commits: tuple[str, ...] = ()


@dataclass(frozen=True)
class MarkInput:
    task: TaskSpec
    target: str
    reason: str


@dataclass(frozen=True)
class TaskOutcome:
    task_id: str
    state: str                        # verified | failed | needs-review | stopped | config
    reason: str = ""
    hosts: tuple[str, ...] = field(default_factory=tuple)
    fleet_code: int | None = None     # an end that stops the fleet with this code
