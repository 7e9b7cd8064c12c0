"""The loops running on this machine, found without any registry of them.

A loop shows in its processes: the bash loop (`start-multi-agent-loop.sh` with its
--project, else its working directory, and the lock file it keeps open), Genesis's steps
(`genesis --project P ...`), and its agents, which carry the loop's marker in their
environment (genesis/markers.py). A project found so is listed only when its loop lock is
held: the kernel's word, so a process that merely looks like a loop is never listed. Only
this user's processes are looked at, within a time budget; one that vanishes or denies
access is passed over.

A loop that ended has no process left to find: the loops and fleets that ended lately are
read from the ledgers (the run ledger, the fleet ledger) of the projects known to this status:
the one asked about, every one seen running by this scanner, and every one whose loop or
fleet left a note at its end (lately.py: where to look, never what happened).
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import psutil

from genesis.fleet import status as fleet_status  # the module: it imports this package's view
from genesis.fleet.ledger import FleetLedger
from genesis.ledger.store import Ledger, LedgerError
from genesis.repo.gitcmd import GitFailed, NotARepository
from genesis.status.view import KILLED_PREFIX, Phase, Wait, build, layout_of
from genesis.store.layout import Layout, state_dir_of
from genesis.store.looplock import FLEET_RUN, Holder, current_holder

__all__ = ["option", "Loop", "Ended", "Scanner", "running_loops", "running_layouts", "ended_loops", "LOOP_SCRIPT", "MARKER",
           "SCAN_BUDGET", "ENDED_WITHIN"]

LOOP_SCRIPT = "start-multi-agent-loop.sh"
MARKER = "GENESIS_PROJECT_DIR"     # see markers_for(): every agent of a loop carries it
SCAN_BUDGET = 1.0                  # seconds one scan of the processes may take
ENDED_WITHIN = 24 * 3600.0         # a loop that ended this long ago is still listed with --all
GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


@dataclass(frozen=True)
class Loop:
    project: Path
    run_id: str
    pid: int                       # the bash loop's (0: its lock record is gone)
    started: float | None          # the run's start, epoch seconds
    iteration: int | None
    phase: Phase | None            # the phase running now (None: between phases, or waiting)
    wait: Wait | None
    health: str                    # the running phase's classification ("" unknown)


@dataclass(frozen=True)
class Ended:
    """A run of a project that ended lately, and how."""
    project: Path
    run_id: str
    started: float
    ended: float | None            # None: no end recorded (killed, and nothing recorded it since)
    exit_code: int | None
    reason: str
    kind: str = "loop"             # loop or fleet

    @property
    def killed(self) -> bool:
        return self.ended is None or self.reason.startswith(KILLED_PREFIX)


class Scanner:
    """Finds the running loops; keeps where each project's state lives between scans
    (a `status --watch` scans every refresh)."""

    def __init__(self, budget: float = SCAN_BUDGET, clock: Callable[[], float] = time.monotonic):
        self.budget = budget
        self.clock = clock
        self._state: dict[Path, Path | None] = {}   # project as found -> its state folder (None: not a git project)
        self.seen: dict[Path, Layout] = {}           # state folder -> layout, of every loop this scanner saw run

    def scan(self, now: float | None = None) -> list[Loop]:
        """Every loop whose lock is held, by project path."""
        loops = []
        for layout, holder in self.held():
            st = build(layout, now=now, recent=0, holder=holder)
            loops.append(Loop(st.project, st.run_id, st.pid or 0, st.started, st.iteration, st.phase, st.wait,
                              st.health.classification if st.health else ""))
        return sorted(loops, key=lambda lp: (str(lp.project), lp.pid))

    def held(self) -> list[tuple[Layout, Holder]]:
        """Where each loop whose lock is held keeps its state, and its lock's holder: the loops
        found without reading any of them (a dashboard reads them itself, when they change)."""
        deadline = self.clock() + self.budget
        hints: dict[Path, set[Path]] = {}           # state folder -> the projects that led to it
        for kind, path in _clues(deadline, self.clock):
            if kind == "state":
                hints.setdefault(path.resolve(), set())
                continue
            state = self._state_of(path)
            if state is not None:
                hints.setdefault(state, set()).add(path)
        found = []
        for state, projects in hints.items():
            layout = layout_of(_project_of(state, projects), state)
            holder = current_holder(layout.loop_lock, layout.loop_record)
            if holder is None:
                continue  # looks like a loop, holds no lock: not one
            self.seen[state] = layout
            found.append((layout, holder))
        return found

    def _state_of(self, project: Path) -> Path | None:
        if project not in self._state:
            self._state[project] = _locate(project)
        return self._state[project]


def ended_loops(layouts: Iterable[Layout], now: float, within: float = ENDED_WITHIN) -> list[Ended]:
    """The runs of these projects that ended in the `within` seconds before now, latest end
    first; a run with no end recorded and no loop holding its lock counts from its start. A
    ledger that cannot be read is passed over (its project's own status says why)."""
    found: dict[tuple[Path, str], Ended] = {}
    for layout in layouts:
        holder = current_holder(layout.loop_lock, layout.loop_record)
        try:
            if not layout.ledger_file.exists():
                continue
            with Ledger.open(layout.ledger_file, readonly=True) as led:
                runs = led.runs()
        except (LedgerError, sqlite3.Error, OSError):
            continue
        for run in runs:
            if run.run_id.startswith(FLEET_RUN):
                continue  # a fleet holds the project's lock under its own run: told from its ledger below
            if holder is not None and (run.run_id == holder.run_id or run.ended is None):
                continue  # the running loop's run (whose lock record may be gone)
            last = run.ended if run.ended is not None else run.started
            if now - within <= last <= now:
                found[(layout.project, run.run_id)] = Ended(layout.project, run.run_id, run.started, run.ended,
                                                            run.exit_code, run.reason or "")
    for layout in layouts:
        for e in _fleets_ended(layout, now, within):
            found[(e.project, e.run_id)] = e
    return sorted(found.values(), key=lambda e: -(e.ended if e.ended is not None else e.started))


def _fleets_ended(layout: Layout, now: float, within: float) -> list[Ended]:
    """The fleet runs of the project that ended in the window (from its fleet ledger's
    fleet_start and fleet_end; a start with no end and no monitor left counts as killed)."""
    folder = layout.state_dir / "fleet"
    path = folder / "ledger.sqlite3"
    if not path.is_file():
        return []
    try:
        with FleetLedger.open(path, readonly=True) as led:
            marks = sorted(led.events("fleet_start") + led.events("fleet_end"), key=lambda e: e.seq)
    except (LedgerError, sqlite3.Error, OSError, RuntimeError, ValueError):
        return []
    found, start = [], None
    running = fleet_status.lock_held(folder / "lock")
    for e in marks + [None]:
        if e is not None and e.kind == "fleet_end" and start is not None:
            code = e.detail.get("exit_code")
            found.append(Ended(layout.project, str(start.detail.get("run_id") or "fleet"), start.at, e.at,
                               code if isinstance(code, int) and not isinstance(code, bool) else None,
                               str(e.detail.get("reason") or ""), "fleet"))
            start = None
        elif e is None or e.kind == "fleet_start":
            if start is not None and (e is not None or not running):  # no end: killed
                found.append(Ended(layout.project, str(start.detail.get("run_id") or "fleet"), start.at, None,
                                   None, "", "fleet"))
            start = e
    return [f for f in found if now - within <= (f.ended if f.ended is not None else f.started) <= now]


def running_loops(budget: float = SCAN_BUDGET) -> list[Loop]:
    return Scanner(budget).scan()


def running_layouts(budget: float = SCAN_BUDGET) -> list[Layout]:
    """Where the state of each loop running on this machine lives."""
    found = []
    for loop in running_loops(budget):
        try:
            found.append(layout_of(loop.project))
        except (NotARepository, GitFailed, OSError):
            continue  # gone since the scan
    return found


def _clues(deadline: float, clock: Callable[[], float]) -> Iterator[tuple[str, Path]]:
    """("project", path) and ("state", state folder) for each of this user's processes that
    could belong to a loop."""
    me = os.getuid()
    for proc in psutil.process_iter(["uids", "cmdline"]):
        if clock() > deadline:
            return
        try:
            uids, cmd = proc.info["uids"], proc.info["cmdline"] or []
            if uids is None or uids.real != me or proc.pid == os.getpid():
                continue
            yield from _from_command(proc, cmd)
            env = proc.environ()
        except GONE:
            continue
        marker = env.get(MARKER, "")
        if os.path.isabs(marker):
            yield "project", Path(marker)


def _from_command(proc: psutil.Process, cmd: Sequence[str]) -> Iterator[tuple[str, Path]]:
    loop = next((i for i, arg in enumerate(cmd[:2]) if os.path.basename(arg) == LOOP_SCRIPT), None)
    if loop is not None:
        project = option(cmd[loop + 1:], "--project") or "."  # the loop's default is its working directory
        yield from _resolved(proc, project)
        for f in proc.open_files():
            if os.path.basename(f.path) == "loop.lock":  # the loop keeps its lock open for its whole life
                yield "state", Path(f.path).parent
        return
    rest = _genesis_args(cmd)
    if rest is not None:
        project = option(rest, "--project")
        if project:
            yield from _resolved(proc, project)


def _resolved(proc: psutil.Process, project: str) -> Iterator[tuple[str, Path]]:
    if not os.path.isabs(project):
        project = os.path.join(proc.cwd(), project)
    yield "project", Path(os.path.normpath(project))


def _genesis_args(cmd: Sequence[str]) -> Sequence[str] | None:
    """The arguments of a `genesis` command line (the console script, or python -m genesis)."""
    for i, arg in enumerate(cmd[:3]):
        if os.path.basename(arg) == "genesis":
            return cmd[i + 1:]
        if arg == "-m" and i + 1 < len(cmd) and cmd[i + 1] == "genesis":
            return cmd[i + 2:]
    return None


def option(args: Sequence[str], name: str) -> str | None:
    """The value of `name VALUE` or `name=VALUE` in a command line's arguments."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def _locate(project: Path) -> Path | None:
    """The state folder of the work tree at project; None when it is not one (or git fails)."""
    try:
        if (project / ".git").is_dir():
            return (project / ".git" / "genesis").resolve()  # the common case, without running git
        return state_dir_of(project).resolve()
    except (NotARepository, GitFailed, OSError):
        return None


def _project_of(state: Path, found: set[Path]) -> Path:
    """The work tree of a state folder (<git dir>/genesis): the project that led to it, else
    read from the git dir (a plain repository's .git, a linked worktree's gitdir file)."""
    tops = sorted(p for p in found if (p / ".git").exists())
    if tops or found:
        return (tops or sorted(found))[0]
    git_dir = state.parent
    if git_dir.name == ".git":
        return git_dir.parent
    try:
        return Path((git_dir / "gitdir").read_text().strip()).parent
    except OSError:
        return state
