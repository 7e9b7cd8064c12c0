"""A red merge goes back to its task: the work its child verified failed the checks of the
merged tree (fleet/mergecheck.py, the merge test), so it did not land.

By the ladder's rules (fleet/ladder.py): the attempt counts as failed, as if it had ended so;
while the ladder has a restart or an escalation left, the task goes back to a new attempt on
its branch, told what failed: Genesis reopens the task there (`[ ]`, with a `Genesis:` note
under it giving the failed check and its output's last lines, redacted), committed alone on
the branch. With the ladder spent, it goes to review (nothing here: the caller's review path).
Either way the run is recorded in the fleet ledger as the merge's evidence (`merge_red`).
decide() is pure, replayed in tests.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from genesis.fleet import ladder
from genesis.fleet.ledger import Attempt, FleetLedger, TaskRow
from genesis.fleet.taskref import PLANNER
from genesis.fleet.worktrees import Git
from genesis.repo.gitcmd import GitFailed
from genesis.repo.signing import probe
from genesis.repo.tasks import OPEN, TASKS_FILE, reopened
from genesis.when import stamp

__all__ = ["decide", "note_of", "send_back", "RED_EVENT", "NOTE_CHARS"]

RED_EVENT = "merge_red"
NOTE_CHARS = 900     # the note under the reopened task: the failure and the output's last lines


def decide(row: TaskRow, history: Sequence[Attempt], attempt: int, policy: ladder.LadderPolicy,
           now: float) -> ladder.Rung:
    """The ladder's step for a task whose attempt `attempt` ended verified but merged red: that
    attempt counted failed, the attempts since the task was last opened (as the monitor climbs)."""
    fresh = max((a.attempt for a in history if a.kind == "start"), default=0)
    mine = [replace(a, outcome="failed") if a.attempt == attempt and a.outcome == "verified" else a
            for a in history if a.task_id == row.id and a.attempt >= fresh]
    if not any(a.attempt == attempt for a in mine):
        return ladder.Rung("none", row.strategy, math.inf, f"attempt {attempt} is not in the task's history")
    return ladder.next_rung(row, mine, policy, now)


def note_of(target: str, why: str, tail: Sequence[str], when: float) -> str:
    """The note the next attempt finds under its task: what failed at the merge, and how it ended."""
    said = f"reopened {stamp(when)}: its merge onto {target} was red: {why}"
    if tail:
        said += ". The output ends: " + " | ".join(tail)
    said = " ".join(said.split())
    return said if len(said) <= NOTE_CHARS else said[:NOTE_CHARS - 3] + "..."


def send_back(ledger: FleetLedger, row: TaskRow, result, policy: ladder.LadderPolicy, target: str, hooks: bool,
              now: float) -> str:
    """Record the red merge; when the ladder sends the task to a new attempt, reopen it on its
    branch, count the attempt failed and say why (the caller climbs the ladder with it). ""
    when the task goes to review instead (the ladder spent, a Planner's branch, no worktree, or
    git could not reopen it)."""
    why = (result.detail or result.outcome).split("\n", 1)[0]
    rung = decide(row, ledger.attempts(row.id), row.attempts, policy, now)
    back = rung.action in ("restart", "escalate") and not row.id.startswith(PLANNER) and bool(row.worktree)
    sha = ""
    if back:
        try:
            sha = _reopen(Path(row.worktree), row.branch, row.text, note_of(target, why, result.tail, now),
                          hooks)
        except (GitFailed, OSError) as exc:
            why += f" (the task could not be reopened on its branch: {exc})"
            back = False
    ledger.record(RED_EVENT, row.id, attempt=row.attempts, reason=why, checks=list(result.checks),
                  tail=list(result.tail), to="task" if back else "review", sha=sha)
    if not back:
        return ""
    ledger.refute_attempt(row.id, row.attempts)
    return f"its merge onto {target} was red: {why}"


def _reopen(worktree: Path, branch: str, task: str, note: str, hooks: bool) -> str:
    """The task set back `[ ]` with the note, in a commit alone on its branch (checked out in its
    worktree, clean: the merge left it so); the commit, or "" when the branch has no such tick."""
    signing = probe(worktree)
    git = Git(worktree, hooks, signing.unsigned, signing.configured and not signing.unsigned)
    if git("symbolic-ref", "-q", "--short", "HEAD").text.strip() != branch:
        raise GitFailed(f"{worktree} is not on {branch}")
    path = worktree / TASKS_FILE
    edited = reopened(path.read_text(encoding="utf-8"), task, OPEN, note)
    if edited is None:
        return ""
    path.write_text(edited, encoding="utf-8")
    git.out("commit", "-q", "-m", f"Genesis: reopen {task[:120]}: its merge was red", "--", TASKS_FILE,
            identity=True)
    return git.out("rev-parse", "HEAD")
