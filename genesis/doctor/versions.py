"""What a program says its version is, asked once and bounded in time.

The program runs in a session of its own with no input: at the deadline its whole process
group is killed, so a CLI that waits on a login prompt or a hung update check costs the
doctor its timeout, never its end.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from genesis.procs.group import kill_group
from genesis.words import sanitize

__all__ = ["Said", "version_of", "parse_version", "VERSION_TIMEOUT"]

VERSION_TIMEOUT = 10.0
MOST_CHARS = 120   # of the line a program says its version in
NUMBER = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Said:
    line: str          # the first line it printed, cleaned ("" when none)
    problem: str       # "" when it answered; else what went wrong, in words


def version_of(program: str, cwd: Path, env: Mapping[str, str], timeout: float = VERSION_TIMEOUT) -> Said:
    """`program --version`'s first line, or what kept it from saying one."""
    try:
        proc = subprocess.Popen([program, "--version"], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return Said("", f"cannot run it ({exc.strerror})")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        _drop(proc)
        return Said("", f"`{Path(program).name} --version` did not answer within {timeout:g}s")
    except BaseException:
        kill_group(proc)
        raise
    line = _first_line(out) or _first_line(err)
    if proc.returncode != 0:
        return Said(line, f"`{Path(program).name} --version` failed (exit {proc.returncode})"
                          + (f": {line}" if line else ""))
    return Said(line, "" if line else f"`{Path(program).name} --version` printed nothing")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The first dotted version number in text, as a tuple (a missing patch number is 0)."""
    match = NUMBER.search(text)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _drop(proc: subprocess.Popen) -> None:
    """Close the pipes of a killed program; something it started outside its group may hold them."""
    try:
        proc.communicate(timeout=1.0)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return sanitize(line, None)[:MOST_CHARS]
