"""The fleet's home (`genesis fleet run --engine temporal`, at the project's checkout): it
checks the start as the local monitor does, starts the account and fleet workflows, runs the
workflow code and the home-only activities (the queue, merges, failure marks) in-process,
writes `<fleet dir>/engine.json` (so status and stop find the fleet), follows the fleet to
its end and exits with the local fleet's codes. The attempts run on `genesis worker`s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Mapping

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from genesis import exitcodes
from genesis.agents import adapter_of
from genesis.config import Config, ConfigError, layout_for, resolve
from genesis.fleet import cascade, ladder
from genesis.fleet.ledger import FleetLedger
from genesis.fleet.lines import say
from genesis.fleet.monitor import MONITOR_FILE, FleetLocked, take_fleet_lock
from genesis.fleet.queue import check_trust, project_branch
from genesis.fleet.resources import fleet_settings, parallel_of
from genesis.ledger.store import LedgerError
from genesis.loop.preflight import read_flag
from genesis.repo.gitcmd import run_git
from genesis.store.atomicio import write_json, write_text
from genesis.store.layout import private_dir
from genesis.store.looplock import FLEET_RUN, Locked, hold, release
from genesis.temporal import reading
from genesis.temporal.activities import HomeActivities
from genesis.temporal.connection import Outage, connect, unreachable
from genesis.temporal.mirror import Mirror
from genesis.temporal.records import (ENGINE_FILE, FleetSpec, LadderSpec, account_workflow_id, fingerprint,
                                      fleet_queue, fleet_workflow_id, home_host, host_queue)
from genesis.temporal.settings import TemporalSettings, temporal_settings
from genesis.temporal.workflows import WORKFLOWS, AccountWorkflow, FleetWorkflow

__all__ = ["run_home", "fleet_spec", "account_of", "FLEET_DIR"]

FLEET_DIR = "fleet"
GIT_TIMEOUT = 60.0
BEAT_EVERY = 1.0          # seconds between two writes of monitor.json and looks at the stop flag
SYNC_EVERY = 2.0          # seconds between two copies of the fleet's state into the ledger
SIGNAL_EXIT = {signal.SIGHUP: exitcodes.INTERRUPTED_HUP, signal.SIGINT: exitcodes.INTERRUPTED_INT,
               signal.SIGTERM: exitcodes.INTERRUPTED_TERM}
RUN_MARGIN = 600.0        # seconds added to an attempt's bound (its steps between phases, a slow start)


def account_of(cfg: Config, settings: TemporalSettings, env: Mapping[str, str]) -> str:
    """The agent subscription's workflow id: from the API key's fingerprint when one is set, else
    GENESIS_TEMPORAL_ACCOUNT, else the home machine's name: the limit is then per home, not per
    worker (every machine of a fleet runs on the account its home names)."""
    adapter = adapter_of(cfg)
    key = adapter.account(env).key
    name = key or settings.account or f"machine {settings.host}"
    return account_workflow_id(settings.queue_prefix, adapter.name, name)


def fleet_spec(cfg: Config, settings: TemporalSettings, overrides: Mapping[str, str], parallel: int, target: str,
               remote_url: str, env: Mapping[str, str]) -> FleetSpec:
    fleet = fleet_settings(cfg.settings)
    strategies = ladder.strategies(cfg)
    phases = tuple(p.name for p in cfg.phases if p.name != "Planner") or ("Builder",)
    print_ = fingerprint(remote_url, target)
    gate = cascade.policy_of(cfg)
    spec = LadderSpec(cfg.fleet_max_task_restarts, cfg.fleet_max_failed_tasks, cfg.fleet_restart_backoff,
                      tuple(s.name for s in strategies),
                      tuple(tuple(sorted(ladder.child_settings(s, cfg).items())) for s in strategies),
                      tuple(s.window_factor for s in strategies))
    return FleetSpec(
        fleet_id=fleet_workflow_id(print_), project=str(cfg.project), remote_url=remote_url, target=target,
        queue_prefix=settings.queue_prefix, home=home_host(print_), account_workflow=account_of(cfg, settings, env),
        parallel=parallel, heartbeat=settings.heartbeat, host_wait=settings.host_wait, check=fleet.check,
        stagger=fleet.stagger, ladder=spec, phases=phases, iterations=fleet.child_iterations,
        overrides=tuple(sorted(overrides.items())),
        attempt_timeout=cfg.max_runtime * len(phases) * fleet.child_iterations + RUN_MARGIN,
        merge_timeout=cfg.merge_test_timeout + RUN_MARGIN, cascade_percent=gate.percent,
        cascade_window=gate.window, probe_after=gate.probe_after, probe_healthy=gate.probe_healthy,
        restart_every=cfg.fleet_restart_every)


def remote_url(project: Path, remote: str) -> str:
    """The URL of the project's remote every machine clones from ("" when it has none)."""
    done = run_git(project, ["remote", "get-url", remote], timeout=GIT_TIMEOUT)
    return done.text.strip() if done.returncode == 0 else ""


