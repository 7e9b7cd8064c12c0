"""The fleet's monitor: one long-lived process per project that runs a loop per open task.

It reads the queue from the project branch's TASKS.md (never the user's work tree), starts
at most N children (ordinary loops in worktrees, see children.py), watches each one's lock
and ledger every GENESIS_FLEET_CHECK_SECONDS, sends a verified task's branch home through
the merge queue (one merge at a time, in a thread of its own so the checks go on), climbs
the ladder for a child that ended abnormally, and records everything in the fleet ledger.
It makes no model call; only the Merger, run once per conflict, is an agent.

It holds two locks for its life: the fleet's (`<fleet dir>/lock`: one monitor per
project) and the project's loop lock (a single loop and a fleet on one project refuse each
other, and `genesis stop` finds the fleet as it finds a loop). Children live in sessions of
their own: the monitor's death leaves them running, and the next monitor adopts them.

A fleet file (`--fleet`, fleet/fleetfile.py) puts several projects under one such process:
a Monitor each, with everything above its own, checked in turn (run_projects); they share
one cascade gate and failure window, max_parallel, the stagger and the port slots (share()).

`start-multi-agent-loop.sh --parallel` execs `genesis fleet run` (run_fleet). Launches are
staggered, and held below the memory floor and while the account's usage limit is known; the
cascade gate and the restart budget (cascade.py, budget.py) bound every restart; with nothing
open and nothing running, the Planner runs once. A signal the monitor gets is forwarded to
every child (forward), and every way out records `fleet_end` (a killed monitor's missing end is
recorded by the next one, which re-adopts the children: reconcile).

Under a fleet file the monitors are ticked in turn, the one that just launched going to the
back; each beats for all; a project whose fleet ended lets its locks go at once; and the exit
code is the worst of theirs (worst_exit).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from genesis import exitcodes
from genesis.actions.fleetside import heed
from genesis.agents import adapter_of
from genesis.agents.models import cli_and_model
from genesis.alerts import handoff
from genesis.alerts.deliver import LedgerBook, deadline_seconds
from genesis.config import Config, ConfigError, layout_for, resolve
from genesis.fleet import cascade as cascade_mod
from genesis.fleet import children as kids
from genesis.fleet import decide, ladder, lifecycle, mergeorder, merging, redmerge, telling, worktrees
from genesis.fleet.leftovers import make_startable
from genesis.fleet.lines import ended_line, merged_line, say, started_line
from genesis.fleet.budget import SPENDING, RestartBudget
from genesis.fleet.beats import BeatBook, newest_beat
from genesis.fleet.ledger import TERMINAL, FleetLedger, TaskRow
from genesis.fleet.lifecycle import Move, Task
from genesis.fleet.planning import fleet_exit, launch_gate, outcome_of
from genesis.fleet.portslots import book_for
from genesis.fleet.queue import check_trust, done_at, project_branch, tasks_at
from genesis.fleet.resources import FleetSettings, available_memory, fleet_settings, parallel_of, port_range
from genesis.fleet.taskref import PLANNER, TaskRef, branch_for, open_refs
from genesis.hints import hint
from genesis.ledger.store import LedgerError
from genesis.loop import agentgo, limits
from genesis.loop.finish import FINAL_ALERT_WAIT
from genesis.loop.preflight import read_flag
from genesis.loop.taskcheck import proven
from genesis.repo.gitcmd import GitFailed, GitTimeout, run_git
from genesis.repo.tasks import parse
from genesis.status.lately import note_end
from genesis.store import accounts
from genesis.store.accounts import AccountStore, StoreUnusable
from genesis.store.atomicio import DiskFull, write_json, write_text
from genesis.store.layout import Layout, ensure_git_excludes, private_dir
from genesis.store.looplock import FLEET_RUN, Locked, hold, release
from genesis.watch.waits import honoured

__all__ = ["run_fleet", "run_projects", "share", "worst_exit", "Monitor", "fleet_dir_of", "FLEET_DIR", "MONITOR_FILE"]

FLEET_DIR = "fleet"
MONITOR_FILE = "monitor.json"
GIT_TIMEOUT = 60.0
STOP_WAIT = 120.0         # seconds the monitor waits for its children after forwarding a signal
HELD_RETRY = 30.0         # seconds between two tries of a merge held by the user's dirty checkout
INTERRUPT_MERGE_WAIT = 10.0  # seconds an interrupted monitor waits for a merge under way (it recovers next start)
LIMIT_CHECK = 5.0         # seconds between two reads of the account store (it vouches each entry: ledgers)
DEATHS_CHECK = 5.0        # seconds between two reads of the running children's ledgers for agents that died
WORKTREE_RETRY = 30.0     # seconds before a worktree that git could not make (a lock, a timeout) is tried again
WORKTREE_TRIES = 5        # ... and after this many tries in a row, the task needs review
TICK_ERRORS = 5           # checks in a row that fail (git, the disk, the ledger) before the monitor gives up
LOG_CAP = 8 << 20         # a child's stdout+stderr log: restarted past this (its own console log keeps all)
SIGNAL_EXIT = {signal.SIGHUP: exitcodes.INTERRUPTED_HUP, signal.SIGINT: exitcodes.INTERRUPTED_INT,
               signal.SIGTERM: exitcodes.INTERRUPTED_TERM}
PLANNER_TEXT = "the Planner: new tasks for TASKS.md"
MERGER_PROMPT = Path(__file__).resolve().parent.parent / "data" / "prompts" / "merger.md"


def fleet_dir_of(layout: Layout) -> Path:
    return layout.state_dir / FLEET_DIR


class FleetLocked(RuntimeError):
    pass


def take_fleet_lock(path: Path) -> int:
    """flock the fleet's lock for the monitor's life (retrying past a status probe's momentary
    shared lock, as looplock.acquire does); FleetLocked when another monitor holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    for attempt in range(6):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if attempt == 5:
                os.close(fd)
                raise FleetLocked(str(path)) from None
            time.sleep(0.02)
    raise AssertionError("unreachable")


def _monitor_record(fleet_dir: Path) -> dict:
    try:
        data = json.loads((fleet_dir / MONITOR_FILE).read_text()[:4096])
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class Merge:
    task_id: str
    future: Future | None = None
    held_until: float = 0.0


