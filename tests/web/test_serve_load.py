"""The dashboard's server under a fleet, in the suite: `genesis serve` streaming a 10-child
fleet (bench/serve_load.py's, every child a real loop in its own worktree and box) to one
event-stream client for 10 s. The figures (CPU, memory, latency) are the benchmark's, at 50
children for 60 s; here, what must hold whatever the machine's load: every child shows, the
events keep coming while the heartbeats do, and the server ends cleanly on SIGTERM.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from serve_load import run_serve_load  # noqa: E402

CHILDREN, SECONDS = 10, 10.0


@pytest.mark.whole
def test_ten_children_streamed_every_child_shown_events_keep_coming(tmp_path):
    load = run_serve_load(tmp_path, children=CHILDREN, seconds=SECONDS, every=2.0, timeout=240)
    assert load.tasks_shown == CHILDREN, (tmp_path / "serve.log").read_text()[-3000:]
    assert load.events >= 2                                      # the first state, and news after it
    assert load.beats_carried > 0                                # heartbeats reach the page
    assert load.serve_exit == 0
