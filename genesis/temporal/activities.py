"""The engine's activities: everything that touches processes, git and the disk.

On every machine (`genesis worker`): `run_attempt`, ONE child-loop attempt of a task, the same
unit as the local fleet's child (fleet/children.py), in the task's worktree on this machine:
kept from an earlier attempt, or made from the task's branch as pushed to the shared remote.
It heartbeats Temporal every second from its first line. The loop is judged by itself, not by
its agent's heartbeat files (a hookless agent writes none): while its process runs and holds its
lock, it must leave a trace (its ledger, record, logs or phase heartbeats) at least once in a
bound made of its own windows; a loop that does not is frozen, and the activity kills it (as the
local monitor stops a child) and fails the try, retryable: Temporal tries again, and the retry
finds no loop to adopt.

At home (`genesis fleet run --engine temporal`): `open_tasks`, `merge` and `mark`, on the
user's checkout, as the local monitor does them, then the project branch pushed to the remote.

Sync git work runs in threads (`asyncio.to_thread`): one machine's event loop heartbeats
every attempt it runs, and must never wait on git.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import re
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterator, Mapping
from urllib.parse import urlsplit

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from genesis import exitcodes
from genesis.alerts import handoff
from genesis.agents import adapter_of
from genesis.config import Config, ConfigError, default_of, layout_for, resolve
from genesis.fleet import children as kids
from genesis.fleet import merging, telling, worktrees
from genesis.fleet.beats import newest_beat
from genesis.fleet.ledger import FleetLedger
from genesis.fleet.leftovers import SNAPSHOTS, keep_aside, make_startable
from genesis.fleet.lines import clean
from genesis.fleet.planning import Verdict, outcome_of
from genesis.fleet.resources import MB, FleetSettings, available_memory, port_range
from genesis.fleet.queue import done_at, tasks_at
from genesis.fleet.taskref import TaskRef, branch_for, open_refs
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop import workerlink
from genesis.loop.limits import REMEMBERED
from genesis.procs.proctree import ProcId, identify
from genesis.repo.autocommit import push_rejected
from genesis.repo.gitcmd import GitFailed
from genesis.repo.tasks import parse
from genesis.store import accounts
from genesis.store.accounts import AccountStore, StoreUnusable
from genesis.store.atomicio import write_json
from genesis.store.layout import private_dir
from genesis.temporal import adoption, cleanup, holds, tether
from genesis.temporal.records import (AGENT_FAILED, FLEET_STOPPING, HELD, INFRA, PAUSED, USAGE_LIMIT,
                                      AlertInput, AttemptInput, AttemptResult, MarkInput, MergeInput, MergeOutcome,
                                      TaskSpec, commit_key)

__all__ = ["MachineActivities", "HomeActivities", "MONITOR_FILE", "BEAT_EVERY", "untrusted"]

MONITOR_FILE = "monitor.json"     # the child's liveness signal of its monitor (here: this activity)
BEAT_EVERY = tether.RENEW_EVERY   # seconds between two heartbeats to Temporal, and two looks at the child
STUCK_MARGIN = 120.0              # seconds past the loop's own windows before it counts as frozen
FROZEN = "LoopFrozen"             # a try whose loop left no trace within its bound (retryable)
TRACES_MAX = 200                  # files of a run's log folder looked at for the loop's last trace
MAX_REFLOG = 50                   # reflog entries of a task branch read for our own replays
STOP_WAIT = 60.0                  # seconds a cancelled attempt's loop gets to end after SIGTERM
STEPS_WAIT = 120.0                # seconds to wait for an ended loop's last steps to let its lock go
REMOTE_NAME = "origin"            # each machine's clone names the shared remote so
ASIDE_REFS = "refs/genesis/stepped-aside"   # a clone's commits that lost to another loop's push, kept
PORTS_PER_CHILD = 10
ANY_STOP_FLOOR = 10.0             # seconds: a child of an unplaced attempt outlives its activity at least this
HOOK_WAIT = 60.0                  # seconds for `genesis hook install` in a worktree
QUERY_WAIT = timedelta(seconds=10)   # a query of the account or the fleet before an agent starts
# What a workflow's input may name (it becomes folders, files and refs here): anyone who can
# start a workflow in the namespace writes it, so nothing else is taken.
WORKFLOW_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
TASK_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}-[0-9a-f]{6}$")   # taskref.task_id's form
BRANCH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}$")
MEMORY_EVERY = 5.0                # seconds between two looks at the memory while below the floor
HOME_BEAT_EVERY = 5.0             # seconds between two heartbeats of a merge or mark at home


class _Watch:
    """What the heartbeat ticker reports: the activity beats for as long as it runs (a frozen
    loop ends it, see _follow), so a missed beat means the machine or its worker is gone."""

    def __init__(self, host: str) -> None:
        self.details: dict = {"host": host, "stage": "preparing the worktree"}
        self.renew: Callable[[], None] | None = None   # the loop's tether's lease, renewed with each heartbeat

    async def tick(self) -> None:
        while True:
            activity.heartbeat(self.details)
            if self.renew is not None:
                try:   # a small file, written here: renewed exactly when the heartbeat is
                    self.renew()
                except OSError as exc:
                    activity.logger.warning(f"the loop's lease was not renewed: {exc}")
            await asyncio.sleep(BEAT_EVERY)


def _say(host: str, text: str) -> None:
    """A worker's own line: it may quote git or a loop (a path, a failure), so it is cleaned as the
    fleet's console lines are."""
    try:
        print(f"genesis worker {host}: {clean(text)}", file=sys.stderr, flush=True)
    except OSError:
        pass  # the terminal went away


