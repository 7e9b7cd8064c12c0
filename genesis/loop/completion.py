"""When the work is done: the loop ends itself with exit 0 instead of idling into the breaker.

The rule (GENESIS_DONE_WHEN) is checked at the end of each iteration:
- `tasks` (default): TASKS.md lists no open task (`[ ]`) and none awaiting review (`[?]`), in
  the grammar of repo/tasks.py, after a Planner pass in the same iteration that added nothing
  (with no Planner phase configured, the task list alone decides). No TASKS.md: never done
  by this rule. A loop told its one task (GENESIS_TASK, a fleet's child: loop/onetask.py) is
  done when that task is `[x]`, whatever the other tasks' state.
- `when:COMMAND`: a bash command run in the project; exit 0 means done.
- `phrase:TEXT`: an agent's final result in this iteration contains TEXT (its final result
  only: text it echoed from files or tools never counts).
- `never`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from genesis.loop.onetask import task_done
from genesis.phases import DoneRule
from genesis.procs.condition import run_condition
from genesis.repo.tasks import DONE, FAILED, OPEN, REVIEW, TASKS_FILE, not_a_file, read_tasks

__all__ = ["is_done", "PLANNER", "CHECK_TIMEOUT"]

PLANNER = "Planner"
CHECK_TIMEOUT = 60.0


def is_done(rule: DoneRule, project: Path, phases: Iterable[str], ran: Iterable[str],
            said_done: bool, iteration: int, env: Mapping[str, str] | None = None,
            task: str | None = None) -> tuple[bool, str]:
    """Whether the work is done at the end of an iteration, and why (for the console).

    phases: the configured phase names; ran: those that finished this iteration;
    said_done: an agent's final result of this iteration held the completion phrase;
    env: added to a `when:` command's environment (the run's markers);
    task: the one task this loop works on (GENESIS_TASK), if told one.
    """
    phases, ran = list(phases), list(ran)
    if rule.kind == "never":
        return False, "never"
    if rule.kind == "phrase":
        return said_done, f"an agent's final result said {rule.text!r}"
    if rule.kind == "when":
        odd = not_a_file(project)
        if odd:  # a check reading the task list would wait on it for ever (until killed)
            return False, f"the completion check was not run: {odd}"
        status = run_condition(rule.text, project, {**os.environ, **(env or {}), "GENESIS_ITERATION": str(iteration)},
                               CHECK_TIMEOUT)
        if status is None:
            return False, f"the completion check timed out after {CHECK_TIMEOUT:.0f}s (killed with what it started)"
        return status == 0, f"the completion check `{rule.text}` exited {status}"
    if task:
        return task_done(project, task)
    if PLANNER in phases and PLANNER not in ran:
        return False, "no Planner pass this iteration"
    tasks = read_tasks(project)
    if tasks is None:
        return False, not_a_file(project) or f"no {TASKS_FILE}"
    if tasks.count(OPEN) or tasks.count(REVIEW):
        return False, f"{tasks.count(OPEN)} task(s) open and {tasks.count(REVIEW)} awaiting review in {TASKS_FILE}"
    after = "after a Planner pass that added nothing" if PLANNER in phases else "at the end of an iteration"
    if not tasks.count(DONE) and not tasks.count(FAILED):
        return True, f"{TASKS_FILE} lists no task ({after})"
    if tasks.count(FAILED):  # `[!]`: a fleet gave up on it; no loop takes it up again by itself
        return True, f"every task in {TASKS_FILE} is done or failed ({tasks.count(FAILED)} failed; {after})"
    return True, f"every task in {TASKS_FILE} is done ({after})"
