"""What the agent's box must keep visible, and what it must keep out of the agent's hands.

Under bubblewrap the agent gets a private /tmp: a fresh tmpfs, so no pre-existing server
socket there (tmux's, an editor's, a database's) is reachable. What the agent was given
that lives under /tmp (the project, HOME, TMPDIR, the agent's program and PATH folders, a
file its command line or environment names) is bound back in; a socket never is.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["Places", "places_for", "code_paths", "TMP"]

TMP = "/tmp"


@dataclass(frozen=True)
class Places:
    project: str
    cwd: str
    home: str | None
    tmpdir: str | None
    visible: tuple[str, ...]       # under /tmp, bound again inside the private /tmp (parents first)
    protected: tuple[str, ...]     # read-only in the box: Genesis's state, its settings file, its code
    beats: str                     # the heartbeat folder inside the state: writable again (the hook beats)


def _real(path: str | Path | None) -> str | None:
    if not path:
        return None
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _exists_not_socket(path: str) -> bool:
    try:
        return not stat.S_ISSOCK(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _holds_socket(folder: str, most: int = 1000) -> bool:
    """Whether a folder holds a socket among its first `most` entries (or cannot be read)."""
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= most or (not entry.is_symlink() and stat.S_ISSOCK(entry.stat().st_mode)):
                    return True
    except OSError:
        return True
    return False


def _named(value: str) -> str | None:
    """What an environment value under /tmp asks to keep: the path if it exists (a socket never),
    else the folder it would be made in (a test's or a tool's output file), unless that is /tmp
    itself or holds a socket."""
    path = _real(value)
    if path is None or not _under(path, TMP) or path == TMP:
        return None
    if os.path.lexists(path):
        if not _exists_not_socket(path) or (os.path.isdir(path) and _holds_socket(path)):
            return None
        return path
    parent = os.path.dirname(path)
    if parent != TMP and os.path.isdir(parent) and not _holds_socket(parent):
        return parent
    return None


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """Each path once, without those inside another of them, parents first."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(_under(path, top) for top in kept):
            kept.append(path)
    return tuple(kept)


def code_paths(package: Path) -> list[str]:
    """Genesis's installed code: the package folder (the hook script is in it), the virtualenv
    running it, and beside an editable checkout its loop script and `.venv`."""
    found = [str(package)]
    if sys.prefix != sys.base_prefix:
        found.append(sys.prefix)
    home = package.parent
    for name in ("start-multi-agent-loop.sh", ".venv"):
        if (home / name).exists():
            found.append(str(home / name))
    return found


def _program(argv: tuple[str, ...], env: Mapping[str, str], cwd: str) -> str | None:
    if not argv:
        return None
    program = argv[0]
    if "/" in program:
        return _real(os.path.join(cwd, program))
    for folder in env.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, program)
        if folder and os.access(candidate, os.X_OK):
            return _real(candidate)
    return None


def places_for(project: Path, state_dir: Path, heartbeat_dir: Path, log_dir: Path, conf: Path,
               package: Path, argv: tuple[str, ...], env: Mapping[str, str]) -> Places:
    """The places of one agent launch. Code inside the project stays writable: a project that
    is Genesis's own checkout is the agent's work (only its state is kept from it then)."""
    proj = _real(project) or str(project)
    home, tmpdir = _real(env.get("HOME")), _real(env.get("TMPDIR"))
    wanted = [proj, home, tmpdir, _real(log_dir), _real(state_dir)]
    program = _program(argv, env, proj)
    if program:
        wanted.append(os.path.dirname(program))
    wanted += [_real(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    named = [*argv[1:], *env.values()]  # a script the command runs, a file the environment names
    wanted += [_named(v) for v in named if v.startswith(TMP + "/") and "\n" not in v and len(v) < 4096]
    visible = _outermost([p for p in wanted if p and _under(p, TMP) and p != TMP and _exists_not_socket(p)])
    state = _real(state_dir) or str(state_dir)
    protected = [state]
    if conf.is_file():
        protected.append(_real(conf) or str(conf))
    protected += [p for p in map(_real, code_paths(package)) if p and not _under(p, proj)]
    return Places(proj, proj, home, tmpdir, visible, tuple(dict.fromkeys(protected)),
                  _real(heartbeat_dir) or str(heartbeat_dir))
