"""A process the watcher starts for its own work (an alert's deliverer) is spared: never
taken for one of the agent's orphans, so the end-of-phase sweep leaves it running."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from helpers.agent import supervised
from helpers.procs import alive
from helpers.waits import wait_for

import genesis.procs.proctree
from genesis.procs.proctree import adopted, identify, spare

RUN = "run-spared"
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def deliverer(pidfile: Path) -> list[str]:
    """A shell that starts a sleeping child, writes its pid, and ends when that child does."""
    return ["sh", "-c", f'sleep 600 & echo $! > "{pidfile}"; wait']


def test_adopted_leaves_out_a_spared_process_and_its_children_and_forgets_it_once_gone(tmp_path, procs):
    plain = procs(SLEEP)
    since = identify(plain.pid).create_time
    spared = procs(deliverer(tmp_path / "child.pid"))
    pidfile = tmp_path / "child.pid"
    wait_for(lambda: pidfile.exists() and pidfile.read_text().endswith("\n"), 10, "the deliverer's child")
    child = int(pidfile.read_text())
    assert {p.pid for p in adopted(since)} >= {plain.pid, spared.pid, child}  # not spared yet: all listed

    spare(spared.pid)
    found = {p.pid for p in adopted(since)}
    assert plain.pid in found and spared.pid not in found and child not in found
    assert identify(spared.pid) in genesis.procs.proctree._SPARED

    ident = identify(spared.pid)
    os.kill(child, 9)  # the deliverer's work ends; so does the deliverer
    spared.wait(10)
    adopted(since)
    assert ident not in genesis.procs.proctree._SPARED


def test_sparing_a_process_already_gone_spares_nothing(procs):
    gone = procs(["true"])
    gone.wait(10)
    before = set(genesis.procs.proctree._SPARED)
    spare(gone.pid)
    assert genesis.procs.proctree._SPARED == before


def test_the_end_of_phase_sweep_leaves_a_spared_process_and_ends_an_unspared_one(tmp_path, procs):
    # Both are started by the watcher's own process during the agent's run, as a deliverer
    # is: descendants of the watcher started after the agent, what its sweep takes for orphans.
    started: dict[str, int] = {}
    go = tmp_path / "go"

    def on_check() -> None:
        if not started:
            started["spared"] = procs(SLEEP).pid
            started["unspared"] = procs(SLEEP).pid
            spare(started["spared"])
            go.touch()

    agent = f'"$HOOK" Bash </dev/null\nwhile [ ! -e "{go}" ]; do sleep 0.05; done\nexit 0\n'
    out, notes, _ = supervised(tmp_path, agent, run_id=RUN, on_check=on_check, stale_after=30.0, max_runtime=60.0)

    assert (out.status, out.returncode) == ("exited", 0)
    assert alive(started["spared"])
    assert not alive(started["unspared"])
    assert out.swept == 1
    [said] = [n for n in notes if n.startswith("ended 1 process(es) the agent left behind")]
    assert f"pid {started['unspared']} " in said and "re-parented to the watcher, its subreaper" in said
