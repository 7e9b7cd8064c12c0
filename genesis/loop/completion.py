"""When the work is done: the loop ends itself with exit 0 instead of idling into the breaker.

The rule (GENESIS_DONE_WHEN) is checked at the end of each iteration:
- `tasks` (default): TASKS.md lists no open `- [ ]` and no `- [?]` awaiting review, after a
  Planner pass in the same iteration that added nothing (with no Planner phase configured,
  the task list alone decides). No TASKS.md: never done by this rule.
- `when:COMMAND`: a bash command run in the project; exit 0 means done.
- `phrase:TEXT`: an agent's final result in this iteration contains TEXT (its final result
  only: text it echoed from files or tools never counts).
- `never`.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = ["DoneRule", "parse_done_rule", "is_done", "open_tasks", "TASKS_FILE", "PLANNER", "CHECK_TIMEOUT"]

TASKS_FILE = "TASKS.md"
PLANNER = "Planner"
CHECK_TIMEOUT = 60.0
MAX_TASKS_BYTES = 4 << 20
OPEN_RE = re.compile(rb"^\s*[-*] \[[ ?]\]", re.M)


@dataclass(frozen=True)
class DoneRule:
    kind: str            # "tasks" | "when" | "phrase" | "never"
    text: str = ""       # the command or the phrase

    def __str__(self) -> str:
        return f"{self.kind}:{self.text}" if self.text else self.kind


def parse_done_rule(text: str) -> DoneRule:
    """`tasks`, `never`, `when:COMMAND` or `phrase:TEXT`; ValueError says what is allowed."""
    text = text.strip()
    if text in ("tasks", "never"):
        return DoneRule(text)
    for kind in ("when", "phrase"):
        if text.startswith(kind + ":") and text[len(kind) + 1:].strip():
            return DoneRule(kind, text[len(kind) + 1:].strip())
    raise ValueError(f"'{text}': use tasks, never, when:COMMAND or phrase:TEXT")


def open_tasks(project: Path) -> int | None:
    """How many tasks of TASKS.md are open or await review; None without a readable TASKS.md."""
    from genesis.store.atomicio import CorruptFile, TooLarge, read_bytes

    try:
        data = read_bytes(project / TASKS_FILE, MAX_TASKS_BYTES, follow_symlinks=True)
    except (OSError, CorruptFile, TooLarge):
        return None
    return len(OPEN_RE.findall(data))


def is_done(rule: DoneRule, project: Path, phases: Iterable[str], ran: Iterable[str],
            said_done: bool, iteration: int) -> tuple[bool, str]:
    """Whether the work is done at the end of an iteration, and why (for the console).

    phases: the configured phase names; ran: those that finished this iteration;
    said_done: an agent's final result of this iteration held the completion phrase.
    """
    phases, ran = list(phases), list(ran)
    if rule.kind == "never":
        return False, "never"
    if rule.kind == "phrase":
        return said_done, f"an agent's final result said {rule.text!r}"
    if rule.kind == "when":
        env = {**os.environ, "GENESIS_ITERATION": str(iteration)}
        try:
            done = subprocess.run(["bash", "-c", rule.text], cwd=project, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=CHECK_TIMEOUT,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            return False, f"the completion check timed out after {CHECK_TIMEOUT:.0f}s"
        return done.returncode == 0, f"the completion check `{rule.text}` exited {done.returncode}"
    if PLANNER in phases and PLANNER not in ran:
        return False, "no Planner pass this iteration"
    left = open_tasks(project)
    if left is None:
        return False, f"no {TASKS_FILE}"
    if left:
        return False, f"{left} task(s) open or awaiting review in {TASKS_FILE}"
    after = "after a Planner pass that added nothing" if PLANNER in phases else "at the end of an iteration"
    return True, f"every task in {TASKS_FILE} is done ({after})"
