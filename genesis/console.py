"""Concise status lines for the terminal; colour only on a TTY and without NO_COLOR."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["say"]

COLOURS = {"info": "", "ok": "\033[32m", "warn": "\033[33m", "error": "\033[31m", "head": "\033[1m"}


def _colour(stream: TextIO) -> bool:
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def say(message: str, kind: str = "info", stream: TextIO | None = None) -> None:
    """One status line: `[genesis HH:MM:SS] message`."""
    stream = stream or sys.stdout
    prefix = time.strftime("[genesis %H:%M:%S]")
    colour = COLOURS.get(kind, "") if _colour(stream) else ""
    reset = "\033[0m" if colour else ""
    stream.write(f"{prefix} {colour}{message}{reset}\n")
    stream.flush()