@dataclass
class MachineActivities:
    """One machine's side: its root folder holds a clone of the remote per fleet, the tasks'
    worktrees and the children's logs; nothing outside it is written."""
    client: Client
    root: Path
    host: str
    env: Mapping[str, str]
    port_base: int = 23000
    host_wait: float = 300.0
    slots: set[int] = field(default_factory=set)
    guard: threading.Lock = field(default_factory=threading.Lock)   # one git at a time in a fleet's clone
    slot_guard: threading.Lock = field(default_factory=threading.Lock)   # port slots picked one at a time
    frozen_after: float | None = None   # seconds without a trace of the loop: None, from its own windows
    stop_wait: float = STOP_WAIT
    fleet: FleetSettings | None = None  # the machine's fleet knobs (ports, memory floor), from its environment
    running: asyncio.Semaphore | None = None   # one count for both queues: at most --parallel loops here
    accounts: holds.AccountWatch | None = None   # the accounts' holds, asked once per account for every attempt
    relayed: set[tuple] = field(default_factory=set)   # holds already put in this machine's account store
    me: ProcId | None = None   # this worker's process, as the tethers of its loops know it
    tethers: list = field(default_factory=list)   # the tethers this worker started (collected once ended)

    def __post_init__(self) -> None:
        if self.accounts is None:
            self.accounts = holds.AccountWatch(lambda workflow_id: self._ask(workflow_id))
        if self.me is None:
            self.me = identify(os.getpid())

    @activity.defn(name="run_attempt")
    async def run_attempt(self, inp: AttemptInput) -> AttemptResult:
        watch = _Watch(self.host)
        ticker = asyncio.create_task(watch.tick())   # from the first line: a slow clone must not look dead
        try:
            if self.running is None:
                return await self._attempt(inp, watch)
            watch.details.update(stage="waiting for a free slot on this machine")
            async with self.running:
                watch.details.update(stage="preparing the worktree")
                return await self._attempt(inp, watch)
        finally:
            ticker.cancel()

    def _folder(self, inp: AttemptInput) -> Path:
        return private_dir(self.root / inp.fleet_workflow)

    async def _attempt(self, inp: AttemptInput, watch: _Watch) -> AttemptResult:
        info = activity.info()
        began = time.time()
        _refuse_bad_input(self.host, inp.fleet_workflow, inp.task, inp.target, inp.remote_url)
        lost = _lost(info.heartbeat_details)
        folder = await asyncio.to_thread(self._folder, inp)
        try:
            wt, fresh = await asyncio.to_thread(self._worktree, folder, inp)
        except (GitFailed, OSError, worktrees.WorktreeError) as exc:
            raise _infra(self.host, f"no worktree for {inp.task.branch}: {exc}", info.attempt) from exc
        watch.details.update(stage="preparing the loop", worktree=str(wt), fresh_clone=fresh)
        settings = {**dict(inp.settings), "AUTO_PUSH": "true", "GENESIS_MAX_LIMIT_WAIT": "0s"}
        try:
            cfg = await asyncio.to_thread(resolve, wt, flags=settings)
        except ConfigError as exc:   # it would stop every child alike: the fleet stops
            raise ApplicationError(f"{self.host}: {exc}", {"host": self.host, "exit_code": exitcodes.USAGE},
                                   type=FLEET_STOPPING, non_retryable=True) from exc
        refused = untrusted(cfg, self.env)
        if refused:   # the workflow's input names the command; this machine decides what it runs
            raise ApplicationError(f"{self.host}: refused: {refused}", {"host": self.host,
                                                                        "exit_code": exitcodes.UNTRUSTED_COMMAND},
                                   type=FLEET_STOPPING, non_retryable=True)
        fleet_dir = private_dir(folder / "fleet")
        child, slot = await asyncio.to_thread(self._adopted, inp, wt, fleet_dir), -1
        adopted = child is not None
        if child is None:
            try:
                await asyncio.to_thread(self._prepare, inp, wt, cfg, info.attempt)
            except (GitFailed, OSError) as exc:
                raise _infra(self.host, f"its worktree {wt} could not be made ready: {exc}", info.attempt) from exc
            await self._memory(watch)
            watch.details.update(stage="checking the account and the fleet")
            await self._may_start(inp, info.attempt)   # last: nothing slow between its word and the start
            child, slot = await asyncio.to_thread(self._launch, inp, wt, fleet_dir, settings, info.attempt)
        await asyncio.to_thread(self._tether, child, fleet_dir, watch)
        watch.details.update(stage="running", pid=child.pid, adopted=adopted)
        bound = self._bound(cfg, inp.window_factor)
        log = fleet_dir / "children" / f"{inp.task.task_id}.attempt-{inp.number}.{info.attempt}.log"

        async def hold(request: float) -> None:   # the account's hold, told between two of the loop's phases
            until = 0.0
            try:
                until = await self.accounts.until(inp.account_workflow, request)
                if until > time.time():
                    await asyncio.to_thread(self._relay, wt, settings, inp.account_workflow, until, folder / "repo")
            except Exception as exc:  # noqa: BLE001 - the next look tries again; the loop is watched meanwhile
                activity.logger.warning(f"the account's hold was not looked at: {exc}")
            finally:
                if request:   # the loop asked before a phase: answered once the store holds what was told
                    try:
                        workerlink.tell(fleet_dir, inp.task.task_id, request, until, time.time())
                    except OSError as exc:
                        activity.logger.warning(f"the loop's ask was not answered: {exc}")

        try:
            ending = await self._follow(child, fleet_dir, watch, bound, log, hold)
        except asyncio.CancelledError:   # cancelled or timed out: the loop goes with its attempt
            watch.renew = None   # its tether may end it first: a retry may be on its way elsewhere
            await asyncio.to_thread(_stopping, child, fleet_dir, self.stop_wait)
            raise
        except _Frozen as exc:
            watch.renew = None
            await asyncio.to_thread(_stopping, child, fleet_dir, self.stop_wait)
            raise ApplicationError(str(exc), {"host": self.host, "run_id": child.run_id,
                                              "activity_attempt": info.attempt}, type=FROZEN) from exc
        finally:
            with self.slot_guard:
                self.slots.discard(slot)
        watch.details.update(stage="pushing")
        try:
            tip, aside = await asyncio.to_thread(_push, wt, inp.task.branch), ""
        except _Rejected as exc:   # another loop of the task pushed its branch: it owns it now
            tip, aside = "", str(exc)
        verified = not aside and ending.exit_code == exitcodes.OK and \
            await asyncio.to_thread(done_at, wt, inp.task.branch, inp.task.text)
        verdict = outcome_of(ending.exit_code, verified, False, child.signalled is not None, ending.reason)
        code = ending.exit_code
        if aside and verdict.outcome not in ("config", "limit"):   # stepped aside, as the loop does: a new attempt
            verdict, code = Verdict("stopped", reason=f"{self.host}: {aside}"), exitcodes.STEPPED_ASIDE
        result = AttemptResult(self.host, verdict.outcome, code, verdict.reason, ending.cost,
                               child.run_id, round(time.time() - began, 1), adopted, fresh, info.attempt, tip,
                               lost=lost)
        if verdict.outcome == "failed":
            raise ApplicationError(f"{self.host}: {verdict.reason}", _wire(result), type=AGENT_FAILED,
                                   non_retryable=True)
        if verdict.outcome == "limit":
            resets_at = await asyncio.to_thread(_limit_reset, child, cfg)
            if not resets_at:   # a limit another loop of this machine met: the account may know its reset
                resets_at = float((await self._ask(inp.account_workflow)).get("until") or 0.0)
            await self._tell_limit(inp.account_workflow, resets_at)
            raise ApplicationError(f"{self.host}: {verdict.reason}", _wire(result, resets_at=resets_at),
                                   type=USAGE_LIMIT,
                                   non_retryable=True)
        if verdict.outcome == "config":
            raise ApplicationError(f"{self.host}: {verdict.reason}", _wire(result), type=FLEET_STOPPING,
                                   non_retryable=True)
        return result

    def _worktree(self, folder: Path, inp: AttemptInput) -> tuple[Path, bool]:
        """The task's worktree on this machine, and whether it was made now from the branch as
        pushed (a fresh clone: the first attempt here, or its machine is gone)."""
        with self.guard:   # two attempts starting at once on one machine share the clone
            return self._worktree_of(folder, inp)

    def _worktree_of(self, folder: Path, inp: AttemptInput) -> tuple[Path, bool]:
        base = folder / "repo"
        if not (base / ".git").is_dir():
            worktrees.Git(folder).out("clone", "-q", "--origin", REMOTE_NAME, inp.remote_url, str(base))
        git = worktrees.Git(base)
        before = cleanup.remote_tips(git, REMOTE_NAME)
        git.out("fetch", "-q", "--prune", REMOTE_NAME)
        branch = inp.task.branch
        vanished = cleanup.gone(before, cleanup.remote_tips(git, REMOTE_NAME))
        vanished.pop(branch, None)
        try:
            removed = cleanup.clean_machine(base, vanished, _loop_at)   # merged tasks' leftovers here
        except (GitFailed, OSError) as exc:   # a clean-up is never this attempt's failure
            removed = []
            _say(self.host, f"merged tasks' worktrees kept: {exc}")
        if removed:
            _say(self.host, f"merged and gone from the remote, removed here: {', '.join(removed)}")
        pushed = worktrees.rev(git, f"refs/remotes/{REMOTE_NAME}/{branch}")
        existing = [w for w in worktrees.listed(base)[1:] if w.branch == branch and not w.prunable]
        fresh = not existing
        if fresh and pushed:  # no worktree of it here: the remote holds the task's work so far
            git.out("branch", "-f", branch, pushed)
        wt = worktrees.create(base, folder / "worktrees", inp.task.task_id, branch, f"{REMOTE_NAME}/{inp.target}")
        here = worktrees.Git(wt)
        local = worktrees.rev(here, "HEAD")
        if pushed and local != pushed and here("merge-base", "--is-ancestor", local, pushed).returncode == 0 \
                and not _loop_in(inp, wt):   # another machine went further: catch up
            # What a lost attempt here left uncommitted would stop the fast-forward: kept aside first.
            kept = keep_aside(wt, f"{SNAPSHOTS}/{inp.task.task_id}/before-catch-up-{int(time.time())}",
                              f"Genesis: the work tree {self.host} had left, set aside before it caught up with "
                              f"{pushed[:12]}")
            if kept:
                here.out("reset", "-q", "--hard")
                here.out("clean", "-fdq")
            here.out("merge", "-q", "--ff-only", pushed)
        git.out("config", f"branch.{branch}.remote", REMOTE_NAME)
        git.out("config", f"branch.{branch}.merge", f"refs/heads/{branch}")
        return wt, fresh

    async def _may_start(self, inp: AttemptInput, tries: int) -> None:
        """The account's and the fleet's word just before an agent would start: their signals take
        a moment to reach every task, and a limit or pause decided meanwhile must start nothing."""
        account = await self._ask(inp.account_workflow)
        if account.get("until", 0.0) > time.time():
            raise ApplicationError("a usage limit is in force on the account",
                                   {"host": self.host, "resets_at": account["until"], "activity_attempt": tries},
                                   type=USAGE_LIMIT, non_retryable=True)
        fleet = await self._ask(inp.fleet_workflow)
        if fleet.get("paused"):
            raise ApplicationError("the fleet is paused", {"host": self.host, "seq": fleet.get("pause_seq", 0)},
                                   type=PAUSED, non_retryable=True)

    async def _memory(self, watch: _Watch) -> None:
        """As the local monitor: no launch while less memory is available than the floor."""
        floor = self.fleet.memory_floor if self.fleet else 0
        while floor and (free := await asyncio.to_thread(available_memory)) < floor:
            watch.details.update(stage=f"waiting for memory: {free // MB} MB available, floor {floor // MB} MB")
            await asyncio.sleep(MEMORY_EVERY)

    async def _tell_limit(self, workflow_id: str, until: float) -> None:
        """The account hears of a limit from the machine that met it, before the task's workflow
        passes it on: an attempt about to start elsewhere meanwhile asks the account first."""
        if until <= time.time():
            return
        try:
            await self.client.get_workflow_handle(workflow_id).signal("limit_met", until, rpc_timeout=QUERY_WAIT)
        except RPCError as exc:   # the task's workflow still tells it
            activity.logger.warning(f"{workflow_id} did not take the limit: {exc}")

    async def _ask(self, workflow_id: str) -> dict:
        """A workflow's state by query, bounded; {} when no worker answers in time (its signals
        still reach the task: the query only closes their delay)."""
        try:
            answer = await self.client.get_workflow_handle(workflow_id).query("state", rpc_timeout=QUERY_WAIT)
        except RPCError as exc:
            activity.logger.warning(f"{workflow_id} did not answer its query: {exc}")
            return {}
        return answer if isinstance(answer, dict) else {}

    def _adopted(self, inp: AttemptInput, wt: Path, fleet_dir: Path) -> kids.Child | None:
        """The loop still running in the worktree, adopted as it is when it is this attempt's (this
        machine's previous worker died; never two loops on one task): no start gate, it is already
        running. Any other loop there (one its attempt is stopping, an earlier attempt's) is
        stopped first, and None returned: a fresh loop starts."""
        now = time.time()
        probe = kids.Child(inp.task.task_id, wt, 0, 0.0, now, inp.number)
        deadline = now + STEPS_WAIT
        for _ in range(3):
            holder = kids.holder_of(probe)
            while holder is not None and (not holder.pid or not holder.alive()) and time.time() < deadline:
                time.sleep(0.5)   # an ended loop's last steps still hold its lock
                holder = kids.holder_of(probe)
            if holder is None or not holder.pid or not holder.alive():
                return None
            child = kids.adopt(inp.task.task_id, wt, holder, inp.number, now)
            child.layout = probe.layout
            why = adoption.refusal(adoption.read_launch(fleet_dir, inp.task.task_id), adoption.session_of(holder.pid),
                                   inp.task_workflow, inp.number)
            if not why:
                return child
            _say(self.host, f"the loop (pid {holder.pid}) in {wt} is not adopted ({why}): stopped first")
            _stop_child(child, self.stop_wait)
        return None

    def _relay(self, wt: Path, settings: Mapping[str, str], account_workflow: str, until: float,
               clone: Path) -> None:
        """The account's hold in this machine's account store, where the loops running here read it
        before their next phase (genesis/temporal/holds.py); a store that cannot take it is said.
        The loop's configuration as the loop sees it (this worker's environment): its store, its CLI."""
        key = (account_workflow, until, str(wt))
        if key in self.relayed:
            return
        self.relayed.add(key)   # tried once per attempt and hold: a store that cannot take it is said once
        try:
            cfg = resolve(wt, env=self.env, flags=settings)
            adapter = adapter_of(cfg)
            account = adapter.account({**adapter.environment(), **self.env})
        except Exception:  # noqa: BLE001 - no adapter to speak of: the loop's preflight says what is wrong
            return
        store = AccountStore(accounts.root_of(cfg.shared_state_dir, self.env))
        now = time.time()
        entry = holds.entry_for(account, until, cfg.limit_margin, account_workflow, clone, now)
        try:
            holds.relay(store, entry, cfg.limit_margin, now)
        except (StoreUnusable, LedgerError, OSError) as exc:
            _say(self.host, f"the hold of {account_workflow} does not reach this machine's loops: {exc}")

    def _prepare(self, inp: AttemptInput, wt: Path, cfg: Config, tries: int) -> None:
        """A worktree no loop runs in made ready for a new one: what a killed attempt left
        committed, the branch on the pushed one, the heartbeat hook."""
        if inp.number > 1 or tries > 1:   # what a killed attempt left would stop the next start
            make_startable(wt, inp.task.branch, inp.number, inp.previous_end or "its machine was lost",
                           hooks=cfg.git_hooks)
        with self.guard:
            _onto_pushed(wt, inp.task)
        _hook_for(wt, cfg)

    def _launch(self, inp: AttemptInput, wt: Path, fleet_dir: Path, settings: dict[str, str],
                tries: int) -> tuple[kids.Child, int]:
        now = time.time()
        with self.slot_guard:   # two attempts launching at once must not share a port range
            slot = next(n for n in range(len(self.slots) + 1) if n not in self.slots)
            self.slots.add(slot)
        spec = kids.ChildSpec(inp.task.task_id, inp.task.text, wt, inp.number, inp.phases, inp.iterations,
                              fleet_dir.parent / "stop-flag", fleet_dir,
                              self._ports(slot), settings,
                              fleet_dir / "children" / f"{inp.task.task_id}.attempt-{inp.number}.{tries}.log")
        env = {**self.env, "GENESIS_COMMIT_KEY": commit_key(inp.task_workflow, inp.number),
               # the child stops itself when this activity's liveness file is older than this
               "GENESIS_FLEET_MONITOR_STOP_SECONDS": f"{self._stop_after():g}"}
        try:
            child = kids.launch(spec, env, now)
        except OSError:
            with self.slot_guard:
                self.slots.discard(slot)
            raise
        child.layout = kids.layout_of(wt)
        adoption.record_launch(fleet_dir, inp.task.task_id, child.pid, inp.task_workflow, inp.number)
        return child, slot

    def _tether(self, child: kids.Child, fleet_dir: Path, watch: _Watch) -> None:
        """The loop tethered to this worker (genesis/temporal/tether.py), launched or adopted (an
        adopted loop's first tether may be gone: a second one reads the same lease). Its lease is
        renewed with each heartbeat call from now on; its grace is derived from this attempt's
        heartbeat timeout and where a retry may go."""
        info = activity.info()
        beat = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 0.0
        loop = identify(child.pid)
        if not beat or self.me is None or loop is None or \
                (child.create_time and abs(loop.create_time - child.create_time) >= 0.01):
            return   # no heartbeat timeout: Temporal never retries a silent attempt; or the loop is gone
        me = self.me

        def renew() -> None:
            tether.renew(fleet_dir, child.task_id, loop.pid, me, time.time())

        renew()   # the lease before its tether reads it
        watch.renew = renew
        self.tethers = [t for t in self.tethers if t.poll() is None]
        # A pinned retry waits S on this machine's queue: the worker's own S, the home's as long as
        # both read GENESIS_TEMPORAL_HOST_WAIT_SECONDS alike (as GENESIS_FLEET_MONITOR_STOP_SECONDS does).
        limit = tether.grace(beat, self.host_wait, pinned="@" in info.task_queue)
        try:
            self.tethers.append(tether.start(loop, fleet_dir, child.task_id, limit, child.launched))
        except OSError as exc:
            _say(self.host, f"the loop (pid {child.pid}) has no tether: {exc}")

    def _ports(self, slot: int) -> tuple[int, int]:
        if self.fleet is not None:
            return port_range(slot, self.fleet)
        return self.port_base + slot * PORTS_PER_CHILD, PORTS_PER_CHILD

    def _bound(self, cfg: Config, factor: float) -> float:
        """How long the loop may leave no trace: its longest silent wait (an agent's whole phase,
        a tool call, an outage) and the watcher's stale window, stretched by the strategy's
        factor, plus a margin; `frozen_after` replaces it (the tests compress it)."""
        if self.frozen_after is not None:
            return self.frozen_after
        longest = max(cfg.max_runtime, cfg.tool_busy_max, cfg.max_outage)
        return (longest + cfg.stale_after + cfg.check_interval) * max(factor, 1.0) + STUCK_MARGIN

    def _stop_after(self) -> float:
        """How long the child outlives this activity's silence. Pinned here, a lost worker's retry
        comes back to this machine (which adopts the loop) or moves after host_wait; unplaced,
        the retry may run anywhere after the heartbeat timeout, so the loop must be gone by then
        (never two loops on one task)."""
        info = activity.info()
        if "@" not in info.task_queue:   # <prefix>-any, not <prefix>@<host>
            beat = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else self.host_wait
            return max(2 * beat, ANY_STOP_FLOOR) if 2 * beat < self.host_wait else self.host_wait
        return self.host_wait

    async def _follow(self, child: kids.Child, fleet_dir: Path, watch: _Watch, bound: float,
                      log: Path, hold=None) -> kids.Ending:
        """Watch the child to its end, telling it its monitor lives (monitor.json) while it does,
        and the account's hold (`hold()`, beside: a slow query never delays the liveness file);
        _Frozen once it left no trace for `bound` seconds."""
        began = time.time()
        looking: asyncio.Task | None = None
        answered = 0.0   # the loop's last request (before a phase) this attempt answers
        try:
            while True:
                now = time.time()
                ending = await asyncio.to_thread(kids.ended, child, now)
                if ending is not None:
                    return ending
                last = max(child.launched, began, await asyncio.to_thread(_last_trace, child, log))
                if now - last > bound:
                    raise _Frozen(f"{self.host}: the loop (pid {child.pid}) left no trace for {now - last:.0f}s "
                                  f"(its bound: {bound:g}s): frozen, stopped")
                await asyncio.to_thread(write_json, fleet_dir / MONITOR_FILE,
                                        {"pid": os.getpid(), "run_id": "temporal", "started": began, "at": now,
                                         "host": self.host})
                watch.details.update(run_id=child.run_id, last_trace=last)
                if hold is not None and (looking is None or looking.done()):
                    request = workerlink.request_of(fleet_dir, child.task_id)   # a small file, read here
                    request, answered = (request, request) if request > answered else (0.0, answered)
                    looking = asyncio.create_task(hold(request))
                await asyncio.sleep(BEAT_EVERY)
        finally:
            if looking is not None:
                looking.cancel()


