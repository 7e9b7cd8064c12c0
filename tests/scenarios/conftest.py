"""Fixtures of the whole-loop suites."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.tmux import INTERACTIVE, Terminal

NOTES = "#!/usr/bin/env bash\necho \"$GENESIS_AGENT was here\" >>notes.txt\n"


@pytest.fixture
def terminal():
    """Opens real terminals (tmux) for the test, each closed at its end."""
    opened: list[Terminal] = []

    def open_(env: dict[str, str], command: str = INTERACTIVE) -> Terminal:
        opened.append(Terminal(env, command))
        return opened[-1]

    yield open_
    for term in opened:
        term.close()


@pytest.fixture
def one_builder(project: Path, tmp_path: Path):
    """A project with an identity and the loop's options for a Builder-only night whose agent
    writes one line: (project, options)."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    agent = script(tmp_path / "agent.sh", NOTES)
    return project, ("--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder")
