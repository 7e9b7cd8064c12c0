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

__all__ = ["bwrap_argv"]


def bwrap_argv(bwrap: str, places: Places, command: tuple[str, ...], root: bool = False) -> tuple[str, ...]:
    argv = [bwrap, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", TMP]
    for path in places.visible:
        argv += ["--bind", path, path]
    if places.tmpdir and places.tmpdir.startswith(TMP + "/") and places.tmpdir not in places.visible:
        argv += ["--dir", places.tmpdir]  # TMPDIR named but missing: an empty one, so mktemp works
    for path, writable in places.layers:  # linked worktrees: the others' read-only, this one's git writable
        argv += ["--bind" if writable else "--ro-bind", path, path]
    for path in places.protected:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", places.beats, places.beats,
             "--unshare-pid", "--unshare-ipc", *(ROOT_FLAGS if root else ()), "--die-with-parent", "--new-session",
             "--chdir", places.cwd, "--", *command]
    return tuple(argv)
