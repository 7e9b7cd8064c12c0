"""Fixtures and hooks for every test: a hermetic environment, a real git project, processes
ended at the test's end, and the fault suite's tally. Plain helpers are in tests/helpers/."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers.git import new_repo
from helpers.hermetic import cleared
from helpers.waits import wait_for

# Started in the background of a script, the suite inherits SIGINT ignored, and so would every
# loop the tests interrupt with it (bash cannot trap a signal ignored at its start): restored.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Under nohup it inherits SIGHUP ignored, with the same effect on the loops the tests hang up.
# Here a hangup stays ignored, as nohup asked, but by a handler, which exec resets: every
# program a test starts gets the default, as from a terminal. A parallel run's workers, started
# with the default, learn of it from NOHUP_IGNORED.
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN or os.environ.get("NOHUP_IGNORED") == "1":
    os.environ["NOHUP_IGNORED"] = "1"
    signal.signal(signal.SIGHUP, lambda _signum, _frame: None)

# pytest rewrites every test module for its assertions and, where PYTHONDONTWRITEBYTECODE is set
# (many containers set it), would keep none of that work: each worker of each of run-tests.sh's
# stages would rewrite and compile all of them again (about 10 CPU-s a process). This process
# keeps its rewritten modules (in __pycache__, which git ignores); the programs the tests start
# still see the variable as the caller set it.
sys.dont_write_bytecode = False


@pytest.fixture(autouse=True)
def hermetic(tmp_path, monkeypatch):
    """Every test gets its own HOME, and none of the caller's Genesis settings, agent CLI config
    folders, API keys or XDG folders (helpers/hermetic.py): nothing a test runs reads or writes
    the developer's own files."""
    home = tmp_path / "home"
    home.mkdir()
    for key in [k for k in os.environ if cleared(k)]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    # The test's folder is its TMPDIR: the agent's box (GENESIS_SANDBOX) gives the agent a private
    # /tmp with TMPDIR bound back in, so what a test shares with its agents there stays in reach.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("GENESIS_NOTIFY_DESKTOP", "false")  # no pop-up per test loop on a developer's desktop
    return home


@pytest.fixture
def project(tmp_path) -> Path:
    """A real git work tree with one commit."""
    return new_repo(tmp_path / "project")


def _execed(pid: int) -> bool:
    """Its command line is laid out (or it has already ended)."""
    try:
        return bool(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return True


@pytest.fixture
def procs():
    """Processes a test starts; whatever is still alive at the end is killed."""
    started: list[subprocess.Popen] = []

    def start(argv, env=None, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, **kw)
        started.append(proc)
        # Popen returns as the exec begins, a moment before the kernel lays out the new program's
        # arguments and environment: until then /proc shows neither, so nothing (a reaper, an
        # incident's capture) could tell it is ours. Handed back once it is its own program.
        wait_for(lambda: _execed(proc.pid), what=f"{argv[0]} to start")
        return proc

    yield start
    for proc in started:
        try:
            for kid in psutil.Process(proc.pid).children(recursive=True):
                kid.kill()
        except psutil.NoSuchProcess:
            pass
        proc.kill()
        proc.wait()


# --- the fault suite's tally ----------------------------------------------------------
# Tests tagged @pytest.mark.fault(N) cover fault N of the reliability list; a fault passes
# when every test tagged with it passed. With GENESIS_FAULT_TALLY set, the results are
# written there as JSON for run-tests.sh to combine with the bats fault tests.

FAULT_RESULTS: dict[int, str] = {}
RANK = {"passed": 0, "skipped": 1, "failed": 2}
COUNTS = {"passed": 0, "failed": 0, "skipped": 0}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's fault numbers travel with its report (from a worker, when run in parallel)."""
    outcome = yield
    faults = [n for mark in item.iter_markers("fault") for n in mark.args]
    if faults:
        outcome.get_result().user_properties.append(("faults", faults))


# Where the tests marked heavy live: run-tests.sh's later stages collect only there (collecting
# every file again costs each stage's workers their time), so a heavy test elsewhere would never run.
HEAVY_HOMES = {"temporal": "tests/temporal", "other": "tests/scenarios"}


# The folders whose files take longest, mostly waiting on real windows (whole nights with the real
# CLIs, then whole loops and fleets): handed to the workers first (run-tests.sh keeps this order,
# --no-loadscope-reorder), so that the many short files fill the cores while they wait, and no long
# file starts last and runs on alone at the end.
LONGEST_FIRST = ("e2e", "scenarios", "web", "temporal", "loop", "fleet")


def _longest_first(item) -> int:
    parts = Path(item.path).resolve().relative_to(Path(__file__).resolve().parent).parts
    return LONGEST_FIRST.index(parts[0]) if len(parts) > 1 and parts[0] in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_longest_first)  # stable: each file's tests keep their order
    root = Path(__file__).resolve().parent.parent
    for item in items:
        if item.get_closest_marker("heavy") is None:
            continue
        home = root / HEAVY_HOMES["temporal" if item.get_closest_marker("temporal") else "other"]
        if home not in Path(item.path).resolve().parents:
            raise pytest.UsageError(f"{item.nodeid} is marked heavy: move it under {home.relative_to(root)}, "
                                    "the only place run-tests.sh's heavy stages collect (see HEAVY_HOMES)")


def pytest_runtest_logreport(report):
    """Counted where the reports meet: the one process, or the controller of the workers."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if report.when != "call" and not (report.failed or report.skipped):
        return
    status = "failed" if report.failed else "skipped" if report.skipped else "passed"
    if report.when == "call" or status != "passed":
        COUNTS[status] += 1
    for n in dict(report.user_properties).get("faults", []):
        prev = FAULT_RESULTS.get(n, "passed")
        FAULT_RESULTS[n] = max(prev, status, key=RANK.__getitem__)


def pytest_terminal_summary(terminalreporter):
    path = os.environ.get("GENESIS_FAULT_TALLY")
    if not path:
        return
    # run-tests.sh runs pytest more than once in a whole run (the heavy tests last): each adds to the tally.
    faults, counts = dict(FAULT_RESULTS), dict(COUNTS)
    try:
        with open(path) as fh:
            before = json.load(fh)
    except (OSError, ValueError):
        before = {}
    for n, status in before.get("faults", {}).items():
        faults[int(n)] = max(faults.get(int(n), "passed"), status, key=RANK.__getitem__)
    for status, n in before.get("counts", {}).items():
        counts[status] = counts.get(status, 0) + n
    with open(path, "w") as fh:
        json.dump({"faults": {str(k): v for k, v in sorted(faults.items())}, "counts": counts}, fh)


@pytest.fixture
def tz(monkeypatch):
    """Sets the reader's time zone for a test (and restores it)."""
    def use(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()
