"""Which projects the dashboard shows: those given, those a fleet file lists, those whose loops
or fleets run on this machine now, and every one seen since the server started (an ended loop
stays on the page, grey).

A fleet's child is a loop of its own in a linked worktree, but the reader thinks of it as one
task of the fleet: a loop whose state lives in `<common git dir>/worktrees/<name>/genesis`
belongs to the project of `<common git dir>` when that project has a fleet, and is shown as
that fleet's task, never as a loop of its own. The machine's processes are looked at no more
often than every RESCAN seconds (a look costs a walk over every process).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import psutil

from genesis.config import default_layout
from genesis.fleet.fleetfile import FleetFile, FleetFileError, load
from genesis.repo.gitcmd import GitFailed, NotARepository
from genesis.status.loops import SCAN_BUDGET, Scanner, option
from genesis.store.layout import Layout
from genesis.web.metrics import ProjectSource

__all__ = ["Discovery", "key_of", "fleet_ledger_of", "main_project_of", "worker_clone_of", "fleet_files_running",
           "RESCAN"]

RESCAN = 2.0          # seconds between two looks at the machine's processes
GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def key_of(project: Path) -> str:
    """The project's key in URLs: stable, and free of the path's characters."""
    return "p-" + hashlib.sha256(str(Path(project).resolve()).encode()).hexdigest()[:12]


def fleet_ledger_of(layout: Layout) -> Path | None:
    path = layout.state_dir / "fleet" / "ledger.sqlite3"
    return path if path.is_file() and not path.is_symlink() else None


def main_project_of(state_dir: Path) -> Path | None:
    """The main work tree a fleet child's state folder belongs to, None when it is not a fleet child's."""
    worktree_dir = state_dir.parent                         # <common>/worktrees/<name>
    if worktree_dir.parent.name != "worktrees":
        return None
    common = worktree_dir.parent.parent
    if not (common / "genesis" / "fleet").is_dir():
        return None
    return common.parent if common.name == ".git" else None


def worker_clone_of(state_dir: Path) -> Path | None:
    """The Temporal worker's fleet folder (`<worker root>/<fleet workflow>`) whose clone holds
    this loop's state, None when it is no worker's: a worker runs each attempt in a linked
    worktree of its clone `<folder>/repo`, beside the attempts' own `<folder>/fleet` folder. Such
    a loop is a task of a fleet the home's project shows (on one of its machines), never a project."""
    worktree_dir = state_dir.parent                         # <folder>/repo/.git/worktrees/<task>
    common = worktree_dir.parent.parent
    if worktree_dir.parent.name != "worktrees" or common.name != ".git" or common.parent.name != "repo":
        return None
    folder = common.parent.parent
    return folder if (folder / "fleet").is_dir() and (folder / "worktrees").is_dir() else None


def fleet_files_running(clock: Callable[[], float] = time.monotonic,
                        budget: float = SCAN_BUDGET) -> Iterator[tuple[str, Path]]:
    """("fleet", file) for each fleet monitor started with a fleet file, ("project", path) for each
    started on one project (`genesis --project P fleet run`): this user's processes only."""
    me, deadline = os.getuid(), clock() + budget
    for proc in psutil.process_iter(["uids", "cmdline"]):
        if clock() > deadline:
            return
        try:
            uids, cmd = proc.info["uids"], proc.info["cmdline"] or []
            if uids is None or uids.real != me or "fleet" not in cmd or "run" not in cmd:
                continue
            at = cmd.index("fleet")
            if at + 1 >= len(cmd) or cmd[at + 1] != "run" or not any(os.path.basename(a) in ("genesis", "-m")
                                                                       for a in cmd[:3]):
                continue
            given = option(cmd[at + 2:], "--fleet")
            if given:
                yield "fleet", _absolute(proc, given)
                continue
            yield "project", _absolute(proc, option(cmd[:at], "--project") or ".")
        except GONE:
            continue


def _absolute(proc: psutil.Process, path: str) -> Path:
    return Path(os.path.normpath(path if os.path.isabs(path) else os.path.join(proc.cwd(), path)))


@dataclass
class Discovery:
    """The projects to show, re-found at most every RESCAN seconds (a `fleet`/`project` given at
    start is always shown; a project found once stays)."""
    projects: Sequence[Path] = ()
    fleets: Sequence[Path] = ()
    scan_machine: bool = True
    clock: Callable[[], float] = time.monotonic
    rescan: float = RESCAN
    budget: float = SCAN_BUDGET                               # seconds one look at the processes may take
    problems: list[str] = field(default_factory=list)        # fleet files that cannot be read, said on the page
    _known: dict[Path, Layout] = field(default_factory=dict)  # main work tree -> its layout, in the order found
    _scanner: Scanner | None = None
    _last: float | None = None
    # A fleet file as last read, by (inode, mtime, size): reading one runs git once per project.
    _fleet_files: dict[Path, tuple[tuple[int, int, int], FleetFile]] = field(default_factory=dict)
    # The build thread and the API's worker threads ask at once: one look at a time.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sources(self) -> list[ProjectSource]:
        """Every project to show now, in the order each was first found."""
        with self._lock:
            now = self.clock()
            if self._last is None or now - self._last >= self.rescan:
                self._last = now
                self._find()
            known = list(self._known.items())
        return [ProjectSource(project=p, name=p.name or str(p), layout=layout, fleet_ledger=fleet_ledger_of(layout))
                for p, layout in known]

    def _find(self) -> None:
        problems: list[str] = []
        self._add_all(self.projects)
        for path in self.fleets:
            problems += self._add_fleet(path)
        if self.scan_machine:
            fleet_files, fleet_projects = [], []
            for kind, path in fleet_files_running(self.clock, self.budget):
                (fleet_files if kind == "fleet" else fleet_projects).append(path)
            for path in fleet_files:
                self._add_fleet(path)
            self._add_all(fleet_projects)
            if self._scanner is None:
                self._scanner = Scanner(self.budget)
            for layout, _holder in self._scanner.held():
                if worker_clone_of(layout.state_dir) is not None:
                    continue  # a Temporal fleet's attempt on this machine: its home's project shows it
                main = main_project_of(layout.state_dir)
                self._add(main, None if main is not None else layout)
        self.problems = problems

    def _add_fleet(self, path: Path) -> list[str]:
        try:
            st = os.stat(path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = self._fleet_files.get(path)
            if cached is not None and cached[0] == stamp:
                fleet = cached[1]
            else:
                fleet = load(path)
                self._fleet_files[path] = (stamp, fleet)
        except (FleetFileError, OSError) as exc:
            return [f"{path}: {exc}"]
        self._add_all(p.path for p in fleet.projects)
        return []

    def _add_all(self, paths: Iterable[Path]) -> None:
        for path in paths:
            self._add(path, None)

    def _add(self, project: Path | None, layout: Layout | None) -> None:
        if layout is not None:
            project = layout.project
        if project is None:
            return
        project = Path(project).resolve()
        if project in self._known:
            return
        try:
            self._known[project] = layout if layout is not None else default_layout(project)
        except (NotARepository, GitFailed, OSError):
            return  # not a git work tree (any more): nothing of Genesis to show
