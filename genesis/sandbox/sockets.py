"""The sockets the box keeps out of the agent's reach: a socket is a door to a process outside
the box (an ssh-agent signs with the user's key, a service under /run/user runs commands,
the session bus, gpg-agent, a container engine is root on the machine).

/tmp and HOME are private in the box already; what is left is /run: `/run/user` (and
$XDG_RUNTIME_DIR) are covered with an empty tmpfs, and every other socket found under /run
(a bounded walk; the name services' excepted) and $SSH_AUTH_SOCK's is covered with
/dev/null, so a connect is refused.
The user gives a socket back through GENESIS_BOX_ALLOW. Abstract sockets have no path:
only a network namespace of the box's own closes them. (The Landlock box keeps sockets away
by other means: landlock.py from ABI 9, unixsockets.py below.)
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Mapping

__all__ = ["Hidden", "hidden", "named_sockets", "RUN", "RUN_USER", "NAME_SERVICES", "SOCKET_VARS"]

RUN, RUN_USER = "/run", "/run/user"
# Name services a program's DNS and user lookups go through (nss-resolve, nscd): they answer
# questions and run nothing, and hiding them would break name resolution on some systems.
NAME_SERVICES = ("/run/systemd/resolve", "/run/nscd")
MAX_DEPTH, MAX_ENTRIES = 4, 4000
# Variables that point the agent at a socket outside the box (dropped from its environment too).
SOCKET_VARS = ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "DOCKER_HOST",
               "CONTAINER_HOST", "XDG_RUNTIME_DIR", "WAYLAND_DISPLAY", "PULSE_SERVER", "TMUX", "STY")


@dataclass(frozen=True)
class Hidden:
    folders: tuple[str, ...]       # covered with an empty tmpfs
    sockets: tuple[str, ...]       # covered with /dev/null


def _is_socket(path: str, follow: bool = False) -> bool:
    try:
        return stat.S_ISSOCK((os.stat if follow else os.lstat)(path).st_mode)
    except (OSError, ValueError):
        return False


def named_sockets(paths: tuple[str, ...]) -> tuple[str, ...]:
    """Of `paths` (GENESIS_BOX_ALLOW's), those that are sockets, a link followed."""
    return tuple(path for path in paths if _is_socket(path, follow=True))


def _walk_sockets(top: str, skip: tuple[str, ...]) -> list[str]:
    """The sockets under `top`, symlinks not followed, at most MAX_DEPTH deep and MAX_ENTRIES read."""
    found: list[str] = []
    seen = 0
    stack = [(top, 0)]
    while stack and seen < MAX_ENTRIES:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if entry.path in skip:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        if depth < MAX_DEPTH:
                            stack.append((entry.path, depth + 1))
                    elif not entry.is_symlink() and stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                        found.append(entry.path)
        except OSError:
            continue
    return found


def _folder(path: str | None, private: tuple[str, ...]) -> str | None:
    real = os.path.realpath(path) if path else None
    if not real or real == "/" or not os.path.isdir(real):
        return None
    # Never over a folder the box makes private anyway, nor over one that holds the agent's places.
    inside = any(real.startswith(p.rstrip("/") + "/") or p.startswith(real.rstrip("/") + "/") or p == real
                 for p in private)
    return None if inside else real


def hidden(env: Mapping[str, str], private: tuple[str, ...]) -> Hidden:
    """What to cover: `private` are the folders the box makes private anyway (/tmp, HOME) and
    the agent's own places (the project): no folder over or under one of them is covered."""
    folders: list[str] = []
    for found in (_folder(RUN_USER, private), _folder(env.get("XDG_RUNTIME_DIR"), private)):
        if found and not any(found.startswith(f.rstrip("/") + "/") or found == f for f in folders):
            folders.append(found)
    sockets = _walk_sockets(RUN, (*folders, *NAME_SERVICES)) if os.path.isdir(RUN) else []
    agent = os.path.realpath(env["SSH_AUTH_SOCK"]) if env.get("SSH_AUTH_SOCK") else ""
    if agent and _is_socket(agent) and not any(agent.startswith(p.rstrip("/") + "/") for p in (*private, *folders)):
        sockets.append(agent)
    return Hidden(tuple(folders), tuple(dict.fromkeys(sockets)))
