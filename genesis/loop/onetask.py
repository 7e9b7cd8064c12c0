"""A loop told to work on one task of TASKS.md (a fleet's child): GENESIS_TASK in its environment.

The task is the text that follows its box in TASKS.md, as written there. The loop's prompts
start with it, and its done rule is that task's box alone: other tasks belong to other loops
working at the same time. A task is found by its text; an agent that rewrites the task's line
(its words, not its box) has left no task of that text, so the task is not done (the console
says so): the fleet's monitor checks the same text at the branch's tip.

The task and its ports reach the agent's environment too (GENESIS_TASK, PORT...:
loop/step.agent_env).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from genesis.repo.tasks import DONE, MAX_ITEM_CHARS, OPEN, REVIEW, TASKS_FILE, not_a_file, read_tasks

__all__ = ["TASK_ENV", "task_of", "task_id_of", "with_task", "task_done"]

# What a fleet's monitor puts in a child loop's environment, passed on to its agent.
TASK_ENV = ("GENESIS_TASK", "GENESIS_TASK_ID", "PORT", "GENESIS_PORT_BASE", "GENESIS_PORT_COUNT")
_SPACE_RE = re.compile(r"[ \t]+")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def task_of(env: Mapping[str, str]) -> str | None:
    """The task this loop works on (None: every task, as a single loop does). A task's text is
    one line of TASKS.md: anything from a control character on is not part of it."""
    text = re.split(r"[\x00-\x1f\x7f]", env.get("GENESIS_TASK", ""), maxsplit=1)[0].strip()
    return text[:MAX_ITEM_CHARS] or None


def task_id_of(env: Mapping[str, str]) -> str:
    """The task's id (fleet/taskref.py: a slug and a digest), "" when unset or not an id."""
    ident = env.get("GENESIS_TASK_ID", "").strip()
    return ident if _ID_RE.fullmatch(ident) else ""


def with_task(prompt: str, task: str | None, task_id: str = "") -> str:
    """The phase's prompt, told first which one task this run works on."""
    if not task:
        return prompt
    ident = f" (id {task_id})" if task_id else ""
    return (f"This run works on ONE task of {TASKS_FILE}{ident}:\n\n    {task}\n\n"
            f"Wherever the instructions below say \"the first open task\" or \"a task\", they mean this one. "
            f"Other tasks in {TASKS_FILE} belong to other agents working at the same time: do not work on them "
            f"and do not change their lines. Change only this task's box, and keep its words as they are "
            f"(the task is found by its text).\n\n---\n\n{prompt}")


def _same(a: str, b: str) -> bool:
    return _SPACE_RE.sub(" ", a) == _SPACE_RE.sub(" ", b)


def task_done(project: Path, task: str) -> tuple[bool, str]:
    """Whether this task is `[x]` in the project's TASKS.md, and why (for the console). Every
    line with its text counts: one still open or awaiting review keeps it not done."""
    tasks = read_tasks(project)
    if tasks is None:
        return False, not_a_file(project) or f"no {TASKS_FILE}"
    mine = [t for t in tasks.items if _same(t.text, task)]
    if not mine:
        return False, (f"the task {task!r} is not in {TASKS_FILE} as written (its line was rewritten or "
                       f"removed): not done")
    states = {t.state for t in mine}
    if states & {OPEN, REVIEW}:
        state = "awaiting review" if REVIEW in states and OPEN not in states else "open"
        return False, f"the task {task!r} is {state} in {TASKS_FILE}"
    if DONE in states:
        return True, f"the task {task!r} is done in {TASKS_FILE} (other tasks are other loops')"
    return False, f"the task {task!r} is not open, awaiting review or done in {TASKS_FILE}: not done"
