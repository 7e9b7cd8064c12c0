"""An agent that cannot start: a configuration error, not a night without progress.

A phase whose agent could not be started, or exited with an error within QUICK seconds,
failed to start. START_FAILURES of them in a row, each with the same words (its exit status
and last line), stop the loop with exit 2 in the agent's own words: Claude Code as root
without IS_SANDBOX=1, a misspelled flag, a missing login. Such iterations are not counted
by the breaker while the loop cannot yet tell (fewer than START_FAILURES failures in a row,
whatever their words), so its advice ("make a change and restart") is never the answer to
a broken command.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from genesis import exitcodes
from genesis.hints import hint
from genesis.loop.step import Step
from genesis.watch.agentlog import tail
from genesis.words import one_line

__all__ = ["START_FAILURES", "QUICK", "Streak", "failed_to_start", "streak", "said", "stop_if_it_cannot_start",
           "spares_breaker"]

START_FAILURES = 3   # the same failure to start this many phases in a row is a configuration error
QUICK = 10.0         # seconds: an agent that failed sooner never got to work
WORDS_LINES = 4      # the agent's last lines quoted (a CLI's usage error often takes two or three)
OWN = "=== genesis:"  # how the lines Genesis writes into an agent's log begin


@dataclass(frozen=True)
class Streak:
    """The newest phases of the run that failed to start."""
    same: int        # in a row, with the newest one's words
    any: int         # in a row, whatever their words
    words: str       # the newest one's words ("" when the newest phase started)


def failed_to_start(event: dict) -> bool:
    """Whether a phase_end event is a failure to start: not started, or an error within QUICK seconds."""
    if event.get("status") == "not_started":
        return True
    took = event.get("duration")
    return (event.get("status") == "exited" and event.get("ending") == "failed"
            and isinstance(took, (int, float)) and took < QUICK)


def streak(phase_ends: Iterable[dict]) -> Streak:
    """The run's newest failures to start in a row, from its phase_end events (oldest first)."""
    ends = [e for e in phase_ends if e.get("event", "phase_end") == "phase_end"]
    same = count = 0
    words = ""
    for e in reversed(ends):
        if not failed_to_start(e):
            break
        detail = str(e.get("detail", ""))
        if count == 0:
            words = detail
        count += 1
        if detail == words and same == count - 1:
            same += 1
    return Streak(same, count, words)


def said(log: Path) -> str:
    """The agent's own last lines in its log (never Genesis's), as one safe line."""
    lines = [line.strip() for line in tail(log, lines=WORDS_LINES * 4) if line.strip()]
    return one_line(" / ".join([line for line in lines if not line.startswith(OWN)][-WORDS_LINES:]), 500)


def stop_if_it_cannot_start(step: Step, phase: str, command: tuple[str, ...], log: Path) -> int | None:
    """USAGE when the agent failed to start START_FAILURES times in a row with the same words
    (said, with what to do), else None."""
    now = streak(step.events(kinds=("phase_end",)))
    if now.same < START_FAILURES:
        return None
    words = said(log) or one_line(now.words)
    step.say(f"{phase}: the agent failed to start {now.same} times in a row, each within {QUICK:g}s, saying: "
             f"{words}. That is a configuration error, not a lack of progress (the breaker was not moved): fix the "
             f"agent command ({shlex.join(command)}; GENESIS_AGENT_CMD) or what it needs (its login, its flags, its "
             f"environment; `{hint(step.cfg.project, 'doctor')}` checks them), try it by hand in {step.cfg.project}, "
             f"then restart the loop", "error")
    step.event("agent_cannot_start", phase=phase, failures=now.same, words=words, command=list(command))
    return exitcodes.USAGE


def spares_breaker(step: Step, iteration: int) -> Streak | None:
    """The streak when this iteration is not to be counted by the breaker (its phases all failed
    to start, fewer than START_FAILURES in a row: a broken command not yet told from bad luck),
    else None."""
    ended = step.events(kinds=("phase_end",), iteration=iteration)
    if not ended or not all(failed_to_start(e) for e in ended):
        return None
    now = streak(step.events(kinds=("phase_end",)))
    return now if now.any < START_FAILURES else None
