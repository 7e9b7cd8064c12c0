"""Phases: which agent runs each iteration, with which prompt, and when; and when the work is done."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Trigger", "Phase", "parse_trigger", "should_run", "DoneRule", "parse_done_rule", "BUILTIN_PROMPTS",
           "TRIGGER_TIMEOUT"]

BUILTIN_PROMPTS = Path(__file__).parent / "data" / "prompts"
TRIGGER_TIMEOUT = 60.0
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,39}$")


@dataclass(frozen=True)
class Trigger:
    kind: str            # "always" | "never" | "every" | "when"
    every: int = 0       # for "every": run on iterations divisible by this
    command: str = ""    # for "when": a bash command; exit 0 means run

    def __str__(self) -> str:
        if self.kind == "every":
            return f"every:{self.every}"
        if self.kind == "when":
            return f"when:{self.command}"
        return self.kind


@dataclass(frozen=True)
class Phase:
    name: str
    trigger: Trigger
    prompt_file: Path
    max_turns: int | None = None          # Claude Code's --max-turns for this phase
    max_budget_usd: float | None = None   # Claude Code's --max-budget-usd for this phase


def parse_trigger(text: str) -> Trigger:
    """Parse `always`, `never`, `every:N` or `when:COMMAND`; ValueError says what is allowed."""
    text = text.strip()
    if text in ("always", "never"):
        return Trigger(text)
    if text.startswith("every:"):
        n = text[len("every:"):].strip()
        if n.isdigit() and int(n) >= 1:
            return Trigger("every", every=int(n))
        raise ValueError(f"'{text}': every:N needs a whole number N >= 1")
    if text.startswith("when:") and text[len("when:"):].strip():
        return Trigger("when", command=text[len("when:"):].strip())
    raise ValueError(f"'{text}': use always, never, every:N or when:COMMAND")


def should_run(phase: Phase, iteration: int, project: Path, env: dict[str, str] | None = None) -> tuple[bool, str]:
    """Decide whether the phase runs this iteration; the reason is for the console."""
    trig = phase.trigger
    if trig.kind == "always":
        return True, "always"
    if trig.kind == "never":
        return False, "never"
    if trig.kind == "every":
        due = iteration % trig.every == 0
        return due, f"every {trig.every} iterations"
    run_env = dict(os.environ if env is None else env)
    run_env.update(GENESIS_ITERATION=str(iteration), GENESIS_PHASE=phase.name)
    try:
        done = subprocess.run(
            ["bash", "-c", trig.command], cwd=project, env=run_env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=TRIGGER_TIMEOUT,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return False, f"condition timed out after {TRIGGER_TIMEOUT:.0f}s"
    return done.returncode == 0, f"its condition exited {done.returncode}"


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
