"""Seed 000's load tests on this machine: many children with heartbeats under one monitor,
and a cascade (half the children killed at once).

Usage: .venv/bin/python bench/fleet_load.py [--children 50] [--beats 5] [--every 4] [--cascade 20]

Each child is a real Genesis loop (bash loop, companion, watcher, the default box) in its own
worktree; once all of them run, `genesis stop` is asked and every agent fires the real
heartbeat hook `--beats` times, `--every` seconds apart; each child then ends after its phase. The monitor runs with the shipped defaults but for a 0.2 s launch
stagger (50 launches 5 s apart would measure the stagger). Printed: heartbeats fired and
seen (a beat is missed when a newer one replaced it before a check saw it), the longest
beat-to-sighting lag, the monitor's CPU, Genesis's own memory per child (its processes,
not the agent's), the fleet ledger's writes per second, and the wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
LOOP = ROOT / "start-multi-agent-loop.sh"
sys.path.insert(0, str(ROOT))

from genesis.fleet.ledger import FleetLedger  # noqa: E402
from genesis.health.heartbeat import hook_script  # noqa: E402
from genesis.store.layout import state_dir_of  # noqa: E402

# Says it started, waits until every agent of the fleet has (the harness opens the gate), fires
# the real hook BEATS times EVERY seconds apart, and ends its phase without ticking its task:
# the harness has stopped the fleet by then, so each child ends by the stop flag after this
# one phase (no merge: this measures supervision, not git).
AGENT = r"""#!/usr/bin/env bash
set -euo pipefail
echo "$$" >>"${GATES}/started"
while [[ -e ${GATES}/closed ]]; do sleep 0.2; done
for _ in $(seq "${BEATS}"); do
  sleep "${EVERY}"
  bash "${BEAT_HOOK}" load_beat </dev/null
done
"""

GIT_ID = {"GIT_AUTHOR_NAME": "Load", "GIT_AUTHOR_EMAIL": "load@example.invalid",
          "GIT_COMMITTER_NAME": "Load", "GIT_COMMITTER_EMAIL": "load@example.invalid"}


@dataclass(frozen=True)
class Load:
    children: int
    peak: int                  # child loops alive at once, at most
    fired: int                 # heartbeats the agents fired
    seen: int                  # heartbeats the monitor counted
    children_fully_seen: int   # children whose every beat was seen
    lag_max: float             # s, beat to sighting, the worst child
    monitor_cpu: float         # s of CPU the monitor used
    monitor_cpu_share: float   # of one core, over the run
    genesis_mb_per_child: float  # Genesis's own resident memory per child, all children alive (median sample)
    ledger_writes: int         # fleet ledger rows written (events + heartbeat sightings)
    writes_per_s: float        # over the run
    capacity_per_s: float      # the fleet ledger's writes per second, one transaction each, measured apart
    wall: float
    exit_code: int
    restarts: int


def project_with_tasks(path: Path, n: int) -> Path:
    path.mkdir(parents=True)
    env = {**os.environ, **GIT_ID}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    (path / "TASKS.md").write_text("# Tasks\n\n" + "".join(f"- [ ] load task {i:02d}\n" for i in range(n)))
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-qm", "tasks"], cwd=path, check=True, env=env)
    for key, value in (("user.name", "Load"), ("user.email", "load@example.invalid")):
        subprocess.run(["git", "config", key, value], cwd=path, check=True)
    return path


def _genesis_rss(monitor: psutil.Process, agent: str) -> tuple[int, int]:
    """Resident bytes of Genesis's own processes under the monitor (the loops' bash, companions,
    watchers and steps; not the agents' boxes and trees), and how many child loops run."""
    total, projects = 0, set()
    try:
        procs = monitor.children(recursive=True)
    except psutil.Error:
        return 0, 0
    for proc in procs:
        try:
            argv = proc.cmdline()
            if not argv or agent in argv or argv[0] in ("bwrap", "sleep"):
                continue
            if any(a.endswith("start-multi-agent-loop.sh") for a in argv) and "--project" in argv:
                projects.add(argv[argv.index("--project") + 1])
            if argv[0].endswith("bash") or "genesis" in " ".join(argv[:3]):
                total += proc.memory_info().rss
        except (psutil.Error, IndexError):
            continue
    return total, len(projects)


