"""11. The box's cost: per phase start (the probe's trial box, and the agent's launch wrapped
in bubblewrap, against the same launch without it; the private HOME and the hidden sockets
against the box without them, and what choosing them costs: the places with their /run walk,
the environment with its secrets dropped and the git identity read) and per tool call (the
hook run inside the box against outside)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from common import HOOK, PY, Row, git_project
from hook_cost import PAYLOAD

import genesis
from genesis.sandbox.box import choose
from genesis.sandbox.detect import probe
from genesis.agents import adapter_named
from genesis.sandbox.places import places_for
from genesis.sandbox.sockets import Hidden

# Times n hook calls in the process it runs in, and prints their median in ms.
HOOK_TIMER = """
import statistics, subprocess, sys, time
payload, runs = sys.stdin.buffer.read(), int(sys.argv[2])
times = []
for _ in range(runs):
    start = time.perf_counter()
    subprocess.run(["bash", sys.argv[1]], input=payload, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times.append((time.perf_counter() - start) * 1000)
print(" ".join(f"{t:.4f}" for t in times))
"""


def _timed(argv: tuple[str, ...], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def run(runs: int = 30, hook_runs: int = 200) -> list[Row]:
    machine = probe()
    if machine.bwrap is None:
        return [Row(f"box: not measured ({machine.bwrap_why})", "ms", (0.0,))]
    with tempfile.TemporaryDirectory() as tmp:
        project = git_project(Path(tmp) / "project")
        state = project / ".git" / "genesis"
        (state / "heartbeats").mkdir(parents=True)
        env = {**os.environ, "GENESIS_HEARTBEAT_FILE": str(state / "heartbeats" / "Builder.json"),
               "GENESIS_AGENT": "Builder"}
        claude = adapter_named("claude")

        def choose_places():
            return places_for(project, state, state / "heartbeats", project / "orchestrator" / "logs",
                              project / "orchestrator" / "genesis.conf", Path(genesis.__file__).resolve().parent,
                              ("true",), env, agent_paths=claude.box_paths(env))
        places = choose_places()
        box = choose("bwrap", machine, places)
        # Before the private HOME: HOME and /run as they are, the same box otherwise.
        open_box = choose("bwrap", machine, replace(places, private_home=None, home_kept=(), home_hidden=(),
                                                    hidden=Hidden((), ())))
        plain, boxed, opened, probes, choosing, filtering = [], [], [], [], [], []
        for _ in range(runs):  # interleaved, so machine noise hits every case alike
            plain.append(_timed(("true",), project))
            boxed.append(_timed(box.wrap(("true",)), project))
            opened.append(_timed(open_box.wrap(("true",)), project))
            start = time.perf_counter()
            probe()
            probes.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            choose_places()
            choosing.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            box.environment(env, claude.key_vars)
            filtering.append((time.perf_counter() - start) * 1000)
        hooks = {}
        for name, wrap in (("outside", lambda argv: argv), ("inside", box.wrap)):
            done = subprocess.run(wrap((PY, "-c", HOOK_TIMER, str(HOOK), str(hook_runs))), input=PAYLOAD, env=env,
                                  cwd=project, capture_output=True, check=True)
            hooks[name] = [float(t) for t in done.stdout.split()]
        assert json.loads((state / "heartbeats" / "Builder.json").read_text())["agent"] == "Builder"
    base = "box: launch of true, no box"
    rows = [Row(base, "ms", tuple(plain)),
            Row("box: launch of true in bubblewrap", "ms", tuple(boxed), baseline=base,
                ratio=statistics.median(boxed) / statistics.median(plain),
                note="added to every phase start"),
            Row("box: the probe at a phase start (a trial box)", "ms", tuple(probes), target="<= 50 ms",
                met=statistics.median(probes) <= 50)]
    open_base = "box: launch of true in bubblewrap, HOME and /run as they are"
    rows += [Row(open_base, "ms", tuple(opened)),
             Row("box: launch of true in bubblewrap, private HOME and /run's sockets hidden", "ms", tuple(boxed),
                 baseline=open_base, ratio=statistics.median(boxed) / statistics.median(opened),
                 note=f"{len(places.home_kept)} kept in HOME, {len(places.hidden.sockets)} socket(s) and "
                      f"{len(places.hidden.folders)} folder(s) hidden"),
             Row("box: the places at a phase start (HOME kept, the /run walk)", "ms", tuple(choosing)),
             Row("box: the agent's environment (secrets dropped, git identity read)", "ms", tuple(filtering),
                 target="<= 50 ms", met=statistics.median(filtering) <= 50)]
    hook_base = "box: hook per tool call, outside the box"
    rows += [Row(hook_base, "ms", tuple(hooks["outside"])),
             Row("box: hook per tool call, inside the box", "ms", tuple(hooks["inside"]), baseline=hook_base,
                 ratio=statistics.median(hooks["inside"]) / statistics.median(hooks["outside"]),
                 target="<= 1.2x outside", met=statistics.median(hooks["inside"])
                 <= 1.2 * statistics.median(hooks["outside"]))]
    return rows
