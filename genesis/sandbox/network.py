"""The allow-listed network of one agent run: its proxy started before the agent and stopped
after it (`serving`), the bridge that runs first in the box (bridge.py), and the variables
that point the agent's tools at it. Seatbelt (macOS) shares the host's network: no bridge, the
proxy listens on a free port of 127.0.0.1 and the profile lets the box connect there alone
(seatbelt.py); the variables name that port.

The box (bubblewrap's own network namespace) has its own loopback and nothing else; the
proxy's folder is bound read-only at BOX_DIR in the box's private /tmp; the bridge listens
on the box's 127.0.0.1:PROXY_PORT and on each forwarded port. HTTPS_PROXY, HTTP_PROXY and
ALL_PROXY (both cases: curl reads only the lower-case http_proxy) name it; NO_PROXY keeps
the box's own loopback direct, so dev servers and tests inside work.

The proxy (asyncio) is imported when a box with an allow-list starts it, not by every step
that imports the box (through the configuration).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from genesis.sandbox.allowlist import Allowlist
from genesis.sandbox.proxyfolder import SOCKET_NAME

if TYPE_CHECKING:
    from genesis.sandbox.proxy import Running

__all__ = ["ALLOWLIST", "PROXY_PORT", "BOX_DIR", "proxy_env", "proxy_port", "bridge_argv", "serving", "PROXY_VARS"]

ALLOWLIST = "allowlist"
PROXY_PORT = 3128
BOX_DIR = "/tmp/.genesis-net"
BRIDGE = str(Path(__file__).resolve().with_name("bridge.py"))
NO_PROXY = "localhost,127.0.0.1,::1"
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


def proxy_port(allowed: Allowlist | None) -> int:
    """The box's proxy port: PROXY_PORT, or the next one a forwarded port (a base URL) does not take."""
    taken = set(allowed.loopback_ports()) if allowed is not None else set()
    return next(p for p in range(PROXY_PORT, PROXY_PORT + 1 + len(taken)) if p not in taken)


def proxy_env(port: int = PROXY_PORT) -> dict[str, str]:
    url = f"http://127.0.0.1:{port}"
    env = {"HTTPS_PROXY": url, "HTTP_PROXY": url, "ALL_PROXY": url, "NO_PROXY": NO_PROXY}
    return {**env, **{name.lower(): value for name, value in env.items()}}


def bridge_argv(allowed: Allowlist, command: tuple[str, ...]) -> tuple[str, ...]:
    """The command the box runs: the bridge, which then execs `command`."""
    forwards = ",".join(str(p) for p in allowed.loopback_ports()) or "-"
    return (sys.executable, "-I", "-S", BRIDGE, f"{BOX_DIR}/{SOCKET_NAME}", str(proxy_port(allowed)), forwards,
            "--", *command)


@contextlib.contextmanager
def serving(box) -> Iterator[tuple[object, Running | None]]:
    """The box with its proxy running (its folder set on the box, which wrap binds), and the
    proxy (None when the box has no allow-list to serve); the proxy stopped at the end."""
    if getattr(box, "allowed", None) is None or box.network != ALLOWLIST:
        yield box, None
        return
    from genesis.sandbox.proxy import start, start_tcp   # asyncio's: imported by a box with a way out alone

    seatbelt = box.kind == "seatbelt"  # shares the host's network: the proxy on a TCP port of 127.0.0.1
    try:
        running = start_tcp(box.allowed) if seatbelt else start(box.allowed)
    except OSError:  # no folder or socket for it: the box keeps its own loopback alone, no way out
        yield box, None
        return
    try:
        yield (replace(box, proxy_port=running.port) if seatbelt else replace(box, proxy_dir=running.folder)), running
    finally:
        running.stop()


def folder_ok(folder: str) -> bool:
    """The proxy's folder is a real folder of ours, no one else's to write (checked before the bind)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return os.path.isdir(folder) and not os.path.islink(folder) and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0
