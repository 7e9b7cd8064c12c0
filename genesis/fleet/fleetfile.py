"""The fleet file: several projects under one monitor (`--fleet fleet.toml`).

    max_parallel = 4            # optional: children at once across all projects (default: the sum)

    [[project]]
    path = "~/src/myapp"        # ~ and paths relative to this file
    parallel = 2                # or "auto"
    [project.settings]          # any genesis.conf knob, as --set KEY=VALUE would give it
    GENESIS_AGENT_CMD = "claude -p"

Read once, before anything starts: every mistake (an unknown key, a path that is not the top
of a git work tree, a project listed twice, a bad parallel, a knob Genesis does not know) is a
FleetFileError that says what to fix, so a fleet never half-starts.

`fleet status`, `report` and `stop` take the same file (`--fleet`) and act on every project it
lists.
"""

from __future__ import annotations

import difflib
import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from genesis.config import MAX_VALUE_CHARS, closest, is_genesis_key
from genesis.fleet.resources import MAX_PARALLEL
from genesis.hints import program
from genesis.repo.gitcmd import GitTimeout, run_git

__all__ = ["FleetFile", "FleetProject", "FleetFileError", "load", "MAX_PROJECTS", "MAX_BYTES"]

MAX_PROJECTS = 20
MAX_BYTES = 64 << 10
GIT_TIMEOUT = 20.0
TOP_KEYS = ("max_parallel", "project")
PROJECT_KEYS = ("path", "parallel", "settings")


class FleetFileError(ValueError):
    """The fleet file cannot be used; the message names the file and what to fix."""


@dataclass(frozen=True)
class FleetProject:
    path: Path                                  # the resolved top of the project's work tree
    parallel: str                               # as --parallel takes it: "N" or "auto"
    settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class FleetFile:
    path: Path                                  # the file, absolute
    max_parallel: int | None                    # children at once across the projects (None: the sum)
    projects: tuple[FleetProject, ...]


def _unknown(key: str, known: tuple[str, ...], where: str) -> str:
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return (f"unknown key {key!r} in {where}" + (f"; did you mean {near[0]!r}?" if near else "")
            + f" (the keys: {', '.join(known)})")


def _parallel(value: Any, where: str) -> str:
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PARALLEL:
        return str(value)
    if isinstance(value, str) and value.isdigit() and 1 <= int(value) <= MAX_PARALLEL:
        return str(int(value))
    raise FleetFileError(f"{where}: parallel = {value!r}: expected a whole number from 1 to {MAX_PARALLEL}, "
                         f"or \"auto\"")


def _settings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise FleetFileError(f"{where}: settings must be a table of KEY = \"VALUE\" ([project.settings])")
    out: dict[str, str] = {}
    for key, setting in value.items():
        if not is_genesis_key(key):
            near = closest(key)
            raise FleetFileError(f"{where}: unknown setting {key}" + (f"; did you mean {near}?" if near else "")
                                 + f"; `{program()} config show --explain` lists the settings")
        if isinstance(setting, bool):
            setting = "true" if setting else "false"
        elif isinstance(setting, (int, float)):
            setting = str(setting)
        if not isinstance(setting, str):
            raise FleetFileError(f"{where}: {key} must be a string (as in genesis.conf), not {type(setting).__name__}")
        if len(setting) > MAX_VALUE_CHARS:
            raise FleetFileError(f"{where}: {key} is {len(setting)} characters long, more than the "
                                 f"{MAX_VALUE_CHARS} allowed")
        out[key] = setting
    return out


def _top_of(path: Path, where: str) -> Path:
    """The path, resolved, if it is the top of a git work tree; else what to fix."""
    if not path.is_dir():
        raise FleetFileError(f"{where}: path {str(path)!r} is not a directory: give the top of a git work tree")
    try:
        done = run_git(path, ["rev-parse", "--show-toplevel"], timeout=GIT_TIMEOUT)
    except (GitTimeout, OSError) as exc:
        raise FleetFileError(f"{where}: git could not look at {path}: {exc}") from None
    top = done.text.strip() if done.returncode == 0 else ""
    if not top:
        raise FleetFileError(f"{where}: {path} is not a git work tree (`git init` it, or fix the path)")
    resolved = path.resolve()
    if Path(top).resolve() != resolved:
        raise FleetFileError(f"{where}: {path} is inside the git work tree {top}, not its top: give {top}")
    return resolved


def load(path: Path) -> FleetFile:
    """The fleet file at path, checked whole; FleetFileError says what to fix."""
    path = Path(path).expanduser().absolute()
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise FleetFileError(f"fleet file {path} is not a file")
        if info.st_size > MAX_BYTES:
            raise FleetFileError(f"fleet file {path} is {info.st_size} bytes, more than the {MAX_BYTES} allowed")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise FleetFileError(f"no fleet file {path}") from None
    except OSError as exc:
        raise FleetFileError(f"cannot read the fleet file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise FleetFileError(f"fleet file {path} is more than the {MAX_BYTES} bytes allowed")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise FleetFileError(f"fleet file {path} is not valid TOML: {exc}") from None
    for key in data:
        if key not in TOP_KEYS:
            raise FleetFileError(f"fleet file {path}: " + _unknown(key, TOP_KEYS, "the file's top level"))
    max_parallel = data.get("max_parallel")
    if max_parallel is not None and (not isinstance(max_parallel, int) or isinstance(max_parallel, bool)
                                     or not 1 <= max_parallel <= MAX_PARALLEL * MAX_PROJECTS):
        raise FleetFileError(f"fleet file {path}: max_parallel = {max_parallel!r}: expected a whole number from 1")
    listed = data.get("project")
    if not isinstance(listed, list) or not listed or not all(isinstance(p, dict) for p in listed):
        raise FleetFileError(f"fleet file {path} lists no project: add a [[project]] table with path = \"...\"")
    if len(listed) > MAX_PROJECTS:
        raise FleetFileError(f"fleet file {path} lists {len(listed)} projects, more than the {MAX_PROJECTS} allowed")
    projects: list[FleetProject] = []
    seen: dict[Path, int] = {}
    for number, entry in enumerate(listed, 1):
        where = f"fleet file {path}, project {number}"
        for key in entry:
            if key not in PROJECT_KEYS:
                raise FleetFileError(f"{where}: " + _unknown(key, PROJECT_KEYS, "[[project]]"))
        given = entry.get("path")
        if not isinstance(given, str) or not given.strip():
            raise FleetFileError(f"{where}: path = \"...\" is missing (the project's git work tree)")
        where = f"fleet file {path}, project {number} ({given})"
        place = Path(given).expanduser()
        top = _top_of(place if place.is_absolute() else path.parent / place, where)
        if top in seen:
            raise FleetFileError(f"{where}: {top} is listed twice (projects {seen[top]} and {number}): keep one")
        seen[top] = number
        projects.append(FleetProject(top, _parallel(entry.get("parallel", 1), where),
                                     MappingProxyType(_settings(entry.get("settings", {}), where))))
    return FleetFile(path, max_parallel, tuple(projects))
