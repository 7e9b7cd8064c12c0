"""The fleet's console: `[genesis fleet HH:MM:SS] ...` lines (the local monitor's, the Temporal
home's; a worker's own lines are cleaned the same way), and the words for a task's attempt
starting, ending and coming home, the same from the local monitor and the Temporal home.

A line may quote an agent or a merge's test output (a reason, a failure): escape codes and
bidi controls are taken out of every line of it, and secrets (redact.py), as the loop's console does.
"""

from __future__ import annotations

import sys
import time

from genesis.redact import redact
from genesis.words import sanitize

__all__ = ["say", "clean", "started_line", "ended_line", "merged_line"]


def say(message: str, kind: str = "info") -> None:
    stamp = time.strftime("%H:%M:%S")
    prefix = "genesis: error: " if kind == "error" else "genesis: warning: " if kind == "warn" else \
        f"[genesis fleet {stamp}] "
    message = clean(message)
    try:
        print(prefix + message, file=sys.stderr, flush=True)
    except OSError:
        pass  # the terminal went away: the ledger keeps the record


def clean(message: str) -> str:
    """A message as a console may print it: secrets redacted, escape codes and bidi controls out."""
    return "\n".join(sanitize(line, None) for line in redact(message).split("\n"))


def started_line(text: str, kind: str, attempt: int, agent: str) -> str:
    """An attempt's start; the monitor adds where it runs (its worktree and pid, or its machine)."""
    return f"started {text!r} ({kind}, attempt {attempt}, {agent})"


def ended_line(text: str, exit_code: int | None, outcome: str, reason: str) -> str:
    return f"{text!r} ended: exit {exit_code}, {outcome} ({reason})"


def merged_line(text: str, state: str, sha: str) -> str:
    return f"{text!r} {'came home' if state == 'merged' else 'is ready for review'}: {sha[:12]}"