def ledger_capacity(path: Path, writes: int = 2000) -> float:
    """Sightings written one transaction each, as fast as the fleet ledger takes them: writes/s."""
    with FleetLedger.open(path) as ledger:
        started = time.perf_counter()
        for n in range(writes):
            ledger.note_beats([(f"t{n % 50}", "run", float(n), float(n) + 0.1)])
        return writes / (time.perf_counter() - started)


def started_agents(path: Path) -> int:
    try:
        return len(path.read_text().split())
    except OSError:
        return 0


def start_fleet(workdir: Path, children: int, env_extra: dict[str, str]) -> tuple[Path, Path, subprocess.Popen]:
    project = project_with_tasks(workdir / "project", children)
    agent = workdir / "agent.sh"
    agent.write_text(AGENT)
    gates = workdir / "gates"
    gates.mkdir()
    (gates / "closed").touch()
    env = {**os.environ, "BEATS": "1", "EVERY": "1", "BEAT_HOOK": str(hook_script()), "GATES": str(gates),
           "GENESIS_FLEET_STAGGER_SECONDS": "0.2", **env_extra}
    for key in [k for k in env if k.startswith(("GENESIS_NOTIFY_", "CLAUDE"))]:
        del env[key]
    log = open(workdir / "fleet.log", "ab")
    fleet = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--parallel", str(children),
                              "--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder"],
                             env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    return project, gates, fleet


