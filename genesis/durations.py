"""A duration setting's one grammar: 90s, 15m, 2h or 1d (decimals allowed), or a bare number
in the unit the setting's name carries (_SECONDS, _MINUTES, _HOURS; a name without one:
seconds), so that every configuration written before units were accepted still means what it did."""

from __future__ import annotations

import re

__all__ = ["UNITS", "UNIT_WORDS", "DURATION_RE", "seconds", "unit_of", "with_unit", "written"]

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
UNIT_WORDS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
DURATION_RE = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhd]?)$")
NAME_UNITS = (("_SECONDS", "s"), ("_MINUTES", "m"), ("_HOURS", "h"))


def unit_of(name: str) -> str:
    """The unit a bare number means for a setting of this name: its suffix's, else seconds."""
    return next((unit for suffix, unit in NAME_UNITS if name.endswith(suffix)), "s")


def seconds(key: str, raw: str, unit: str, source: str = "") -> float:
    """RAW as seconds; a ValueError says what to write instead."""
    found = DURATION_RE.match(raw.strip().lower())
    if not found:
        where = f" ({source})" if source else ""
        raise ValueError(f"{key}={raw.strip()!r}{where} is not a duration: write 90s, 15m or 2h (a bare number "
                         f"means {UNIT_WORDS[unit]})")
    return float(found.group(1)) * UNITS[found.group(2) or unit]


def with_unit(raw: str, unit: str) -> str:
    """RAW with its unit said: a bare number gets UNIT's letter; anything else is kept as written."""
    found = DURATION_RE.match(raw.strip().lower())
    return f"{found.group(1)}{unit}" if found and not found.group(2) else raw


def written(value: float) -> str:
    """Seconds as a setting is best written: 90s, 15m, 2h, 1d (seconds when nothing larger divides),
    never in an exponent's form, which no setting reads."""
    for unit in ("d", "h", "m"):
        if value >= UNITS[unit] and value % UNITS[unit] == 0:
            return f"{_plain(value / UNITS[unit])}{unit}"
    return f"{_plain(value)}s"


def _plain(number: float) -> str:
    return f"{number:.6f}".rstrip("0").rstrip(".") or "0"