def run_home(project: Path, overrides: Mapping[str, str], parallel: str, *, trust: bool = False,
             env: Mapping[str, str] | None = None) -> int:
    """The home's whole life for one project's fleet; its exit code."""
    env = dict(os.environ if env is None else env)
    cfg = resolve(project, flags=overrides)
    settings = temporal_settings(cfg.settings)
    n = parallel_of(parallel, fleet_settings(cfg.settings))
    layout = layout_for(cfg)
    private_dir(layout.state_dir)
    fleet_dir = private_dir(layout.state_dir / FLEET_DIR)
    refused = check_trust(cfg, layout.state_dir, trust)
    if refused:
        say(refused, "error")
        return exitcodes.UNTRUSTED_COMMAND
    target = project_branch(cfg.project)
    url = remote_url(cfg.project, settings.remote)
    if not url:
        say(f"--engine temporal needs a git remote every machine can clone and push to; {cfg.project} has no "
            f"remote named {settings.remote!r}: add one (`git remote add {settings.remote} URL`) or name yours "
            f"with GENESIS_TEMPORAL_REMOTE", "error")
        return exitcodes.USAGE
    spec = fleet_spec(cfg, settings, overrides, n, target, url, env)
    run_id = FLEET_RUN + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    home = HomeActivities(cfg.project, cfg, settings.remote, run_id, fleet_dir / "ledger.sqlite3")
    try:   # one home per project, and never beside a single loop on it (as the local monitor)
        fleet_fd = take_fleet_lock(fleet_dir / "lock")
    except FleetLocked:
        say(f"a fleet already runs on {cfg.project}: `genesis fleet status` shows it", "error")
        return exitcodes.LOCKED
    try:
        loop_fd = hold(layout.loop_lock, layout.loop_record, run_id)
    except Locked as exc:
        os.close(fleet_fd)
        say(f"a single Genesis loop runs on {cfg.project} (pid {exc.holder.pid}): stop it first", "error")
        return exitcodes.LOCKED
    if read_flag(cfg.stop_flag) == "false":
        write_text(cfg.stop_flag, "true\n")
    loop = asyncio.new_event_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=4, thread_name_prefix="genesis-home"))
    try:
        taking_over = _unfinished(fleet_dir)
        if taking_over:   # moved while no home watched: put back before it is pushed for every machine
            home.guard_branch(target)
        pushed = run_git(cfg.project, ["push", "-q", "--no-follow-tags", settings.remote,
                                       f"refs/heads/{target}:refs/heads/{target}"], timeout=GIT_TIMEOUT)
        if pushed.returncode != 0:
            say(f"{target} could not be pushed to {settings.remote} (every machine starts its tasks from it there): "
                f"{(pushed.stderr or pushed.text).strip()[-300:]}; bring the two together (`git pull`), then start "
                f"again", "error")
            return exitcodes.USAGE
        if not taking_over:
            home.keep_start(target)
        return loop.run_until_complete(_follow(settings, spec, home, fleet_dir, cfg, run_id))
    except RuntimeError as exc:
        say(f"cannot reach Temporal at {settings.address}: {exc}", "error")
        return exitcodes.ERROR
    except ConfigError as exc:   # the client's TLS or API-key settings
        say(str(exc), "error")
        return exitcodes.USAGE
    finally:
        release(layout.loop_record, run_id)
        os.close(loop_fd)
        os.close(fleet_fd)


def _unfinished(fleet_dir: Path) -> bool:
    """Whether the fleet's last home was killed (its start recorded, no end): the project branch
    is then judged against the tip that home gave it, as a restarted local monitor judges it."""
    try:
        with FleetLedger.open(fleet_dir / "ledger.sqlite3", readonly=True) as led:
            last = led.last_event("fleet_start", "fleet_end")
    except (OSError, LedgerError):
        return False
    return last is not None and last.kind == "fleet_start"


