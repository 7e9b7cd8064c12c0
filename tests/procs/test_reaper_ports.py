"""A fleet's child knows its port range (GENESIS_PORT_BASE, GENESIS_PORT_COUNT): a listener there
that is provably this loop's (its markers) is reaped as one on REAP_PORTS is; one that is not is
only reported. Real listeners, real signals."""

from __future__ import annotations

import socket
import sys

from helpers.procs import LISTEN, alive, listening
from helpers.waits import wait_for

from genesis.config import layout_for, resolve
from genesis.loop.reap import reap
from genesis.loop.step import Step
from genesis.procs.reaper import MAX_RANGE, markers_for, plan_reap, port_range
from genesis.store.layout import private_dir

RUN = "20260101T000000Z-96"


def free_range(count: int) -> int:
    """The first of `count` consecutive ports nobody listens on."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base = sock.getsockname()[1]
        if base + count <= 65535 and not any(listening(p) for p in range(base, base + count)):
            return base
    raise AssertionError("no free port range")


def test_the_range_is_read_from_the_environment_within_bounds():
    assert port_range({"GENESIS_PORT_BASE": "20010", "GENESIS_PORT_COUNT": "3"}) == (20010, 20011, 20012)
    assert port_range({"GENESIS_PORT_BASE": "65534", "GENESIS_PORT_COUNT": "5"}) == (65534, 65535)
    assert len(port_range({"GENESIS_PORT_BASE": "1", "GENESIS_PORT_COUNT": "99999"})) == MAX_RANGE
    assert port_range({"GENESIS_PORT_BASE": "x", "GENESIS_PORT_COUNT": "3"}) == port_range({}) == ()


def test_a_listener_in_the_childs_range_is_reaped_if_ours_and_reported_if_not(project, procs, monkeypatch):
    base = free_range(3)
    env = {"GENESIS_PORT_BASE": str(base), "GENESIS_PORT_COUNT": "3", "PORT": str(base)}
    ours = procs([sys.executable, "-c", LISTEN, str(base + 1)], env={**markers_for(project, RUN), **env})
    theirs = procs([sys.executable, "-c", LISTEN, str(base + 2)], env=env)  # same range, not this loop's
    wait_for(lambda: listening(base + 1) and listening(base + 2), what="listeners")
    # Only ports decide (REAP_SCOPE=matching, no patterns): the range is what names them.
    plan = plan_reap(project, RUN, "matching", "", port_range(env))
    assert [(lo.ident.pid, lo.why) for lo in plan.leftovers] == [(ours.pid, f"listens on port {base + 1}")]
    assert [(f.port, f.pid) for f in plan.foreign_ports] == [(base + 2, theirs.pid)]

    # The loop's reap step reads the range from its environment.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = resolve(project, env={"REAP_SCOPE": "matching", "REAP_PATTERNS": "", "REAP_PORTS": "",
                                "KILL_GRACE_SECONDS": "1"})
    lay = layout_for(cfg)
    private_dir(lay.state_dir)
    said: list[str] = []
    step = Step(cfg, lay, RUN, lambda msg, kind="info": said.append(msg))
    step.event("loop_start")
    reap(step, "after Builder")
    wait_for(lambda: not alive(ours.pid), what="our listener to be reaped")
    assert alive(theirs.pid) and listening(base + 2)
    (event,) = step.events(kinds=("reap",))
    assert event["pids"] == [ours.pid] and event["why"] == [f"listens on port {base + 1}"]
    (foreign,) = step.events(kinds=("foreign_port",))
    assert [p["port"] for p in foreign["ports"]] == [base + 2]
    assert any(f"port {base + 2} is held by pid {theirs.pid}" in m and "left alone" in m for m in said)
