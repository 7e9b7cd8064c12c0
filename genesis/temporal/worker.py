"""`genesis worker`: one per machine. It runs the fleet's workflow code (any worker may) and
the child-loop attempts of tasks placed on this machine (`<prefix>@<host>`) or on none yet
(`<prefix>-any`), in its own root folder. SIGTERM or SIGINT stops it gracefully: its running
attempts are cancelled (each child loop is stopped as `genesis stop` would) and Temporal
retries them on another machine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Mapping, NoReturn

from temporalio.worker import Worker

from genesis.fleet.lines import clean
from genesis.fleet.resources import FleetSettings
from genesis.config import ConfigError
from genesis.temporal import tether
from genesis.temporal.activities import MachineActivities
from genesis.temporal.connection import Outage, connect
from genesis.temporal.records import any_queue, fleet_queue, host_queue
from genesis.temporal.settings import TemporalSettings
from genesis.temporal.workflows import WORKFLOWS

__all__ = ["serve", "main", "GRACEFUL", "exit_now"]

# Running attempts get this long to stop their loops when the worker stops (the SDK's default,
# 0, cancels them at once); the loop's own stop may take longer: it is bounded by the activity.
GRACEFUL = timedelta(seconds=30)
# The SDK sends an attempt's heartbeats at most every min(0.8 H, THROTTLE): pinned here, since a
# loop's tether derives its grace from it (genesis/temporal/tether.py).
THROTTLE = timedelta(seconds=tether.THROTTLE_MAX)


async def serve(settings: TemporalSettings, root: Path, parallel: int, env: Mapping[str, str],
                ready: asyncio.Event | None = None, fleet: FleetSettings | None = None) -> None:
    """Poll the fleet's queues until SIGTERM or SIGINT, then shut down gracefully. Each queue's
    worker takes up to `parallel` attempts; one count across both runs at most `parallel` loops
    (an attempt beyond it waits on this machine, beating, for a slot)."""
    client = await connect(settings, f"genesis-worker@{settings.host}:{os.getpid()}", env,
                           Outage(settings.address, _say))
    machine = MachineActivities(client, root, settings.host, env, host_wait=settings.host_wait, fleet=fleet,
                                running=asyncio.Semaphore(parallel))
    prefix = settings.queue_prefix
    workers = [
        Worker(client, task_queue=fleet_queue(prefix), workflows=WORKFLOWS, graceful_shutdown_timeout=GRACEFUL),
        Worker(client, task_queue=host_queue(prefix, settings.host), activities=[machine.run_attempt],
               max_concurrent_activities=parallel, graceful_shutdown_timeout=GRACEFUL,
               max_heartbeat_throttle_interval=THROTTLE),
        Worker(client, task_queue=any_queue(prefix), activities=[machine.run_attempt],
               max_concurrent_activities=parallel, graceful_shutdown_timeout=GRACEFUL,
               max_heartbeat_throttle_interval=THROTTLE),
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    runs = [asyncio.create_task(w.run()) for w in workers]
    print(f"genesis worker {settings.host}: polling {fleet_queue(prefix)}, {host_queue(prefix, settings.host)} and "
          f"{any_queue(prefix)} on {settings.address} (namespace {settings.namespace}); working in {root}",
          file=sys.stderr, flush=True)
    if ready is not None:
        ready.set()
    await asyncio.wait([asyncio.create_task(stop.wait()), *runs], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
    await asyncio.gather(*runs, return_exceptions=True)


def _say(text: str, level: str) -> None:
    """The worker's own lines may quote a loop or git (a reason, a failure): cleaned as the fleet's."""
    print(f"genesis worker: {level}: {clean(text)}", file=sys.stderr, flush=True)


def exit_now(code: int) -> NoReturn:
    """Leave without the interpreter's finalization: the SDK's core threads can outlive the event
    loop and abort it (temporalio/sdk-python#300). Everything is shut down by then."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(settings: TemporalSettings, root: Path, parallel: int, env: Mapping[str, str],
         fleet: FleetSettings | None = None) -> NoReturn:
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="genesis-git")
    loop = asyncio.new_event_loop()
    loop.set_default_executor(pool)   # asyncio.to_thread: the activities' git, bounded
    try:
        loop.run_until_complete(serve(settings, root, parallel, env, fleet=fleet))
        code = 0
    except (OSError, ConfigError) as exc:
        print(f"genesis: error: {exc}", file=sys.stderr)
        code = 1
    except RuntimeError as exc:   # the server cannot be reached: the SDK says so
        print(f"genesis: error: cannot reach Temporal at {settings.address}: {exc}", file=sys.stderr)
        code = 1
    exit_now(code)
