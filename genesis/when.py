"""Times as the reader reads them: in the reader's zone (TZ, else the machine's), the zone
always said, so a night that crosses midnight or a report read on another machine is never
ambiguous. Files keep UTC (clock.iso); only what a person reads goes through here."""

from __future__ import annotations

import time

__all__ = ["zone", "clock", "stamp", "day"]


def zone(epoch: float) -> str:
    """The reader's zone at that moment: its abbreviation (CET, EST, UTC), or its offset
    (+0530) where the zone has no letters."""
    local = time.localtime(epoch)
    name = local.tm_zone or ""
    if name.isalpha():
        return name
    offset = local.tm_gmtoff or 0
    sign = "-" if offset < 0 else "+"
    return f"{sign}{abs(offset) // 3600:02d}{abs(offset) % 3600 // 60:02d}"


def clock(epoch: float, seconds: bool = False) -> str:
    """03:12 CET (03:12:40 CET with seconds)."""
    shape = "%H:%M:%S" if seconds else "%H:%M"
    return f"{time.strftime(shape, time.localtime(epoch))} {zone(epoch)}"


def stamp(epoch: float, seconds: bool = False) -> str:
    """2026-11-24 03:12 CET: a date and a time."""
    shape = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return f"{time.strftime(shape, time.localtime(epoch))} {zone(epoch)}"


def day(epoch: float) -> str:
    """24 Nov: the day alone, for an axis that crosses midnight."""
    return time.strftime("%d %b", time.localtime(epoch))