@dataclass
class Monitor:
    project: Path
    cfg: Config
    fleet: FleetSettings
    parallel: int
    ledger: FleetLedger
    fleet_dir: Path
    run_id: str
    target: str                                        # the project branch
    overrides: Mapping[str, str]
    clock: Callable[[], float] = time.time
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    children: dict[str, kids.Child] = field(default_factory=dict)
    merges: list[Merge] = field(default_factory=list)
    stopping: bool = False
    fatal: int | None = None
    interrupted: int | None = None
    last_launch: float = 0.0
    started: float = 0.0
    slots: dict[str, int] = field(default_factory=dict)
    gate_notes: dict[str, str] = field(default_factory=dict)
    limit_note: str = ""
    unmarked: dict[str, str] = field(default_factory=dict)   # failed tasks whose `[!]` is held
    seen_tip: str = ""
    planned: bool = False
    open_ids: set[str] = field(default_factory=set)
    merger_groups: set[int] = field(default_factory=set)     # the Merger's process group while it runs
    limit_read: float = -1e18
    launched: bool = False                                   # a child started at the last check
    start_seq: int = 0                                       # this run's fleet_start event: its outcomes after it
    worktree_tries: dict[str, tuple[int, float]] = field(default_factory=dict)  # transient failures, retry at
    # Several projects under one monitor (a fleet file): the monitors of all of them (sharing one
    # cascade gate and failure window, see share()), and the cap on their children at once.
    peers: list["Monitor"] = field(default_factory=list)
    max_parallel: int | None = None
    kept_slots: set[int] = field(default_factory=set)        # port slots of children a monitor that gave up left
    reason: str = ""                                         # why this project's fleet ended
    errors: int = 0                                          # checks in a row that failed
    due: float = 0.0                                         # the next check (time.monotonic)
    ended_code: int | None = None                            # its fleet_end recorded, with this code
    paused: bool = False                                     # `genesis pause`: no child starts until resume
    deaths_read: float = -1e18                               # the running children's agent deaths last read
    deaths_seen: dict[str, int] = field(default_factory=dict)  # per task: its child ledger's newest event read
    agent_waits: dict[str, float] = field(default_factory=dict)  # per task: the agent death its loop waits after
    agent_answers: dict[str, dict] = field(default_factory=dict)  # per task: the budget's answer (monitor.json)

    def __post_init__(self) -> None:
        self.layout = layout_for(self.cfg)
        self.root = worktrees.worktree_root(self.project, self.cfg)
        self.strategies = ladder.strategies(self.cfg)
        self.policy = ladder.policy_of(self.cfg)
        self.budget = RestartBudget.from_events(self.cfg.fleet_restart_every,
                                                [e for kind in SPENDING for e in self.ledger.events(kind)])
        self.gate = cascade_mod.CascadeGate.from_events(cascade_mod.policy_of(self.cfg), [
            e for kind in cascade_mod.EVENTS for e in self.ledger.events(kind)])
        window = self.cfg.fleet_cascade_window
        self.failures: list[tuple[float, str]] = [
            (float(e.detail.get("ended_at") or e.at), e.task_id or "") for e in self.ledger.events("child_end")
            if e.detail.get("outcome") == "failed" and e.at > self.clock() - window] + [
            (float(e.detail.get("at") or e.at), e.task_id or "") for e in self.ledger.events("agent_died")
            if e.at > self.clock() - window]
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-merge")
        self.beats = BeatBook()
        self.started = self.started or self.clock()
        self.unmarked.update(self.pending_marks())
        self.last_launch = 0.0

    # -- the monitor's heartbeat -----------------------------------------------------

    def beat(self) -> None:
        """This project's heartbeat, and every live peer's: one project's step may block for
        minutes (a worktree, a mark), and the other projects' children must not think the monitor
        down meanwhile."""
        self._beat()
        for peer in self.peers:
            if peer is not self:
                try:
                    peer._beat()
                except OSError:
                    pass  # the peer's own check meets it and says so

    def _beat(self) -> None:
        write_json(self.fleet_dir / MONITOR_FILE, {"pid": os.getpid(), "run_id": self.run_id,
                                                   "started": self.started, "at": self.clock(),
                                                   "parallel": self.parallel, "host": socket.gethostname(),
                                                   agentgo.ANSWERS: self.agent_answers})

    # -- the queue -------------------------------------------------------------------

    def open_tasks(self) -> list[TaskRef]:
        text = tasks_at(self.project, self.target)
        return [] if text is None else open_refs(parse(text))

    def sync_queue(self) -> list[TaskRow]:
        """Every open task of the project branch has a row (a new one: queued); the rows, in order."""
        known = {row.id: row for row in self.ledger.tasks()}
        refs = self.open_tasks()
        self.open_ids = {ref.id for ref in refs}
        for ref in refs:
            if ref.id not in known:
                now = self.clock()
                row = TaskRow(ref.id, ref.text, "queued", branch=ref.branch, updated=now, created=now)
                self.ledger.upsert_task(row)
                known[ref.id] = row
            elif self.reopened(known[ref.id]):
                self.reopen(known[ref.id])
        return list(self.ledger.tasks())

    def reopened(self, row: TaskRow) -> bool:
        """A task the fleet closed on the project branch (`[!]` failed, `[x]` merged) that is open
        there again: the user reopened it, or a new task reads the same. Not one needing review
        (the fleet never closed its line) nor a failed one whose `[!]` still waits."""
        return lifecycle.may(row.state, Move.REOPEN) and row.id not in self.unmarked and row.id not in self.children

    def reopen(self, row: TaskRow) -> None:
        """A fresh start: counters and strategy reset; the old attempts stay in the history (the
        ladder counts from the newest `start`)."""
        why = f"open again on {self.target} after it was {row.state}: a fresh start"
        self.ledger.set_state(row.id, lifecycle.step(row.state, Move.REOPEN), why, strategy=0, attempts=0, restarts=0,
                              escalations=0,
                              not_before=0.0, pid=None, merged_sha="")
        self.ledger.record("reopened", row.id, was=row.state, reason=why)
        say(f"{row.text!r}: {why}")

    # -- re-adoption -----------------------------------------------------------------

    def reconcile(self) -> None:
        """After a monitor's death: adopt the children still running (never a duplicate), take
        over the ends it missed, resume the merges it queued."""
        listed = {str(Path(w.path).resolve()): w for w in worktrees.listed(self.project)}
        for row in self.ledger.tasks():
            if row.state in TERMINAL or not row.worktree:
                continue
            wt = Path(row.worktree)
            if row.state == "merging":
                self.merges.append(Merge(row.id))
                continue
            probe = kids.Child(row.id, wt, row.pid or 0, 0.0, self.clock(), row.attempts, run_id=row.run_id)
            holder = kids.holder_of(probe) if str(wt.resolve()) in listed or wt.is_dir() else None
            if holder is not None and holder.pid:
                child = kids.adopt(row.id, wt, holder, row.attempts, self.clock())
                child.layout = probe.layout
                self.children[row.id] = child
                self.ledger.set_state(row.id, lifecycle.step(row.state, Move.ADOPT), row.reason, pid=holder.pid,
                                      run_id=holder.run_id)
                self.ledger.record("adopted", row.id, pid=holder.pid, run_id=holder.run_id, attempt=row.attempts)
                say(f"adopted the running child of {row.text!r} (pid {holder.pid})")
                continue
            starting = kids.running_loop_at(wt, row.pid)
            if starting is not None and row.state == "running":
                starting.task_id, starting.attempt, starting.layout = row.id, row.attempts, probe.layout
                self.children[row.id] = starting
                self.ledger.record("adopted", row.id, pid=starting.pid, run_id="", attempt=row.attempts)
                continue
            if row.state == "running":  # it ended while no monitor watched: its end is in its ledger
                probe.pid = 0
                self.children[row.id] = probe
                probe.layout = probe.layout or kids.layout_of(wt)
        now = self.clock()
        for attempt in self.ledger.attempts():  # the end of an attempt nobody watches any more is unknown
            if attempt.ended is None and attempt.task_id not in self.children and \
                    not any(m.task_id == attempt.task_id for m in self.merges):
                self.ledger.end_attempt(attempt.task_id, attempt.attempt, None, "stopped", now)
                self.ledger.record("attempt_closed", attempt.task_id, attempt=attempt.attempt,
                                   reason="no child runs for it and its end was never recorded")

    # -- launching -------------------------------------------------------------------

    def _slot(self, task_id: str) -> int:
        """The task's port slot: the one it had, unless a running child holds it now; else the lowest free
        (the children of every project of a fleet file count: their ports never overlap)."""
        used = {m.slots[t] for m in self.peers or [self] for t in m.children
                if t in m.slots and (m is not self or t != task_id)} | self.kept_slots
        slot = self.slots.get(task_id)
        book = book_for(accounts.root_of(self.cfg.shared_state_dir, os.environ))  # other fleets of this machine
        if slot is None or slot in used or not book.claim(slot):
            slot = book.first_free(used)
        self.slots[task_id] = slot
        return slot

    def _let_slot_go(self, task_id: str) -> None:
        """The child's port slot is free again for this machine's other fleets."""
        slot = self.slots.get(task_id)
        if slot is not None and not any(m.slots.get(t) == slot for m in self.peers or [self] for t in m.children):
            book_for(accounts.root_of(self.cfg.shared_state_dir, os.environ)).release(slot)

    def _settings_for(self, strategy: int) -> dict[str, str]:
        chosen = self.strategies[min(strategy, len(self.strategies) - 1)]
        return {**self.overrides, **ladder.child_settings(chosen, self.cfg)}

    def launch(self, row: TaskRow, kind: str) -> bool:
        """Start the task's child (or adopt one already running in its worktree: never two)."""
        now = self.clock()
        self.beat()  # the steps below may block for minutes: the children must not think the monitor down
        branch = row.branch or branch_for(row.id)
        try:
            wt = worktrees.create(self.project, self.root, row.id, branch, self.target, hooks=self.cfg.git_hooks)
        except (GitFailed, OSError, worktrees.WorktreeError) as exc:
            if isinstance(exc, worktrees.WorktreeError) and not _lock_held(str(exc)):
                return self._no_worktree(row, f"no worktree for it: {exc}")  # something in the way: a person looks
            # A ref or index lock another git holds, a timeout: tried again later, a few times.
            tries = self.worktree_tries.get(row.id, (0, 0.0))[0] + 1
            if tries < WORKTREE_TRIES:
                self.worktree_tries[row.id] = (tries, now + WORKTREE_RETRY)
                why = f"git could not make its worktree (try {tries} of {WORKTREE_TRIES}; again in " \
                      f"{WORKTREE_RETRY:g}s): {exc}"
                self.ledger.set_state(row.id, lifecycle.step(row.state, Move.HOLD), why)
                say(f"{row.text!r}: {why}", "warn")
                return False
            self.worktree_tries.pop(row.id, None)
            return self._no_worktree(row, f"no worktree for it after {tries} tries: {exc}")
        self.worktree_tries.pop(row.id, None)
        probe = kids.Child(row.id, wt, 0, 0.0, now, row.attempts)
        holder = kids.holder_of(probe)
        if holder is not None and (not holder.pid or not holder.alive()):
            # The last attempt's loop is gone but its steps still end (they hold its lock): not
            # a loop to adopt, and no new one may start there yet. The next check looks again.
            self.ledger.set_state(row.id, row.state, "waiting for the last attempt's steps to end")
            return False
        if holder is not None and holder.pid:  # a child of an earlier monitor runs there: adopt it
            child = kids.adopt(row.id, wt, holder, row.attempts, now)
            child.layout = probe.layout
            self.children[row.id] = child
            self.ledger.set_state(row.id, lifecycle.step(row.state, Move.ADOPT), "", worktree=str(wt), pid=holder.pid,
                                  run_id=holder.run_id)
            self.ledger.record("adopted", row.id, pid=holder.pid, run_id=holder.run_id)
            return True
        if row.attempts:  # what an earlier attempt left would stop the next child's start
            try:
                done = make_startable(wt, branch, row.attempts, row.reason or "unknown", hooks=self.cfg.git_hooks)
            except (GitFailed, OSError) as exc:
                done = []
                say(f"the worktree of {row.text!r} could not be tidied for its next attempt: {exc}", "warn")
            if done:
                self.ledger.record("leftovers", row.id, attempt=row.attempts, done=done)
                say(f"{row.text!r}: " + "; ".join(done))
        return self._start(row, kind, wt, probe, now)

    def _no_worktree(self, row: TaskRow, why: str) -> bool:
        self.ledger.set_state(row.id, lifecycle.step(row.state, Move.REVIEW), why, pid=None)
        self.ledger.record("needs_review", row.id, reason=why, outcome="worktree")
        say(f"{row.text!r} needs review: {why}", "error")
        self.alert(row.id, "high", f"task needs review: {row.text[:80]}", why,
                   "move away what is in the way, then start the fleet again")
        return False

    def _start(self, row: TaskRow, kind: str, wt: Path, probe: kids.Child, now: float) -> bool:
        chosen = self.strategies[min(row.strategy, len(self.strategies) - 1)]
        attempt = self.ledger.begin_attempt(row.id, kind, row.reason if kind != "start" else "", chosen.name, "",
                                            now)
        ports = port_range(self._slot(row.id), self.fleet)
        planner = row.id.startswith(PLANNER)
        phases = ("Planner",) if planner else tuple(p.name for p in self.cfg.phases if p.name != "Planner") or \
            ("Builder",)
        spec = kids.ChildSpec(row.id, "" if planner else row.text, wt, attempt.attempt, phases,
                              1 if planner else self.fleet.child_iterations,
                              self.cfg.stop_flag, self.fleet_dir, ports, self._settings_for(row.strategy),
                              self.fleet_dir / "children" / f"{row.id}.attempt-{attempt.attempt}.log")
        self.beat()
        self._hook_for(wt)
        try:
            child = kids.launch(spec, self.env, now)
        except OSError as exc:
            self.ledger.end_attempt(row.id, attempt.attempt, None, "failed", now)
            self.ledger.set_state(row.id, lifecycle.step(row.state, Move.UNQUEUE), f"could not start its loop: {exc}")
            say(f"could not start the child of {row.text!r}: {exc}", "error")
            return False
        child.layout = probe.layout
        self.children[row.id] = child
        self.last_launch = now
        self.gate_notes.pop(row.id, None)
        self.ledger.set_state(row.id, lifecycle.step(row.state, Move.LAUNCH), "", worktree=str(wt), pid=child.pid,
                              not_before=0.0)
        cli, model = cli_and_model(self.cfg, chosen.agent_cmd)  # what the dashboard's metrics count it by
        self.ledger.record("launch", row.id, attempt=attempt.attempt, pid=child.pid, how=kind, agent=chosen.name,
                           port_base=ports[0], port_count=ports[1], worktree=str(wt), log=str(spec.log),
                           cli=cli, model=model)
        say(started_line(row.text, kind, attempt.attempt, chosen.name) + f" in {wt} (pid {child.pid}, "
            f"ports {ports[0]}-{ports[0] + ports[1] - 1})")
        return True

    def _hook_for(self, worktree: Path) -> None:
        """The heartbeat hook in the child's worktree, as the project has it (a local scope the
        worktree lacks: settings.local.json is untracked)."""
        if (self.project / ".claude" / "settings.local.json").is_file():
            kids.install_hook(worktree, self.cfg, GIT_TIMEOUT)

    def launches(self, rows: list[TaskRow]) -> None:
        """Start what may start now: new tasks in TASKS.md's order, then relaunches past their
        backoff (within the restart budget and the cascade gate)."""
        self.launched = False
        if self.stopping or self.fatal is not None or self.paused:
            return  # nothing starts; the tasks keep their state for the next start
        now = self.clock()
        for row in rows:
            if row.id in self.children or row.state in TERMINAL or row.state in (Task.MERGING, Task.RUNNING) or \
                    row.id.startswith(PLANNER):
                continue
            relaunch = row.state in lifecycle.RELAUNCH
            if row.id not in self.open_ids:  # ticked or removed by hand on the project branch: not started
                if relaunch:
                    self.ledger.set_state(row.id, lifecycle.step(row.state, Move.UNQUEUE),
                                          f"no longer open on {self.target}", not_before=0.0)
                    say(f"{row.text!r} is no longer open on {self.target}: not relaunched")
                continue
            if relaunch and row.not_before > now:
                continue
            if self.worktree_tries.get(row.id, (0, 0.0))[1] > now:
                continue  # its worktree is tried again later
            if self.max_parallel is not None and sum(len(p.children) for p in self.peers) >= self.max_parallel:
                self._hold(row, f"max_parallel: {self.max_parallel} children run across the fleet file's projects", "")
                return
            last = max(p.last_launch for p in self.peers or [self])  # one stagger across the projects
            gate = launch_gate(running=len(self.children), parallel=self.parallel, stopping=self.stopping or
                               self.fatal is not None, since_last=now - last, stagger=self.fleet.stagger,
                               available=available_memory(), floor=self.fleet.memory_floor,
                               limit=self.known_limit(now))
            if not gate.open:
                self._hold(row, gate.why, "memory_held" if "memory" in gate.why else "")
                return
            if relaunch:
                kind = "escalate" if row.state == Task.ESCALATED else "restart"
                (go,) = self.decided(decide.RelaunchDue(row.id, kind, now))
                if isinstance(go, decide.Hold):  # the cascade pause, the restart budget
                    self._hold(row, go.reason, go.kind)
                    continue
                probe = isinstance(go, decide.Launch) and go.probe
                if self.launch(row, kind):
                    self.launched = True
                    self.decided(decide.Relaunched(row.id, now, probe, self.who(row.id)))
                    self.ledger.record(kind, row.id, strategy=row.strategy, reason=row.reason)
                    if probe:
                        self.record_everywhere("cascade_probe", row.id, reason="one child probes whether the "
                                                                              "cause is gone")
                        say(f"cascade: {row.text!r} probes whether the cause is gone")
                return  # one launch per check: staggered
            if self.launch(row, "resume" if row.attempts else "start"):
                self.launched = True
                return

    def known_limit(self, now: float) -> str:
        """Why no child may start: a usage limit this CLI and account met in any loop of this
        user on this machine (the account store, each entry vouched by its run's ledger); ""
        when none. A limit never spends a restart: the tasks wait, state `waiting`."""
        if now - self.limit_read < LIMIT_CHECK:
            return self.limit_note
        self.limit_read = now
        note = ""
        try:
            store = AccountStore(accounts.root_of(self.cfg.shared_state_dir, os.environ))
            entries, _warning = limits.read_shared(store, now)
            live = [e for e in entries if e.resets_at + self.cfg.limit_margin > now]
            good, _planted = limits.vouched_shared(live, now)
            adapter = adapter_of(self.cfg)
            account = adapter.account({**adapter.environment(), **os.environ})
            found = limits.binding(good, account, now, self.cfg.limit_margin)
        except (StoreUnusable, OSError) as exc:
            found = None
            say(f"the account store cannot be read: {exc}", "warn")
        if found is not None:
            note = (f"a usage limit of {found.account.cli} ({found.account.describe()}) is known until "
                    f"{limits.when(found.resets_at)} (+{self.cfg.limit_margin:g}s): no child starts before")
        if note and not self.limit_note:
            self.ledger.record("limit_hold", None, until=found.resets_at + self.cfg.limit_margin, reason=note)
            say(note, "warn")
        elif self.limit_note and not note:
            self.ledger.record("limit_resume", None, reason="the usage limit's reset passed: children start again, "
                                                            "one by one")
            say("the usage limit's reset passed: children start again, one by one")
        self.limit_note = note
        return note

    def _hold(self, row: TaskRow, why: str, kind: str) -> None:
        if not why:
            return
        if self.gate_notes.get(row.id) != why:
            self.gate_notes[row.id] = why
            if row.state in lifecycle.HELD_BEFORE_LAUNCH:
                self.ledger.set_state(row.id, lifecycle.step(row.state, Move.HOLD), why)
            if kind:
                self.ledger.record(kind, row.id, reason=why)
                say(why, "warn")

    # -- watching --------------------------------------------------------------------

    def check_children(self) -> None:
        now = self.clock()
        sightings = []
        for task_id, child in list(self.children.items()):
            if child.popen is not None:
                self._cap_log(task_id, child)
            ending = kids.ended(child, now)
            if ending is None:
                if child.run_id and child.layout is not None:
                    seen = self.beats.sight(task_id, child.run_id, newest_beat(child.layout.heartbeat_dir), now)
                    if seen is not None:
                        sightings.append(seen)
                if child.run_id and not getattr(child, "_seen", False):
                    child._seen = True  # type: ignore[attr-defined]
                    self.ledger.set_state(task_id, "running", "", run_id=child.run_id, pid=child.pid)
                    self.ledger.record("child_healthy", task_id, run_id=child.run_id, attempt=child.attempt)
                continue
            del self.children[task_id]
            self.beats.forget(task_id)
            self._let_slot_go(task_id)
            self.deaths_seen.pop(task_id, None)
            self.agent_waits.pop(task_id, None)
            self.agent_answers.pop(task_id, None)
            self.ended(task_id, child, ending)
        self.ledger.note_beats(sightings)
        self.agent_deaths(now)
        self.agent_restarts(now)

    def agent_deaths(self, now: float) -> None:
        """An agent killed inside a running child (the OOM killer takes agents first) is a failure
        the cascade counts, as a child loop's death is; its loop then waits for the restart
        budget's go before it starts an agent again (agent_restarts)."""
        if now - self.deaths_read < DEATHS_CHECK:
            return
        self.deaths_read = now
        for task_id, child in list(self.children.items()):
            died, seen, started = kids.agent_deaths(child, self.deaths_seen.get(task_id, 0))
            self.deaths_seen[task_id] = seen
            for at in died:
                self.ledger.record("agent_died", task_id, run_id=child.run_id, attempt=child.attempt, at=at)
                self.decided(decide.Failure(at, self.who(task_id)))
            if died and (started is None or started < died[-1]):
                self.agent_waits[task_id] = died[-1]   # no agent started since: its loop asks
            elif started is not None and self.agent_waits.get(task_id, started) < started:
                del self.agent_waits[task_id]          # it started one without the go (the monitor was down)

    def agent_restarts(self, now: float) -> None:
        """The restart budget's answer to each loop waiting to start an agent again after its
        agent died, the oldest death first: the go (spent, recorded `agent_restart`) or a hold
        until the budget's next restart. The loops read it in monitor.json (loop/agentgo.py)."""
        if not self.agent_waits:
            return
        for task_id, died in sorted(self.agent_waits.items(), key=lambda wait: wait[1]):
            (go,) = self.decided(decide.AgentRestartDue(task_id, now))
            if isinstance(go, decide.Launch):
                del self.agent_waits[task_id]
                self.gate_notes.pop(task_id, None)
                self.agent_answers[task_id] = {"died": died}
                self.ledger.record("agent_restart", task_id, died=died)
                row = self.ledger.task(task_id)
                say(f"{row.text if row else task_id!r}: its agent may start again (the restart budget's go)")
                continue
            self.agent_answers[task_id] = {"died": died, "held": self.budget.next_at(now)}
            row = self.ledger.task(task_id)
            if row is not None:
                self._hold(row, go.reason, go.kind)
        self._beat()

    def _cap_log(self, task_id: str, child: kids.Child) -> None:
        log = self.fleet_dir / "children" / f"{task_id}.attempt-{child.attempt}.log"
        try:
            if log.stat().st_size > LOG_CAP:
                os.truncate(log, 0)
        except OSError:
            pass

    def ended(self, task_id: str, child: kids.Child, ending: kids.Ending) -> None:
        row = self.ledger.task(task_id)
        if row is None:
            return
        now = self.clock()
        if row.id.startswith(PLANNER):
            self.planner_ended(row, child, ending)
            return
        ticked = ending.exit_code == exitcodes.OK and done_at(self.project, row.branch, row.text)
        proof = proven(child.layout, row.text) if ticked else (False, "")  # the evidence in its own ledger
        verified = ticked and proof[0]
        verdict = outcome_of(ending.exit_code, verified, self.stopping or self.interrupted is not None,
                             child.signalled is not None,
                             f"its task is [x] on its branch, but {proof[1]}" if ticked and not verified
                             else ending.reason)
        self.ledger.end_attempt(task_id, child.attempt or row.attempts, ending.exit_code, verdict.outcome, now)
        self.ledger.record("child_end", task_id, run_id=child.run_id, attempt=child.attempt or row.attempts,
                           exit_code=ending.exit_code, outcome=verdict.outcome, cost_usd=ending.cost,
                           ended_at=ending.at, reason=verdict.reason, model_used=ending.model)
        log = self.fleet_dir / "children" / f"{task_id}.attempt-{child.attempt or row.attempts}.log"
        say(ended_line(row.text, ending.exit_code, verdict.outcome, verdict.reason)
            + ("" if verdict.outcome == "verified" else f"; its output: {log}"))
        history, causes = self.history(row.id)
        self.apply(self.decided(decide.ChildEnded(self.ledger.task(row.id) or row, history, verdict, ending.at, now,
                                                  self._ran_within(now), self.who(task_id), causes)))

    def planner_ended(self, row: TaskRow, child: kids.Child, ending: kids.Ending) -> None:
        """The Planner's child: its commits come home (TASKS.md included); none: nothing to plan."""
        now = self.clock()
        ahead = run_git(self.project, ["rev-list", "--count", f"{self.target}..{row.branch}"], timeout=GIT_TIMEOUT)
        commits = int(ahead.text.strip() or 0) if ahead.returncode == 0 else 0
        outcome = "verified" if ending.exit_code == exitcodes.OK and commits else \
            "stopped" if ending.exit_code == exitcodes.OK or child.signalled is not None else "failed"
        self.ledger.end_attempt(row.id, child.attempt or row.attempts, ending.exit_code, outcome, now)
        self.ledger.record("child_end", row.id, run_id=child.run_id, attempt=child.attempt or row.attempts,
                           exit_code=ending.exit_code, outcome=outcome, cost_usd=ending.cost, ended_at=ending.at,
                           reason=ending.reason, model_used=ending.model)
        if outcome == "verified":
            self.ledger.set_state(row.id, "merging", "the Planner's tasks, queued for the merge queue", pid=None)
            self.ledger.record("merge_queued", row.id)
            self.merges.append(Merge(row.id))
        elif outcome == "stopped":
            self.ledger.set_state(row.id, "merged", "the Planner added nothing: the fleet is done", pid=None)
        else:
            self.ledger.set_state(row.id, "failed", f"the Planner failed: exit {ending.exit_code} {ending.reason}",
                                  pid=None)
        say(f"the Planner ended: exit {ending.exit_code}, {outcome} ({commits} commit(s) on {row.branch})")

    def history(self, task_id: str) -> tuple[tuple, tuple[str, ...]]:
        """The task's attempts since its fresh start (a reopened task counts from its newest
        `start`), and the reasons its ended ones gave, oldest first."""
        attempts = self.ledger.attempts(task_id)
        fresh = max((a.attempt for a in attempts if a.kind == "start"), default=0)
        ends = [e for e in self.ledger.events("child_end", task_id=task_id)
                if int(e.detail.get("attempt") or 0) >= fresh]
        return (tuple(a for a in attempts if a.attempt >= fresh),
                tuple(str(e.detail.get("reason") or "") for e in sorted(ends, key=lambda e: e.seq)))

    def rules(self) -> decide.Rules:
        return decide.Rules(self.policy, self.gate.policy, self.budget.every)

    def climb(self, row: TaskRow, reason: str) -> None:
        """The ladder after a red merge refuted the task's verified attempt: restart, escalate or
        fail for good, by the same rung a failed attempt climbs."""
        history, _ = self.history(row.id)
        _rung, effect = decide.climb(self.ledger.task(row.id) or row, history, self.policy, self.clock(), reason)
        if effect is not None:
            self.apply([effect])

    def decided(self, event: decide.Event) -> list[decide.Effect]:
        """decide() over this monitor's fleet; the gate (shared with a fleet file's other
        projects), the budget and the failure window take its answer in place."""
        fleet = decide.Fleet(self.gate, self.budget, tuple(self.failures), self.stopping or
                             self.interrupted is not None, self.fatal)
        after, effects = decide.decide(fleet, event, self.rules(), hint(self.project, "fleet", "status"))
        self.gate.__dict__.update(after.gate.__dict__)
        self.budget.last = after.budget.last
        self.failures[:] = after.failures
        return effects

    def apply(self, effects: Iterable[decide.Effect]) -> None:
        """The decisions' effects as processes, ledger rows and lines: this driver's part."""
        for effect in effects:
            if isinstance(effect, decide.StopLaunching):
                if self.fatal is None:
                    self.fatal = effect.code
                    say(f"the fleet launches nothing more: a child ended with exit {effect.code} ({effect.reason})",
                        "error")
            elif isinstance(effect, decide.SetState):
                self.ledger.set_state(effect.task_id, effect.state, effect.reason, pid=None, **effect.fields)
            elif isinstance(effect, decide.Merge):
                self.ledger.record("merge_queued", effect.task_id)
                self.merges.append(Merge(effect.task_id))
            elif isinstance(effect, decide.Fail):
                row = self.ledger.task(effect.task_id)
                if row is not None:
                    self.fail(row, effect.reason)
            elif isinstance(effect, decide.Alert):
                self.alert(effect.about, effect.severity, effect.cause, effect.what, effect.action)
            elif isinstance(effect, decide.GateMoved):
                self._gate_moved(effect.step)

    def _ran_within(self, now: float) -> int:
        """Children that ran within the cascade window: running now, or ended in it (an attempt
        whose end was never recorded counts only while its child is watched)."""
        start = now - self.gate.policy.window
        return sum(len({a.task_id for a in m.ledger.attempts() if a.started <= now and
                        (a.task_id in m.children if a.ended is None else a.ended > start)})
                   for m in self.peers or [self])

    def who(self, task_id: str) -> str:
        """The task as the cascade gate counts it: with several projects, two tasks of the same text
        in two projects are two children."""
        return f"{self.project}\0{task_id}" if self.peers else task_id

    def record_everywhere(self, kind: str, task_id: str | None, **detail) -> None:
        """A move of the shared cascade gate, in every project's fleet ledger (each one's status
        and report show the pause); the task's id only in its own project's."""
        self.ledger.record(kind, task_id, **detail)
        for peer in self.peers:
            if peer is not self:
                peer.ledger.record(kind, None, project=str(self.project), task=task_id, **detail)

    def gate_step(self, step: cascade_mod.GateStep) -> None:
        """Record and tell what the cascade gate decided (a pause with its alert)."""
        self.apply(decide.gate_effects(step, hint(self.project, "fleet", "status")))

    def _gate_moved(self, step: cascade_mod.GateStep) -> None:
        """A move of the gate recorded and said (a probe is recorded when it launches)."""
        if step.event is None or step.action == "probe":
            return
        self.record_everywhere(step.event, None, reason=step.reason)
        say(f"cascade: {step.reason}")  # the fleet's own news (its alert is critical), no error of the user's

    def mark(self, row: TaskRow, reason: str) -> str:
        """`- [!]` on the project branch ("" when held by the user's dirty checkout: tried again)."""
        self.beat()  # a merge in the user's checkout may take minutes
        try:
            sha = merging.mark_failed(self.project, self.target, TaskRef(row.id, row.text, 0), reason,
                                      hooks=self.cfg.git_hooks)
        except (GitFailed, GitTimeout, OSError) as exc:
            say(f"could not mark {row.text!r} failed in TASKS.md: {exc}", "warn")
            sha = ""
        if sha:
            if self.unmarked.pop(row.id, None) is not None:
                self.ledger.record("marked", row.id, sha=sha)
        elif row.id not in self.unmarked:
            self.unmarked[row.id] = reason
            self.ledger.record("mark_pending", row.id, reason=reason)  # kept: the next monitor marks it
        return sha

    def pending_marks(self) -> dict[str, str]:
        """Failed tasks whose `[!]` waits (an earlier monitor found the user's checkout dirty)."""
        done = {e.task_id: e.seq for e in self.ledger.events("marked")}
        waiting = {e.task_id: (e.seq, e.detail.get("reason", "")) for e in self.ledger.events("mark_pending")}
        return {task: reason for task, (seq, reason) in waiting.items() if task and done.get(task, 0) < seq and
                (row := self.ledger.task(task)) is not None and row.state == "failed"}

    def fail(self, row: TaskRow, reason: str) -> None:
        sha = self.mark(row, reason)
        self.ledger.set_state(row.id, lifecycle.step(row.state, Move.FAIL), reason, pid=None)
        self.ledger.record("failed_permanently", row.id, reason=reason, sha=sha)
        say(f"{row.text!r} failed permanently: {reason}; its branch {row.branch} is kept", "error")

    # -- the merge queue -------------------------------------------------------------

    def merge_step(self) -> None:
        if not self.merges:
            return
        head = self.merges[0]
        now = self.clock()
        if head.future is None:
            if head.held_until > now:
                if len(self.merges) > 1:  # a held merge lets the others by
                    self.merges.append(self.merges.pop(0))
                return
            head = self.disjoint_first(now)
            row = self.ledger.task(head.task_id)
            if row is None or (row.state in TERMINAL and row.state != "ready"):
                self.merges.remove(head)
                return
            head.future = self.pool.submit(self._merge, row)
            return
        if not head.future.done():
            return
        self.merges.pop(0)
        row = self.ledger.task(head.task_id)
        try:
            result = head.future.result()
        except Exception as exc:  # noqa: BLE001 - a merge that raised is retried, said
            say(f"the merge of {row.text if row else head.task_id!r} failed: {type(exc).__name__}: {exc}", "error")
            self.merges.append(Merge(head.task_id, held_until=now + HELD_RETRY))
            return
        self.merged(row, result, now)

    def disjoint_first(self, now: float) -> Merge:
        """The merges due now reordered, those touching files no other touches first (mergeorder.py);
        the one to take."""
        due = [m for m in self.merges if m.held_until <= now]
        if len(due) > 1:
            rows = [self.ledger.task(m.task_id) for m in due]
            ids = mergeorder.arranged(self.project, self.target,
                                      [(m.task_id, r.branch if r else "") for m, r in zip(due, rows)])
            self.merges[:] = sorted(due, key=lambda m: ids.index(m.task_id)) + \
                [m for m in self.merges if m.held_until > now]
        return self.merges[0]

    def rebase_ready(self) -> None:
        """GENESIS_FLEET_MERGE=branch: each kept branch is rebased again when the project branch moves."""
        if self.cfg.fleet_merge != "branch":
            return
        done = run_git(self.project, ["rev-parse", "--verify", "-q", f"refs/heads/{self.target}"], timeout=GIT_TIMEOUT)
        tip = done.text.strip() if done.returncode == 0 else ""
        if tip and self.seen_tip and tip != self.seen_tip:
            queued = {m.task_id for m in self.merges}
            for row in self.ledger.tasks():
                if row.state == "ready" and row.id not in queued:
                    self.merges.append(Merge(row.id))
        self.seen_tip = tip or self.seen_tip

    def guard_branch(self) -> None:
        """The project branch moved behind the merge queue's back (a child's `git update-ref`) is
        put back and said (repo/branchguard.py); not while a merge of ours is moving it."""
        if self.merges and self.merges[0].future is not None and not self.merges[0].future.done():
            return
        merging.guard_branch(self.project, self.target, self.ledger.record,
                             lambda a: self.alert(a.about, a.severity, a.cause, a.what, a.action))

    def _merge(self, row: TaskRow) -> merging.MergeResult:
        planner = row.id.startswith(PLANNER)
        task = TaskRef(row.id, "" if planner else row.text, 0)
        rows = {r.id: r.text for r in self.ledger.tasks()}  # a lost line is named with the task that brought it
        owners = {str(c): rows.get(e.task_id or "", "") for e in self.ledger.events("merged") for c in
                  e.detail.get("commits") or ()}
        return merging.merge_home(self.project, Path(row.worktree), row.branch, self.target, task, self.cfg,
                                  resolve=self.resolver(row), keep_tasks=planner, owners=owners)

    def merged(self, row: TaskRow, result: merging.MergeResult, now: float) -> None:
        if result.outcome == "merged" or result.outcome == "ready":
            state = result.outcome
            again = row.state == "ready"  # branch mode: a kept branch rebased as the project branch moved
            self.ledger.set_state(row.id, state, result.detail, merged_sha=result.sha)
            self.ledger.record("rebased" if again else "merged", row.id, sha=result.sha, commits=list(result.commits),
                               outcome=state, checks=list(result.checks))
            say(merged_line(row.text, state, result.sha))
            if not again:
                self.resolve_told(row)
        elif result.outcome == "held":
            if row.reason != f"merge held: {result.detail}":
                self.ledger.record("merge_held", row.id, reason=result.detail)
                say(f"the merge of {row.text!r} is held: {result.detail}", "warn")
            self.ledger.set_state(row.id, "merging", f"merge held: {result.detail}")
            self.merges.append(Merge(row.id, held_until=now + HELD_RETRY))
        elif result.outcome == merging.TESTS_FAILED and (back := redmerge.send_back(
                self.ledger, row, result, self.policy, self.target, self.cfg.git_hooks, now)):
            say(f"{row.text!r}: {back}; back to its task", "warn")
            self.climb(row, back)
        else:
            why = result.detail or result.outcome
            self.ledger.set_state(row.id, "needs-review", why)
            self.ledger.record("needs_review", row.id, reason=why, outcome=result.outcome, lost=list(result.lost))
            say(f"{row.text!r} needs review: {why}; its branch {row.branch} is kept", "warn")
            self.alert(row.id, "high", f"task needs review: {row.text[:80]}",
                       f"{why}. Its branch {row.branch} is kept as it was",
                       f"merge {row.branch} into {self.target} by hand, then tick the task")

    def resolver(self, row: TaskRow) -> Callable[[Path, list[str]], bool]:
        """The Merger: the configured agent run once in the worktree on the conflicted files,
        bounded by AGENT_MAX_RUNTIME; True when no conflicted file is left."""

        def resolve(worktree: Path, files: list[str]) -> bool:
            try:
                prompt = MERGER_PROMPT.read_text()
            except OSError:
                return False
            prompt += ("\n\nThe task whose branch is being replayed: " + row.text +
                       "\nThe conflicted files: " + ", ".join(files) + "\n")
            adapter = adapter_of(self.cfg)
            argv = [*adapter.command(self.cfg.agent_cmd), prompt]
            env = {**self.env, **adapter.environment(), "GENESIS_TASK": row.text, "GENESIS_TASK_ID": row.id,
                   "GENESIS_AGENT": "Merger", "GENESIS_PHASE": "Merger", "GENESIS_PROJECT_DIR": str(worktree)}
            self.ledger.record("merger", row.id, files=files)
            if not bounded_run(argv, worktree, env, self.cfg.max_runtime, self.merger_groups):
                return False
            left = run_git(worktree, ["diff", "--name-only", "--diff-filter=U"], timeout=GIT_TIMEOUT)
            return left.returncode == 0 and not left.text.strip()

        return resolve

    # -- alerts ----------------------------------------------------------------------

    def alert(self, about: str, severity: str, cause: str, what: str, action: str) -> None:
        """Tell the alert channels (one ticket, its deliverer detached); recorded in the fleet ledger."""
        self.ledger.record("alert", None if about == "cascade" else about, severity=severity, cause=cause)
        try:
            ticket = telling.alert_ticket(severity, cause, what, action, run_id=self.run_id, project=str(self.project),
                                          at=self.clock(), task="" if about == "cascade" else about)
            handoff.dispatch(ticket, self.cfg.alerts, self.layout.ledger_file)
        except Exception as exc:  # noqa: BLE001 - an alert is never worth failing the fleet
            say(f"the alert could not be sent: {exc}", "warn")

    def resolve_told(self, row: TaskRow) -> None:
        """The task came home: what its attempts told (a stall, a phase that gave up) is resolved,
        wherever that alert went (telling.resolution)."""
        try:
            runs = {e.detail.get("run_id") for e in self.ledger.events("child_end", task_id=row.id)} - {None, ""}
            since = min((a.started for a in self.ledger.attempts(row.id)), default=self.started)
            told = [t for t in LedgerBook(self.layout.ledger_file).told(since) if t.run_id in runs]
            ticket = telling.resolution(row.text, row.attempts, told, str(self.project), self.run_id, self.clock())
            if ticket is not None:
                self.ledger.record("alert", row.id, severity=ticket.severity, cause=ticket.cause,
                                   resolves=ticket.resolves)
                handoff.dispatch(ticket, self.cfg.alerts, self.layout.ledger_file)
        except Exception as exc:  # noqa: BLE001 - a follow-up is never worth failing the fleet
            say(f"the resolution of {row.text!r}'s alert could not be sent: {exc}", "warn")

    def outcome(self) -> telling.Outcome:
        """This run of the project's fleet, as its end is told."""
        rows = {r.id: r for r in self.ledger.tasks()}

        def text(task: str | None) -> str:
            return rows[task].text if task in rows else str(task)

        def decided(kind: str, state: str) -> tuple[tuple[str, str], ...]:
            found = {e.task_id: e.detail.get("reason", "") for e in self.ledger.events(kind, after=self.start_seq)
                     if e.task_id in rows and rows[e.task_id].state == state and not e.task_id.startswith(PLANNER)}
            return tuple((text(t), str(why)) for t, why in found.items())

        home = tuple(dict.fromkeys(text(e.task_id) for e in self.ledger.events("merged", after=self.start_seq)
                                   if e.task_id and not e.task_id.startswith(PLANNER)))
        costs = [e.detail.get("cost_usd") for e in self.ledger.events("child_end", after=self.start_seq)]
        costs = [float(c) for c in costs if isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0]
        still = sum(1 for r in rows.values() if r.state not in TERMINAL and not r.id.startswith(PLANNER) and
                    r.id in self.open_ids)
        return telling.Outcome(str(self.project), self.ended_code if self.ended_code is not None else exitcodes.ERROR,
                               self.reason, home, decided("failed_permanently", "failed"),
                               decided("needs_review", "needs-review"), still, sum(costs) if costs else None,
                               max(0.0, self.clock() - self.started))

    # -- the whole run ---------------------------------------------------------------

    def read_stop(self) -> None:
        if read_flag(self.cfg.stop_flag) == "false":
            if not self.stopping:
                say(f"stop flag {self.cfg.stop_flag} says false: the children stop after their current phase; "
                    f"nothing more starts")
            self.stopping = True
        elif self.stopping:  # a child's preflight set it back: every child must still see it
            write_text(self.cfg.stop_flag, "false\n")

    def done(self, rows: list[TaskRow]) -> bool:
        """Over when no child runs and no merge is under way or due, and either the fleet is
        stopping (a merge held by the user's checkout then waits for the next start) or every
        task is finished. A held merge alone keeps the fleet waiting for the checkout."""
        if self.children or any(m.future is not None for m in self.merges):
            return False
        if any(m.held_until <= self.clock() for m in self.merges):
            return False
        if self.stopping or self.fatal is not None:
            return True
        return not self.merges and all(r.state in TERMINAL or (r.state in ("queued", "waiting") and
                                                               r.id not in self.open_ids) for r in rows)

    def tick(self) -> bool:
        """One check; True when the fleet is over."""
        self.beat()
        self.read_stop()
        heed(self)  # the actions asked of the fleet (genesis/actions/)
        self.check_children()
        now = self.clock()
        window = self.gate.policy.window
        busy = self.gate.state != "open" or any(f[0] > now - window for f in self.failures)
        self.apply(self.decided(decide.TimePassed(now, self._ran_within(now) if busy else 0)))
        self.guard_branch()
        self.merge_step()
        self.rebase_ready()
        for task, reason in list(self.unmarked.items()):
            row = self.ledger.task(task)
            if row is not None:
                self.mark(row, reason)
        rows = self.sync_queue()
        if self.interrupted is None:
            self.launches(rows)
            if self.done(rows) and self.plan():
                return False
        return self.done(self.ledger.tasks())

    def plan(self) -> bool:
        """No task open and none running: the Planner once per fleet run (when GENESIS_PHASES has
        it), as a child on a branch of its own whose TASKS.md edits come home; True if started."""
        if self.planned or self.stopping or self.fatal is not None or \
                "Planner" not in [p.name for p in self.cfg.phases]:
            return False
        self.planned = True
        now = self.clock()
        ident = PLANNER + self.run_id.lower()
        row = TaskRow(ident, PLANNER_TEXT, "queued", branch=f"genesis/plan/{self.run_id}", updated=now, created=now)
        self.ledger.upsert_task(row)
        return self.launch(row, "start")

    def forward(self, sig: int) -> None:
        """Every child loop gets the signal; the monitor waits for them, bounded (see _forward)."""
        _forward([self], sig)

    def prune_merged(self) -> None:
        """Remove the worktrees and branches of merged tasks, once no child runs: a running child's
        history check would take another task's deleted branch for history it rewrote. Only what
        is proven merged goes (worktrees.prune checks it again)."""
        if self.children:
            return
        for row in self.ledger.tasks():
            if row.state != "merged" or not row.worktree or not Path(row.worktree).exists():
                continue
            try:
                if worktrees.prune(self.project, Path(row.worktree), row.branch, self.target):
                    self.ledger.record("pruned", row.id, worktree=row.worktree, branch=row.branch)
            except (GitFailed, GitTimeout, worktrees.WorktreeError, OSError) as exc:
                say(f"the worktree of {row.text!r} is kept: {exc}", "warn")

    def exit_code(self) -> int:
        """From this run's outcomes: a task failed or sent to review by an earlier run (the user
        may have dealt with it since) is not this run's news. The Planner's own end is said,
        never the fleet's code: no task of the list failed."""
        decided = {e.task_id for kind in ("failed_permanently", "needs_review")
                   for e in self.ledger.events(kind, after=self.start_seq)}
        return fleet_exit((r.state for r in self.ledger.tasks() if r.id in decided and not r.id.startswith(PLANNER)),
                          self.fatal, self.interrupted)

    def held_merges(self) -> list[str]:
        return [m.task_id for m in self.merges]


