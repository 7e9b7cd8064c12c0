"""Seed 000's first load test, in the suite: 50 children with heartbeats under one monitor on
this 2-core machine, every one a real loop in its own worktree and box, with the shipped
defaults but for a 0.2 s launch stagger. The figures (CPU,
memory per child, ledger writes) are printed by `bench/fleet_load.py`, which runs the same
fleet; here, what must hold whatever the machine's load: every child runs at once, every
heartbeat is seen, none is missed, nothing restarts, and the fleet ends cleanly.

Each agent beats every 5 s; the monitor checks every 2 s (the default), so a beat is missed
only if a check comes more than 3 s late.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_load import run_load  # noqa: E402

CHILDREN, BEATS = 50, 3

# Run last and alone by run-tests.sh: 50 loops would slow every window-timed test beside them.
pytestmark = pytest.mark.heavy


def test_fifty_children_with_heartbeats_every_beat_seen_none_missed(tmp_path):
    load = run_load(tmp_path, children=CHILDREN, beats=BEATS, every=5.0, timeout=400)
    assert load.exit_code == 0, (tmp_path / "fleet.log").read_text()[-3000:]
    assert load.peak == CHILDREN                      # all 50 loops alive at once
    assert load.fired == CHILDREN * BEATS
    assert load.seen == load.fired and load.children_fully_seen == CHILDREN  # every beat seen, none missed
    assert load.restarts == 0
    assert load.genesis_mb_per_child > 0              # measured while all ran
