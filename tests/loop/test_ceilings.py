"""Ceilings for a whole night: runtime and cost, checked between phases."""

from __future__ import annotations

from dataclasses import replace

from genesis import exitcodes
from genesis.config import layout_for, resolve
from genesis.loop.ceilings import deadline, reached, spent
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
