"""Reaping against real process trees: ours die, nothing else is touched."""

import sys
import time
from pathlib import Path

import pytest
from helpers import paths
from helpers.procs import alive, free_port, listening
from helpers.waits import wait_for

from genesis.procs.proctree import ProcId, identify, kill_all
from genesis.procs.reaper import execute, markers_for, plan_reap

SPAWN = str(paths.SPAWN)
PATTERNS = r"python[0-9.]* -m server\.main|pytest"


def read_pid(path: Path) -> int:
    wait_for(path.exists, what=f"{path}")
    return int(path.read_text())


@pytest.mark.fault(10, 13, 15)
def test_ours_die_unrelated_survive_and_a_foreign_port_is_reported(project, tmp_path, procs):
    ours_port, foreign_port = free_port(), free_port()
    marks = markers_for(project, "run-reap")
    # An "agent" of this loop left a server in its own session (orphaned) and a pytest run.
    procs([sys.executable, SPAWN, "detach", str(tmp_path / "srv.pid"), sys.executable, SPAWN, "listen",
           str(ours_port)], env=marks).wait()
    server = read_pid(tmp_path / "srv.pid")
    ours_pytest = procs([sys.executable, SPAWN, "sleep", "pytest"], env=marks)
    # The user's own processes: a pytest of another project, a server on a reaped port, and
    # a process of another Genesis loop (another project).
    their_pytest = procs([sys.executable, SPAWN, "sleep", "pytest"])
    their_server = procs([sys.executable, SPAWN, "listen", str(foreign_port)])
    other_loop = procs([sys.executable, SPAWN, "sleep", "pytest"],
                       env=markers_for(tmp_path / "elsewhere", "run-9"))
    wait_for(lambda: listening(ours_port) and listening(foreign_port), what="listeners")

    plan = plan_reap(project, "run-reap", "all", PATTERNS, (ours_port, foreign_port))
    why = {lo.ident.pid: lo.why for lo in plan.leftovers}
    assert why == {server: f"listens on port {ours_port}", ours_pytest.pid: "matches REAP_PATTERNS"}
    assert [(f.port, f.pid) for f in plan.foreign_ports] == [(foreign_port, their_server.pid)]

    report = execute(plan, grace=2.0)
    assert report.survivors == ()
    wait_for(lambda: not alive(server) and not alive(ours_pytest.pid), what="leftovers to die")
    assert not listening(ours_port)
    for proc in (their_pytest, their_server, other_loop):
        assert alive(proc.pid), proc.args
    assert listening(foreign_port)


def test_scope_matching_spares_leftovers_that_match_nothing(project, procs):
    marks = markers_for(project, "run-reap")
    plain = procs([sys.executable, SPAWN, "sleep", "plain"], env=marks)
    assert plan_reap(project, "run-reap", "matching", PATTERNS, ()).leftovers == ()
    plan = plan_reap(project, "run-reap", "all", PATTERNS, ())
    assert [lo.ident.pid for lo in plan.leftovers] == [plain.pid]


def test_dry_run_planning_kills_nothing(project, procs):
    leftover = procs([sys.executable, SPAWN, "sleep", "pytest"], env=markers_for(project, "r"))
    assert len(plan_reap(project, "r", "all", PATTERNS, ()).leftovers) == 1
    time.sleep(0.2)  # a kill, had one been sent, would have landed by now
    assert alive(leftover.pid)


@pytest.mark.fault(7)
def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(project, procs, tmp_path):
    ready = tmp_path / "ready"
    stubborn = procs([sys.executable, SPAWN, "stubborn"], env={**markers_for(project, "r"), "SPAWN_READY": str(ready)})
    wait_for(ready.exists, what="it to ignore SIGTERM")
    report = execute(plan_reap(project, "r", "all", PATTERNS, ()), grace=0.5)
    assert report.targets == 1 and report.killed == 1 and report.survivors == ()
    assert not alive(stubborn.pid)


@pytest.mark.fault(11)
def test_a_recycled_pid_is_left_alone(procs):
    bystander = procs([sys.executable, SPAWN, "sleep"])
    real = identify(bystander.pid)
    recorded = ProcId(real.pid, real.create_time - 100.0)  # same pid, another process's start time
    report = kill_all(lambda: [recorded], grace=0.2)
    assert report.targets == 0
    assert alive(bystander.pid)


@pytest.mark.fault(13)
def test_never_signals_itself_or_its_ancestors():
    import os

    import psutil

    me = psutil.Process()
    chain = [identify(os.getpid())] + [identify(p.pid) for p in me.parents()]
    report = kill_all(lambda: [c for c in chain if c], grace=0.1)
    assert report.targets == 0  # and we are still here to say so


@pytest.mark.whole
@pytest.mark.fault(14)
def test_a_forking_tree_with_setsid_and_stubborn_members_converges(project, procs):
    root = procs([sys.executable, SPAWN, "tree", "3", "3"], env=markers_for(project, "r"))
    wait_for(lambda: len(plan_reap(project, "r", "all", PATTERNS, ()).leftovers) >= 40, timeout=30,
             what="the tree to grow")
    plan = plan_reap(project, "r", "all", PATTERNS, ())
    report = execute(plan, grace=1.0)
    assert report.survivors == ()
    assert plan_reap(project, "r", "all", PATTERNS, ()).leftovers == ()
    assert root.wait(timeout=5) is not None