class _Beating:
    """A sync activity heartbeats from a thread of its own while it works (git, the project's
    tests): its heartbeat stops only when its process does."""

    def __init__(self, what: str, every: float = HOME_BEAT_EVERY) -> None:
        self.what, self.every = what, every
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> "_Beating":
        context = contextvars.copy_context()   # the activity's context, for activity.heartbeat
        self.thread = threading.Thread(target=context.run, args=(self._beat,), daemon=True,
                                       name="genesis-home-beat")
        self.thread.start()
        return self

    def _beat(self) -> None:
        while True:
            activity.heartbeat(self.what)
            if self.done.wait(self.every):
                return

    def __exit__(self, *exc) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=5)


def _infra(host: str, what: str, tries: int) -> ApplicationError:
    """A failure of this machine's git before any agent ran: the workflow's own backoff on any
    machine, never the task's ladder nor Temporal's quick retry here."""
    return ApplicationError(f"{host}: {what}", {"host": host, "activity_attempt": tries}, type=INFRA,
                            non_retryable=True)


def _loop_at(wt: Path) -> bool:
    """A loop runs in the worktree (a task's worktree is named after its task id)."""
    holder = kids.holder_of(kids.Child(wt.name, wt, 0, 0.0, time.time(), 0))
    return holder is not None and bool(holder.pid) and holder.alive()


