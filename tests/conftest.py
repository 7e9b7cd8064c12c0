"""Shared fixtures: a hermetic HOME, real git projects, and real process helpers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

PY = sys.executable


@pytest.fixture(autouse=True)
def hermetic(tmp_path, monkeypatch):
    """Every test gets its own HOME and no GENESIS_* or knob settings from the caller."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    for key in list(os.environ):
        if key.startswith(("GENESIS_", "HEARTBEAT_", "AGENT_MAX", "CB_", "REAP_", "PHASE_", "AUTO_",
                           "ITERATION_PAUSE", "KILL_GRACE", "CLAUDE")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GENESIS_NOTIFY_DESKTOP", "false")  # no pop-up per test loop on a developer's desktop
    return home


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path) -> Path:
    """A real git work tree with one commit."""
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README.md").write_text("hello\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def state_of(project: Path) -> Path:
    """Genesis's private state folder for a plain (non-worktree) repository: <git dir>/genesis."""
    return project / ".git" / "genesis"


def events_of(project: Path, run_id: str | None = None) -> list[dict]:
    """Every event in the project's ledger (of one run), oldest first; none without a ledger."""
    from genesis.ledger.store import Ledger

    path = state_of(project) / "ledger.sqlite3"
    if not path.exists():
        return []
    with Ledger.open(path, readonly=True) as led:
        return led.events(run_id)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
          "time.sleep(600)\n")


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def procs():
    """Processes a test starts; whatever is still alive at the end is killed."""
    started: list[subprocess.Popen] = []

    def start(argv, env=None, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, **kw)
        started.append(proc)
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
    if path:
        with open(path, "w") as fh:
            json.dump({"faults": {str(k): v for k, v in sorted(FAULT_RESULTS.items())}, "counts": COUNTS}, fh)
