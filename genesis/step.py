"""What every step of the loop shares: its configuration, layout, run id and voice."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import events
from .atomicio import DiskFull
from .config import Config
from .layout import Layout, state_dir_of
from .markers import markers_for

__all__ = ["Step", "StepFailed", "layout_for", "agent_env", "is_claude", "reads_prompt_from_stdin"]

Say = Callable[[str, str], None]


class StepFailed(Exception):
    """A step cannot go on; carries the exit code the loop should stop with."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Step:
    cfg: Config
    layout: Layout
    run_id: str
    say: Say

    def event(self, kind: str, /, **detail) -> None:
        """Record an event; on a full disk, say it instead (the record is not lost on the
        user, and the step goes on to stop the loop cleanly at its next write)."""
        try:
            events.record(self.layout.events_file, self.run_id, kind, **detail)
        except DiskFull as exc:
            self.say(f"disk full, so this was not recorded: {kind} {detail} ({exc})", "error")

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)


def layout_for(cfg: Config) -> Layout:
    return Layout(cfg.project, cfg.log_dir, cfg.stop_flag, state_dir_of(cfg.project))


def is_claude(cfg: Config) -> bool:
    from .agents import adapter_for

    return adapter_for(cfg.agent_cmd).name == "claude"


def agent_env(step: Step, phase: str, iteration: int) -> dict[str, str]:
    """The environment of a phase's agent: the caller's, the loop's markers and where to beat."""
    return {**os.environ, **markers_for(step.cfg.project, step.run_id), "GENESIS_AGENT": phase,
            "GENESIS_HEARTBEAT_FILE": str(step.layout.heartbeat_file(phase)), "GENESIS_ITERATION": str(iteration)}


def reads_prompt_from_stdin(cfg: Config) -> bool:
    """`claude -p` takes its prompt on stdin when none is given: the way for a huge prompt."""
    from .agents import adapter_for

    return adapter_for(cfg.agent_cmd).prompt_on_stdin
