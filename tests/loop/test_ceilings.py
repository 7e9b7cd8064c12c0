"""Ceilings for a whole night: runtime and cost, checked between phases."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from genesis import exitcodes
from genesis.config import layout_for, resolve
from genesis.loop.ceilings import deadline, reached, spent
from genesis.loop.phase import run_phase
from genesis.loop.step import Step, ledger_of
from genesis.store.layout import private_dir


def make_step(project, **changes) -> Step:
    cfg = replace(resolve(project, env={}), **changes)
    lay = layout_for(cfg)
    private_dir(lay.state_dir)
    return Step(cfg, lay, "run-1", lambda msg, kind="info": None)


def test_no_ceiling_by_default(project):
    step = make_step(project)
    step.event("loop_start")
    assert reached(step, 4e9) is None and deadline(step) is None


def test_the_runtime_ceiling_counts_from_the_runs_start(project):
    step = make_step(project, max_run_seconds=3600.0)
    step.event("loop_start")
    started = spent(step.events()).started
    assert started == step.events()[0]["epoch"]
    assert deadline(step) == started + 3600
    assert reached(step, started + 3599) is None
    code, why = reached(step, started + 3600)
    assert code == exitcodes.MAX_RUNTIME and "GENESIS_MAX_RUNTIME_HOURS" in why


def test_the_cost_ceiling_sums_the_agents_reported_costs_of_this_run_only(project):
    step = make_step(project, max_cost_usd=1.0)
    log = ledger_of(step.layout)
    log.record("run-0", "loop_start")
    log.record("run-0", "phase_end", cost_usd=5.0)  # another run's cost does not count
    log.record("run-1", "loop_start")
    log.record("run-1", "phase_end", cost_usd=0.6)
    log.record("run-1", "phase_end", cost_usd=None)  # an agent that reports none
    log.record("run-1", "phase_end", cost_usd=True)  # not a number
    assert reached(step, 0) is None
    log.record("run-1", "phase_end", cost_usd=0.4)
    code, why = reached(step, 0)
    assert code == exitcodes.MAX_COST and "$1.00" in why


@pytest.mark.parametrize("ceiling, code", [(dict(max_cost_usd=0.005), exitcodes.MAX_COST),
                                           (dict(max_run_seconds=60.0), exitcodes.MAX_RUNTIME)],
                         ids=["cost", "runtime"])
def test_a_ceiling_reached_stops_the_loop_before_the_next_phase_starts(project, ceiling, code):
    """Checked just before each phase, never during one: a running phase finishes first."""
    said: list[tuple[str, str]] = []
    step = make_step(project, **ceiling)
    step = Step(step.cfg, step.layout, step.run_id, lambda msg, kind="info": said.append((kind, msg)))
    ledger_of(step.layout).record(step.run_id, "loop_start", at=time.time() - 3600)  # started an hour ago
    step.event("phase_end", iteration=1, phase="Builder", cost_usd=0.006)  # one phase's reported cost
    planner = next(p for p in step.cfg.phases if p.name == "Planner")
    assert run_phase(step, planner, 1) == code
    (stop,) = step.events(kinds=("ceiling",))
    assert (stop["iteration"], stop["phase"], stop["code"]) == (1, "Planner", code)
    assert said[-1][0] == "warn" and said[-1][1].endswith(": stopping before Planner")
    assert not step.events(kinds=("phase_start",)) and not step.events(kinds=("phase_skip",))
