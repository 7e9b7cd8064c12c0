r"""A fleet task's lifecycle: one enumeration of its states, one transition function.

The fleet ledger's `tasks.state`, the status views, the dashboard, and both drivers of the
fleet (the local monitor, the Temporal workflows) speak of a task by these words; every move
between them goes through step(), so a move no rule allows is a bug said at once, not a state
found later in a ledger.

                 +------------------- reopen (open again on the project branch) -----------+
                 v                                                                          |
    queued --hold--> waiting                                                                |
      |  ^             |                                                                    |
      |  +--end_free---+--------------+                                                     |
   launch/adopt     launch/adopt      |                                                     |
      v                v              |  (a limit, an outage, a stop: nothing spent)        |
    running ---------------------------+                                                    |
      |  \--end_failed: the ladder's rung--> restarting | escalated --launch--> running     |
      |                                 \--> failed (fail: no rung left) -------------------+
      +--end_verified--> merging --merged--> merged ----------------------------------------+
                           |  \--ready--> ready --rebased--> ready (branch mode)
                           +--review--> needs-review        (a conflict, a failed test, no worktree)

Terminal: merged, ready, needs-review, failed (a restarted monitor never retries these).
A task in `running` has a child launched for it; `restarting` and `escalated` wait for their
relaunch (their backoff, the restart budget, the cascade gate); `waiting` is held before a
launch (a limit, the memory floor, the cascade pause, a worktree git could not make yet).

Workflow code: the Temporal workflows run this module inside their sandbox; its words are
in their histories' memos, so a word never changes.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Task", "Move", "step", "may", "Illegal", "STATES", "TERMINAL", "UNFINISHED", "CHILD_MAY_RUN",
           "RELAUNCH", "HELD_BEFORE_LAUNCH", "as_ledger"]


class Task(str, Enum):
    """A task's state; each compares equal to its word in the ledger (`Task.QUEUED == "queued"`)."""
    QUEUED = "queued"
    WAITING = "waiting"
    RUNNING = "running"
    RESTARTING = "restarting"
    ESCALATED = "escalated"
    MERGING = "merging"
    MERGED = "merged"
    READY = "ready"
    NEEDS_REVIEW = "needs-review"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class Move(str, Enum):
    """What happened to a task (the events of its lifecycle)."""
    LAUNCH = "launch"              # its child started (a start, a restart, an escalation, a resume)
    ADOPT = "adopt"                # a child of an earlier monitor runs for it: taken over
    HOLD = "hold"                  # held before a launch (a limit, the memory floor, the cascade pause)
    PAUSE = "pause"                # Temporal: its workflow paused by the fleet's cascade before an attempt
    END_VERIFIED = "end_verified"  # its child ended with its task done and proven: to the merge queue
    END_FREE = "end_free"          # its child ended with no failure of its own (limit, outage, stop, config)
    RESTART = "restart"            # ended abnormally: the ladder restarts it
    ESCALATE = "escalate"          # ended abnormally: the ladder moves it to the next strategy
    FAIL = "fail"                  # ended abnormally with no rung left, or it cannot go on: failed for good
    MERGED = "merged"              # the merge queue brought it home
    READY = "ready"                # branch mode: its branch is kept, rebased, ready for review
    MERGE_HELD = "merge_held"      # the merge waits (the user's checkout): it stays in the queue
    REVIEW = "review"              # a person must look (a conflict, a failed test, no worktree)
    REOPEN = "reopen"              # open again on the project branch after the fleet closed it
    UNQUEUE = "unqueue"            # no longer open on the project branch, or its child could not start


STATES = tuple(Task)
TERMINAL = frozenset({Task.MERGED, Task.READY, Task.NEEDS_REVIEW, Task.FAILED})
UNFINISHED = frozenset(STATES) - TERMINAL                  # not yet decided: the fleet still owes it a move
CHILD_MAY_RUN = frozenset({Task.RUNNING, Task.WAITING, Task.ESCALATED})  # a child may run: its own state is read
RELAUNCH = frozenset({Task.RESTARTING, Task.ESCALATED})    # waiting for a relaunch the ladder decided
HELD_BEFORE_LAUNCH = frozenset({Task.QUEUED, Task.WAITING})

_BEFORE_LAUNCH = HELD_BEFORE_LAUNCH | RELAUNCH
_ALIVE = UNFINISHED - {Task.MERGING}
_RULES: dict[Move, tuple[frozenset, Task | None]] = {
    # move: (the states it may happen in, the state after it; None: the state stays)
    Move.LAUNCH: (_BEFORE_LAUNCH, Task.RUNNING),
    Move.ADOPT: (_ALIVE, Task.RUNNING),
    Move.HOLD: (_BEFORE_LAUNCH | {Task.RUNNING}, None),
    Move.PAUSE: (_BEFORE_LAUNCH | {Task.RUNNING}, Task.WAITING),
    Move.END_VERIFIED: (frozenset({Task.RUNNING}), Task.MERGING),
    Move.END_FREE: (frozenset({Task.RUNNING}), Task.QUEUED),
    Move.RESTART: (frozenset({Task.RUNNING}), Task.RESTARTING),
    Move.ESCALATE: (frozenset({Task.RUNNING}), Task.ESCALATED),
    Move.FAIL: (_ALIVE, Task.FAILED),
    Move.MERGED: (frozenset({Task.MERGING, Task.READY}), Task.MERGED),
    Move.READY: (frozenset({Task.MERGING, Task.READY}), Task.READY),
    Move.MERGE_HELD: (frozenset({Task.MERGING, Task.READY}), None),
    Move.REVIEW: (UNFINISHED | {Task.READY}, Task.NEEDS_REVIEW),
    Move.REOPEN: (frozenset({Task.FAILED, Task.MERGED}), Task.QUEUED),
    Move.UNQUEUE: (_BEFORE_LAUNCH | {Task.RUNNING}, Task.QUEUED),
}


class Illegal(ValueError):
    """A move the lifecycle does not allow from the task's state."""


def may(state: str, move: Move) -> bool:
    allowed, _ = _RULES[Move(move)]
    return _known(state) in allowed


def step(state: str, move: Move) -> Task:
    """The task's state after move; Illegal when the move cannot happen in that state."""
    now = _known(state)
    allowed, after = _RULES[Move(move)]
    if now not in allowed:
        raise Illegal(f"a task {now.value} cannot {Move(move).value}")
    if move is Move.HOLD:  # held before a launch: a relaunch keeps its word (its rung), the rest wait
        return Task.WAITING if now in HELD_BEFORE_LAUNCH or now is Task.RUNNING else now
    return now if after is None else after


def as_ledger(word: str) -> Task:
    """A Temporal task workflow's own word for its row, as the ledger says it: its `verified`
    is the fleet's `merging` (the fleet workflow takes it to the merge queue)."""
    return Task.MERGING if word == "verified" else _known(word)


def _known(state: str) -> Task:
    try:
        return Task(state)
    except ValueError:
        raise Illegal(f"not a task state: {state!r}") from None
