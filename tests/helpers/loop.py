"""The shipped loop as a user starts it, with its time knobs compressed for a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import paths

__all__ = ["GENESIS", "LOOP", "loop_env", "run_loop"]

LOOP = paths.LOOP
GENESIS = [sys.executable, "-m", "genesis"]


def loop_env(**extra: str) -> dict[str, str]:
    """The caller's environment with time knobs compressed; phases and triggers untouched.

    IS_SANDBOX=1: the suite may run as root in a container, where preflight would otherwise
    refuse a stand-in `claude` given the default --dangerously-skip-permissions."""
    return {**os.environ, "GENESIS_BIN": str(Path(sys.executable).parent / "genesis"), "NO_COLOR": "1",
            "HEARTBEAT_CHECK_INTERVAL": "0.2", "HEARTBEAT_STALE": "5s", "KILL_GRACE_SECONDS": "1",
            "ITERATION_PAUSE_SECONDS": "0", "PHASE_RETRY_DELAY_SECONDS": "0", "REAP_PORTS": "", "IS_SANDBOX": "1",
            **extra}


def run_loop(project: Path, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`start-multi-agent-loop.sh --project PROJECT ARGS...` to its end."""
    return subprocess.run(["bash", str(LOOP), "--project", str(project), *args], env=env or loop_env(),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
