"""Memory: the agent's tree is the OOM killer's first choice, never its watcher (without a box;
in one, tests/watch/test_supervisor_box.py)."""

from __future__ import annotations

import pytest
from helpers.agent import supervised


@pytest.mark.fault(80)
def test_the_agents_tree_is_the_oom_killers_first_choice_never_the_watcher(tmp_path):
    agent = 'cat /proc/self/oom_score_adj > own.txt\nsh -c "cat /proc/self/oom_score_adj" > child.txt\n'
    out, _, _ = supervised(tmp_path, agent, run_id="run-oom")
    assert out.status == "exited", out
    assert (tmp_path / "own.txt").read_text().strip() == "1000"
    assert (tmp_path / "child.txt").read_text().strip() == "1000"
    assert open("/proc/self/oom_score_adj").read().strip() != "1000"  # the watcher's own
