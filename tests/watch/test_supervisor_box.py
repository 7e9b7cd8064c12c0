"""The watcher with its agent in a real box: under bubblewrap the tool watch still finds the
hook's process (the hook writes its namespace's pid) and the agent's tree is the OOM killer's
first choice while the watcher is not; under Landlock the agent writes only where it may."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from helpers import paths
from helpers.agent import launcher_cli, supervised

from genesis.procs.nspid import ns_pids
from genesis.procs.proctree import command_line, descendants, identify
from genesis.sandbox import landlock
from genesis.sandbox.box import BUBBLEWRAP, LANDLOCK, Box
from genesis.sandbox.detect import probe
from genesis.sandbox.places import Places

MACHINE = probe()
needs_bwrap = pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")


def boxed(folder: Path) -> Box:
    real = os.path.realpath(folder)
    # The checkout (its .venv's Python, the hook) stays visible where it lives under /tmp, as
    # places_for keeps the agent's program and what its environment names.
    root = os.path.realpath(paths.ROOT)
    visible = (real,) + ((root,) if root.startswith("/tmp/") else ())
    places = Places(real, real, None, None, visible, (), f"{real}/hb")
    return Box(BUBBLEWRAP, places, program=MACHINE.bwrap)


@needs_bwrap
@pytest.mark.fault(46)
def test_in_the_box_a_launchers_own_work_still_is_not_its_tools(tmp_path):
    # The CLI runs the hook and its hung tool below a launcher that keeps working: the hook's
    # `pid` is the box's numbering, which the watcher must translate to find the tool's tree.
    launcher_cli(tmp_path)
    out, _, _ = supervised(tmp_path, '"$PY" cli.py\n', run_id="run-box-tool", name="launcher.sh", stale_after=30.0,
                           max_runtime=60.0, count_output=False, tool_silent=1.0, box=boxed(tmp_path))
    assert out.status == "stuck" and "inside Bash" in out.detail and "tool-silent window 1s" in out.detail, out
    assert out.kill is not None and out.kill.survivors == ()


@needs_bwrap
def test_in_the_box_the_agents_pid_is_the_command_it_runs_and_its_pid_there_too(tmp_path):
    # A quick agent, gone long before the first check: the phase's pid is still its own (the
    # host's), not bubblewrap's, and the pid it tells itself (its box's) is kept beside it.
    seen: dict[int, tuple[tuple[int, ...], set[str]]] = {}
    stop = threading.Event()

    def follow():
        me = identify(os.getpid())
        while not stop.is_set():
            for ident in descendants(me):
                ns = ns_pids(ident.pid)
                if len(ns) > 1:  # every command line it had: bubblewrap until it execs, a zombie's at its end
                    seen.setdefault(ident.pid, (ns, set()))[1].add(command_line(ident.pid))

    tracer = threading.Thread(target=follow, daemon=True)
    tracer.start()
    try:
        out, _, _ = supervised(tmp_path, 'echo $$ > told.txt\nsleep 0.5\n', run_id="run-box-pid", check_interval=5.0,
                               box=boxed(tmp_path))
    finally:
        stop.set()
        tracer.join()
    assert out.status == "exited" and out.box_pid == int((tmp_path / "told.txt").read_text()), out
    ns, lines = seen[out.pid]
    assert ns == (out.pid, out.box_pid) and f"bash {tmp_path}/agent.sh" in lines, seen


@needs_bwrap
@pytest.mark.fault(80)
def test_in_the_box_the_agents_tree_is_the_oom_killers_first_choice_never_the_watcher(tmp_path):
    agent = 'cat /proc/self/oom_score_adj > own.txt\nsh -c "cat /proc/self/oom_score_adj" > child.txt\n'
    out, _, _ = supervised(tmp_path, agent, run_id="run-box-oom", box=boxed(tmp_path))
    assert out.status == "exited", out
    assert (tmp_path / "own.txt").read_text().strip() == "1000"
    assert (tmp_path / "child.txt").read_text().strip() == "1000"
    assert open("/proc/self/oom_score_adj").read().strip() != "1000"  # the watcher's own


@pytest.mark.skipif(MACHINE.landlock_abi < 1, reason="no Landlock in this kernel")
def test_under_landlock_the_agent_writes_only_where_it_may(tmp_path):
    # Where bubblewrap cannot run: the ruleset is applied in the child before exec, for its whole tree.
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    places = Places(str(work), str(work), None, None, (), (), str(work / "hb"))
    box = Box(LANDLOCK, places, rules=landlock.prepare((str(work),), MACHINE.landlock_abi))
    agent = f'echo a > "{work}/mine.txt"; sh -c \'echo b > "{outside}/theirs.txt"\'; echo "rc=$?"\n'
    out, _, _ = supervised(work, agent, run_id="run-box-landlock", box=box, hb_dir=work / "hb")
    assert out.status == "exited", out
    assert (work / "mine.txt").read_text() == "a\n"
    assert not (outside / "theirs.txt").exists()