async def _follow(settings: TemporalSettings, spec: FleetSpec, home: HomeActivities, fleet_dir: Path,
                  cfg: Config, run_id: str) -> int:
    outage = Outage(settings.address, say)   # the home rides out the server's outages
    client = await connect(settings, f"genesis-home@{settings.host}:{os.getpid()}", outage=outage)
    queue = fleet_queue(spec.queue_prefix)
    await outage.call(lambda: client.start_workflow(AccountWorkflow.run, id=spec.account_workflow, task_queue=queue,
                                                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING))
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="genesis-merge")
    workers = [Worker(client, task_queue=queue, workflows=WORKFLOWS, graceful_shutdown_timeout=timedelta(seconds=5)),
               Worker(client, task_queue=host_queue(spec.queue_prefix, spec.home),
                      activities=[home.open_tasks, home.merge, home.mark, home.alert], activity_executor=pool,
                      max_concurrent_activities=2, graceful_shutdown_timeout=timedelta(seconds=30))]
    runs = [asyncio.create_task(w.run()) for w in workers]
    try:
        try:
            handle = await outage.call(lambda: client.start_workflow(
                FleetWorkflow.run, spec, id=spec.fleet_id, task_queue=queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL))
        except WorkflowAlreadyStartedError:
            # Its home died (this checkout's fleet lock was free): this one takes it over, as a
            # restarted local monitor adopts its children. It runs on with the settings it began with.
            handle = client.get_workflow_handle(spec.fleet_id)
            say(f"fleet {spec.fleet_id} already runs on Temporal: this home takes it over (the queue, merges, "
                f"marks and status); it goes on with the settings it started with")
        started = time.time()
        write_json(fleet_dir / ENGINE_FILE, {"engine": "temporal", "address": settings.address,
                                             "namespace": settings.namespace, "workflow_id": spec.fleet_id,
                                             "run_id": handle.result_run_id, "queue_prefix": spec.queue_prefix,
                                             "started": started, "pid": os.getpid()})
        mirror = Mirror(fleet_dir / "ledger.sqlite3", run_id)
        await asyncio.to_thread(mirror.start, spec.parallel, spec.fleet_id, settings.address, started)
        say(f"fleet {spec.fleet_id} started on {settings.address}: {spec.parallel} at once across the workers "
            f"polling {spec.queue_prefix}-any")
        got: list[int] = []
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, lambda s=sig: _stop(handle, got, s, outage))
        outcome = asyncio.create_task(outage.call(handle.result))
        synced = 0.0
        while not outcome.done():
            await asyncio.to_thread(write_json, fleet_dir / MONITOR_FILE,
                                    {"pid": os.getpid(), "run_id": run_id, "started": started, "at": time.time(),
                                     "parallel": spec.parallel, "host": settings.host, "engine": "temporal",
                                     "temporal_unreachable_since": outage.since})
            if len(got) > 1 and outage.since is not None:   # stopped twice while Temporal is away: leave now
                say(f"leaving while Temporal is unreachable: fleet {spec.fleet_id} goes on in Temporal, and "
                    f"`genesis fleet run --engine temporal` here takes it over again", "warn")
                outcome.cancel()
                return SIGNAL_EXIT.get(got[-1], exitcodes.INTERRUPTED_INT)
            if not got and read_flag(cfg.stop_flag) == "false":   # `genesis stop` on the project
                _stop(handle, got, None, outage)
            if time.monotonic() - synced >= SYNC_EVERY:
                await _sync(client, spec.fleet_id, spec.account_workflow, mirror, outage)
                await asyncio.to_thread(home.guard_branch, spec.target)   # as the local monitor's watch
                synced = time.monotonic()
            await asyncio.wait([outcome], timeout=BEAT_EVERY)
        try:
            result = outcome.result()
        except WorkflowFailureError as exc:
            say(f"the fleet's workflow failed: {exc.cause or exc}", "error")
            await asyncio.to_thread(mirror.end, exitcodes.ERROR, f"the fleet's workflow failed: {exc.cause or exc}",
                                    time.time())
            return exitcodes.ERROR
        await _sync(client, spec.fleet_id, spec.account_workflow, mirror, outage)
        code = int(result.get("exit_code", exitcodes.ERROR))
        code = SIGNAL_EXIT.get(got[0], code) if got and got[0] is not None else code
        await asyncio.to_thread(mirror.end, code, "stopped" if got else "every task ended", time.time())
        say(f"fleet {spec.fleet_id} ended: exit {code}")
        return code
    finally:
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        await asyncio.gather(*runs, return_exceptions=True)


async def _sync(client: Client, fleet_id: str, account_id: str, mirror: Mirror, outage: Outage) -> None:
    """The fleet's memos (and, for a try a lost worker cost, the task's history), and the
    account's limit, into the ledger."""
    try:
        fleet, tasks, tries, account = await reading.fleet_state(client, fleet_id, account_id, mirror.done)
        await asyncio.to_thread(mirror.sync, fleet, tasks, tries, account)
    except RPCError as exc:   # the copy waits for the next turn; the fleet goes on
        if unreachable(exc):
            outage.failed(exc)
        else:
            say(f"the fleet's state could not be copied into the ledger: {exc}", "warn")
    except (OSError, LedgerError) as exc:
        say(f"the fleet's state could not be copied into the ledger: {exc}", "warn")
    else:
        outage.answered()
    for line in mirror.take_lines():   # each start, end and merge, as the local monitor says them
        say(line)


def _stop(handle, got: list, sig: int | None, outage: Outage) -> None:
    """A signal at home (or `genesis stop`) stops the whole fleet, as it stops the local monitor:
    every task's running attempt is stopped where it runs, and the home follows until the fleet's
    workflow ends. The stop waits for an unreachable Temporal; a second signal meanwhile leaves."""
    if not got:
        away = " (Temporal is unreachable: the stop is sent when it answers; stop again to leave now)" \
            if outage.since is not None else ""
        say(f"stopping the fleet: every running attempt is stopped where it runs{away}")
        asyncio.ensure_future(outage.call(lambda: handle.signal("stop")))
    got.append(sig)
