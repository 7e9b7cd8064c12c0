"""What the box's allow-list holds by default: the agent CLI's API hosts (its adapter names
them, and the base URL it is configured with, so a CLI pointed at another endpoint reaches
that one), the package registries, the hosts of the project's git remotes, and what
GENESIS_NETWORK_ALLOW adds.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterable

from genesis.sandbox.allowlist import REGISTRIES, Allowlist, AllowlistError, Entry, entry_of_url, parse_entries

__all__ = ["default_allowlist", "remote_hosts"]

GIT_TIMEOUT = 5.0
MAX_REMOTES = 64


def _remote_host(url: str) -> str | None:
    """The host of a git remote's URL: https://host/..., ssh://user@host:port/..., user@host:path."""
    url = url.strip()
    if "://" in url:
        rest = url.split("://", 1)[1]
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        return host.split(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    if ":" in url.split("/", 1)[0]:  # scp-like: user@host:path
        return url.split(":", 1)[0].rsplit("@", 1)[-1]
    return None  # a local path


def remote_hosts(project: Path, timeout: float = GIT_TIMEOUT) -> tuple[str, ...]:
    """The hosts of the project's git remotes (one git call, read outside the box)."""
    try:
        done = subprocess.run(["git", "config", "--get-regexp", r"^remote\..*\.(url|pushurl)$"], cwd=project,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ()
    hosts = [_remote_host(line.split(" ", 1)[1]) for line in done.stdout.splitlines()[:MAX_REMOTES] if " " in line]
    return tuple(dict.fromkeys(h.lower() for h in hosts if h))


def _entries(names: Iterable[str], why: str) -> list[Entry]:
    """Host names, host:port or URLs; one that cannot be read is left out (it came from a config, not the user)."""
    found: list[Entry] = []
    for name in names:
        if "://" in name:
            entry = entry_of_url(name, why)
            found += [entry] if entry else []
            continue
        try:
            found += parse_entries(name, why)
        except AllowlistError:
            continue
    return found


def default_allowlist(cli: str, cli_hosts: Iterable[str], project: Path, added: tuple[Entry, ...]) -> Allowlist:
    """`cli_hosts`: the adapter's API hosts and base URLs (network_hosts); `added`: GENESIS_NETWORK_ALLOW's."""
    return Allowlist.of([*_entries(cli_hosts, cli), *_entries(REGISTRIES, "a package registry"),
                         *_entries(remote_hosts(project), "a git remote"), *added])
