"""The agent tree's caps with real processes: a (bounded) fork bomb meets the pids cap and its
phase ends saying so; a /tmp filled in the box meets the memory cap; the watcher is untouched."""

from __future__ import annotations

import os
import sys

import pytest
from helpers.agent import supervised

from genesis.procs import caps, cgroups
from genesis.sandbox.box import BUBBLEWRAP, Box
from genesis.sandbox.detect import probe
from genesis.sandbox.places import Places

MACHINE = probe()


def _capable() -> str:
    """Why no cap can be set here ("" when one can): a v2 group with controllers, or v1's hierarchies."""
    group, why = cgroups.create("caps-probe")
    if group is not None:
        pids = (group.path / "pids.max").exists()
        group.remove()
        if pids:
            return ""
    got, why_v1 = caps.open_v1(f"genesis-caps-probe-{os.getpid()}", 100, None)
    if got is None:
        return f"no cgroup to cap in: {why}; {why_v1}"
    got.remove()
    return ""


NO_CAP = _capable()
needs_caps = pytest.mark.skipif(bool(NO_CAP), reason=NO_CAP or "caps settable")

# Forks until refused (at most 400 children, each gone within 20s): the bomb's own tally, then out.
BOMB = f"""#!/usr/bin/env bash
exec {sys.executable} - <<'PY'
import os, time
made = refused = 0
for _ in range(400):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    made += 1
print(f"made={{made}} refused={{refused}}", flush=True)
PY
"""


@needs_caps
def test_a_fork_bomb_meets_the_pids_cap_and_the_phase_says_so(tmp_path):
    out, _notes, _ = supervised(tmp_path, BOMB, run_id="run-caps-bomb", pids_max=40, check_interval=5.0)
    assert out.status == "exited" and out.returncode == 0, out
    said = (tmp_path / "agent.log").read_text()
    made = int(said.split("made=")[1].split()[0])
    assert made < 40 and "refused=0" not in said, said
    assert "met its process cap (GENESIS_AGENT_PIDS_MAX=40)" in out.capped and "fork(s) refused" in out.capped, out
    assert os.fork  # the watcher itself forks on: this very test goes on


@needs_caps
@pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")
def test_a_tmp_filled_in_the_box_meets_the_memory_cap(tmp_path):
    real = os.path.realpath(tmp_path)
    box = Box(BUBBLEWRAP, Places(real, real, None, None, (real,), (), f"{real}/hb"), program=MACHINE.bwrap)
    fill = "head -c 600M /dev/zero > /tmp/fill; echo \"wrote rc=$?\"\n"
    out, _notes, _ = supervised(tmp_path, fill, run_id="run-caps-tmp", memory_max=128 << 20, check_interval=5.0,
                                box=box)
    assert out.status == "exited" and out.returncode != 0, out
    assert "the memory cap (GENESIS_AGENT_MEMORY_MAX, 128M) killed" in out.capped, out
    assert "a filled /tmp counts" in out.capped
