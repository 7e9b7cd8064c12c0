"""What a fleet may use of this machine: how many children, memory, ports, launch spacing.

An agent CLI takes 200-620 MB resident (Claude Code, Codex, Gemini measured by the peers:
the fleet reference's figures); 400 MB is the estimate `--parallel auto` divides the
available memory by: near the middle, so a machine is neither left idle nor swapped out
when most agents sit near the low end and a few climb to the top. Eight children at most
by default: past that, two cores spend their time switching between agents' tools.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

import psutil

from genesis.config import ConfigError, Setting, default_of
from genesis.durations import seconds as duration_seconds
from genesis.durations import unit_of

__all__ = ["FleetSettings", "fleet_settings", "auto_parallel", "parallel_of", "available_memory", "port_range",
           "AUTO_CAP", "MB"]

MB = 1 << 20
AUTO_CAP = 8          # --parallel auto never picks more
MAX_PARALLEL = 64     # an explicit --parallel above this is most likely a typo


@dataclass(frozen=True)
class FleetSettings:
    child_iterations: int
    stagger: float            # seconds between two launches
    memory_per_agent: int     # bytes, for --parallel auto
    memory_floor: int         # bytes: no launch while less is available
    port_base: int
    ports_per_task: int
    check: float              # seconds between two checks of the children


KEYS = ("GENESIS_FLEET_CHILD_ITERATIONS", "GENESIS_FLEET_STAGGER_SECONDS", "GENESIS_FLEET_MEMORY_PER_AGENT_MB",
        "GENESIS_FLEET_MEMORY_FLOOR_MB", "GENESIS_FLEET_PORT_BASE", "GENESIS_FLEET_PORTS_PER_TASK",
        "GENESIS_FLEET_CHECK_SECONDS")
DEFAULTS = {key: default_of(key) for key in KEYS}   # from the knob table, the one place defaults live


def fleet_settings(settings: Mapping[str, Setting]) -> FleetSettings:
    """The fleet's knobs from a configuration's settings; ConfigError names a bad one."""

    def number(key: str, low: float, high: float, integer: bool = False, duration: bool = False) -> float:
        setting = settings.get(key)
        raw = (setting.value if setting is not None else DEFAULTS[key]).strip()
        source = setting.source if setting is not None else "default"
        try:
            value = duration_seconds(key, raw, unit_of(key), source) if duration else int(raw) if integer \
                else float(raw)
        except ValueError as exc:
            if duration:
                raise ConfigError(str(exc)) from None
            raise ConfigError(f"{key}={raw!r} ({source}): expected {'a whole number' if integer else 'a number'}") \
                from None
        if not low <= value <= high:
            unit = "s" if duration else ""
            raise ConfigError(f"{key}={raw!r} ({source}): expected {low:g}{unit} to {high:g}{unit}")
        return value

    fleet = FleetSettings(
        child_iterations=int(number("GENESIS_FLEET_CHILD_ITERATIONS", 1, 1000, integer=True)),
        stagger=number("GENESIS_FLEET_STAGGER_SECONDS", 0, 3600, duration=True),
        memory_per_agent=int(number("GENESIS_FLEET_MEMORY_PER_AGENT_MB", 1, 1 << 20)) * MB,
        memory_floor=int(number("GENESIS_FLEET_MEMORY_FLOOR_MB", 0, 1 << 24)) * MB,
        port_base=int(number("GENESIS_FLEET_PORT_BASE", 1024, 65535, integer=True)),
        ports_per_task=int(number("GENESIS_FLEET_PORTS_PER_TASK", 1, 1000, integer=True)),
        check=number("GENESIS_FLEET_CHECK_SECONDS", 0.05, 60, duration=True),
    )
    return fleet


def auto_parallel(cores: int, available: int, per_agent: int, cap: int = AUTO_CAP) -> int:
    """N for `--parallel auto`: no more children than cores, than the available memory holds
    at per_agent bytes each, or than cap; at least one."""
    return max(1, min(cores, available // max(1, per_agent), cap))


def parallel_of(value: str, fleet: FleetSettings, cores: int | None = None, available: int | None = None) -> int:
    """--parallel N or auto as a number of children (ConfigError for anything else)."""
    if value == "auto":
        return auto_parallel(cores or os.cpu_count() or 1,
                             available_memory() if available is None else available, fleet.memory_per_agent)
    if not value.isdigit() or not 1 <= int(value) <= MAX_PARALLEL:
        raise ConfigError(f"--parallel {value!r}: expected a whole number from 1 to {MAX_PARALLEL}, or auto")
    return int(value)


def available_memory() -> int:
    """Bytes the kernel says new processes can have without swapping (MemAvailable)."""
    return int(psutil.virtual_memory().available)


def port_range(slot: int, fleet: FleetSettings) -> tuple[int, int]:
    """The ports of the child in launch slot `slot` (0, 1, ...): (base, count), never past 65535."""
    span = max(1, (65536 - fleet.port_base) // fleet.ports_per_task)
    return fleet.port_base + (slot % span) * fleet.ports_per_task, fleet.ports_per_task
