"""A phase held open until the test lets it go: the simulated agent's Bash call waits on a file.

  action, ready, go = gate(folder)     `action` goes in a simagent --script rule; once the
                                       phase runs, `ready` exists; touching `go` ends the call
"""

from __future__ import annotations

import shlex
import sys
import urllib.parse
from pathlib import Path

__all__ = ["gate", "simagent"]


def gate(folder: Path, name: str = "gate") -> tuple[str, Path, Path]:
    """The simagent action that waits (its Bash call touches `ready`, then waits for `go`), and the two files."""
    ready, go = folder / f"{name}.ready", folder / f"{name}.go"
    command = f"touch {shlex.quote(str(ready))}; while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.1; done"
    return "bash:" + urllib.parse.quote(command, safe=""), ready, go


def simagent(script: str, *extra: str) -> str:
    """The simulated Claude Code's command line (GENESIS_AGENT_CMD) playing `script`."""
    return shlex.join([sys.executable, "-m", "genesis.demo.simagent", *extra, "--script", script])
