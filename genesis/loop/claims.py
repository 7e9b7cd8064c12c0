"""When a task an agent ticked `[x]` counts as done: on evidence Genesis gathered itself.

A phase that ticks a task `[x]` claims it. Genesis then runs the task's check (its `check:`
line in TASKS.md) and the project's (GENESIS_CHECK_CMD) in the agent's box, and records the
result in the ledger as the task's evidence (loop/taskcheck.py), where no agent can write.
What the claim is worth (judge):
- a check failed: the task is reopened (`[ ]`), the failure's tail given to the next attempt;
- no check failed, but the phases include a Criticizer and another phase ticked it: back to
  `[?]`, awaiting the Criticizer's review (nothing reaches `[x]` that no Criticizer saw);
- every check passed: done, on evidence;
- no check at all: done on the agent's word, and every view says so.
The single loop's done rule and a fleet child's "verified" count a task an agent ticked in
the run only with accepted evidence recorded after its latest claim (unproven): a task whose
reopening could not be written stays not done. Pure functions, replayed in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from genesis.repo.tasks import OPEN, REVIEW
from genesis.words import duration

__all__ = ["CheckRun", "Verdict", "judge", "unproven", "evidence_of", "CRITICIZER", "PASSED", "FAILED",
           "UNREVIEWED", "AGENT_WORD", "ACCEPTED", "EVIDENCE_EVENT", "REOPENED_EVENT"]

CRITICIZER = "Criticizer"
PASSED, FAILED, UNREVIEWED, AGENT_WORD = "passed", "failed", "unreviewed", "agent's word"
ACCEPTED = frozenset({PASSED, AGENT_WORD})
EVIDENCE_EVENT = "task_evidence"
REOPENED_EVENT = "task_reopened"


@dataclass(frozen=True)
class CheckRun:
    """One check's run, as the evidence records it."""
    kind: str                  # "task" (its check: line) or "project" (GENESIS_CHECK_CMD)
    command: str
    exit_code: int | None      # None: timed out, or could not start
    seconds: float
    tail: tuple[str, ...] = ()  # its output's last lines, made safe and redacted
    timed_out: bool = False
    error: str = ""            # why it could not start

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def said(self) -> str:
        """`pytest -q` exited 1 (after 3s), in words."""
        if self.error:
            return f"`{self.command}` could not start: {self.error}"
        if self.timed_out:
            return f"`{self.command}` ran over its time bound ({duration(self.seconds)}) and was killed"
        return f"`{self.command}` exited {self.exit_code} (after {duration(self.seconds)})"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "command": self.command, "exit_code": self.exit_code,
                "seconds": round(self.seconds, 2), "timed_out": self.timed_out, "error": self.error}


@dataclass(frozen=True)
class Verdict:
    outcome: str               # PASSED, FAILED, UNREVIEWED or AGENT_WORD
    back_to: str | None        # the box Genesis sets the task back to (OPEN, REVIEW); None: it stays done
    why: str

    def said(self) -> str:
        """The verdict for the console: `check failed, reopened: `make test` exited 2 (after 3s)`."""
        if self.outcome == AGENT_WORD:
            return "done on the agent's word (no check)"
        lead = {PASSED: "check passed", FAILED: "check failed, reopened", UNREVIEWED: "sent back for review"}
        return f"{lead.get(self.outcome, self.outcome)}: {self.why}"


def judge(runs: Sequence[CheckRun], phase: str, phases: Sequence[str]) -> Verdict:
    """What a phase's claim of a task is worth, from its checks' runs (none: it has no check)."""
    failed = [r for r in runs if not r.passed]
    if failed:
        return Verdict(FAILED, OPEN, "; ".join(r.said() for r in failed))
    if CRITICIZER in phases and phase != CRITICIZER:
        return Verdict(UNREVIEWED, REVIEW, f"ticked done by the {phase}, not by the {CRITICIZER}: it awaits review")
    if runs:
        return Verdict(PASSED, None, "; ".join(r.said() for r in runs))
    return Verdict(AGENT_WORD, None, "no check: done on the agent's word")


def _key(text: str) -> str:
    return " ".join(str(text).split())


def evidence_of(events: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each task's latest evidence event, by its text (runs of spaces as one)."""
    return {_key(e.get("task", "")): e for e in events if e.get("event") == EVIDENCE_EVENT}


def unproven(events: Iterable[Mapping[str, Any]], done: Iterable[str]) -> list[str]:
    """The tasks of `done` (`[x]` now) that a phase ticked in this run without accepted evidence
    recorded after its latest claim. events: the run's phase_work and task_evidence events,
    oldest first. A task nobody ticked in the run (done before it) is not the run's to prove."""
    claimed: dict[str, int] = {}
    latest: dict[str, tuple[int, str]] = {}
    for n, e in enumerate(events):
        if e.get("event") == "phase_work":
            for text in e.get("tasks_done") or ():
                claimed[_key(text)] = n
        elif e.get("event") == EVIDENCE_EVENT:
            latest[_key(e.get("task", ""))] = (n, str(e.get("outcome", "")))
    left = []
    for text in done:
        key = _key(text)
        if key not in claimed:
            continue
        seen = latest.get(key)
        if seen is None or seen[0] < claimed[key] or seen[1] not in ACCEPTED:
            left.append(text)
    return left
