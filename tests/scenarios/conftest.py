"""Fixtures of the whole-loop suites."""

from __future__ import annotations

import pytest
from helpers.tmux import INTERACTIVE, Terminal


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
