"""Concise status lines for people: on stderr, so stdout stays for what the loop reads.

Colour only on a TTY and without NO_COLOR. Each line can also be appended to the run's
console log, the per-run copy of what the terminal showed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TextIO

from genesis.words import sanitize

__all__ = ["say"]

COLOURS = {"info": "", "ok": "\033[32m", "warn": "\033[33m", "error": "\033[31m", "head": "\033[1m"}


def _colour(stream: TextIO) -> bool:
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def say(message: str, kind: str = "info", stream: TextIO | None = None,
        copy_to: tuple[Path, ...] = ()) -> None:
    """One status line, `[genesis HH:MM:SS] message`, on stderr (and appended to each copy_to).
    A message may quote an agent (its last line, the tool it hung in): escape codes and bidi
    controls are taken out of every line of it."""
    message = "\n".join(sanitize(line, None) for line in message.split("\n"))
    stream = stream or sys.stderr
    prefix = time.strftime("[genesis %H:%M:%S]")
    colour = COLOURS.get(kind, "") if _colour(stream) else ""
    reset = "\033[0m" if colour else ""
    stream.write(f"{prefix} {colour}{message}{reset}\n")
    stream.flush()
    for path in copy_to:
        _append(path, f"{prefix} {message}\n")


def _append(path: Path, line: str) -> None:
    """One O_APPEND write; the copy is best effort and never stops the loop."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        return
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    except OSError:
        pass
    finally:
        os.close(fd)
