"""Alerts never hold up the loop: dispatch() hands a ticket to a detached deliverer process
(deliver.py) and returns at once.

The deliverer carries none of the loop's markers, so the loop's reaper never takes it for
an agent's leftover; it runs in its own session, so a closed terminal or a Ctrl-C of the
loop does not end it. This module is all a loop step loads to raise a ticket: the
deliverer's own imports (urllib among them) are paid by the deliverer alone.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket

__all__ = ["dispatch", "settle", "deliverer_env", "MARKER_PREFIXES"]

# The loop's markers (see procs/markers.py, loop/step.agent_env): a process carrying one is the loop's.
MARKER_PREFIXES = ("GENESIS_RUN", "GENESIS_LOOP", "GENESIS_AGENT", "GENESIS_HEARTBEAT", "GENESIS_ITERATION",
                   "GENESIS_PROJECT_DIR")

_launched: list[subprocess.Popen] = []   # kept so their exit is collected, never waited on


def deliverer_env(env: Mapping[str, str]) -> dict[str, str]:
    """The deliverer's environment: the caller's without the loop's markers, and with this
    Genesis importable whatever the working directory."""
    clean = {k: v for k, v in env.items() if not k.startswith(MARKER_PREFIXES)}
    root = str(Path(__file__).resolve().parents[2])
    # From a checkout, the checkout goes on the path; an installed Genesis needs nothing (and
    # site-packages on PYTHONPATH would come before the standard library).
    if root not in _site_dirs():
        clean["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [clean.get("PYTHONPATH")])])
    return clean


def _site_dirs() -> set[str]:
    try:
        return {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    except (AttributeError, OSError):  # a virtualenv's old site module
        return set()


def dispatch(ticket: Ticket, settings: AlertSettings, ledger_path: Path) -> int | None:
    """Start a detached deliverer for ticket and return at once: its pid, or None if it
    could not start (an alert is never worth failing the loop)."""
    for proc in list(_launched):
        if proc.poll() is not None:
            _launched.remove(proc)
    document = json.dumps({"ticket": ticket.to_json(), "settings": settings.to_json(),
                           "ledger": str(ledger_path)}).encode()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "genesis.alerts.deliver"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                                start_new_session=True, env=deliverer_env(os.environ))
    except OSError:
        return None
    try:
        proc.stdin.write(document)  # a few KiB: the pipe's buffer takes it without waiting
        proc.stdin.close()
    except OSError:
        pass
    _launched.append(proc)
    return proc.pid


def settle(pid: int | None, seconds: float) -> bool:
    """Wait, at most `seconds`, for the deliverer dispatch() started as pid to finish (a process
    about to exit lets its last alert's deliverer record what it did); True when it did."""
    proc = next((p for p in _launched if p.pid == pid), None)
    if proc is None:
        return True
    try:
        proc.wait(timeout=max(0.0, seconds))
    except subprocess.TimeoutExpired:
        return False
    return True
