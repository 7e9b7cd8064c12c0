"""Fixtures for the loop's steps: a Step on a real project, its words kept for the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from genesis.config import layout_for, resolve
from genesis.loop.step import Step
from genesis.store.layout import private_dir


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
