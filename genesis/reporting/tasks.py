"""Each TASKS.md item over a run: when it was built, reviewed and verified, how many times it
was built, and the time and cost of the phases that moved it.

Read from the project's git history, not from the agents' words: the loop commits after every
phase (repo/autocommit.py), so TASKS.md at a phase's commit is the list as that phase left it,
and the box that changed between two commits is what that phase did to the item:
`[ ]` -> `[?]` built, `[?]` -> `[x]` reviewed and verified, `[?]` -> `[ ]` reviewed and sent
back, `[ ]` -> `[x]` built and verified at once. One `git cat-file --batch`, bounded in time,
output and commits read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from genesis.reporting.model import CommitRow, Night, PhaseRow
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.tasks import DONE, FAILED, OPEN, REVIEW, TASKS_FILE, parse

__all__ = ["Step", "TaskRow", "task_history", "short_lines", "MAX_COMMITS", "MAX_ROWS"]

MAX_COMMITS = 300          # commits of a run whose TASKS.md is read (the latest kept)
MAX_ROWS = 200             # items shown
GIT_BOUND = 20.0           # seconds for the one git command
OUTPUT_LIMIT = 32 << 20    # bytes of TASKS.md versions read in all
MAX_VERSION = 4 << 20      # one version bigger than this is not parsed


@dataclass(frozen=True)
class Step:
    """A phase that moved an item's box."""
    at: float              # its commit's time
    iteration: int | None
    phase: str | None
    before: str            # OPEN (also: not in the list yet), REVIEW, DONE
    after: str


@dataclass(frozen=True)
class TaskRow:
    text: str
    state: str                         # at the run's last commit (or before it, if no commit touched it)
    built: Step | None = None          # the last time it was built ([ ] -> [?] or [ ] -> [x])
    reviewed: Step | None = None       # the last review ([?] -> [x] or [?] -> [ ])
    verified: Step | None = None       # ticked done ([x]), None if it is not done now
    attempts: int = 0                  # times it was built in the run
    seconds: float | None = None       # the phases that moved it, their time in all
    cost_usd: float | None = None      # those phases' cost, each shared among the items it moved
    steps: tuple[Step, ...] = ()


def _versions(project: Path, commits: list[CommitRow]) -> list[str | None] | None:
    """TASKS.md before the first commit, then at each commit (None where it is missing or too big);
    None when git cannot say."""
    names = [f"{commits[0].sha}^:{TASKS_FILE}", *(f"{c.sha}:{TASKS_FILE}" for c in commits)]
    try:
        done = run_git(project, ["cat-file", "--batch"], stdin="".join(n + "\n" for n in names).encode(),
                       timeout=GIT_BOUND, limit=OUTPUT_LIMIT)
    except (GitFailed, OSError):
        return None
    if done.returncode != 0:
        return None
    out, at, versions = done.stdout, 0, []
    for _ in names:
        end = out.find(b"\n", at)
        if end < 0:
            return None
        header = out[at:end].split()
        at = end + 1
        if len(header) == 3 and header[1] == b"blob" and header[2].isdigit():
            size = int(header[2])
            body = out[at:at + size]
            at += size + 1
            versions.append(os.fsdecode(body) if size <= MAX_VERSION else None)
        else:
            versions.append(None)  # "missing": no TASKS.md there (or not a blob)
    return versions


def _states(text: str | None) -> dict[str, str]:
    return {} if text is None else {t.text: t.state for t in parse(text).items if t.text}


def task_history(night: Night, project: Path | None = None) -> tuple[TaskRow, ...]:
    """The run's TASKS.md items as its commits moved them; () without commits or a readable history."""
    where = Path(project or night.project) if (project or night.project) else None
    commits = list(night.commits)[-MAX_COMMITS:]
    if where is None or not commits or not where.is_dir():
        return ()
    versions = _versions(where, commits)
    if versions is None:
        return ()
    steps: dict[str, list[Step]] = {}
    order: dict[str, None] = {}
    before = _states(versions[0])
    order.update(dict.fromkeys(before))
    for commit, text in zip(commits, versions[1:]):
        if text is None:
            continue  # a commit where the list is missing or too big moves nothing
        now = _states(text)
        order.update(dict.fromkeys(now))
        for item, state in now.items():
            # An item that comes in open (the Planner wrote it) has not been worked on yet.
            if before.get(item, OPEN) != state:
                steps.setdefault(item, []).append(Step(commit.at, commit.iteration, commit.phase,
                                                       before.get(item, OPEN), state))
        before = now
    moved_by: dict[tuple[int | None, str | None], int] = {}
    for item_steps in steps.values():
        for key in {(s.iteration, s.phase) for s in item_steps}:
            moved_by[key] = moved_by.get(key, 0) + 1
    runs: dict[tuple[int | None, str | None], list[PhaseRow]] = {}
    for p in night.phases:
        runs.setdefault((p.iteration, p.phase), []).append(p)
    rows = [_row(item, before.get(item, OPEN), tuple(steps.get(item, ())), runs, moved_by)
            for item in order if item in before]
    return tuple(rows[:MAX_ROWS])


def _row(text: str, state: str, steps: tuple[Step, ...], runs: dict, moved_by: dict) -> TaskRow:
    built = [s for s in steps if s.after in (REVIEW, DONE) and s.before == OPEN]
    reviewed = [s for s in steps if s.before == REVIEW and s.after in (DONE, OPEN)]
    verified = [s for s in steps if s.after == DONE]
    seconds, cost = None, None
    for key in dict.fromkeys((s.iteration, s.phase) for s in steps):
        for p in runs.get(key, ()):  # every attempt of that phase: a retry's time is the item's too
            if p.seconds is not None:
                seconds = (seconds or 0.0) + p.seconds
            if p.cost_usd is not None:
                cost = (cost or 0.0) + p.cost_usd / moved_by.get(key, 1)
    return TaskRow(text=text, state=state, built=built[-1] if built else None,
                   reviewed=reviewed[-1] if reviewed else None,
                   verified=verified[-1] if verified and state == DONE else None,
                   attempts=len(built), seconds=seconds, cost_usd=cost, steps=steps)


def short_lines(rows: tuple[TaskRow, ...]) -> list[str]:
    """One line per item the run moved, for the text report: `[x] Add /health (built 2 times, iteration 3 Criticizer)`."""
    boxes = {OPEN: "[ ]", REVIEW: "[?]", DONE: "[x]", FAILED: "[!]"}
    lines = []
    for r in rows:
        if not r.steps:
            continue
        last = r.steps[-1]
        by = " ".join(str(v) for v in (f"iteration {last.iteration}" if last.iteration else None, last.phase) if v)
        built = f"built {r.attempts} time{'s' if r.attempts != 1 else ''}" if r.attempts else "not built"
        lines.append(f"{boxes.get(r.state, '[ ]')} {r.text} ({built}; last moved by {by or 'a commit'})")
    return lines
