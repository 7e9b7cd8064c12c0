"""A fleet task's merges with their evidence, as the fleet ledger records them: each landed
merge with the checks run on the merged tree, each red one (a check failed: not landed, the
output's last lines kept), each that dropped lines a side added (not landed, the hunks named).

Read by the fleet's report, `fleet status` and the dashboard alike; light to import (every
`genesis` command imports fleet status).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from genesis.fleet.ledger import FleetEvent
from genesis.loop.claims import CheckRun
from genesis.redact import redact
from genesis.when import clock
from genesis.words import one_line

__all__ = ["MergeEvidence", "MERGE_EVENTS", "merges_of", "merge_line"]

MERGE_EVENTS = ("merged", "merge_red", "needs_review")   # the events a merge's evidence is read from


@dataclass(frozen=True)
class MergeEvidence:
    """One merge of the task: the merged tree's checks as run, and what came of it."""
    at: float
    result: str                    # green (landed), red (a check failed: not landed), dropped (lines lost)
    checks: tuple[str, ...]        # each check's run, in words
    tail: tuple[str, ...] = ()     # red: the failed check's output's last lines, redacted
    lost: tuple[str, ...] = ()     # dropped: each lost hunk, in words
    to: str = ""                   # red: where the task went (task: a new attempt; review)


def merges_of(events: Sequence[FleetEvent]) -> tuple[MergeEvidence, ...]:
    """A task's merges with their evidence, oldest first: each landed one with checks run, each
    red one, each that dropped lines (a review for another cause is no merge evidence)."""
    found = []
    for e in sorted(events, key=lambda e: e.seq):
        d = e.detail if isinstance(e.detail, dict) else {}
        raw = d.get("checks") if isinstance(d.get("checks"), list) else []
        checks = tuple(_check_said(c) for c in raw if isinstance(c, dict))
        if e.kind == "merged" and checks:
            found.append(MergeEvidence(e.at, "green", checks))
        elif e.kind == "merge_red":
            found.append(MergeEvidence(e.at, "red", checks, _strs(d.get("tail")), to=str(d.get("to") or "")))
        elif e.kind == "needs_review" and d.get("outcome") == "dropped":
            found.append(MergeEvidence(e.at, "dropped", (), lost=_strs(d.get("lost"))))
    return tuple(found)


def merge_line(m: MergeEvidence) -> str:
    """`01:10 CET green, landed: the project's check `make test` exited 0 (after 3s)`."""
    back = f" (back to {'its task' if m.to == 'task' else 'review'})" if m.to else ""
    said = {"green": "green, landed", "red": f"red, not landed{back}",
            "dropped": "dropped lines, not landed"}.get(m.result, m.result)
    what = "; ".join(m.lost if m.result == "dropped" else m.checks)
    return f"{clock(m.at)} {said}" + (f": {one_line(redact(what), 600)}" if what else "")


def _check_said(c: dict) -> str:
    """A check's run as the merge recorded it, in words (claims.CheckRun.said)."""
    code = c.get("exit_code")
    seconds = c.get("seconds")
    seconds = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0
    run = CheckRun(str(c.get("kind") or "?"), str(c.get("command") or ""), code if isinstance(code, int) else None,
                   seconds, (), bool(c.get("timed_out")), str(c.get("error") or ""))
    return f"the {run.kind}'s check {run.said()}"


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()
