"""The environment a phase's agent gets: Claude Code's stream watchdog set from AGENT_STREAM_IDLE_WINDOW."""

from __future__ import annotations

import pytest

from genesis.config import layout_for, resolve
from genesis.loop.step import STREAM_IDLE_VAR, Step, agent_env

RUN = "run-env"


def step_of(project, **knobs: str) -> Step:
    cfg = resolve(project, env=knobs)
    return Step(cfg, layout_for(cfg), RUN, lambda msg, kind="info": None)


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv(STREAM_IDLE_VAR, raising=False)


def test_claude_codes_stream_watchdog_gets_the_window_in_milliseconds(project):
    assert agent_env(step_of(project), "Builder", 1)[STREAM_IDLE_VAR] == "120000"
    assert agent_env(step_of(project, AGENT_STREAM_IDLE_WINDOW="45s"), "Builder", 1)[STREAM_IDLE_VAR] == "45000"


def test_the_users_own_value_stands_and_zero_or_another_cli_leaves_it_unset(project, monkeypatch):
    assert STREAM_IDLE_VAR not in agent_env(step_of(project, AGENT_STREAM_IDLE_WINDOW="0"), "Builder", 1)
    assert STREAM_IDLE_VAR not in agent_env(step_of(project, GENESIS_AGENT_CMD="codex exec"), "Builder", 1)
    monkeypatch.setenv(STREAM_IDLE_VAR, "600000")
    assert agent_env(step_of(project), "Builder", 1)[STREAM_IDLE_VAR] == "600000"
