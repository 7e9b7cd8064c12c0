"""The Seatbelt box (macOS `sandbox-exec -p PROFILE`): file writes to Genesis's state,
settings file and code denied (the heartbeat folder allowed again), and signals only to
processes in the same sandbox. No PID namespace and no private /tmp: the agent still sees
the loop and local server sockets, it only cannot signal the loop or write Genesis's files.

HOME is denied (read and write) but what bubblewrap's private HOME keeps (home.py): the
agent's own places in it, its CLI's folder and the caches, its install folders read-only,
and GENESIS_BOX_ALLOW's paths; HOME's entries can be stat'ed, not listed or read. The
ssh-agent launchd starts (its socket under /private/tmp/com.apple.launchd.*) is refused.

GENESIS_NETWORK=allowlist (`out_ports`): no IP connection out but to the loopback ports named,
Genesis's proxy (proxy.py, TCP on 127.0.0.1) and a base URL's port; the box shares the host's
loopback, so it can still listen there, but connect only to those ports (as sandbox-runtime's
macOS profile does).
"""

from __future__ import annotations

import os

from genesis.sandbox.places import Places

__all__ = ["profile", "seatbelt_argv"]


def _quoted(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _filter(path: str) -> str:
    return f"(subpath {_quoted(path)})" if os.path.isdir(path) else f"(literal {_quoted(path)})"


LAUNCHD_SOCKETS = r'#"^/private/tmp/com\.apple\.launchd\.[^/]+/"'   # the user's ssh-agent (SSH_AUTH_SOCK)


def _grant(path: str, writable: bool) -> str:
    return f"(allow file-read* {'file-write* ' if writable else ''}{_filter(path)})"


def home_rules(places: Places) -> list[str]:
    """HOME denied but what the agent keeps of it; the user's sockets refused; GENESIS_BOX_ALLOW last."""
    lines: list[str] = []
    if places.private_home:
        home = _quoted(places.private_home)
        lines += [f"(deny file-read* file-write* (subpath {home}))", f"(allow file-read-metadata (subpath {home}))"]
        lines += [_grant(path, writable) for path, writable in places.home_kept]
        lines += [f"(deny file-read* file-write* (literal {_quoted(p)}))" for p in places.home_hidden]
    lines.append(f"(deny network-outbound (remote unix-socket (path-regex {LAUNCHD_SOCKETS})))")
    for allowed in places.allow:
        lines.append(_grant(allowed.path, allowed.writable))
        lines.append(f"(allow network-outbound (remote unix-socket (path-literal {_quoted(allowed.path)})))")
    return lines


def network_rules(network: bool, out_ports: tuple[int, ...] | None) -> list[str]:
    """`out_ports` (allowlist): IP out only to these loopback ports; `network` False (none): to the loopback."""
    if out_ports is not None:
        return ["(deny network-outbound (remote ip))",
                *(f'(allow network-outbound (remote ip "localhost:{port}"))' for port in sorted(set(out_ports)))]
    if not network:
        return ["(deny network-outbound (remote ip))", '(allow network-outbound (remote ip "localhost:*"))']
    return []


def profile(places: Places, network: bool = True, out_ports: tuple[int, ...] | None = None) -> str:
    """The SBPL text; a later rule wins over an earlier one it overlaps. `network` False
    (GENESIS_NETWORK=none): no connection out but to the loopback; `out_ports` (allowlist): no
    connection out but to those ports of the loopback (the proxy's, a base URL's)."""
    lines = ["(version 1)", "(allow default)", *home_rules(places), *network_rules(network, out_ports)]
    for path, writable in places.layers:  # linked worktrees, parents first: the later rule wins
        lines.append(f"({'allow' if writable else 'deny'} file-write* {_filter(path)})")
    if places.protected:
        lines.append("(deny file-write* " + " ".join(_filter(p) for p in places.protected) + ")")
    lines.append(f"(allow file-write* (subpath {_quoted(places.beats)}))")
    lines += ["(deny signal)", "(allow signal (target same-sandbox))"]
    return "\n".join(lines) + "\n"


def seatbelt_argv(sandbox_exec: str, places: Places, command: tuple[str, ...], network: bool = True,
                  out_ports: tuple[int, ...] | None = None) -> tuple[str, ...]:
    return (sandbox_exec, "-p", profile(places, network, out_ports), *command)
