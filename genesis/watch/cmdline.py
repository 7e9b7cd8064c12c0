"""What fits on an agent's command line: the OS's limits, and the real reason when it does not."""

from __future__ import annotations

import os
import shlex
import struct
import sys
from typing import Mapping

__all__ = ["prompt_problem", "misfit", "too_big", "header_line"]

# Linux: one string (argument or environment entry) takes at most MAX_ARG_STRLEN = 32 pages
# with its NUL, and all of them with their pointers at most a quarter of the stack limit
# (capped at 6 MiB, at least 128 KiB). macOS: only the total, ARG_MAX. HEADROOM covers what
# the kernel adds (the program's path, a script's interpreter line).
HEADROOM = 8 << 10
POINTER = struct.calcsize("P")


def _limits() -> tuple[int, int | None]:
    """(bytes for every argument and environment string with its pointer, most bytes for one string)."""
    try:
        total = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        total = -1
    total = total if total > 0 else 128 << 10
    if sys.platform.startswith("linux"):
        return min(total, 6 << 20) - HEADROOM, 32 * os.sysconf("SC_PAGE_SIZE")
    return total - HEADROOM, None


def _cost(strings: list[bytes]) -> int:
    return sum(len(b) + 1 + POINTER for b in strings) + 2 * POINTER  # the two NULL terminators


def _strings(argv: tuple[str, ...], env: Mapping[str, str]) -> list[bytes]:
    return [os.fsencode(a) for a in argv] + [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]


def misfit(argv: tuple[str, ...], prompt: str, env: Mapping[str, str]) -> str | None:
    """Why prompt cannot be the last argument of argv, or None when it can."""
    if "\0" in prompt:
        return "the prompt contains a NUL byte, which no command-line argument can carry (remove it)"
    total, per_string = _limits()
    size = len(os.fsencode(prompt))
    if per_string is not None and size + 1 > per_string:
        return (f"the prompt is {size} bytes, more than the {per_string - 1} bytes the OS allows in one "
                f"command-line argument")
    room = total - _cost(_strings(argv, env)) - POINTER - 1
    if size > room:
        return (f"the prompt is {size} bytes, but the OS allows {total + HEADROOM} bytes for a program's "
                f"arguments and environment together and the agent command and environment leave "
                f"{max(room, 0)} of them")
    return None


def prompt_problem(argv: tuple[str, ...], prompt: str, env: Mapping[str, str], prompt_stdin: bool) -> str | None:
    """Why the agent cannot be given this prompt, with what to do; None when it can.

    A prompt goes as the last argument when it fits the OS's limits, else on stdin if the
    agent reads it there; otherwise the run is refused with this reason, before it starts.
    """
    if not prompt or prompt_stdin:
        return None
    why = misfit(tuple(argv), prompt, env)
    if why is None:
        return None
    return f"{why}; shorten the prompt file, or use an agent that reads its prompt from stdin (as `claude -p` does)"


def too_big(argv: tuple[str, ...], env: Mapping[str, str]) -> str:
    """The real reason behind E2BIG: the sizes, the largest strings, the limits."""
    total, per_string = _limits()
    strings = _strings(argv, env)
    names = [f"argument {i}" for i in range(len(argv))] + [f"environment variable {k}" for k in env]
    largest = max(range(len(strings)), key=lambda i: len(strings[i]), default=None)
    biggest = f"; the largest is {names[largest]}, {len(strings[largest])} bytes" if largest is not None else ""
    one = f", at most {per_string - 1} in one string" if per_string is not None else ""
    return (f"its arguments and environment take {_cost(strings)} bytes, too many for the OS (about "
            f"{total + HEADROOM} in all{one}){biggest}; shorten the agent command, the prompt or the environment")


def header_line(argv: tuple[str, ...], prompt: str, on_stdin: bool) -> str:
    """The command for the log's header: quoted, cut short, the prompt by its size only."""
    shown = shlex.join(argv)
    shown = shown if len(shown) <= 500 else shown[:500] + "..."
    if not prompt:
        return shown
    size = len(prompt.encode("utf-8", "surrogateescape"))
    return f"{shown} <prompt, {size} bytes{' on stdin' if on_stdin else ''}>"
