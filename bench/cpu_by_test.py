"""A pytest plugin: the CPU each test used, its own and that of every process it started
(loops, agents, servers, orphans and daemons too), as the kernel counts it. Each test runs in a
cgroup of its own, which every process it starts inherits; the table comes at the end.

Usage (Linux, as root, with cgroup v2 or v1's cpuacct controller mounted):
    PYTHONPATH=bench .venv/bin/python -m pytest -p cpu_by_test -n 3 -m "not heavy" [PATHS]
GENESIS_CPU_SHOWN=N names the N costliest tests (25 by default).

Wall time says how long a test waited; on 2 cores the suite is CPU-bound, and this says which
tests ask for the CPU. A test's figure includes the pytest worker's own work for it.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

ENV = "GENESIS_CPU_CGROUP"
SHOWN = int(os.environ.get("GENESIS_CPU_SHOWN", "25"))  # how many of the costliest tests are named
V2 = Path("/sys/fs/cgroup")
V1 = Path("/sys/fs/cgroup/cpuacct")


def _base() -> tuple[Path, str]:
    """Where test cgroups go, and the file holding a cgroup's CPU."""
    if (V2 / "cgroup.controllers").exists():
        return V2, "cpu.stat"
    if (V1 / "cpuacct.usage").exists():
        return V1, "cpuacct.usage"
    raise pytest.UsageError("cpu_by_test needs cgroup v2, or v1's cpuacct controller, mounted under /sys/fs/cgroup")


def _seconds(group: Path, counter: str) -> float:
    text = (group / counter).read_text()
    if counter == "cpu.stat":  # usage_usec <n>
        return int(re.search(r"^usage_usec (\d+)", text, re.M).group(1)) / 1e6
    return int(text) / 1e9


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller: one folder for the run, named for the workers
        base, _ = _base()
        # Not named genesis-*: that is the watcher's own agent groups' prefix, which tests look for.
        root = base / f"cpu-by-test-{os.getpid()}"
        root.mkdir(exist_ok=True)
        os.environ[ENV] = str(root)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    group = Path(os.environ[ENV]) / re.sub(r"[^A-Za-z0-9_.\[\]-]", "_", item.nodeid)[:200]
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or ENV not in os.environ:
        return
    root = Path(os.environ[ENV])
    # Without workers (-n 0) this process ran the tests: it leaves the last one's group.
    (root.parent / "cgroup.procs").write_text(str(os.getpid()))
    _, counter = _base()
    tests = {g.name: _seconds(g, counter) for g in root.iterdir() if g.is_dir()}
    folders: dict[str, float] = defaultdict(float)
    for name, cpu in tests.items():
        folders[_folder(name)] += cpu
    say = terminalreporter.write_line
    say(f"CPU by test: {sum(tests.values()):.0f} CPU-s over {len(tests)} tests")
    for name, cpu in sorted(tests.items(), key=lambda kv: -kv[1])[:SHOWN]:
        say(f"{cpu:8.1f} s  {name}")
    say("CPU by folder:")
    for name, cpu in sorted(folders.items(), key=lambda kv: -kv[1]):
        say(f"{cpu:8.1f} s  {name}")
    for group in root.iterdir():  # a group still holding a process stays (rmdir refuses it)
        _remove(group)
    _remove(root)


def _folder(name: str) -> str:
    """tests/e2e/... -> e2e (the group's name is the test's id with / as _)."""
    parts = name.split("_")
    return "tests (top level)" if len(parts) < 2 or parts[1] == "test" else parts[1]


def _remove(group: Path) -> None:
    try:
        group.rmdir()
    except OSError:
        pass
