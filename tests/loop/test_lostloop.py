"""genesis.loop.lostloop: the end of a loop that could not record it, settled once, by
whichever of its companion and its phase's watcher comes first; a freeze recorded."""

from __future__ import annotations

import subprocess
import sys

from helpers.procs import alive

from genesis.loop.lostloop import KILLED_CODE, LOST_REASON, ended, frozen, settle, thawed
from genesis.procs.proctree import ProcId, identify

RUN = "run-lostloop"


def test_a_lost_loop_is_settled_once_its_run_reaped_and_its_end_recorded_as_killed(step, said):
    step.layout.run_dir(RUN).mkdir(parents=True, exist_ok=True)
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a step the loop left
    try:
        assert not ended(step)
        assert settle(step, [identify(left.pid)], "its companion")
        left.wait(10)
        assert not alive(left.pid)
        (end,) = step.events(kinds=("loop_end",))
        assert end["reason"] == f"{LOST_REASON} (seen by its companion)" and end["exit_code"] == KILLED_CODE == 137
        assert ("error", f"{LOST_REASON} (seen by its companion); ending what is left of its run") in said
        assert not settle(step, [], "the phase's watcher")  # the other one finds it done
        assert len(step.events(kinds=("loop_end",))) == 1
    finally:
        left.kill()
        left.wait()


def test_a_loop_that_recorded_its_own_end_is_not_settled(step):
    step.layout.run_dir(RUN).mkdir(parents=True, exist_ok=True)
    step.event("loop_end", reason="reached GENESIS_MAX_ITERATIONS=1", exit_code=0)
    assert not settle(step, [], "its companion")
    assert [e["exit_code"] for e in step.events(kinds=("loop_end",))] == [0]


def test_a_freeze_and_its_thaw_are_recorded(step, said):
    loop = ProcId(4242, 1000.0)
    frozen(step, loop, 1000.0)
    thawed(step, loop, 1000.0, 42.4)
    kinds = [(e["event"], e.get("since")) for e in step.events(kinds=("loop_frozen", "loop_thawed"))]
    assert kinds == [("loop_frozen", 1000.0), ("loop_thawed", 1000.0)]
    assert step.events(kinds=("loop_thawed",))[0]["lasted"] == 42.4
    assert said[0][0] == "error" and said[0][1].startswith("the loop (pid 4242) is frozen: stopped (SIGSTOP?) since ")