def _loop_in(inp: AttemptInput, wt: Path) -> bool:
    """A loop runs in the worktree (it is adopted, never reset under it)."""
    holder = kids.holder_of(kids.Child(inp.task.task_id, wt, 0, 0.0, time.time(), inp.number))
    return holder is not None and bool(holder.pid) and holder.alive()


class _Frozen(Exception):
    """The loop runs (its process, its lock) but has left no trace within its bound."""


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _last_trace(child: kids.Child, log: Path) -> float:
    """When the loop last showed it works: its ledger, its record, its phase heartbeats, its
    own output and its run's logs (an agent's output), whichever is newest."""
    found = [_mtime(log)]
    lay = child.layout
    if lay is not None:
        found += [_mtime(lay.ledger_file), _mtime(lay.loop_record), newest_beat(lay.heartbeat_dir) or 0.0]
        if child.run_id:
            try:
                with os.scandir(lay.run_dir(child.run_id)) as entries:
                    for n, entry in enumerate(entries):
                        if n >= TRACES_MAX:
                            break
                        found.append(_mtime(Path(entry.path)))
            except OSError:
                pass
    return max(found)

def untrusted(cfg: Config, env: Mapping[str, str]) -> str:
    """Why the attempt's agent command lines are not this machine's to run ("" when they are).
    A machine runs its own GENESIS_AGENT_CMD (the default when unset), its own
    GENESIS_FALLBACK_AGENT_CMD and the lines its GENESIS_TEMPORAL_AGENT_COMMANDS lists; anyone
    who can start a workflow in the namespace writes the input, so nothing else is taken."""
    def words(line: str) -> tuple[str, ...]:
        try:
            return tuple(shlex.split(line))
        except ValueError:
            return ()

    mine = {words(env.get("GENESIS_AGENT_CMD") or default_of("GENESIS_AGENT_CMD") or ""),
            words(env.get("GENESIS_FALLBACK_AGENT_CMD") or ""),
            *(words(line) for line in (env.get("GENESIS_TEMPORAL_AGENT_COMMANDS") or "").split("|"))} - {()}
    for asked in (cfg.agent_cmd, cfg.fallback_agent_cmd):
        if asked and tuple(asked) not in mine:
            line = shlex.join(asked)
            return (f"the agent command {line[:300]!r} is not one this machine runs: add it to the worker's "
                    f"GENESIS_TEMPORAL_AGENT_COMMANDS (|-separated) if it should, then start the fleet again")
    return ""


