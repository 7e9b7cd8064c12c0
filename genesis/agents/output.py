"""Reading a CLI's output: the small pieces every reader shares.

An agent CLI's output mixes its records (one JSON object a line) with whatever else it
prints (stderr, a cut line); a reader parses the lines that are records, keeps the rest as
text, and writes a bounded, readable transcript line for each.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from genesis.words import sanitize

__all__ = ["MAX_LINE_BYTES", "TEXT_WIDTH", "LINE_WIDTH", "INPUT_WIDTH", "ERROR_WIDTH", "ERROR_LINES", "parse",
           "paragraph", "one_line", "text", "integer", "number", "turns", "iso_time_ahead"]

MAX_LINE_BYTES = 1 << 20   # a longer output line is not parsed (bounded memory and time)
TEXT_WIDTH = 4000          # one line of the model's text (or of other output) in the transcript, at most
LINE_WIDTH = 1000          # any other transcript line, at most
INPUT_WIDTH = 200          # a tool's input shown as JSON, at most
ERROR_WIDTH = 300          # one line of a failed tool's output, at most
ERROR_LINES = 4            # lines of a failed tool's output shown
ISO_TIME = re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?")


def parse(line: str) -> dict[str, Any] | None:
    """The record on a line, or None when the line is not a JSON object (stderr, a cut line)."""
    if not line.lstrip().startswith("{"):
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    return record if isinstance(record, dict) else None


def paragraph(head: str, said: str, width: int) -> list[str]:
    """Text over several transcript lines: the first after `head`, the rest indented two spaces."""
    shown = [line for line in said.splitlines() if line.strip()]
    if not shown:
        return []
    return [sanitize(head + shown[0], width)] + [sanitize("  " + line, width) for line in shown[1:]]


def turns(n: int | None) -> str | None:
    return None if not n else f"{n} turn" if n == 1 else f"{n} turns"


def one_line(line: str) -> str:
    return sanitize(line, LINE_WIDTH)


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def iso_time_ahead(message: str, now: float) -> float | None:
    """The epoch of the first ISO time in a message that is still ahead (a provider's "will
    reset at ..."); a time with no zone is UTC."""
    for found in ISO_TIME.finditer(message):
        try:
            at = dt.datetime.fromisoformat(found.group().replace("Z", "+00:00").replace(" ", "T"))
        except ValueError:
            continue
        epoch = (at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)).timestamp()
        if epoch > now:
            return epoch
    return None
