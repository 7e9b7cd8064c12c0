"""Fixtures for the loop's steps: a Step on a real project, its words kept for the test."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.agent import script

from genesis.config import layout_for, resolve
from genesis.loop.preflight import preflight
from genesis.loop.step import Step
from genesis.store.layout import private_dir
from genesis.store.looplock import release


@pytest.fixture
def said() -> list[tuple[str, str]]:
    """What the step said, as (kind, message)."""
    return []


@pytest.fixture
def step(project: Path, said, request) -> Step:
    """A started run's step with the defaults; its run id is the test module's RUN."""
    cfg = resolve(project, env={})
    lay = layout_for(cfg)
    private_dir(lay.state_dir)
    made = Step(cfg, lay, request.module.RUN, lambda msg, kind="info": said.append((kind, msg)))
    made.event("loop_start")
    return made


@pytest.fixture
def preflighted(said, request):
    """preflighted(cfg, **flags): the preflight of the test module's run RUN on these settings,
    as the loop calls it, the loop's lock released after: its step."""
    run_id = request.module.RUN

    def run(cfg, **flags) -> Step:
        lay = layout_for(cfg)
        private_dir(lay.state_dir)
        step = Step(cfg, lay, run_id, lambda msg, kind="info": said.append((kind, msg)))
        fd = os.open(lay.loop_lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            preflight(step, os.getpid(), fd, **flags)
        finally:
            release(lay.loop_record, run_id)
            os.close(fd)
        return step

    return run


@pytest.fixture
def start(project: Path, tmp_path: Path, preflighted):
    """start(**flags): the preflight of the test module's run RUN with a small agent script,
    as the loop calls it."""
    agent = script(tmp_path / "agent.sh", "#!/bin/sh\nexit 0\n")
    cfg = resolve(project, env={"GENESIS_AGENT_CMD": str(agent), "GENESIS_PHASES": "Builder"})

    def run(auto_commit: bool = True, **flags) -> Step:
        return preflighted(replace(cfg, auto_commit=auto_commit), **flags)

    return run
