"""The bubblewrap box's command line (Linux): mount, PID and IPC namespaces.

The whole file system as it is (`--bind / /`: the project, the CLI's own config and caches,
the network all work as before), then, in order: a fresh /dev (`--dev`: the standard
devices and a private /dev/shm and /dev/pts, so no host terminal or shared-memory segment
is reachable; real CLIs need nothing more), a /proc of the box's own PID namespace (the
loop, the watcher and every other process are invisible, so unsignallable), a private /tmp
with what the agent needs bound back, in a repository with linked worktrees the other work
trees and the common dir's Genesis state read-only (places.py), Genesis's state, settings
file and code read-only, and the heartbeat folder writable again inside the state. As root,
a user namespace of its own with no capability in it (`root`): with them, root in the box
could unmount every read-only bind (measured: `umount -l` then works; with --cap-drop ALL it
is refused).
"""

from __future__ import annotations

from genesis.sandbox.detect import ROOT_FLAGS
from genesis.sandbox.places import TMP, Places

__all__ = ["bwrap_argv", "private_home_argv", "hidden_sockets_argv", "allowed_argv"]

NOTHING = "/dev/null"   # bound over a file to hide it: a connect to it is refused, a read is empty


def private_home_argv(places: Places) -> list[str]:
    """HOME an empty tmpfs, with what the agent keeps of it bound back (home.py)."""
    if not places.private_home:
        return []
    argv = ["--tmpfs", places.private_home]
    for path, writable in places.home_kept:
        argv += ["--bind" if writable else "--ro-bind", path, path]
    for path in places.home_hidden:
        argv += ["--ro-bind", NOTHING, path]
    return argv


def hidden_sockets_argv(places: Places) -> list[str]:
    """/run/user (and $XDG_RUNTIME_DIR) empty, every other socket found covered (sockets.py)."""
    argv: list[str] = []
    for path in places.hidden.folders:
        argv += ["--tmpfs", path]
    for path in places.hidden.sockets:
        argv += ["--ro-bind", NOTHING, path]
    return argv


def allowed_argv(places: Places) -> list[str]:
    """What GENESIS_BOX_ALLOW gives back, in the user's order; a path that does not exist is skipped."""
    argv: list[str] = []
    for allowed in places.allow:
        argv += ["--bind-try" if allowed.writable else "--ro-bind-try", allowed.path, allowed.path]
    return argv


def bwrap_argv(bwrap: str, places: Places, command: tuple[str, ...], root: bool = False,
               network: bool = True, net_dir: tuple[str, str] | None = None) -> tuple[str, ...]:
    """`root`: as root, the box's own user namespace and no capability (ROOT_FLAGS). `network` False
    (GENESIS_NETWORK=none or allowlist): a network namespace of the box's own, its loopback alone;
    `net_dir` (outside, inside): the allow-list proxy's folder, bound read-only (network.py)."""
    argv = [bwrap, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", TMP]
    for path in places.visible:
        argv += ["--bind", path, path]
    if places.tmpdir and places.tmpdir.startswith(TMP + "/") and places.tmpdir not in places.visible:
        argv += ["--dir", places.tmpdir]  # TMPDIR named but missing: an empty one, so mktemp works
    argv += private_home_argv(places) + hidden_sockets_argv(places) + allowed_argv(places)
    for path, writable in places.layers:  # linked worktrees: the others' read-only, this one's git writable
        argv += ["--bind" if writable else "--ro-bind", path, path]
    for path in places.protected:
        argv += ["--ro-bind", path, path]
    if net_dir is not None:
        argv += ["--ro-bind", *net_dir]
    argv += ["--bind", places.beats, places.beats,
             "--unshare-pid", "--unshare-ipc", *(ROOT_FLAGS if root else ()), *(() if network else ("--unshare-net",)),
             "--die-with-parent", "--new-session",
             "--chdir", places.cwd, "--", *command]
    return tuple(argv)
