"""The engine's activities: everything that touches processes, git and the disk.

On every machine (`genesis worker`): `run_attempt`, ONE child-loop attempt of a task, the same
unit as the local fleet's child (fleet/children.py), in the task's worktree on this machine:
kept from an earlier attempt, or made from the task's branch as pushed to the shared remote.
It heartbeats Temporal every second from its first line while the child's loop is alive (its
lock held, its phase heartbeats fresh) and stops when Genesis would judge the loop stuck, so
Temporal times a frozen loop out as it does a dead machine.

At home (`genesis fleet run --engine temporal`): `open_tasks`, `merge` and `mark`, on the
user's checkout, as the local monitor does them, then the project branch pushed to the remote.

Sync git work runs in threads (`asyncio.to_thread`): one machine's event loop heartbeats
every attempt it runs, and must never wait on git.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Mapping

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from genesis import exitcodes
from genesis.agents import adapter_of
from genesis.config import Config, ConfigError, resolve
from genesis.fleet import children as kids
from genesis.fleet import merging, worktrees
from genesis.fleet.beats import newest_beat
from genesis.fleet.leftovers import make_startable
from genesis.fleet.planning import outcome_of
from genesis.fleet.queue import done_at, tasks_at
from genesis.fleet.taskref import TaskRef, open_refs
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.limits import REMEMBERED
from genesis.repo.gitcmd import GitFailed
from genesis.repo.tasks import parse
from genesis.store.atomicio import write_json
from genesis.store.layout import private_dir
from genesis.temporal.records import (AGENT_FAILED, FLEET_STOPPING, HELD, NO_REMOTE, PAUSED, USAGE_LIMIT,
                                      AttemptInput, AttemptResult, MarkInput, MergeInput, MergeOutcome, TaskSpec,
                                      commit_key)

__all__ = ["MachineActivities", "HomeActivities", "MONITOR_FILE", "BEAT_EVERY"]

MONITOR_FILE = "monitor.json"     # the child's liveness signal of its monitor (here: this activity)
BEAT_EVERY = 1.0                  # seconds between two heartbeats to Temporal, and two looks at the child
STUCK_MARGIN = 120.0              # seconds past the watcher's own window before the loop counts as frozen
STOP_WAIT = 60.0                  # seconds a cancelled attempt's loop gets to end after SIGTERM
STEPS_WAIT = 120.0                # seconds to wait for an ended loop's last steps to let its lock go
REMOTE_NAME = "origin"            # each machine's clone names the shared remote so
PORTS_PER_CHILD = 10
ANY_STOP_FLOOR = 10.0             # seconds: a child of an unplaced attempt outlives its activity at least this
HOOK_WAIT = 60.0                  # seconds for `genesis hook install` in a worktree
QUERY_WAIT = timedelta(seconds=10)   # a query of the account or the fleet before an agent starts


class _Watch:
    """What the heartbeat ticker reports, and whether it still may (the loop is not judged stuck)."""

    def __init__(self, host: str) -> None:
        self.details: dict = {"host": host, "stage": "preparing the worktree"}
        self.alive = True

    async def tick(self) -> None:
        while True:
            if self.alive:
                activity.heartbeat(self.details)
            await asyncio.sleep(BEAT_EVERY)


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

    @activity.defn(name="run_attempt")
    async def run_attempt(self, inp: AttemptInput) -> AttemptResult:
        watch = _Watch(self.host)
        ticker = asyncio.create_task(watch.tick())   # from the first line: a slow clone must not look dead
        try:
            return await self._attempt(inp, watch)
        finally:
            ticker.cancel()

    def _folder(self, inp: AttemptInput) -> Path:
        return private_dir(self.root / inp.fleet_workflow)

    async def _attempt(self, inp: AttemptInput, watch: _Watch) -> AttemptResult:
        info = activity.info()
        began = time.time()
        lost = _lost(info.heartbeat_details)
        folder = await asyncio.to_thread(self._folder, inp)
        try:
            wt, fresh = await asyncio.to_thread(self._worktree, folder, inp)
        except (GitFailed, OSError, worktrees.WorktreeError) as exc:
            raise ApplicationError(f"{self.host}: no worktree for {inp.task.branch}: {exc}", type=NO_REMOTE) from exc
        watch.details.update(stage="checking the account and the fleet", worktree=str(wt), fresh_clone=fresh)
        await self._may_start(inp, info.attempt)
        settings = {**dict(inp.settings), "AUTO_PUSH": "true", "GENESIS_MAX_LIMIT_WAIT": "0s"}
        try:
            cfg = await asyncio.to_thread(resolve, wt, flags=settings)
        except ConfigError as exc:   # it would stop every child alike: the fleet stops
            raise ApplicationError(f"{self.host}: {exc}", {"host": self.host, "exit_code": exitcodes.USAGE},
                                   type=FLEET_STOPPING, non_retryable=True) from exc
        fleet_dir = private_dir(folder / "fleet")
        child, adopted, slot = await asyncio.to_thread(self._child, inp, wt, cfg, fleet_dir, settings,
                                                       info.attempt)
        watch.details.update(stage="running", pid=child.pid, adopted=adopted)
        window = (cfg.stale_after + cfg.check_interval) * inp.window_factor + STUCK_MARGIN
        try:
            ending = await self._follow(child, fleet_dir, watch, window, began)
        except asyncio.CancelledError:
            await asyncio.to_thread(_stop_child, child)
            raise
        finally:
            self.slots.discard(slot)
        watch.details.update(stage="pushing")
        tip = await asyncio.to_thread(_push, wt, inp.task.branch)
        verified = ending.exit_code == exitcodes.OK and await asyncio.to_thread(done_at, wt, inp.task.branch,
                                                                                inp.task.text)
        verdict = outcome_of(ending.exit_code, verified, False, child.signalled is not None, ending.reason)
        result = AttemptResult(self.host, verdict.outcome, ending.exit_code, verdict.reason, ending.cost,
                               child.run_id, round(time.time() - began, 1), adopted, fresh, info.attempt, tip,
                               lost=lost)
        if verdict.outcome == "failed":
            raise ApplicationError(f"{self.host}: {verdict.reason}", _wire(result), type=AGENT_FAILED,
                                   non_retryable=True)
        if verdict.outcome == "limit":
            resets_at = await asyncio.to_thread(_limit_reset, child, cfg)
            if not resets_at:   # a limit another loop of this machine met: the account may know its reset
                resets_at = float((await self._ask(inp.account_workflow)).get("until") or 0.0)
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
        git.out("fetch", "-q", "--prune", REMOTE_NAME)
        branch = inp.task.branch
        pushed = worktrees.rev(git, f"refs/remotes/{REMOTE_NAME}/{branch}")
        existing = [w for w in worktrees.listed(base)[1:] if w.branch == branch and not w.prunable]
        fresh = not existing
        if fresh and pushed:  # no worktree of it here: the remote holds the task's work so far
            git.out("branch", "-f", branch, pushed)
        wt = worktrees.create(base, folder / "worktrees", inp.task.task_id, branch, f"{REMOTE_NAME}/{inp.target}")
        here = worktrees.Git(wt)
        local = worktrees.rev(here, "HEAD")
        if pushed and local != pushed and here("merge-base", "--is-ancestor", local, pushed).returncode == 0:
            here.out("merge", "-q", "--ff-only", pushed)   # another machine went further: catch up
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

    async def _ask(self, workflow_id: str) -> dict:
        """A workflow's state by query, bounded; {} when no worker answers in time (its signals
        still reach the task: the query only closes their delay)."""
        try:
            answer = await self.client.get_workflow_handle(workflow_id).query("state", rpc_timeout=QUERY_WAIT)
        except RPCError as exc:
            activity.logger.warning(f"{workflow_id} did not answer its query: {exc}")
            return {}
        return answer if isinstance(answer, dict) else {}

    def _child(self, inp: AttemptInput, wt: Path, cfg: Config, fleet_dir: Path, settings: dict[str, str],
               tries: int) -> tuple[kids.Child, bool, int]:
        """Adopt the loop still running in the worktree (this machine's previous worker died; never
        two loops on one task), else launch one."""
        now = time.time()
        probe = kids.Child(inp.task.task_id, wt, 0, 0.0, now, inp.number)
        deadline = now + STEPS_WAIT
        holder = kids.holder_of(probe)
        while holder is not None and (not holder.pid or not holder.alive()) and time.time() < deadline:
            time.sleep(0.5)   # an ended loop's last steps still hold its lock
            holder = kids.holder_of(probe)
        if holder is not None and holder.pid and holder.alive():
            child = kids.adopt(inp.task.task_id, wt, holder, inp.number, now)
            child.layout = probe.layout
            return child, True, -1
        if inp.number > 1 or tries > 1:   # what a killed attempt left would stop the next start
            make_startable(wt, inp.task.branch, inp.number, inp.previous_end or "its machine was lost",
                           hooks=cfg.git_hooks)
        _hook_for(wt, cfg)
        slot = next(n for n in range(len(self.slots) + 1) if n not in self.slots)
        self.slots.add(slot)
        spec = kids.ChildSpec(inp.task.task_id, inp.task.text, wt, inp.number, inp.phases, inp.iterations,
                              fleet_dir.parent / "stop-flag", fleet_dir,
                              (self.port_base + slot * PORTS_PER_CHILD, PORTS_PER_CHILD), settings,
                              fleet_dir / "children" / f"{inp.task.task_id}.attempt-{inp.number}.{tries}.log")
        env = {**self.env, "GENESIS_COMMIT_KEY": commit_key(inp.task_workflow, inp.number),
               # the child stops itself when this activity's liveness file is older than this
               "GENESIS_FLEET_MONITOR_STOP_SECONDS": f"{self._stop_after():g}"}
        try:
            child = kids.launch(spec, env, now)
        except OSError:
            self.slots.discard(slot)
            raise
        child.layout = probe.layout or kids.layout_of(wt)
        return child, False, slot

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

    async def _follow(self, child: kids.Child, fleet_dir: Path, watch: _Watch, window: float,
                      began: float) -> kids.Ending:
        """Watch the child to its end; beat while it is alive, stop beating once it is frozen."""
        while True:
            now = time.time()
            await asyncio.to_thread(write_json, fleet_dir / MONITOR_FILE,
                                    {"pid": os.getpid(), "run_id": "temporal", "started": began, "at": now,
                                     "host": self.host})
            ending = await asyncio.to_thread(kids.ended, child, now)
            if ending is not None:
                watch.alive = True
                return ending
            beat = newest_beat(child.layout.heartbeat_dir) if child.layout else None
            watch.alive = (beat or child.launched) > now - window
            watch.details.update(run_id=child.run_id, newest_beat=beat)
            await asyncio.sleep(BEAT_EVERY)

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
    """A Claude Code child needs the heartbeat hook in its worktree (settings.local.json is
    untracked: a fresh worktree lacks it), as the local monitor installs it."""
    try:
        if adapter_of(cfg).name != "claude":
            return
    except Exception:  # noqa: BLE001 - no adapter to speak of: the child's preflight says what is wrong
        return
    genesis = Path(sys.executable).parent / "genesis"
    argv = [str(genesis)] if genesis.is_file() else [sys.executable, "-m", "genesis"]
    try:
        subprocess.run([*argv, "--project", str(worktree), "hook", "install", "--scope", "local"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=HOOK_WAIT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


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


def _push(wt: Path, branch: str) -> str:
    """The task's branch pushed to the shared remote (the loop pushes each phase's commit; this
    makes sure of the last, leftovers included); its tip. Never forced."""
    git = worktrees.Git(wt)
    tip = worktrees.rev(git, f"refs/heads/{branch}")
    done = git("push", "-q", "--no-follow-tags", REMOTE_NAME, f"refs/heads/{branch}:refs/heads/{branch}")
    if done.returncode != 0:
        raise GitFailed(f"git push of {branch} failed: {(done.stderr or done.text)[-300:]}")
    return tip


def _stop_child(child: kids.Child) -> None:
    """As the local monitor forwards a stop: SIGTERM to the loop (it ends its agent and records its
    end), SIGKILL past STOP_WAIT."""
    kids.signal_child(child, signal.SIGTERM)
    deadline = time.time() + STOP_WAIT
    while time.time() < deadline:
        if kids.ended(child, time.time()) is not None:
            return
        time.sleep(0.5)
    kids.signal_child(child, signal.SIGKILL)


@dataclass
class HomeActivities:
    """The home's side, on the user's checkout: the queue, the merge queue, the failure marks."""
    project: Path
    cfg: Config
    remote: str

    @activity.defn(name="open_tasks")
    def open_tasks(self, target: str) -> list[TaskSpec]:
        text = tasks_at(self.project, target)
        return [] if text is None else [TaskSpec(r.id, r.text, r.branch) for r in open_refs(parse(text))]

    @activity.defn(name="merge")
    def merge(self, inp: MergeInput) -> MergeOutcome:
        """Bring the task's branch, as pushed, home through fleet/merging.merge_home (once: a task
        already ticked on the target is not merged again), then push the target."""
        git = worktrees.Git(self.project)
        if done_at(self.project, inp.target, inp.task.text):
            tip = worktrees.rev(git, f"refs/heads/{inp.target}")
            self._push_target(inp.target)
            return MergeOutcome("merged", tip, f"already on {inp.target}")
        branch = inp.task.branch
        git.out("fetch", "-q", self.remote, f"+refs/heads/{branch}:refs/genesis/fetched/{branch}")
        fetched = worktrees.rev(git, f"refs/genesis/fetched/{branch}")
        root = worktrees.worktree_root(self.project, self.cfg)
        checked_out = [w for w in worktrees.listed(self.project)[1:] if w.branch == branch and not w.prunable]
        if checked_out:
            worktrees.Git(checked_out[0].path).out("reset", "-q", "--hard", fetched)
        else:
            git.out("branch", "-f", branch, fetched)
        wt = worktrees.create(self.project, root, inp.task.task_id, branch, inp.target, hooks=self.cfg.git_hooks)
        activity.heartbeat("merging")
        result = merging.merge_home(self.project, wt, branch, inp.target, TaskRef(inp.task.task_id, inp.task.text, 0),
                                    self.cfg, resolve=None)
        if result.outcome == merging.HELD:
            raise ApplicationError(f"the merge is held: {result.detail}", type=HELD)
        if result.outcome == "merged":
            self._push_target(inp.target)
        return MergeOutcome(result.outcome, result.sha, result.detail, tuple(result.commits))

    @activity.defn(name="mark")
    def mark(self, inp: MarkInput) -> str:
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
