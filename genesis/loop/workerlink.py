"""A loop's link to the Temporal worker that follows it: the files the two share in the fleet's
folder, read and written without temporalio (the loop is no Temporal process).

- The lease (`children/<task>.lease.json`): the worker renews it with each heartbeat; the
  tether beside the loop (genesis/temporal/tether.py) ends the loop when it grows old.
- The ask (`<task>.ask.json`) and the answer (`<task>.told.json`): before each phase the loop
  asks; the worker asks the fleet's account anew, puts any hold in the machine's account store
  and answers (genesis/temporal/holds.py); the loop then reads the store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from genesis.procs.proctree import ProcId
from genesis.store.atomicio import CorruptFile, finite, read_json, write_json

LIVE_FLOOR = 3.0      # seconds: a live worker's lease this old is a silent worker's
ASK_WAIT = 15.0            # seconds a loop waits for its worker's answer before a phase (a query: 10 s at most)
ASK_POLL = 0.05            # seconds between two looks of the loop for that answer


@dataclass(frozen=True)
class Lease:
    loop: int            # the loop's pid (it leads its session)
    worker: ProcId       # the worker renewing it
    at: float            # its last renewal


def lease_file(fleet_dir: Path, task_id: str) -> Path:
    return fleet_dir / "children" / f"{task_id}.lease.json"


def read_lease(fleet_dir: Path, task_id: str) -> Lease | None:
    try:
        found = read_json(lease_file(fleet_dir, task_id), 4096)
    except (OSError, CorruptFile, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    loop, pid, created, at = found.get("loop"), found.get("pid"), finite(found.get("created")), finite(found.get("at"))
    if not isinstance(loop, int) or not isinstance(pid, int) or created is None or at is None:
        return None
    return Lease(loop, ProcId(pid, created), at)


def ask_file(fleet_dir: Path, task_id: str) -> Path:
    return fleet_dir / "children" / f"{task_id}.ask.json"


def told_file(fleet_dir: Path, task_id: str) -> Path:
    return fleet_dir / "children" / f"{task_id}.told.json"


def _time_in(path: Path, key: str) -> float:
    try:
        found = read_json(path, 4096)
    except (OSError, CorruptFile, ValueError):
        return 0.0
    return (finite(found.get(key)) or 0.0) if isinstance(found, dict) else 0.0


def request_of(fleet_dir: Path, task_id: str) -> float:
    """When the task's loop last asked for the account's word (0.0: never)."""
    return _time_in(ask_file(fleet_dir, task_id), "at")


def tell(fleet_dir: Path, task_id: str, request: float, until: float, now: float) -> None:
    """The worker's answer to the request made at `request`: the account asked since, any hold
    already in the store."""
    write_json(told_file(fleet_dir, task_id), {"request": request, "until": until, "at": now})


def answered(told_request: float, asked: float) -> bool:
    """Whether the worker's last answer is to this request or a later one."""
    return told_request >= asked > 0.0


def through_worker(fleet_dir: Path, task_id: str, clock: Callable[[], float] = time.time,
                   sleep: Callable[[float], None] = time.sleep, wait: float = ASK_WAIT) -> str:
    """Before a phase, in a loop a worker follows: the account asked through the worker, its hold
    in the store when this returns. "" when answered or when no worker follows the loop (no
    fresh lease: its tether sees to it); else why the phase goes on unanswered."""
    lease = read_lease(fleet_dir, task_id)
    if lease is None or clock() - lease.at > LIVE_FLOOR:
        return ""
    asked = clock()
    write_json(ask_file(fleet_dir, task_id), {"at": asked})
    while clock() - asked < wait:
        if answered(_time_in(told_file(fleet_dir, task_id), "request"), asked):
            return ""
        sleep(ASK_POLL)
    return (f"its worker did not answer within {wait:g}s whether the fleet's account is held: the account "
            f"store's word as its last ask left it")
