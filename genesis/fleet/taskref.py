"""A fleet task: an open task of TASKS.md, with the id and branch the fleet knows it by.

The id is made from the task's text alone (a readable slug and a short hash), so the same
task keeps its id, worktree and branch across monitor restarts, and two tasks of different
texts never share them. repo/tasks.py is the one grammar of TASKS.md; this reads through it.

Its branch is `genesis/task/<id>` (BRANCH_PREFIX): the same text, the same branch.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from genesis.repo.tasks import OPEN, Task, Tasks, read_tasks

__all__ = ["TaskRef", "BRANCH_PREFIX", "PLANNER", "task_id", "branch_for", "ref_of", "open_refs", "read_open"]

BRANCH_PREFIX = "genesis/task/"
PLANNER = "planner-"  # the id prefix of the fleet's row for the Planner's pass (not a task of TASKS.md)
SLUG_CHARS = 40
HASH_CHARS = 6
NOT_SLUG_RE = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class TaskRef:
    id: str         # slug of the text + "-" + sha1(text)[:6]
    text: str       # the task's text as written in TASKS.md (what follows the box)
    line: int       # its line when it was read (a hint: the text is what identifies it)

    @property
    def branch(self) -> str:
        return branch_for(self.id)


def task_id(text: str) -> str:
    """`add-a-health-endpoint-3f2a9c`: stable for the same text, a valid ref and file name."""
    slug = NOT_SLUG_RE.sub("-", text.lower()).strip("-")[:SLUG_CHARS].rstrip("-") or "task"
    return f"{slug}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:HASH_CHARS]}"


def branch_for(task_id: str) -> str:
    """The task's branch (short name)."""
    return BRANCH_PREFIX + task_id


def ref_of(task: Task) -> TaskRef:
    return TaskRef(task_id(task.text), task.text, task.line)


def open_refs(tasks: Tasks) -> list[TaskRef]:
    """The open tasks in order; the same text twice is one task (one id, one branch)."""
    seen: dict[str, TaskRef] = {}
    for task in tasks.items:
        if task.state == OPEN and task.text:
            ref = ref_of(task)
            seen.setdefault(ref.id, ref)
    return list(seen.values())


def read_open(project: Path) -> list[TaskRef] | None:
    """The project's open tasks; None without a readable TASKS.md."""
    tasks = read_tasks(project)
    return None if tasks is None else open_refs(tasks)
