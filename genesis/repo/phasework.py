"""What a phase did to the project, for the ledger: the commits made during it (the agent's
own and the auto-commit), the files they changed, and the TASKS.md items it ticked.

Read once before the phase and once after its auto-commit; every git call is bounded, and
whatever cannot be read is left out (the report says "not known"), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.tasks import done_tasks

__all__ = ["Before", "before", "after", "MAX_COMMITS", "GIT_BOUND"]

MAX_COMMITS = 200     # commits of one phase kept in the ledger
MAX_TASKS = 200       # ticked TASKS.md items of one phase kept
GIT_BOUND = 10.0      # seconds for each git call


@dataclass(frozen=True)
class Before:
    head: str | None          # HEAD's sha when the phase started (None: no commit yet, or unreadable)
    done: frozenset[str]      # TASKS.md items already ticked


def _git(project: Path, *args: str) -> str | None:
    try:
        done = run_git(project, list(args), timeout=GIT_BOUND, limit=1 << 20)
    except (GitFailed, OSError):
        return None
    return done.text if done.returncode == 0 else None


def before(project: Path) -> Before:
    head = _git(project, "rev-parse", "--verify", "-q", "HEAD")
    return Before(head.strip() or None if head else None, done_tasks(project))


def after(project: Path, start: Before) -> dict:
    """The phase's work since `start`, as the ledger's `phase_work` detail."""
    head = (_git(project, "rev-parse", "--verify", "-q", "HEAD") or "").strip() or None
    commits: list[dict] = []
    files = None
    if head and head != start.head:
        span = f"{start.head}..{head}" if start.head else head
        log = _git(project, "log", f"--max-count={MAX_COMMITS}", "--format=%h%x09%ct%x09%s", span) or ""
        for line in log.splitlines():
            sha, _, rest = line.partition("\t")
            when, _, subject = rest.partition("\t")
            if sha:
                commits.append({"sha": sha, "at": float(when) if when.isdigit() else None, "subject": subject[:300]})
        commits.reverse()  # oldest first
        if start.head:
            names = _git(project, "diff", "--name-only", "--no-renames", start.head, head)
            files = len(names.splitlines()) if names is not None else None
    elif head == start.head:
        files = 0
    ticked = sorted(done_tasks(project) - start.done)
    return {"commits": commits, "files_changed": files, "tasks_done": ticked[:MAX_TASKS]}
