"""A loop tethered to the worker that follows it: a worker gone, its loop is stopped before
Temporal can start the attempt's retry on another machine.

A loop runs in a session of its own, so it outlives its worker (a crash, a SIGKILL, a worker
wedged with the machine up). Temporal retries the attempt once its heartbeats stop for H (the
heartbeat timeout), and the retry may start on another machine: the orphaned loop's agent and
the retry's would then work one task at once. So each launch gets a tether, a small process of
its own session beside the loop (not its child: it sees the loop's SIGKILL too), which reads the
lease the attempt's activity renews every second (`children/<task id>.lease.json`: the loop it
follows, the worker's pid and start time, when) and stops the loop when its lease is older than
the tether's grace: a worker that is gone (its pid and start time no longer a live process) or
silent (alive, but renewing nothing) alike. It then marks the launch stopping (no retry adopts
it, genesis/temporal/adoption.py), freezes the loop's whole tree, ends it (SIGTERM, SIGKILL past
STOP_GRACE) and writes what it did in `children/<task id>.tether.json`. A worker restarted in
time, whose retry adopts the loop, renews the lease in its own name: the loop goes on.

The grace, derived from the heartbeat timeout so that the loop is gone before a retry can start
elsewhere (`retry_after`, `grace`): the SDK sends heartbeats at most every T = min(0.8 H,
THROTTLE_MAX) (worker.py pins THROTTLE_MAX): a call within T of the last one sent waits for the
end of that window, so the server's last heartbeat may be T older than the worker's last call,
which renews the lease too (RENEW_EVERY more is kept as a margin). Temporal times the attempt out H after its last heartbeat and retries it no sooner:
anywhere for an unplaced attempt (`<prefix>-any`), after S (the host wait, the retry's
schedule-to-start timeout) more for one pinned to its machine (`<prefix>@<host>`). So a retry
starts elsewhere no sooner than H - T - RENEW_EVERY (+ S pinned) after the lease's last renewal,
and the tether, looking every LOOK_EVERY and ending the tree within STOP_GRACE, stops the loop
once the lease is `grace` = that less LOOK_EVERY and STOP_GRACE old. With the defaults (H = 60 s,
S = 300 s): an unplaced loop is stopped 8.75 s after its worker's last renewal, 3.25 s before any
retry can start; a pinned one after 308.75 s. A grace below zero (H under about 16 s) stops the
loop as soon as its worker is proven gone, and a live worker's loop once its lease is LIVE_FLOOR
old (a lease is a beat old at most while its worker renews it): the bound then holds only as far
as that reaction does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from genesis.loop.workerlink import LIVE_FLOOR, Lease, lease_file, read_lease
from genesis.procs.proctree import ProcId, alive, command_line, descendants, identify, kill_all
from genesis.store.atomicio import write_json
from genesis.temporal import adoption

__all__ = ["RENEW_EVERY", "THROTTLE_MAX", "LOOK_EVERY", "STOP_GRACE",
           "record_file", "renew", "retry_after", "grace", "verdict", "start", "watch", "main"]

RENEW_EVERY = 1.0     # seconds: the activity calls activity.heartbeat, and renews the lease with it, this often
THROTTLE_MAX = 60.0   # seconds: the SDK's longest heartbeat throttle (Worker's max_heartbeat_throttle_interval)
LOOK_EVERY = 0.25     # seconds between two looks of the tether at the lease
STOP_GRACE = 2.0      # seconds between SIGTERM and SIGKILL to the loop's tree


def record_file(fleet_dir: Path, task_id: str) -> Path:
    return fleet_dir / "children" / f"{task_id}.tether.json"


def renew(fleet_dir: Path, task_id: str, loop: int, worker: ProcId, now: float) -> None:
    write_json(lease_file(fleet_dir, task_id), {"loop": loop, "pid": worker.pid, "created": worker.create_time,
                                                "at": now})


def retry_after(heartbeat: float, host_wait: float, pinned: bool) -> float:
    """How soon after the lease's last renewal a retry of the attempt can start on another
    machine: H less the SDK's heartbeat throttle and a renewal's period, plus the host wait S
    for an attempt pinned to this machine (see the module's words)."""
    throttle = min(0.8 * heartbeat, THROTTLE_MAX)
    return heartbeat - throttle - RENEW_EVERY + (host_wait if pinned else 0.0)


def grace(heartbeat: float, host_wait: float, pinned: bool) -> float:
    """How old the lease may grow before the loop is stopped: gone before that retry can start."""
    return retry_after(heartbeat, host_wait, pinned) - LOOK_EVERY - STOP_GRACE


def verdict(lease: Lease | None, loop: int, worker_alive: bool, since: float, now: float, limit: float) -> str:
    """Why the loop is stopped now ("" while it is tethered). A lease naming another loop (an
    earlier launch's) is none; with none, the loop's launch (`since`) counts as the last renewal.
    A worker proven gone stops the loop once the lease is `limit` old (at once if that is below
    zero); a live one, once it is also LIVE_FLOOR old (silent: wedged, or cut off)."""
    ours = lease is not None and lease.loop == loop
    last = lease.at if ours else since
    age = now - last
    if ours and worker_alive:
        if age < max(limit, LIVE_FLOOR):
            return ""
        return (f"its worker (pid {lease.worker.pid}) renewed nothing for {age:.1f}s (grace {limit:g}s): a retry of "
                f"its attempt may start on another machine")
    if age < limit:
        return ""
    who = f"its worker (pid {lease.worker.pid}) is gone" if ours else "no worker follows it"
    return (f"{who}, its lease {age:.1f}s old (grace {limit:g}s): a retry of its attempt may start on another "
            f"machine")


def _companion(ident: ProcId, loop: int) -> bool:
    """The loop's companion (genesis/watch/companion.py) records a loop that ended without its
    own end: it is left to do so."""
    words = command_line(ident.pid, 400).split()
    return "companion" in words and str(loop) in words


def _tree(loop: ProcId) -> list[ProcId]:
    """The loop and every process below it (its steps, its phase's watcher, the agent's tree),
    each by pid and start time, the companion left out."""
    return [p for p in descendants(loop) if not _companion(p, loop.pid)]


def stop(loop: ProcId, fleet_dir: Path, task_id: str, why: str, clock: Callable[[], float] = time.time) -> None:
    """Marked stopping first (no retry adopts it), then the loop's whole tree frozen and ended."""
    adoption.mark_stopping(fleet_dir, task_id, loop.pid)
    began = clock()
    report = kill_all(lambda: _tree(loop), STOP_GRACE)
    write_json(record_file(fleet_dir, task_id), {"loop": loop.pid, "why": why, "began": began, "ended": clock(),
                                                 "processes": report.targets, "survivors": list(report.survivors)})


def watch(loop: ProcId, fleet_dir: Path, task_id: str, limit: float, since: float,
          clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> str:
    """Look at the lease until the loop ends ("") or is stopped (why)."""
    while alive(loop):
        lease = read_lease(fleet_dir, task_id)
        why = verdict(lease, loop.pid, lease is not None and alive(lease.worker), since, clock(), limit)
        if why:
            stop(loop, fleet_dir, task_id, why, clock)
            return why
        sleep(LOOK_EVERY)
    return ""


def start(loop: ProcId, fleet_dir: Path, task_id: str, limit: float, since: float) -> subprocess.Popen:
    """The tether of a loop, in a session of its own (a worker's process group killed leaves it)."""
    argv = [sys.executable, "-m", "genesis.temporal.tether", "--loop", str(loop.pid), "--created",
            repr(loop.create_time), "--fleet-dir", str(fleet_dir), "--task", task_id, "--grace", f"{limit!r}",
            "--since", repr(since)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True, cwd=str(fleet_dir))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m genesis.temporal.tether")
    parser.add_argument("--loop", type=int, required=True)
    parser.add_argument("--created", type=float, required=True)
    parser.add_argument("--fleet-dir", type=Path, required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--grace", type=float, required=True)
    parser.add_argument("--since", type=float, required=True)
    args = parser.parse_args(argv)
    loop = ProcId(args.loop, args.created)
    if identify(args.loop) != loop:
        return 0   # the loop is gone already
    watch(loop, args.fleet_dir, args.task, args.grace, args.since)
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main())