def _lock_held(message: str) -> bool:
    """git failed on a lock another git process holds (it goes away): not something in the way."""
    return ".lock" in message or "cannot lock ref" in message


def bounded_run(argv: list[str], cwd: Path, env: Mapping[str, str], timeout: float, groups: set[int]) -> bool:
    """argv in cwd, its own process group (in `groups` while it runs, for an interrupt to end),
    at most timeout seconds (then the group is killed)."""
    try:
        proc = subprocess.Popen(argv, cwd=str(cwd), env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return False
    groups.add(proc.pid)
    try:
        return proc.wait(timeout=timeout) == 0
    except subprocess.TimeoutExpired:
        end_group(proc.pid)
        proc.wait()
        return False
    finally:
        groups.discard(proc.pid)


def end_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class _Held:
    """A project's start, checked and locked: what its Monitor is made of."""
    cfg: Config
    layout: Layout
    fleet: FleetSettings
    parallel: int
    fleet_dir: Path
    target: str
    overrides: Mapping[str, str]
    fleet_fd: int
    loop_fd: int


def _take(project: Path, overrides: Mapping[str, str], parallel: str, trust: bool, run_id: str) -> _Held | int:
    """Lock one project for the monitor and check it may start (its exit code when not: said)."""
    cfg = resolve(project, flags=overrides)
    fleet = fleet_settings(cfg.settings)
    n = parallel_of(parallel, fleet)
    layout = layout_for(cfg)
    private_dir(layout.state_dir)
    fleet_dir = private_dir(fleet_dir_of(layout))
    try:
        fleet_fd = take_fleet_lock(fleet_dir / "lock")
    except FleetLocked:
        other = _monitor_record(fleet_dir)
        say(f"a fleet monitor already runs on {cfg.project} (pid {other.get('pid', '?')}, run "
            f"{other.get('run_id', '?')}): `{hint(cfg.project, 'fleet', 'status')}` shows it, "
            f"`{hint(cfg.project, 'stop')}` stops it", "error")
        return exitcodes.LOCKED
    try:
        loop_fd = hold(layout.loop_lock, layout.loop_record, run_id)
    except Locked as exc:
        os.close(fleet_fd)
        say(f"a single Genesis loop runs on {cfg.project} (pid {exc.holder.pid}, run {exc.holder.run_id}): a fleet "
            f"and a loop never work on one project at once; stop it first (`{hint(cfg.project, 'stop')}`)",
            "error")
        return exitcodes.LOCKED
    held = _Held(cfg, layout, fleet, n, fleet_dir, "", overrides, fleet_fd, loop_fd)
    try:
        refused = check_trust(cfg, layout.state_dir, trust)
        if refused:
            say(refused, "error")
            _let_go(held, run_id)
            return exitcodes.UNTRUSTED_COMMAND
        held.target = project_branch(cfg.project)
        ensure_git_excludes(layout)  # the stop flag `genesis stop` writes here stays untracked, as a loop's does
        if read_flag(cfg.stop_flag) == "false":
            write_text(cfg.stop_flag, "true\n")
            say(f"stop flag {cfg.stop_flag} said false (an earlier stop); set it back to true")
    except BaseException:
        _let_go(held, run_id)
        raise
    return held


def _let_go(held: _Held, run_id: str) -> None:
    release(held.layout.loop_record, run_id)
    os.close(held.loop_fd)
    os.close(held.fleet_fd)


def run_fleet(project: Path, overrides: Mapping[str, str], parallel: str, *, trust: bool = False,
              clock: Callable[[], float] = time.time) -> int:
    """The monitor's whole life over one project (`--parallel`); its exit code."""
    return run_projects([(project, overrides, parallel)], trust=trust, clock=clock)


def run_projects(projects: Sequence[tuple[Path, Mapping[str, str], str]], *, max_parallel: int | None = None,
                 trust: bool = False, clock: Callable[[], float] = time.time) -> int:
    """One monitor over the projects (a fleet file's: path, settings as --set flags, parallel):
    each is checked and locked first (one that cannot start stops the whole start, saying which,
    before any child runs), then all are watched in turn; the worst of their exit codes."""
    if len(projects) > 1:  # every project's settings checked before any lock is taken
        for project, overrides, parallel in projects:
            try:
                parallel_of(parallel, fleet_settings(resolve(project, flags=overrides).settings))
            except ConfigError as exc:
                raise ConfigError(f"{project}: {exc}") from None
    run_id = FLEET_RUN + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    held: list[_Held] = []
    unfinished = False
    try:
        for project, overrides, parallel in projects:
            got = _take(project, overrides, parallel, trust, run_id)
            if isinstance(got, int):
                if len(projects) > 1:
                    say(f"the fleet does not start: {project} cannot (said above); nothing was started", "error")
                return got
            held.append(got)
        with ExitStack() as stack:
            monitors: list[Monitor] = []
            locks: dict[int, _Held] = {}
            for h in held:
                ledger = stack.enter_context(FleetLedger.open(h.fleet_dir / "ledger.sqlite3", clock=clock))
                if ledger.reset_note:
                    say(ledger.reset_note, "warn")
                monitors.append(Monitor(h.cfg.project, h.cfg, h.fleet, h.parallel, ledger, h.fleet_dir, run_id,
                                        h.target, h.overrides, clock=clock))
                locks[id(monitors[-1])] = h

            def finished(monitor: Monitor) -> None:
                """A project whose fleet ended lets its locks go now, not when the last project ends
                (a loop or a fleet may start on it); not while a merge of the project still runs."""
                if any(m.future is not None and not m.future.done() for m in monitor.merges):
                    return
                h = locks.pop(id(monitor), None)
                if h is not None:
                    held.remove(h)
                    _let_go(h, run_id)

            if len(monitors) > 1:
                share(monitors, max_parallel)
            try:
                code = _run_all(monitors, finished if len(monitors) > 1 else None)
            except BaseException:
                if any(m.future is not None and not m.future.done() for mon in monitors for m in mon.merges):
                    # A merge thread that outlived its bound: never let a new monitor merge beside it.
                    say("the monitor failed while a merge was under way: it ends now, the locks with it", "error")
                    sys.stderr.flush()
                    os._exit(exitcodes.ERROR)
                raise
            unfinished = any(m.future is not None and not m.future.done() for mon in monitors for m in mon.merges)
    finally:
        for h in reversed(held):
            _let_go(h, run_id)
    if unfinished:  # an interrupted merge's thread would hold the exit: its worktree recovers next start
        sys.stderr.flush()
        os._exit(code)
    return code


def share(monitors: list[Monitor], max_parallel: int | None) -> None:
    """The projects' monitors share one cascade gate and one failure window (a burst of failures
    in one project pauses the restarts of all: the cause is most likely shared), rebuilt from
    the ledger that saw the gate move last (each move is recorded in all of them); the first
    project's cascade settings rule. max_parallel caps their children at once."""
    def newest(m: Monitor) -> float:
        return max((e.at for kind in cascade_mod.EVENTS for e in m.ledger.events(kind)), default=-1.0)

    source = max(monitors, key=newest)
    moves = [e for kind in cascade_mod.EVENTS for e in source.ledger.events(kind)]
    gate = cascade_mod.CascadeGate.from_events(cascade_mod.policy_of(monitors[0].cfg), moves)
    crew, kept = list(monitors), set()  # one list, shared: an ended project leaves it (_run_all)
    for m in monitors:
        m.peers, m.max_parallel, m.kept_slots = crew, max_parallel, kept
    probes = sorted((e for e in moves if e.kind == "cascade_probe"), key=lambda e: e.seq)
    if gate.state == "probing" and probes:  # the probe as the shared gate counts it (see who())
        last = probes[-1]
        project = str(source.project) if last.task_id else str(last.detail.get("project") or "")
        task = last.task_id or last.detail.get("task")
        gate.probe_task = f"{project}\0{task}" if task else None
    failures = sorted((at, m.who(task)) for m in monitors for at, task in m.failures)
    for m in monitors:
        m.gate, m.failures = gate, failures


def worst_exit(codes: Iterable[int]) -> int:
    """The whole's exit code from the projects': an interruption's, then any other failure's,
    then 31 (a task failed), then 32 (a task needs review), else 0."""
    codes = list(codes)
    for group in (set(SIGNAL_EXIT.values()),
                  set(codes) - {exitcodes.OK, exitcodes.FLEET_TASKS_FAILED, exitcodes.FLEET_NEEDS_REVIEW},
                  {exitcodes.FLEET_TASKS_FAILED}, {exitcodes.FLEET_NEEDS_REVIEW}):
        found = [c for c in codes if c in group]
        if found:
            return found[0]
    return exitcodes.OK


def _run(monitor: Monitor) -> int:
    return _run_all([monitor])


def _begin(monitor: Monitor) -> None:
    ledger = monitor.ledger
    last = ledger.last_event("fleet_start", "fleet_end")
    if last is not None and last.kind == "fleet_start":  # the monitor before was killed: its end, as known now
        ledger.record("fleet_end", exit_code=None, reason="the monitor was killed (SIGKILL?): no end recorded; "
                      "the next monitor took its children over", pid=last.detail.get("pid"),
                      run_id=last.detail.get("run_id"))
    if last is not None and last.kind == "fleet_start":
        monitor.guard_branch()  # moved while no monitor watched: judged against the tip the one before gave it
    else:
        merging.keep_start(monitor.project, monitor.target)
    monitor.start_seq = ledger.record("fleet_start", run_id=monitor.run_id, parallel=monitor.parallel,
                                      pid=os.getpid(), target=monitor.target)
    say(f"fleet on {monitor.project} (branch {monitor.target}): at most {monitor.parallel} children at once; "
        f"`{hint(monitor.project, 'fleet', 'status')}` shows every task, `{hint(monitor.project, 'stop')}` stops "
        f"them after their current phase")


def _run_all(monitors: list[Monitor], finished: Callable[[Monitor], None] | None = None) -> int:
    """Every project's monitor checked in turn until each is over (or a signal ends them all).
    A project whose fleet ended (or gave up) leaves its peers (its children no longer count, its
    ledger is no longer read) and `finished` is called for it (its locks let go)."""
    got: list[int] = []

    def retire(monitor: Monitor) -> None:
        if monitor in monitor.peers:
            monitor.peers.remove(monitor)
            # The children of one that gave up run on, unwatched: their ports stay theirs for this run.
            monitor.kept_slots.update(monitor.slots[t] for t in monitor.children if t in monitor.slots)
        if finished is not None:
            finished(monitor)

    def on_signal(signum, _frame) -> None:
        got.append(signum)

    old = {sig: signal.signal(sig, on_signal) for sig in honoured()}  # SIGHUP under nohup stays ignored
    active: list[Monitor] = []
    try:
        for monitor in monitors:
            _begin(monitor)
            active.append(monitor)
        for monitor in monitors:
            monitor.reconcile()
        while active:
            if got:
                sig = got[0]
                for monitor in active:
                    monitor.interrupted = SIGNAL_EXIT[sig]
                    monitor.reason = f"interrupted by SIG{kids.SIGNALS[sig]}"
                say(f"received SIG{kids.SIGNALS[sig]}: stopping every child now")
                _forward(active, sig)
                while active:
                    ending = active.pop(0)
                    _end(ending)
                    retire(ending)
                break
            launcher: Monitor | None = None
            for monitor in list(active):
                if monitor.due > time.monotonic():
                    continue
                try:
                    over = monitor.tick()
                    monitor.errors = 0
                except DiskFull:
                    raise
                except (GitFailed, OSError, LedgerError) as exc:  # git, the disk, the ledger: said, tried again
                    monitor.errors += 1
                    say(f"a check failed ({monitor.errors} of {TICK_ERRORS} in a row): {type(exc).__name__}: {exc}",
                        "error")
                    if monitor.errors >= TICK_ERRORS:
                        monitor.reason = f"{TICK_ERRORS} checks in a row failed; the last: {type(exc).__name__}: {exc}"
                        monitor.interrupted = exitcodes.ERROR  # nothing more starts
                        active.remove(monitor)
                        _end(monitor, gave_up=True)  # its children go on to their own end; the next monitor adopts them
                        retire(monitor)
                        continue
                    monitor.due = time.monotonic() + min(60.0, monitor.fleet.check * 2 ** monitor.errors)
                    continue
                if over:
                    monitor.reason = ("stopped by the stop flag" if monitor.stopping else
                                      f"a child ended with exit {monitor.fatal}" if monitor.fatal is not None else
                                      "every task is finished")
                    active.remove(monitor)
                    _end(monitor)
                    retire(monitor)
                    continue
                # One launch a check; after one, the next check comes as soon as the stagger allows.
                monitor.due = time.monotonic() + (min(monitor.fleet.check, monitor.fleet.stagger) if monitor.launched
                                                  else monitor.fleet.check)
                launcher = monitor if monitor.launched else launcher
            if launcher is not None and launcher in active and len(active) > 1:
                # Round robin: the project that launched checks last next time, and every project's
                # next check comes with its (the stagger), so the next launch goes to another one.
                active.remove(launcher)
                active.append(launcher)
                soon = launcher.due
                for monitor in active:
                    if not monitor.errors:  # a failing project keeps its backoff
                        monitor.due = min(monitor.due, soon)
            if active:
                _sleep(max(0.0, min(m.due for m in active) - time.monotonic()), got)
        return worst_exit(m.ended_code if m.ended_code is not None else exitcodes.ERROR for m in monitors)
    except DiskFull as exc:
        for monitor in active:
            monitor.reason = f"disk full: {exc}"
            monitor.ended_code = exitcodes.DISK_FULL
            _end_merges(monitor)
        raise
    except BaseException as exc:  # noqa: BLE001 - a crash: no merge may outlive the locks released next
        for monitor in active:
            monitor.reason = monitor.reason or f"the monitor failed: {type(exc).__name__}: {exc}"
            _end_merges(monitor)
        raise
    finally:
        for monitor in active:
            _record_end(monitor, monitor.ended_code if monitor.ended_code is not None else exitcodes.ERROR)
        _tell_end(monitors)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _tell_end(monitors: Sequence[Monitor]) -> None:
    """The fleet's end, told once for all its projects (the children's ends are its to tell)."""
    try:
        first = monitors[0]
        ticket = telling.end_ticket([m.outcome() for m in monitors], first.run_id, first.clock())
        first.ledger.record("alert", None, severity=ticket.severity, cause=ticket.cause, final=True)
        pid = handoff.dispatch(ticket, first.cfg.alerts, first.layout.ledger_file)
        # As a loop's end waits for its final alert (loop/finish.py): bounded, never past its deliverer's deadline.
        handoff.settle(pid, min(FINAL_ALERT_WAIT, deadline_seconds(first.cfg.alerts)))
    except Exception as exc:  # noqa: BLE001 - an alert is never worth failing the fleet's end
        say(f"the fleet's end could not be told: {exc}", "warn")


def _end(monitor: Monitor, gave_up: bool = False) -> int:
    """One project's fleet is over: merges settled, merged worktrees pruned, its end recorded."""
    code = exitcodes.ERROR
    try:
        if monitor.interrupted is not None:
            _end_merges(monitor)
        if gave_up:
            return code
        monitor.pool.shutdown(wait=monitor.interrupted is None, cancel_futures=True)
        while monitor.merges and monitor.merges[0].future is not None and monitor.merges[0].future.done():
            monitor.merge_step()  # a merge that finished meanwhile is recorded
        monitor.prune_merged()
        code = monitor.exit_code()
        for task in monitor.unmarked:
            row = monitor.ledger.task(task)
            say(f"{row.text if row else task!r} failed; its `- [!]` mark in TASKS.md waits for a clean checkout "
                f"of {monitor.target} (the next fleet start makes it)", "warn")
        return code
    except DiskFull as exc:
        monitor.reason, code = f"disk full: {exc}", exitcodes.DISK_FULL
        _end_merges(monitor)
        raise
    except BaseException as exc:  # noqa: BLE001 - a crash: no merge may outlive the locks released next
        monitor.reason = monitor.reason or f"the monitor failed: {type(exc).__name__}: {exc}"
        _end_merges(monitor)
        raise
    finally:
        _record_end(monitor, code)


def _record_end(monitor: Monitor, code: int) -> None:
    monitor.ended_code = code
    ledger = monitor.ledger
    try:
        ledger.record("fleet_end", exit_code=code, reason=monitor.reason, pid=os.getpid())
    except Exception:  # noqa: BLE001 - the end is said on stderr at least
        pass
    note_end(monitor.project, monitor.layout.state_dir)  # `status --all` finds it tomorrow
    counts: dict[str, int] = {}
    try:
        for row in ledger.tasks():
            counts[row.state] = counts.get(row.state, 0) + 1
    except Exception:  # noqa: BLE001 - a ledger that cannot be read: the end is still said
        pass
    say(f"fleet {'on ' + str(monitor.project) + ' ' if monitor.peers else ''}ended ({monitor.reason or 'error'}), "
        f"exit {code}: " + (", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no task"))


def _forward(monitors: Sequence[Monitor], sig: int) -> None:
    """Every child loop gets the signal (they reap their trees and record their end); the
    monitor then waits for them, bounded, and SIGKILLs a loop that outlives the bound (its
    companion records and reaps it)."""
    for monitor in monitors:
        for child in monitor.children.values():
            kids.signal_child(child, sig)
    for bound, then in ((STOP_WAIT, signal.SIGKILL), (10.0, None)):
        until = time.monotonic() + bound
        while any(m.children for m in monitors) and time.monotonic() < until:
            for monitor in monitors:
                monitor.check_children()
            time.sleep(0.1)
        if then is not None:
            for monitor in monitors:
                for child in list(monitor.children.values()):
                    kids.signal_child(child, then)


def _end_merges(monitor: Monitor) -> None:
    """The Merger's process group ended, a merge under way given a moment (its worktree recovers
    at the next start), no new one begun: before the monitor lets its locks go."""
    for group in list(monitor.merger_groups):
        end_group(group)
    monitor.pool.shutdown(wait=False, cancel_futures=True)
    running = [m.future for m in monitor.merges if m.future is not None]
    until = time.monotonic() + INTERRUPT_MERGE_WAIT
    while running and not all(f.done() for f in running) and time.monotonic() < until:
        time.sleep(0.05)


def _sleep(seconds: float, got: list[int]) -> None:
    until = time.monotonic() + seconds
    while not got and time.monotonic() < until:
        time.sleep(min(0.05, max(0.0, until - time.monotonic())))
