"""The agent's private HOME: what of the user's HOME the box keeps, and what the user adds.

The box covers HOME with an empty tmpfs, then binds back only what the agent's work needs:
its CLI's own folder and files (the adapter names them: config and login, writable), the
language caches it fills (npm, pip, cargo, go, maven...; writable, those that exist), its
program's install and PATH folders under HOME (read-only; a version manager's whole folder,
since its shims run the rest of it) and the interpreter Genesis's hook runs on, and what GENESIS_BOX_ALLOW adds.
The rest (`~/.ssh`, `~/.aws`, `~/.config/gh`, `~/.netrc`, `~/.gitconfig`, other projects) is
absent. A credentials file inside a kept cache (cargo's registry token) stays hidden.

GENESIS_BOX_ALLOW: paths separated by commas, each `PATH`, `PATH:ro` or `PATH:rw` (read-only
when no mode is given); PATH is absolute or starts with `~/`. A socket named there is bound
too: the one way to give the agent a socket (an ssh-agent's, a container engine's).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = ["Allowed", "parse_allow", "CACHES", "HIDDEN_IN_CACHES", "AllowError"]

# Relative to HOME: the language tools' caches and toolchains an agent's builds fill.
CACHES = (".npm", ".cache/pip", ".cache/pypoetry", ".cache/uv", ".cache/go-build", ".cargo", ".rustup", "go",
          ".m2", ".gradle", ".cache/yarn", ".yarn", ".pnpm-store", ".local/share/pnpm", ".bun", ".deno",
          ".cache/ms-playwright", ".cache/node-gyp")
# Credentials kept inside a cache folder: covered even when the cache is kept.
HIDDEN_IN_CACHES = (".cargo/credentials", ".cargo/credentials.toml", ".m2/settings-security.xml")
# Folders in HOME that hold many tools' data: a program inside is kept alone, never the whole folder.
SHARED_TOPS = (".local", ".config", ".cache", "Library", "Documents", "Downloads", "Desktop")
MODES = {"ro": False, "rw": True}
_MODE_LIKE = re.compile(r"^[A-Za-z]{1,5}$")


class AllowError(ValueError):
    """GENESIS_BOX_ALLOW cannot be read; the message says what to write."""


@dataclass(frozen=True)
class Allowed:
    path: str                      # absolute, `~` expanded
    writable: bool


def _entry(text: str, home: str) -> Allowed:
    path, writable = text, False
    head, sep, mode = text.rpartition(":")
    if sep and mode in MODES:
        path, writable = head, MODES[mode]
    elif sep and _MODE_LIKE.match(mode):
        raise AllowError(f"{text!r}: unknown mode {mode!r}; write PATH:ro (read-only) or PATH:rw (writable)")
    if path == "~" or path.startswith("~/"):
        if not home:
            raise AllowError(f"{text!r}: `~` needs HOME set; write an absolute path")
        path = home + path[1:]
    if not os.path.isabs(path):
        raise AllowError(f"{text!r}: not an absolute path; write /path/to/it or ~/path (a comma separates paths)")
    return Allowed(os.path.normpath(path), writable)


def parse_allow(value: str, home: str | None) -> tuple[Allowed, ...]:
    """GENESIS_BOX_ALLOW's paths, in order; AllowError for one that cannot be read."""
    return tuple(_entry(part.strip(), home or "") for part in value.replace("\n", ",").split(",") if part.strip())


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def tool_root(path: str, home: str) -> str:
    """What to keep for a program or PATH folder under HOME: its tool's own folder (~/.pyenv for
    ~/.pyenv/shims, whose shims run ~/.pyenv/libexec; ~/.nvm, ~/.asdf, ~/.volta...), or the
    folder alone inside a folder shared by many (~/.local/bin, not ~/.local/share's keyrings)."""
    if not under(path, home) or path == home:
        return path
    parts = path[len(home.rstrip("/")) + 1:].split("/")
    return path if parts[0] in SHARED_TOPS else os.path.join(home, parts[0])


def kept(home: str, agent_paths: Iterable[str], readable: Iterable[str], writable: Iterable[str] = (),
         exists=os.path.lexists) -> tuple[tuple[tuple[str, bool], ...], tuple[str, ...]]:
    """What of HOME the box binds back as (path, writable), in mount order, and the credentials
    files inside them to cover: the agent's own places (`writable`: the project, its state and
    logs, TMPDIR), the CLI's own places and the caches that exist (writable), then `readable`
    (its install and PATH folders, read-only) where not already inside a kept place."""
    binds: list[tuple[str, bool]] = []
    for path in [*writable, *agent_paths, *(os.path.join(home, c) for c in CACHES)]:
        if under(path, home) and path != home and exists(path) and (path, True) not in binds:
            binds.append((path, True))
    for path in (tool_root(p, home) for p in readable):
        if under(path, home) and path != home and not any(under(path, p) for p, _ in binds):
            binds.append((path, False))
    binds.sort(key=lambda b: b[0].count("/"))  # parents first: a folder inside another stays visible
    hidden = tuple(p for p in (os.path.join(home, h) for h in HIDDEN_IN_CACHES) if exists(p))
    return tuple(binds), hidden


def allowed_env(env: Mapping[str, str], allow: tuple[Allowed, ...]) -> set[str]:
    """The variables whose value is a path the user allowed (SSH_AUTH_SOCK with its socket
    allowed): they pass into the box."""
    return {name for name, value in env.items() if value and any(under(value, a.path) for a in allow)}
