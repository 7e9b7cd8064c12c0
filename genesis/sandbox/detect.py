"""What this machine can run to box the agent: probed once per phase start, cheaply.

bubblewrap counts only when a trial box runs (`bwrap ... true`): an installed bwrap
without unprivileged user namespaces, or inside a container that forbids them, fails
there, not at the first agent. Landlock is asked for its ABI; Seatbelt is sandbox-exec.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import psutil

from genesis.procs.proctree import become_subreaper, reap_zombie_children
from genesis.sandbox import landlock

__all__ = ["Machine", "probe", "TRIAL_TIMEOUT", "INSTALL_BWRAP"]

TRIAL_TIMEOUT = 10.0
INSTALL_BWRAP = "Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap"


@dataclass(frozen=True)
class Machine:
    bwrap: str | None              # the bwrap that ran a trial box, or None
    bwrap_why: str                 # why not, when bwrap is None
    landlock_abi: int              # 0: none
    seatbelt: str | None           # sandbox-exec (macOS), or None
    root: bool = False             # Genesis runs as root: the box must take root's capabilities away
    root_why: str = ""             # as root, why a box without capabilities could not run ("": it can)
    arch: str = field(default_factory=lambda: os.uname().machine)  # Landlock's socket filter is per architecture


# As root, bubblewrap keeps every capability unless told: the agent could unmount the read-only
# binds. A user namespace of its own, and no capability in it, keeps them read-only.
ROOT_FLAGS = ("--unshare-user", "--cap-drop", "ALL")


def _trial(bwrap: str, extra: tuple[str, ...] = ()) -> str:
    """"" if a box like the agent's runs here, else what went wrong."""
    argv = [bwrap, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-pid",
            "--unshare-ipc", *extra, "--die-with-parent", "--new-session", "true"]
    # A box's PID namespace leaves an orphan behind for a moment: adopted here and waited for,
    # never left a zombie under an init that does not reap (a container's).
    become_subreaper()
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=TRIAL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"a trial box did not finish in {TRIAL_TIMEOUT:g}s"
    except OSError as exc:
        return f"{bwrap} cannot run ({exc.strerror})"
    finally:
        _collect_orphans(bwrap)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"a trial box failed: {said[-1][:200] if said else f'exit {done.returncode}'}"
    return ""


def _named(proc: psutil.Process, name: str) -> bool:
    try:
        return proc.name() == name
    except psutil.Error:
        return False


def _collect_orphans(bwrap: str, bound: float = 1.0) -> None:
    """Wait (bounded) for the box's own processes the trial left to this process, its subreaper."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        reap_zombie_children()
        try:
            left = [c for c in psutil.Process().children() if _named(c, os.path.basename(bwrap))]
        except psutil.Error:
            left = []
        if not left:
            return
        time.sleep(0.005)


def probe(platform: str | None = None, root: bool | None = None) -> Machine:
    platform = platform or sys.platform
    root = os.geteuid() == 0 if root is None else root
    bwrap, why, root_why = None, "not Linux", ""
    if platform.startswith("linux"):
        found = shutil.which("bwrap")
        if found is None:
            why = f"bubblewrap not installed: {INSTALL_BWRAP}"
        else:
            root_why = _trial(found, ROOT_FLAGS) if root else ""
            why = _trial(found) if root_why or not root else ""
            bwrap = None if why else found
    seatbelt = shutil.which("sandbox-exec") if platform == "darwin" else None
    return Machine(bwrap, why, landlock.abi() if platform.startswith("linux") else 0, seatbelt, root, root_why)