def bad_input(fleet_workflow: str, task: TaskSpec, target: str, remote_url: str) -> str:
    """What is wrong with a workflow's input before any of it becomes a path, a ref or a URL
    this machine uses ("" when nothing)."""
    if not WORKFLOW_ID_RE.match(fleet_workflow) or ".." in fleet_workflow:
        return f"the fleet's workflow id {fleet_workflow!r} is not a plain name"
    if not TASK_ID_RE.match(task.task_id):
        return f"the task id {task.task_id!r} is not of the fleet's form"
    if task.branch != branch_for(task.task_id):
        return f"the task's branch {task.branch!r} is not {branch_for(task.task_id)!r}"
    if not _branch_name(target):
        return f"the target branch {target!r} is not a plain branch name"
    if remote_url and _has_credentials(remote_url):
        return ("the remote's URL carries credentials (user:password@ or a token): they would sit in "
                "the workflow's history in plain text; give each machine its credentials through git's "
                "credential helper or SSH keys, and the URL without them")
    return ""


def _branch_name(name: str) -> bool:
    return bool(BRANCH_RE.match(name)) and ".." not in name and "//" not in name and "@{" not in name \
        and not name.endswith((".lock", "/", "."))


def _has_credentials(url: str) -> bool:
    """A URL with a password, or a web URL with any user part (a token is often the user)."""
    if "://" not in url:
        return False   # a path, or scp-like user@host:path (an SSH user, never a secret)
    parts = urlsplit(url)
    if parts.password:
        return True
    return bool(parts.username) and parts.scheme.lower() in ("http", "https", "ftp", "ftps")


