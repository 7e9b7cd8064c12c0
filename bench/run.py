"""Run every Genesis benchmark on this machine and print one table.

Usage: .venv/bin/python bench/run.py [--quick] [--only N[,N...]]

Each figure is the median of repeated runs, with min and max; a ratio compares a row with
the baseline measured side by side in the same run. --quick runs fewer repetitions.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import box_cost  # noqa: E402
import busy  # noqa: E402
import detection  # noqa: E402
import hook_cost  # noqa: E402
import killtime  # noqa: E402
import ledger_cost  # noqa: E402
import loop_overhead  # noqa: E402
import marker_scan  # noqa: E402
import morning_cost  # noqa: E402
import net_cost  # noqa: E402
import night  # noqa: E402
import reap_cost  # noqa: E402
import silences  # noqa: E402
import step_imports  # noqa: E402
import tamper  # noqa: E402
import watcher_cost  # noqa: E402
from common import Row  # noqa: E402


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{system}, {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def fmt(value: float, unit: str) -> str:
    return f"{value:.2f}" if unit != "% core" else f"{value:.3f}"


def main() -> int:
    quick = "--quick" in sys.argv
    started = time.monotonic()
    plan = [
        ("1. hook cost", lambda: hook_cost.run(60 if quick else 300)),
        ("2. detection latency", lambda: detection.run(((1.0, 3.0, 3), (10.0, 30.0, 2)) if quick else
                                                        ((1.0, 3.0, 9), (10.0, 30.0, 5)))),
        ("3. kill time", lambda: killtime.run(2 if quick else 5)),
        ("4. loop overhead", lambda: loop_overhead.run(3 if quick else 6)),
        ("5. watcher cost", lambda: watcher_cost.run(20 if quick else 60, 2 if quick else 3)),
        ("6. reap cost", lambda: reap_cost.run(5 if quick else 10)),
        ("7. a careless agent", lambda: tamper.run(3 if quick else 5, 2 if quick else 3)),
        ("8. a night with a usage limit and an outage (real Claude Code)", night.run),
        ("9. busy or stuck", lambda: busy.run(2 if quick else 3)),
        ("10. the ledger", lambda: ledger_cost.run(200 if quick else 500)),
        ("11. the box", lambda: box_cost.run(10 if quick else 30, 60 if quick else 200)),
        ("12. the morning", lambda: morning_cost.run(5 if quick else 10)),
        ("13. the hang classes", lambda: silences.run(((1.0, 5.0, 3.0, 3 if quick else 5),))),
        ("14. the box's network", lambda: net_cost.run(10 if quick else 30, 100 if quick else 300)),
        ("15. what a loop step imports", lambda: step_imports.run(5 if quick else 15)
         + [step_imports.loop_cpu(3 if quick else 5)]),
        ("16. finding the agent's processes", lambda: marker_scan.run(5 if quick else 20)),
    ]
    only = next((a.split("=", 1)[1] if "=" in a else sys.argv[sys.argv.index(a) + 1]
                 for a in sys.argv[1:] if a.startswith("--only")), None)
    if only:  # the groups named by their numbers, e.g. --only 4,10
        wanted = {n.strip() for n in only.split(",")}
        plan = [(title, bench) for title, bench in plan if title.split(".", 1)[0] in wanted]
    rows: list[Row] = []
    for title, bench in plan:
        print(f"running {title} ...", file=sys.stderr, flush=True)
        rows += bench()
    print(f"\nGenesis benchmarks on {machine()}")
    print(f"{'benchmark':<52} {'unit':>6} {'n':>4} {'median':>8} {'min':>8} {'max':>8} {'ratio':>7}  target")
    for r in rows:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
        target = f"{r.target} {'met' if r.met else 'MISSED'}" if r.target else ""
        print(f"{r.name:<52} {r.unit:>6} {len(r.samples):>4} {fmt(r.median, r.unit):>8} "
              f"{fmt(min(r.samples), r.unit):>8} {fmt(max(r.samples), r.unit):>8} {ratio:>7}  {target}"
              + (f"  ({r.note})" if r.note else ""))
    print(f"\n{len(rows)} figures in {time.monotonic() - started:.0f}s; ratios are to: "
          + "; ".join(sorted({r.baseline for r in rows if r.baseline})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
