"""The children's heartbeats, as the monitor sees them at each check.

A child's hook writes a heartbeat file per phase in the child's own state folder (each
beat replaces the last). At every check the monitor reads the newest of them for each
running child; a beat newer than the last it saw is a sighting, counted in the fleet
ledger. A beat is missed when a newer one replaced it before a check came: so a fleet is
fully seen while every check, all children read, takes less than the time between beats.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from genesis.health.heartbeat import read_heartbeat

__all__ = ["newest_beat", "BeatBook", "MAX_FILES"]

MAX_FILES = 32  # phase heartbeat files read per child (a loop has a handful of phases)


def newest_beat(heartbeat_dir: Path) -> float | None:
    """The newest heartbeat time among a child's phase heartbeat files, or None (none yet, unreadable)."""
    try:
        with os.scandir(heartbeat_dir) as entries:
            names = [e.name for n, e in zip(range(MAX_FILES * 2), entries)
                     if e.name.endswith(".json") and not e.name.endswith(".health.json")]
    except OSError:
        return None
    newest = None
    for name in names[:MAX_FILES]:
        beat, _why = read_heartbeat(heartbeat_dir / name)  # no symlink followed, size-bounded
        if beat is not None and (newest is None or beat.epoch > newest):
            newest = beat.epoch
    return newest


@dataclass
class BeatBook:
    """The newest beat seen per child run; sightings() gives only what is new since the last check."""
    last: dict[tuple[str, str], float] = field(default_factory=dict)

    def sight(self, task_id: str, run_id: str, beat: float | None, now: float) -> tuple[str, str, float, float] | None:
        """(task id, run id, beat time, now) when beat is newer than the last one seen of that run."""
        if beat is None or beat <= self.last.get((task_id, run_id), float("-inf")):
            return None
        self.last[(task_id, run_id)] = beat
        return (task_id, run_id, beat, now)

    def forget(self, task_id: str) -> None:
        for key in [k for k in self.last if k[0] == task_id]:
            del self.last[key]
