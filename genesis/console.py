"""Concise status lines for people: on stderr, so stdout stays for what the loop reads.

Colour only on a TTY and without NO_COLOR. Each line can also be appended to the run's
console log, the per-run copy of what the terminal showed: it is written first, and the
terminal's copy is best effort. A terminal closed or a `| tee` killed mid-night costs the
output, never the night: a write that meets EPIPE or EIO points the stream at /dev/null
from then on (a lost reader never comes back), and the step goes on.

A countdown (`progress`) rewrites one terminal line and leaves it open; the next line, the
wait's own or the loop's, ends it with a newline first, so no message lands inside it.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from genesis.redact import redact
from genesis.words import sanitize

__all__ = ["say", "progress", "end_line", "write", "survive_lost_output", "coloured"]

COLOURS = {"info": "", "ok": "\033[32m", "warn": "\033[33m", "error": "\033[31m", "head": "\033[1m"}
# The reader is gone (a killed `tee`); the terminal closed (EIO), or revoked at a logout (ENXIO).
LOST = frozenset({errno.EPIPE, errno.EIO, errno.ENXIO})

# Streams whose last line is a progress line still open (a countdown, no newline yet): the
# next line said on that stream ends it first. By id: one terminal line per stream.
_OPEN: set[int] = set()


def coloured(stream: TextIO) -> bool:
    """Whether to colour what goes to stream: a terminal, and NO_COLOR unset."""
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def say(message: str, kind: str = "info", stream: TextIO | None = None,
        copy_to: tuple[Path, ...] = ()) -> None:
    """One status line, `[genesis HH:MM:SS] message`, appended to each copy_to, then on stderr
    if it is still there. A message may quote an agent (its last line, the tool it hung in):
    escape codes and bidi controls are taken out of every line of it, and secrets (redact.py)."""
    message = "\n".join(sanitize(line, None) for line in redact(message).split("\n"))
    stream = stream or sys.stderr
    prefix = time.strftime("[genesis %H:%M:%S]")
    for path in copy_to:  # the record first: a terminal that went away must not cost it
        _append(path, f"{prefix} {message}\n")
    colour = COLOURS.get(kind, "") if coloured(stream) else ""
    reset = "\033[0m" if colour else ""
    end_line(stream)
    write(stream, f"{prefix} {colour}{message}{reset}\n")


def progress(message: str, stream: TextIO | None = None) -> None:
    """Rewrite the terminal's current line with `[genesis HH:MM:SS] message` and leave it open
    (a countdown); the next say, or end_line, ends it with a newline."""
    stream = stream or sys.stderr
    if write(stream, f"\r\033[K{time.strftime('[genesis %H:%M:%S]')} {message}"):
        _OPEN.add(id(stream))


def end_line(stream: TextIO | None = None) -> None:
    """End an open progress line with a newline, so that what follows starts a line of its own."""
    stream = stream or sys.stderr
    if id(stream) in _OPEN:
        _OPEN.discard(id(stream))
        write(stream, "\n")


def write(stream: TextIO, text: str) -> bool:
    """Write and flush, best effort: False when the reader or the terminal is gone."""
    try:
        stream.write(text)
        stream.flush()
    except OSError as exc:
        if exc.errno not in LOST:
            raise
        _lose(stream)
        return False
    return True


def _lose(stream: TextIO) -> None:
    """Point the stream's descriptor at /dev/null: what is still buffered, and every later
    write (a library's, the interpreter's flush at exit), goes nowhere instead of failing."""
    _OPEN.discard(id(stream))
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


class _Surviving:
    """A text stream whose write and flush survive a lost reader or terminal (see write)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            if exc.errno not in LOST:
                raise
            _lose(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if exc.errno not in LOST:
                raise
            _lose(self._stream)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def survive_lost_output() -> None:
    """Make this process's stdout and stderr survive their reader or terminal going away, for
    everything that writes to them (click.echo included)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Surviving):
            setattr(sys, name, _Surviving(stream))


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