def _refuse_bad_input(host: str, fleet_workflow: str, task: TaskSpec, target: str, remote_url: str) -> None:
    why = bad_input(fleet_workflow, task, target, remote_url)
    if why:   # the same input would fail on every machine: the fleet stops, saying why
        raise ApplicationError(f"{host}: refused: {why}", {"host": host, "exit_code": exitcodes.USAGE},
                               type=FLEET_STOPPING, non_retryable=True)


def _limit_reset(child: kids.Child, cfg: Config) -> float:
    """When the limit the child met resets, plus the margin, from the child's own ledger (its
    `limit_remembered`); 0 when it is not there (the workflow then holds a while)."""
    if child.layout is None or not child.run_id:
        return 0.0
    try:
        with Ledger.open(child.layout.ledger_file, readonly=True) as led:
            found = led.events(child.run_id, kinds=[REMEMBERED], limit=5, newest=True)
    except (LedgerError, OSError):
        return 0.0
    resets = [float(e["resets_at"]) for e in found if isinstance(e.get("resets_at"), (int, float))]
    return max(resets) + cfg.limit_margin if resets else 0.0


def _hook_for(worktree: Path, cfg: Config) -> None:
    """The heartbeat hook in a fresh worktree, as the local monitor installs it."""
    kids.install_hook(worktree, cfg, HOOK_WAIT)


def _lost(details) -> str:
    """What the lost try of this attempt last reported (a retry reads it from Temporal)."""
    if not details:
        return ""
    last = details[0]
    if isinstance(last, dict):
        return f"{last.get('host', '?')}: {last.get('stage', '?')}"
    return str(last)[:200]


def _wire(result: AttemptResult, **extra) -> dict:
    return {"host": result.host, "exit_code": result.exit_code, "reason": result.reason, "cost": result.cost,
            "run_id": result.run_id, "activity_attempt": result.activity_attempt, "tip": result.tip,
            "adopted": result.adopted, "fresh_clone": result.fresh_clone, "lost": result.lost, **extra}


class _Rejected(Exception):
    """The remote refused the task branch's push as non-fast-forward: another loop of the task
    pushed it (the task moved while this try's loop was still in a phase)."""


