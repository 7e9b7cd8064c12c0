"""15. What a loop step costs before it does anything: the CPU time (user + system) of a fresh
interpreter importing exactly what the step imports (genesis.cli and the modules its command
imports in its body), and how many modules that loads, next to a bare interpreter. The loop
runs a new `genesis` process for every step, so this is paid several times an iteration.

Usage: .venv/bin/python bench/step_imports.py [N] [--loop ITERATIONS]
  N: runs of each step's imports, interleaved (default 15); --loop: also the CPU time of the
  whole loop (start-multi-agent-loop.sh) over that many iterations of the shipped three phases
  with an agent that exits at once: every process it waited for, steps, agents and git.

Last, the same run-phase step forked from an interpreter that already imported it: what a step
would cost to start if a warm process forked each (no such step server exists; the figure says
what one would save).

CPU time, not wall time: a loaded machine stretches the latter, hardly the former. The package
is compiled to bytecode first, as run-tests.sh does (where PYTHONDONTWRITEBYTECODE is set, every
process would otherwise compile it from source, and that would be most of what is measured).
The heartbeat hook is a bash script (no Python), so it is not here.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from common import PY, ROOT, Row, git_project

CLI = "genesis.cli"
RELOCK = "genesis.loop.relock"   # a started run's step reads its snapshot (cli.py, Context.run_config)
# The loop's steps and what each imports: cli.py's command bodies.
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("python alone (no import)", ()),
    ("loop-settings (genesis.cli alone)", (CLI,)),
    ("preflight", (CLI, "genesis.loop.preflight")),
    ("iteration start / finish", (CLI, "genesis.loop.iteration", RELOCK)),
    ("run-phase / phase-lost", (CLI, "genesis.loop.phase", RELOCK)),
    ("wait", (CLI, "genesis.loop.ceilings", "genesis.loop.stopflag", "genesis.loop.waiting", RELOCK)),
    ("finish (once a run)", (CLI, "genesis.loop.finish")),
    ("companion (once a run)", (CLI, "genesis.loop.lostloop", RELOCK)),
)
# Heavy third-party or standard modules, named when a step loads them.
HEAVY = ("detect_secrets", "requests", "asyncio", "rich", "git", "email", "http", "ssl", "logging", "zipfile",
         "tomllib", "json", "sqlite3", "psutil")
REPORT = ("import sys; mods = sys.modules; "
          "print(len(mods), sum(m == 'genesis' or m.startswith('genesis.') for m in mods), "
          f"' '.join(h for h in {HEAVY!r} if h in mods))")


def _cpu(modules: tuple[str, ...], where: str) -> tuple[float, str]:
    """(CPU seconds, the child's report) of one fresh interpreter importing modules, from a
    folder outside the checkout (as a loop step runs: genesis found as installed)."""
    code = "".join(f"import {m}; " for m in modules) + REPORT
    child = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, cwd=where)
    out = child.stdout.read().decode()
    child.stdout.close()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"importing {', '.join(modules)} failed (exit {child.returncode})")
    return usage.ru_utime + usage.ru_stime, out.strip()


def run(n: int = 15) -> list[Row]:
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "genesis")], stdout=subprocess.DEVNULL, check=True)
    samples: dict[str, list[float]] = {name: [] for name, _ in STEPS}
    seen: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as where:
        for _ in range(n):   # interleaved: load that comes and goes falls on every step alike
            for name, modules in STEPS:
                took, seen[name] = _cpu(modules, where)
                samples[name].append(took * 1000)
    rows = []
    for name, _ in STEPS:
        count, ours, *heavy = seen[name].split(" ")
        note = f"{count} modules, {ours} of genesis" + (f"; loads {', '.join(heavy)}" if heavy else "")
        rows.append(Row(f"step imports: {name}", "ms CPU", tuple(samples[name]), note=note))
    return rows


FORKED = """import os, resource
for _ in range({n}):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print((used.ru_utime + used.ru_stime) / {n})"""


def forked(n: int = 15) -> Row:
    """What a phase's step would pay to start if it were forked from an interpreter that had
    already imported what it imports (a step server), not started afresh: the CPU of each fork."""
    modules = dict(STEPS)["run-phase / phase-lost"]
    code = "".join(f"import {m}; " for m in modules) + "\n" + FORKED.format(n=max(n, 50))
    with tempfile.TemporaryDirectory() as where:
        out = subprocess.run([PY, "-c", code], cwd=where, capture_output=True, text=True, check=True).stdout
    return Row("step imports: run-phase, forked from a warm interpreter", "ms CPU", (float(out) * 1000,),
               note="each fork of a process that imported it; no interpreter start, no import")


def loop_cpu(iterations: int = 5) -> Row:
    """The CPU time an iteration of the real loop costs, over `iterations` (loop_overhead.py's
    set-up: a task under review, so that the shipped triggers run all three phases)."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # an alert may still be recorded
        project = git_project(Path(tmp) / "project")
        (project / "TASKS.md").write_text("# Tasks\n- [?] a task that stays under review\n")
        subprocess.run(["git", "add", "TASKS.md"], cwd=project, check=True)
        subprocess.run(["git", "commit", "-qm", "tasks"], cwd=project, check=True)
        agent = Path(tmp) / "agent.sh"
        agent.write_text("echo done\n")
        env = {**os.environ, "GENESIS_AGENT_CMD": f"bash {agent}", "ITERATION_PAUSE_SECONDS": "0",
               "CB_WARNING_THRESHOLD": "100", "CB_STOP_THRESHOLD": "100", "HEARTBEAT_CHECK_INTERVAL": "1",
               "HEARTBEAT_STALE": "30s", "NO_COLOR": "1"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(["bash", str(ROOT / "start-multi-agent-loop.sh"), "--project", str(project),
                        "--max-iterations", str(iterations)], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Row("step imports: the whole loop, an iteration", "s CPU", (cpu / iterations,),
               note=f"{iterations} iterations of three phases, an agent that exits at once")


def main() -> int:
    args = sys.argv[1:]
    loop = int(args[args.index("--loop") + 1]) if "--loop" in args else 0
    rest = [a for i, a in enumerate(args) if a != "--loop" and (i == 0 or args[i - 1] != "--loop")]
    n = int(rest[0]) if rest else 15
    print(f"{'step':<44} {'CPU ms':>7} {'min':>7} {'max':>7}  modules")
    for row in run(n):
        print(f"{row.name.removeprefix('step imports: '):<44} {row.median:>7.0f} {min(row.samples):>7.0f} "
              f"{max(row.samples):>7.0f}  {row.note}", flush=True)
    row = forked(n)
    print(f"{row.name.removeprefix('step imports: '):<44} {row.median:>7.1f} {'':>7} {'':>7}  {row.note}")
    if loop:
        row = loop_cpu(loop)
        print(f"{row.name.removeprefix('step imports: ')}: {row.median:.2f} s of CPU ({row.note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
