"""Time zones for tests of a night that crosses the reader's midnight."""

from __future__ import annotations


def zone_with_midnight_at(epoch: float) -> str:
    """A POSIX TZ (named GEN) in which `epoch` is local midnight (POSIX offsets are west-positive)."""
    east = (-int(epoch)) % 86400
    east = east - 86400 if east > 43200 else east
    west = -east
    sign = "-" if west < 0 else "+"
    west = abs(west)
    return f"GEN{sign}{west // 3600:02d}:{west % 3600 // 60:02d}:{west % 60:02d}"
