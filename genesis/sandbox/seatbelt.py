"""The Seatbelt box (macOS `sandbox-exec -p PROFILE`): file writes to Genesis's state,
settings file and code denied (the heartbeat folder allowed again), and signals only to
processes in the same sandbox. No PID namespace and no private /tmp: the agent still sees
the loop and local server sockets, it only cannot signal the loop or write Genesis's files.
"""

from __future__ import annotations

import os

from genesis.sandbox.places import Places

__all__ = ["profile", "seatbelt_argv"]


def _quoted(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _filter(path: str) -> str:
    return f"(subpath {_quoted(path)})" if os.path.isdir(path) else f"(literal {_quoted(path)})"


def profile(places: Places) -> str:
    """The SBPL text; a later rule wins over an earlier one it overlaps."""
    lines = ["(version 1)", "(allow default)"]
    for path, writable in places.layers:  # linked worktrees, parents first: the later rule wins
        lines.append(f"({'allow' if writable else 'deny'} file-write* {_filter(path)})")
    if places.protected:
        lines.append("(deny file-write* " + " ".join(_filter(p) for p in places.protected) + ")")
    lines.append(f"(allow file-write* (subpath {_quoted(places.beats)}))")
    lines += ["(deny signal)", "(allow signal (target same-sandbox))"]
    return "\n".join(lines) + "\n"


def seatbelt_argv(sandbox_exec: str, places: Places, command: tuple[str, ...]) -> tuple[str, ...]:
    return (sandbox_exec, "-p", profile(places), *command)