def run_load(workdir: Path, children: int = 50, beats: int = 5, every: float = 4.0,
             timeout: float = 600.0) -> Load:
    """A fleet of `children` at --parallel `children`; once every agent runs: `genesis stop`, then
    the agents beat `beats` times at once, and each child ends after that one phase."""
    started = time.monotonic()
    project, gates, fleet = start_fleet(workdir, children, {"BEATS": str(beats), "EVERY": str(every)})
    agent = workdir / "agent.sh"
    genesis = Path(sys.executable).parent / "genesis"
    samples: list[float] = []
    peak, cpu, stopped = 0, 0.0, False
    try:
        monitor = psutil.Process(fleet.pid)
        while fleet.poll() is None and time.monotonic() - started < timeout:
            time.sleep(0.5)
            try:
                times = monitor.cpu_times()
                cpu = times.user + times.system
                rss, loops = _genesis_rss(monitor, str(agent))
            except psutil.Error:
                continue
            peak = max(peak, loops)
            if loops >= children:
                samples.append(rss / loops)
            if not stopped and started_agents(gates / "started") >= children:
                subprocess.run([str(genesis), "--project", str(project), "stop"], capture_output=True, timeout=60)
                (gates / "closed").unlink()
                stopped = True
        if fleet.poll() is None:
            os.killpg(fleet.pid, 2)
            fleet.wait(60)
    finally:
        if fleet.poll() is None:
            os.killpg(fleet.pid, 9)
    wall = time.monotonic() - started
    with FleetLedger.open(state_dir_of(project) / "fleet" / "ledger.sqlite3", readonly=True) as ledger:
        seen_by_task = ledger.beats()
        events = len(ledger.events())
        restarts = len(ledger.events("restart")) + len(ledger.events("escalate"))
    seen = sum(b.seen for b in seen_by_task.values())
    full = sum(1 for b in seen_by_task.values() if b.seen == beats)
    samples.sort()
    writes = events + seen
    return Load(children, peak, children * beats, seen, full,
                max((b.lag_max for b in seen_by_task.values()), default=0.0), cpu, cpu / wall if wall else 0.0,
                (samples[len(samples) // 2] / (1 << 20)) if samples else 0.0, writes,
                writes / wall if wall else 0.0, ledger_capacity(workdir / "capacity.sqlite3"), wall,
                fleet.returncode if fleet.returncode is not None else -1, restarts)


@dataclass(frozen=True)
class Cascade:
    children: int
    killed: int
    detected_after: float      # s from the kills to the monitor's cascade pause
    ends_before_pause: int     # child ends seen when the pause was decided
    restarts: int              # restarts and escalations in the whole run
    criticals: int             # critical alerts raised
    wall: float


def run_cascade(workdir: Path, children: int = 20, killed: int = 10, timeout: float = 300.0) -> Cascade:
    """`killed` of `children` running child loops SIGKILLed at once, with the shipped cascade and
    restart-budget defaults: when the monitor pauses, what it restarts, what it tells."""
    started = time.monotonic()
    project, gates, fleet = start_fleet(workdir, children, {})
    ledger_path = state_dir_of(project) / "fleet" / "ledger.sqlite3"
    try:
        while started_agents(gates / "started") < children:
            if fleet.poll() is not None or time.monotonic() - started > timeout:
                raise RuntimeError(f"the fleet did not start {children} agents: see {workdir / 'fleet.log'}")
            time.sleep(0.5)
        with FleetLedger.open(ledger_path, readonly=True) as ledger:
            loops = sorted(e.detail["pid"] for e in ledger.events("launch"))[:killed]
        kill_at = time.time()
        for pid in loops:
            os.kill(pid, 9)
        pause = None
        while pause is None and time.monotonic() - started < timeout:
            time.sleep(0.2)
            with FleetLedger.open(ledger_path, readonly=True) as ledger:
                pause = ledger.last_event("cascade_pause")
        time.sleep(5)  # a few checks more: what the monitor does once paused
        with FleetLedger.open(ledger_path, readonly=True) as ledger:
            events = ledger.events()
    finally:
        if fleet.poll() is None:
            os.killpg(fleet.pid, 15)
            fleet.wait(180)
    ends = [e for e in events if e.kind == "child_end"]
    return Cascade(children, killed, (pause.at - kill_at) if pause else float("nan"),
                   len([e for e in ends if pause and e.seq < pause.seq]),
                   len([e for e in events if e.kind in ("restart", "escalate")]),
                   len([e for e in events if e.kind == "alert" and e.detail.get("severity") == "critical"]),
                   time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--beats", type=int, default=5)
    parser.add_argument("--every", type=float, default=4.0)
    parser.add_argument("--cascade", type=int, default=20, help="children of the cascade run (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="genesis-fleet-load.") as tmp:
        load = run_load(Path(tmp), args.children, args.beats, args.every)
    cascade = None
    if args.cascade:
        with tempfile.TemporaryDirectory(prefix="genesis-fleet-cascade.") as tmp:
            cascade = run_cascade(Path(tmp), args.cascade, args.cascade // 2)
    print(f"children                      {load.children} at once at most {load.peak} "
          f"(exit {load.exit_code}, {load.restarts} restarts)")
    print(f"heartbeats fired / seen       {load.fired} / {load.seen} "
          f"({load.children_fully_seen} of {load.children} children fully seen)")
    print(f"longest beat-to-sighting lag  {load.lag_max:.2f} s")
    print(f"monitor CPU                   {load.monitor_cpu:.1f} s ({100 * load.monitor_cpu_share:.1f}% of one core)")
    print(f"Genesis memory per child      {load.genesis_mb_per_child:.1f} MB (all {load.children} alive)")
    print(f"fleet ledger writes           {load.ledger_writes} in the run ({load.writes_per_s:.1f}/s); "
          f"capacity {load.capacity_per_s:.0f}/s")
    print(f"wall time                     {load.wall:.1f} s")
    if cascade is not None:
        print(f"cascade: {cascade.killed} of {cascade.children} children killed at once")
        print(f"  paused after                {cascade.detected_after:.2f} s, at the {cascade.ends_before_pause}th end seen")
        print(f"  restarts (whole run)        {cascade.restarts}")
        print(f"  critical alerts             {cascade.criticals}")
        print(f"  wall time                   {cascade.wall:.1f} s")
    return 0 if load.exit_code == 0 and load.seen == load.fired else 1


if __name__ == "__main__":
    sys.exit(main())