def _push(wt: Path, branch: str) -> str:
    """The task's branch pushed to the shared remote (the loop pushes each phase's commit; this
    makes sure of the last, leftovers included); its tip. Never forced: _Rejected when the
    remote's branch has commits this one lacks, GitFailed (retryable) on any other failure."""
    git = worktrees.Git(wt)
    tip = worktrees.rev(git, f"refs/heads/{branch}")
    # Without git's hints, which would crowd its verdict out of the few hundred characters kept.
    done = git("-c", "advice.pushUpdateRejected=false", "push", "-q", "--no-follow-tags", REMOTE_NAME,
               f"refs/heads/{branch}:refs/heads/{branch}")
    if done.returncode != 0:
        said = done.stderr or done.text
        words = said[-300:]
        if push_rejected(said):
            raise _Rejected(f"the push of {branch} was refused (the remote's branch has commits this one lacks: "
                            f"another loop of the task pushed it); this try steps aside, its work committed in "
                            f"{wt}: {words.strip()}")
        raise GitFailed(f"git push of {branch} failed: {words}")
    return tip


def _onto_pushed(wt: Path, task: TaskSpec) -> None:
    """A worktree whose branch has diverged from the pushed one (a loop here stepped aside when
    another loop's push won) moved onto the pushed branch, which is the task's: what this clone
    committed past it is kept under a ref of its own, never pushed over it. Clean by now
    (make_startable), so the move keeps nothing uncommitted to lose."""
    here = worktrees.Git(wt)
    pushed = worktrees.rev(here, f"refs/remotes/{REMOTE_NAME}/{task.branch}")
    local = worktrees.rev(here, "HEAD")
    if not pushed or not local or local == pushed:
        return
    if here("merge-base", "--is-ancestor", pushed, local).returncode == 0:
        return   # this clone is ahead of the remote: its commits go up with the next push
    here.out("update-ref", f"{ASIDE_REFS}/{task.task_id}", local)
    here.out("reset", "-q", "--keep", pushed)


