"""Fixtures the end-to-end suites share: the real Claude Code and a quick stub of its API."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e.harness import CLAUDE, TOOLS, installed
from e2e.stub_api import StubAPI


@pytest.fixture(scope="module")
def claude() -> Path:
    """The real `claude` the test command installed, or the suite skipped with the reason."""
    return installed(CLAUDE, TOOLS / "claude-install.log", "Claude Code")


@pytest.fixture
def fast_stub():
    api = StubAPI(turn_delay=0.05).start()  # these scenarios watch artefacts, not heartbeats in flight
    yield api
    api.shutdown()
