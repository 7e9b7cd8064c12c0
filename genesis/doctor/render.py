"""The doctor's findings for a person (one line a check, the fix under it, a verdict last) or
for a program (JSON)."""

from __future__ import annotations

from typing import Sequence

from genesis.doctor.checks import FAIL, OK, WARN, Check
from genesis.words import plural

__all__ = ["text", "as_json", "ready", "MARKS"]

MARKS = {OK: "ok", WARN: "--", FAIL: "!!"}
COLOURS = {OK: "\033[32m", WARN: "\033[33m", FAIL: "\033[31m"}
RESET = "\033[0m"


def ready(checks: Sequence[Check]) -> bool:
    """Ready for a night: nothing fails (warnings leave something open, and say what)."""
    return not any(c.level == FAIL for c in checks)


def text(checks: Sequence[Check], colour: bool = False) -> list[str]:
    """One line a check (`ok`, `--` a warning, `!!` a failure), its fix under it, and the verdict."""
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for check in checks:
        mark = MARKS[check.level]
        if colour:
            mark = f"{COLOURS[check.level]}{mark}{RESET}"
        lines.append(f"{mark} {check.name:<{width}}  {check.found}")
        if check.fix and check.level != OK:
            lines.append(f"   {'':<{width}}  fix: {check.fix}")
    failing = sum(c.level == FAIL for c in checks)
    lines.append(f"{plural(failing, 'thing')} to fix before a night" if failing else "ready for a night")
    return lines


def as_json(checks: Sequence[Check]) -> dict:
    failing = sum(c.level == FAIL for c in checks)
    return {"ready": not failing, "failures": failing, "warnings": sum(c.level == WARN for c in checks),
            "checks": [c.to_json() for c in checks]}