def _stop_child(child: kids.Child, wait: float = STOP_WAIT) -> None:
    """As the local monitor forwards a stop: SIGTERM to the loop (it ends its agent and records its
    end; SIGCONT lets a stopped loop hear it), SIGKILL past `wait`."""
    if kids.signal_child(child, signal.SIGTERM):
        try:
            os.kill(child.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    deadline = time.time() + wait
    while time.time() < deadline:
        if kids.ended(child, time.time()) is not None:
            return
        time.sleep(0.5)
    kids.signal_child(child, signal.SIGKILL)


def _stopping(child: kids.Child, fleet_dir: Path, wait: float) -> None:
    """The attempt stops its loop: recorded first, so that no retry adopts a loop being stopped."""
    adoption.mark_stopping(fleet_dir, child.task_id, adoption.session_of(child.pid) or child.pid)
    _stop_child(child, wait)


def _replayed_from(git: worktrees.Git, branch: str) -> str:
    """Where the branch was before our merge replayed it onto the project branch ("" when its tip
    is not such a replay): a merge held after its replay leaves the branch there, and that tip is
    ours to rebuild, not the user's work. Read from the branch's reflog, newest first."""
    log = git("reflog", "show", "--format=%H%x09%gs", f"refs/heads/{branch}", "--")
    if log.returncode != 0:
        return ""
    entries = [line.split("\t", 1) for line in log.text.splitlines()[:MAX_REFLOG] if "\t" in line]
    replays = 0
    for sha, subject in entries:
        if subject != merging.REPLAYED:
            return sha if replays else ""
        replays += 1
    return ""


@dataclass
class HomeActivities:
    """The home's side, on the user's checkout: the queue, the merge queue, the failure marks, the
    alerts (the home's channels)."""
    project: Path
    cfg: Config
    remote: str
    run_id: str = ""
    fleet_ledger: Path | None = None   # where a moved project branch is recorded (the Mirror's: the report reads it)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)   # around a look at the branch
    moving: int = 0     # merges and marks of ours under way: each may move the project branch

    def keep_start(self, target: str) -> None:
        """The project branch's tip at the fleet's start is its known tip (fleet/merging.keep_start)."""
        with self.lock:
            merging.keep_start(self.project, target)

    def guard_branch(self, target: str) -> None:
        """The project branch moved behind the merge queue's back (a `git update-ref` by whatever
        can write this checkout: a loop of a worker on this machine, say) put back and said as the
        local monitor does (fleet/merging.guard_branch): in the fleet ledger, on the console, to
        the home's alert channels. Looked at beside the fleet's watch, and before every merge and
        mark; never while one of ours may be moving the branch."""
        with self.lock:
            if not self.moving:
                self._guard(target)

    @contextlib.contextmanager
    def _moves(self, target: str) -> Iterator[None]:
        """A merge or mark of ours: the branch looked at first (none builds on a tip a child forged),
        then not again until it is done."""
        with self.lock:
            if not self.moving:
                self._guard(target)
            self.moving += 1
        try:
            yield
        finally:
            with self.lock:
                self.moving -= 1

    def _guard(self, target: str) -> None:
        merging.guard_branch(self.project, target, self._record, self._tell)

    def _tell(self, alert: AlertInput) -> None:
        try:
            self.alert(alert)
        except Exception as exc:  # noqa: BLE001 - an alert is never worth a merge (as the local monitor's)
            _say("home", f"the alert could not be sent: {exc}")

    def _record(self, kind: str, **detail) -> None:
        if self.fleet_ledger is None:
            return
        try:
            with FleetLedger.open(self.fleet_ledger) as led:
                led.record(kind, None, **detail)
        except (OSError, LedgerError) as exc:   # said on the console already: the record is not worth a merge
            _say("home", f"{kind} could not be recorded in {self.fleet_ledger}: {exc}")

    @activity.defn(name="alert")
    def alert(self, inp: AlertInput) -> int:
        """One ticket to the home's alert channels, as the local monitor sends it (its deliverer
        detached): the deliverer's pid, 0 when none could start."""
        ticket = telling.alert_ticket(inp.severity, inp.cause, inp.what, inp.action, run_id=self.run_id,
                                      project=str(self.project), at=time.time())
        return handoff.dispatch(ticket, self.cfg.alerts, layout_for(self.cfg).ledger_file) or 0

    @activity.defn(name="open_tasks")
    def open_tasks(self, target: str) -> list[TaskSpec]:
        text = tasks_at(self.project, target)
        return [] if text is None else [TaskSpec(r.id, r.text, r.branch) for r in open_refs(parse(text))]

    @activity.defn(name="merge")
    def merge(self, inp: MergeInput) -> MergeOutcome:
        """Bring the task's branch, as pushed, home through fleet/merging.merge_home (once: a task
        already ticked on the target is not merged again), then push the target. It heartbeats
        while it works (its tests too): a home that died mid-merge is known within a heartbeat,
        and the next try starts from a fresh merge worktree."""
        _refuse_bad_input("home", inp.fleet_id, inp.task, inp.target, inp.remote_url)
        with _Beating("merging"), self._moves(inp.target):
            return self._merge(inp)

    def _merge(self, inp: MergeInput) -> MergeOutcome:
        git = worktrees.Git(self.project)
        if done_at(self.project, inp.target, inp.task.text):
            tip = worktrees.rev(git, f"refs/heads/{inp.target}")
            self._push_target(inp.target)
            return MergeOutcome("merged", tip, f"already on {inp.target}")
        branch = inp.task.branch
        root = worktrees.worktree_root(self.project, self.cfg)
        self._fresh_merge_tree(root / inp.task.task_id, inp.task.task_id)
        fetched_ref = f"refs/genesis/fetched/{branch}"
        git.out("fetch", "-q", self.remote, f"+refs/heads/{branch}:{fetched_ref}")
        try:
            fetched = worktrees.rev(git, fetched_ref)
            self._take(git, branch, fetched)
        finally:   # the user's repository keeps no refs of ours
            git("update-ref", "-d", fetched_ref)
        wt = worktrees.create(self.project, root, inp.task.task_id, branch, inp.target, hooks=self.cfg.git_hooks)
        result = merging.merge_home(self.project, wt, branch, inp.target, TaskRef(inp.task.task_id, inp.task.text, 0),
                                    self.cfg, resolve=None)
        if result.outcome == merging.HELD:
            raise ApplicationError(f"the merge is held: {result.detail}", type=HELD)
        detail = result.detail
        if result.outcome == "merged":
            self._push_target(inp.target)
            try:   # by default: the merged task's branch on the remote, its worktree and branch here
                tidy = cleanup.clean_home(self.project, self.remote, wt, branch, inp.target, fetched)
            except (GitFailed, OSError, worktrees.WorktreeError) as exc:
                tidy = f"its branch and worktree kept: {exc}"
            detail = f"{detail}; {tidy}" if detail else tidy
        return MergeOutcome(result.outcome, result.sha, detail, tuple(result.commits))

    def _fresh_merge_tree(self, path: Path, task_id: str) -> None:
        """The merge worktree an earlier try left (its home killed mid-replay or mid-test) removed,
        what it held uncommitted kept aside first: every try starts from the branch as pushed."""
        mine = [w for w in worktrees.listed(self.project)[1:] if w.path.resolve() == path.resolve()]
        if not mine:
            return
        if path.is_dir():
            keep_aside(path, f"{SNAPSHOTS}/{task_id}/merge-{int(time.time())}",
                       "Genesis: the merge worktree as an interrupted merge left it")
        worktrees.Git(self.project).out("worktree", "remove", "--force", "--force", str(path))

    def _take(self, git: worktrees.Git, branch: str, fetched: str) -> None:
        """The home's branch of the task moved to the pushed tip, never over the user's work: a
        worktree of it with uncommitted changes, or local commits the pushed tip lacks, hold the
        merge (HELD, saying which) until the user sees to them."""
        checked_out = [w for w in worktrees.listed(self.project)[1:] if w.branch == branch and not w.prunable]
        here = worktrees.Git(checked_out[0].path) if checked_out else git
        local = worktrees.rev(here, "HEAD" if checked_out else f"refs/heads/{branch}")
        if checked_out:
            dirty = here("status", "--porcelain", "--untracked-files=no")
            if dirty.returncode != 0 or dirty.text.strip():
                raise ApplicationError(f"the merge is held: {checked_out[0].path} (a worktree of {branch}) has "
                                       "uncommitted changes; commit or discard them", type=HELD)
        replayed = _replayed_from(git, branch) if local else ""
        base = replayed or local   # a tip our own held merge replayed counts as the one it came from
        if base and base != fetched and git("merge-base", "--is-ancestor", base, fetched).returncode != 0:
            raise ApplicationError(f"the merge is held: {branch} here has commits its pushed tip lacks "
                                   f"({local[:12]} is not an ancestor of {fetched[:12]}); push or drop them",
                                   type=HELD)
        if checked_out:   # clean (checked above); a replayed tip is rebuilt by the merge from the pushed one
            here.out("reset", "-q", "--hard", fetched) if replayed else here.out("merge", "-q", "--ff-only", fetched)
        else:
            git.out("branch", "-f", branch, fetched)

    @activity.defn(name="mark")
    def mark(self, inp: MarkInput) -> str:
        _refuse_bad_input("home", "home", inp.task, inp.target, "")
        with _Beating("marking"), self._moves(inp.target):
            return self._mark(inp)

    def _mark(self, inp: MarkInput) -> str:
        ref = TaskRef(inp.task.task_id, inp.task.text, 0)
        sha = merging.mark_failed(self.project, inp.target, ref, inp.reason, hooks=self.cfg.git_hooks)
        if not sha:
            raise ApplicationError("the mark is held: the project branch's checkout has uncommitted changes",
                                   type=HELD)
        self._push_target(inp.target)
        return sha

    def _push_target(self, target: str) -> None:
        """The project branch to the remote, so every machine starts new tasks from it. Never
        forced: a remote that moved meanwhile (someone else's push) refuses it, and says so."""
        git = worktrees.Git(self.project)
        done = git("push", "-q", "--no-follow-tags", self.remote, f"refs/heads/{target}:refs/heads/{target}")
        if done.returncode != 0:
            raise GitFailed(f"git push of {target} to {self.remote} failed: {(done.stderr or done.text)[-300:]}")
