"""Phases: which agent runs each iteration, with which prompt, and when; and when the work is done."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from genesis.procs.condition import run_condition
from genesis.repo.tasks import OPEN, REVIEW, TASKS_FILE, not_a_file, read_tasks

__all__ = ["Trigger", "Phase", "parse_trigger", "should_run", "DoneRule", "parse_done_rule", "BUILTIN_PROMPTS",
           "TRIGGER_TIMEOUT", "TASK_CONDITIONS"]

BUILTIN_PROMPTS = Path(__file__).parent / "data" / "prompts"
TRIGGER_TIMEOUT = 60.0
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,39}$")
# The built-in conditions on TASKS.md (read with the one grammar of repo/tasks.py, in this
# process: no command, no PATH): what each asks of the task list.
TASK_CONDITIONS = {"review": "a task awaits review", "open": "a task is open", "none-open": "no task is open"}
USAGE = "use always, never, every:N, tasks:review, tasks:open, tasks:none-open, any:A,B or when:COMMAND"


@dataclass(frozen=True)
class Trigger:
    kind: str            # "always" | "never" | "every" | "tasks" | "any" | "when"
    every: int = 0       # for "every": run on iterations divisible by this
    command: str = ""    # for "when": a bash command, exit 0 means run; for "tasks": a TASK_CONDITIONS key
    parts: tuple["Trigger", ...] = ()  # for "any": run when one of these would

    def __str__(self) -> str:
        if self.kind == "every":
            return f"every:{self.every}"
        if self.kind in ("when", "tasks"):
            return f"{self.kind}:{self.command}"
        if self.kind == "any":
            return "any:" + ",".join(map(str, self.parts))
        return self.kind


@dataclass(frozen=True)
class Phase:
    name: str
    trigger: Trigger
    prompt_file: Path
    max_turns: int | None = None          # Claude Code's --max-turns for this phase
    max_budget_usd: float | None = None   # Claude Code's --max-budget-usd for this phase


def parse_trigger(text: str) -> Trigger:
    """Parse a trigger (see USAGE); ValueError says what is allowed."""
    text = text.strip()
    if text in ("always", "never"):
        return Trigger(text)
    if text.startswith("every:"):
        n = text[len("every:"):].strip()
        if n.isdigit() and int(n) >= 1:
            return Trigger("every", every=int(n))
        raise ValueError(f"'{text}': every:N needs a whole number N >= 1")
    if text.startswith("tasks:"):
        what = text[len("tasks:"):].strip()
        if what in TASK_CONDITIONS:
            return Trigger("tasks", command=what)
        raise ValueError(f"'{text}': tasks: takes " + ", ".join(f"{k} ({v})" for k, v in TASK_CONDITIONS.items()))
    if text.startswith("any:"):
        # A when: command may hold commas of its own, so it cannot be a part; it can hold its own ||.
        joins = ("any: joins two or more of always, never, every:N and tasks:... with commas, e.g. "
                 "any:every:5,tasks:none-open (join conditions inside a when: command with ||)")
        try:
            parts = tuple(parse_trigger(part) for part in text[len("any:"):].split(","))
        except ValueError as exc:
            raise ValueError(f"{exc}; {joins}") from None
        if len(parts) < 2 or any(p.kind in ("any", "when") for p in parts):
            raise ValueError(f"'{text}': {joins}")
        return Trigger("any", parts=parts)
    if text.startswith("when:") and text[len("when:"):].strip():
        return Trigger("when", command=text[len("when:"):].strip())
    raise ValueError(f"'{text}': {USAGE}")


def _tasks_due(condition: str, project: Path) -> tuple[bool, str]:
    tasks = read_tasks(project)
    if tasks is None:
        return condition == "none-open", not_a_file(project) or f"no readable {TASKS_FILE}"
    count = tasks.count(REVIEW if condition == "review" else OPEN)
    what = "awaiting review" if condition == "review" else "open"
    due = count == 0 if condition == "none-open" else count > 0
    return due, f"{count} task(s) {what} in {TASKS_FILE}"


def should_run(phase: Phase, iteration: int, project: Path, env: dict[str, str] | None = None) -> tuple[bool, str]:
    """Decide whether the phase runs this iteration; the reason is for the console."""
    return _due(phase.trigger, phase.name, iteration, project, env)


def _due(trig: Trigger, name: str, iteration: int, project: Path, env: dict[str, str] | None) -> tuple[bool, str]:
    if trig.kind == "always":
        return True, "always"
    if trig.kind == "never":
        return False, "never"
    if trig.kind == "every":
        due = iteration % trig.every == 0
        return due, f"every {trig.every} iterations"
    if trig.kind == "tasks":
        return _tasks_due(trig.command, project)
    if trig.kind == "any":
        answers = [_due(part, name, iteration, project, env) for part in trig.parts]
        due = [why for ok, why in answers if ok]
        return (True, due[0]) if due else (False, "; ".join(why for _ok, why in answers))
    odd = not_a_file(project)
    if odd:  # a condition reading the task list would wait on it for ever (until killed)
        return False, f"its condition was not run: {odd}"
    run_env = dict(os.environ if env is None else env)
    run_env.update(GENESIS_ITERATION=str(iteration), GENESIS_PHASE=name)
    status = run_condition(trig.command, project, run_env, TRIGGER_TIMEOUT)
    if status is None:
        return False, f"condition timed out after {TRIGGER_TIMEOUT:.0f}s (it was killed with everything it started)"
    return status == 0, f"its condition exited {status}"


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
