"""What a phase did to the project, for the ledger: the commits made during it (the agent's
own and the auto-commit), the files they changed, and the TASKS.md items it ticked.

Read once before the phase and once after its auto-commit; every git call is bounded, and
whatever cannot be read is left out (the report says "not known"), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genesis.repo import safety
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.tasks import DONE, done_tasks, read_tasks

__all__ = ["Before", "before", "after", "since_refs", "MAX_COMMITS", "GIT_BOUND"]

MAX_COMMITS = 200     # commits of one phase kept in the ledger
MAX_TASKS = 200       # ticked TASKS.md items of one phase kept
GIT_BOUND = 10.0      # seconds for each git call


@dataclass(frozen=True)
class Before:
    head: str | None          # HEAD's sha when the phase started (None: no commit yet, or unreadable)
    done: frozenset[str]      # TASKS.md items already ticked
    checks: tuple[tuple[str, str], ...] = ()  # (task, its check:) as TASKS.md had them: the agent's edits don't count


def _git(project: Path, *args: str) -> str | None:
    try:
        done = run_git(project, list(args), timeout=GIT_BOUND, limit=1 << 20)
    except (GitFailed, OSError):
        return None
    return done.text if done.returncode == 0 else None


def before(project: Path) -> Before:
    head = _git(project, "rev-parse", "--verify", "-q", "HEAD")
    tasks = read_tasks(project)
    if tasks is None:
        return Before(head.strip() or None if head else None, frozenset())
    return Before(head.strip() or None if head else None, tasks.texts(DONE),
                  tuple((t.text, t.check) for t in tasks.items if t.check))


def since_refs(run_id: str, iteration: int, phase: str) -> tuple[str, ...]:
    """What a phase's commits are told from: HEAD at its start and every tip the run started with
    (safety refs: they outlive a reset, a `reflog expire` and a `gc --prune=now`)."""
    return (f"{safety.phase_prefix(run_id, iteration, phase)}/HEAD", f"--glob={safety.run_prefix(run_id)}")


def after(project: Path, start: Before, since: tuple[str, ...] = (), own: str | None = None,
          orphaned: bool = False) -> dict:
    """The phase's work since `start`, as the ledger's `phase_work` detail.

    Its commits are those now in HEAD's history and not in `since` (since_refs), so that a
    switch to another branch does not count that branch's commits as the phase's; `own` (the
    auto-commit Genesis made) is always among them. `orphaned`: they are on no branch of the
    phase's (the agent switched or detached HEAD), and the detail says so.
    """
    head = (_git(project, "rev-parse", "--verify", "-q", "HEAD") or "").strip() or None
    commits: list[dict] = []
    files = None
    if head and head != start.head:
        fmt = f"--max-count={MAX_COMMITS}", "--format=%h%x09%ct%x09%s"
        log = _git(project, "log", *fmt, head, "--not", *since, "--") if since else None
        if log is None:  # no safety refs: the span from HEAD at the start, while that commit exists
            log = _git(project, "log", *fmt, f"{start.head}..{head}" if start.head else head, "--")
        if log is None and own:
            log = _git(project, "log", "-1", "--format=%h%x09%ct%x09%s", own, "--")
        for line in (log or "").splitlines():
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
    work = {"commits": commits, "files_changed": files, "tasks_done": ticked[:MAX_TASKS]}
    return {**work, "orphaned": True} if orphaned else work
