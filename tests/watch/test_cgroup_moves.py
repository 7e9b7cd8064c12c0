"""A process moved into the agent's cgroup from outside is not the agent's: the cgroup alone
proves nothing to a watcher whose agent can write its own cgroup.procs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import paths
from helpers.agent import watcher_spec
from helpers.procs import alive, carries

from genesis.procs import cgroups

SPAWN = str(paths.SPAWN)
RUN_ID = "run-cgmove"

# The agent writes the two pids into its own cgroup, leaves a child of its own behind, and exits.
MOVE_IN = ('g=$(sed -n "s/^0:://p" /proc/self/cgroup)\n'
           'for pid in $MOVE; do echo "$pid" > "$CGROOT${g%/}/cgroup.procs"; done\n'
           'for pid in $MOVE; do grep -qx "0::$g" "/proc/$pid/cgroup" || exit 9; done\n'
           '"$PY" "$SPAWN" detach "$PWD/left.pid" "$PY" "$SPAWN" sleep left-behind\n'
           '"$HOOK" Bash </dev/null\n')


def cgroup_mount() -> str:
    """Where the cgroup v2 hierarchy this process sees is mounted ("" when there is none to write)."""
    probe, why = cgroups.create("probe-cgmove")
    if probe is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    probe.remove()
    path, rel, _ = cgroups.own_cgroup()
    return str(path) if rel == "/" else str(path)[:-len(rel.rstrip("/"))]


@pytest.mark.fault(81)
def test_another_loops_agent_and_a_bystander_moved_into_the_agents_cgroup_survive_the_sweep(tmp_path, procs):
    mount = cgroup_mount()
    bystander = procs([sys.executable, SPAWN, "sleep", "bystander"])
    other = procs([sys.executable, SPAWN, "sleep", "other-loops-agent"], env={"GENESIS_RUN_ID": "another-run"})
    spec_file = watcher_spec(tmp_path, MOVE_IN, run_id=RUN_ID, max_runtime=60.0, stale_after=10.0,
                             env={"MOVE": f"{bystander.pid} {other.pid}", "CGROOT": mount,
                                  "GENESIS_SANDBOX": "off"})
    watcher = procs([sys.executable, SPAWN, "supervise", str(spec_file)], start_new_session=True)
    assert watcher.wait(60) == 0
    out = json.loads((tmp_path / "outcome.json").read_text())
    assert (out["status"], out["returncode"]) == ("exited", 0)  # 9: the moves did not happen
    assert alive(bystander.pid) and alive(other.pid)
    assert carries(other.pid, {"GENESIS_RUN_ID": "another-run"})
    left = int((tmp_path / "left.pid").read_text())
    assert not alive(left)  # what the agent itself left behind is still ended
    moved = [n for n in out["notes"] if n.startswith("moved into the agent's cgroup from outside: left alone")]
    assert len(moved) == 1 and f"pid {bystander.pid} " in moved[0] and f"pid {other.pid} " in moved[0]
    ended = next(n for n in out["notes"] if n.startswith("ended "))
    assert f"pid {left} " in ended and f"pid {bystander.pid} " not in ended
    for pid in (bystander.pid, other.pid):  # moved back out: the agent's group could be removed
        assert not Path(f"/proc/{pid}/cgroup").read_text().count("genesis-")
