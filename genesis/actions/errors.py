"""The words every surface of the actions shares: the actions, where one comes from, what came
of it, and why one does not apply."""

from __future__ import annotations

from dataclasses import dataclass

from genesis import exitcodes

__all__ = ["ACTIONS", "CONFIRM", "TASK_ACTIONS", "FLEET_REQUESTS", "WAIT_REQUESTS", "EVENT", "Origin", "Done",
           "NotApplicable", "NothingRuns", "Failed", "MAX_NOTE", "REVIEW", "RELAUNCHED"]

ACTIONS = ("stop", "stop-now", "retry", "approve", "send-back", "skip", "pause", "resume", "wait-extend",
           "wait-end", "revert")
CONFIRM = frozenset({"stop-now", "approve", "skip", "revert"})      # cannot be undone: the dashboard asks first
TASK_ACTIONS = frozenset({"retry", "approve", "send-back", "skip"})
FLEET_REQUESTS = frozenset({"pause", "resume", "retry", "skip"})    # what the fleet's monitor picks up
WAIT_REQUESTS = frozenset({"wait-extend", "wait-end"})              # what a loop's wait picks up
EVENT = "action"
MAX_NOTE = 500
REVIEW = ("ready", "needs-review")
RELAUNCHED = ("restarting", "escalated")


@dataclass(frozen=True)
class Origin:
    surface: str       # terminal, dashboard, alert
    credential: str    # who: the user and uid, the dashboard key's fingerprint, the link's nonce


@dataclass(frozen=True)
class Done:
    action: str
    task: str          # the task's id ("" for the loop or fleet)
    said: str          # what was done, a sentence


class NotApplicable(Exception):
    """The action does not apply here; the message says what does."""
    code = exitcodes.NOT_APPLICABLE


class NothingRuns(NotApplicable):
    """The action needs a running loop or monitor, and none runs."""
    code = exitcodes.NOT_RUNNING


class Failed(Exception):
    """The action was tried and did not work (a merge that conflicts, a revert that cannot apply)."""
    code = exitcodes.ERROR
