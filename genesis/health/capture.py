"""What an agent's tree was doing just before the watcher kills it (processes, listening ports, tool calls,
heartbeat, transcript, `git status`), read within a time budget and caps because the agent is still alive
and the next phase waits."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil

from genesis.procs.proctree import ProcId, descendant_pids
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.progress import measuring_config
from genesis.words import sanitize

__all__ = ["Incident", "Proc", "Listener", "capture", "CMD_WIDTH", "TEXT_WIDTH"]

MAX_PROCS = 200
MAX_PORTS = 200
MAX_TOOL_CALLS = 20
MAX_TRANSCRIPT = 40
MAX_GIT_LINES = 200
PROC_BUDGET = 1.0          # seconds for reading the tree and its ports
GIT_BUDGET = 3.0           # seconds for git (its config lookup and status together)
CMD_WIDTH = 200
TEXT_WIDTH = 500           # a transcript, git status or given string longer than this is cut
MAX_KEYS = 40              # keys kept of a given dict (heartbeat, tool call)

STATUS = {psutil.STATUS_RUNNING: "R", psutil.STATUS_SLEEPING: "S", psutil.STATUS_DISK_SLEEP: "D",
          psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t",
          psutil.STATUS_DEAD: "X", psutil.STATUS_IDLE: "I"}


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    status: str          # R, S, D, Z, T... ("?" when it could not be read)
    cpu: float           # user + system seconds so far
    rss: int             # bytes
    wchan: str           # the kernel function it sleeps in (Linux, where readable), else ""
    command: str
    origin: str          # "root" (the agent), "tree" (its descendant) or "extra" (found by marker)


@dataclass(frozen=True)
class Listener:
    pid: int
    proto: str           # tcp, tcp6, udp, udp6
    address: str
    port: int


@dataclass(frozen=True)
class Incident:
    at: float                            # wall-clock epoch of the capture
    kind: str                            # stuck, wedged, overtime
    reason: str
    phase: str
    iteration: int
    run_id: str
    project: str
    processes: tuple[Proc, ...]
    ports: tuple[Listener, ...]
    tool_in_flight: dict | None
    tool_calls: tuple[dict, ...]         # the newest last
    heartbeat: dict | None
    transcript: tuple[str, ...]
    git_status: tuple[str, ...]
    git_error: str = ""
    notes: tuple[str, ...] = ()          # what was left out, and why
    window: str | None = None            # the window that fired: stale, tool_silent, tool_busy, runtime (None: none)
    log: str = ""                        # the attempt's own transcript, whose tail `transcript` is

    @property
    def base_id(self) -> str:
        """`20261121T093512Z-Builder-i3`; write() adds -2, -3... when that is taken."""
        phase = re.sub(r"[^A-Za-z0-9_-]", "_", self.phase)[:40] or "agent"
        return f"{_stamp(self.at)}-{phase}-i{max(0, int(self.iteration))}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def capture(root: ProcId | None, extra: list[ProcId], *, phase: str, iteration: int, run_id: str, reason: str,
            kind: str, heartbeat: dict | None, tool_in_flight: dict | None, tool_calls: list[dict],
            transcript: list[str], project: Path, now: float, mono: Callable[[], float] = time.monotonic,
            budget: float = PROC_BUDGET, git_timeout: float = GIT_BUDGET, window: str | None = None,
            log: str = "") -> Incident:
    """Everything worth knowing about a run about to be killed; never raises for what it
    cannot read (that is said in the incident instead). `now` is the wall clock, `mono`
    the clock the time budget is measured on."""
    deadline = mono() + budget
    notes: list[str] = []
    procs = _read_tree(root, extra, deadline, mono, notes)
    ports = _read_ports({p.pid for p in procs}, deadline, mono, notes)
    status, git_error = _git_status(Path(project), git_timeout, notes)
    calls = list(tool_calls)[-MAX_TOOL_CALLS:]
    lines = list(transcript)[-MAX_TRANSCRIPT:]
    return Incident(at=float(now), kind=str(kind), reason=_cut(str(reason), 2000), phase=str(phase),
                    iteration=int(iteration), run_id=str(run_id), project=str(project), processes=tuple(procs),
                    ports=tuple(ports), tool_in_flight=_plain(tool_in_flight), tool_calls=tuple(_plain(c) for c in calls),
                    heartbeat=_plain(heartbeat), transcript=tuple(_cut(str(x), TEXT_WIDTH) for x in lines),
                    git_status=tuple(status), git_error=git_error, notes=tuple(notes), window=window, log=str(log))


# --- the process tree ------------------------------------------------------------------

def _read_tree(root: ProcId | None, extra: Iterable[ProcId], deadline: float, mono: Callable[[], float],
               notes: list[str]) -> list[Proc]:
    found: list[tuple[psutil.Process, str]] = []
    seen: set[int] = set()
    top = root.process() if root is not None else None
    if top is not None:
        found.append((top, "root"))
        seen.add(top.pid)
        for pid in descendant_pids(top):
            try:
                found.append((psutil.Process(pid), "tree"))
                seen.add(pid)
            except psutil.Error:
                continue  # gone meanwhile: what was found is still worth reading
    elif root is not None:
        notes.append(f"the agent (pid {root.pid}) was already gone")
    for ident in extra:
        if ident.pid in seen:
            continue
        proc = ident.process()
        if proc is not None:
            seen.add(ident.pid)
            found.append((proc, "extra"))
    if len(found) > MAX_PROCS:
        notes.append(f"{len(found) - MAX_PROCS} more processes were not recorded (at most {MAX_PROCS})")
        found = found[:MAX_PROCS]
    procs: list[Proc] = []
    for n, (proc, origin) in enumerate(found):
        if mono() > deadline:
            notes.append(f"{len(found) - n} processes were not read (the capture's {PROC_BUDGET:g}s budget ran out)")
            break
        info = _read_proc(proc, origin)
        if info is not None:
            procs.append(info)
    return procs


def _read_proc(proc: psutil.Process, origin: str) -> Proc | None:
    try:
        with proc.oneshot():
            status = proc.status()
            ppid = proc.ppid()
            times = proc.cpu_times()
            rss = proc.memory_info().rss
            try:
                command = " ".join(proc.cmdline())
            except (psutil.AccessDenied, psutil.ZombieProcess):
                command = ""
            command = command or f"[{proc.name()}]"
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        return Proc(proc.pid, 0, "?", 0.0, 0, "", "(not readable)", origin)
    return Proc(proc.pid, ppid, STATUS.get(status, status[:1].upper() or "?"), round(times.user + times.system, 3),
                int(rss), _wchan(proc.pid), _cut(sanitize(command, CMD_WIDTH * 2), CMD_WIDTH), origin)


def _wchan(pid: int) -> str:
    """Where in the kernel a process waits (a socket read, a pipe, a futex...), if we may know."""
    if not sys.platform.startswith("linux"):
        return ""
    try:
        fd = os.open(f"/proc/{pid}/wchan", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        text = os.read(fd, 128).decode("ascii", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)
    return "" if text == "0" else text  # "0": running, or hidden from us


def _read_ports(pids: set[int], deadline: float, mono: Callable[[], float], notes: list[str]) -> list[Listener]:
    if not pids:
        return []
    found: set[Listener] = set()
    try:
        conns = [(c.pid, c) for c in psutil.net_connections(kind="inet") if c.pid in pids]
    except (psutil.AccessDenied, PermissionError):
        # macOS lets only root list every socket; a process's own are ours to read.
        conns = []
        for pid in sorted(pids):
            if mono() > deadline:
                notes.append("not every process's ports were read (the capture's time budget ran out)")
                break
            try:
                proc = psutil.Process(pid)
                reader = getattr(proc, "net_connections", None) or proc.connections
                conns.extend((pid, c) for c in reader(kind="inet"))
            except psutil.Error:
                continue
    except OSError as exc:
        notes.append(f"ports not read: {exc}")
        return []
    for pid, conn in conns:
        if not conn.laddr:
            continue
        tcp = conn.type == socket.SOCK_STREAM
        if tcp and conn.status != psutil.CONN_LISTEN:
            continue
        if not tcp and conn.raddr:
            continue  # a connected UDP socket serves nobody
        six = conn.family == socket.AF_INET6
        found.add(Listener(pid, ("tcp" if tcp else "udp") + ("6" if six else ""), conn.laddr.ip, conn.laddr.port))
    ports = sorted(found, key=lambda p: (p.port, p.proto, p.pid))
    if len(ports) > MAX_PORTS:
        notes.append(f"{len(ports) - MAX_PORTS} more listening ports were not recorded")
    return ports[:MAX_PORTS]


# --- git ---------------------------------------------------------------------------------

class _Lines:
    """Keeps the first `most` lines of a stream and counts the rest, in bounded memory."""

    def __init__(self, most: int):
        self.most = most
        self.lines: list[str] = []
        self.more = 0
        self._part = b""

    def __call__(self, chunk: bytes) -> None:
        if len(self.lines) >= self.most:
            self.more += chunk.count(b"\n")
            return
        data = self._part + chunk
        *whole, self._part = data.split(b"\n")
        for raw in whole:
            if len(self.lines) < self.most:
                self.lines.append(_cut(sanitize(os.fsdecode(raw), TEXT_WIDTH * 2), TEXT_WIDTH))
            else:
                self.more += 1
        self._part = self._part[:TEXT_WIDTH * 4]  # one absurd line never grows without bound

    def finish(self) -> None:
        if self._part:
            self(b"\n")


def _git_status(project: Path, timeout: float, notes: list[str]) -> tuple[list[str], str]:
    """`git status --porcelain=v1 -b`, run so that nothing the repository configures runs
    (no filters, hooks or fsmonitor) and it takes no lock the agent's git could trip on."""
    end = time.monotonic() + timeout
    try:
        config = measuring_config(project, timeout)
        out = _Lines(MAX_GIT_LINES)
        done = run_git(project, ["status", "--porcelain=v1", "-b", "--ignore-submodules=dirty"],
                       timeout=max(0.1, end - time.monotonic()), config=config, sink=out,
                       env={"GIT_OPTIONAL_LOCKS": "0"})
    except (GitFailed, OSError) as exc:
        return [], _cut(str(exc), TEXT_WIDTH)
    out.finish()
    if done.returncode != 0:
        return out.lines, _cut(f"git status exited {done.returncode}: {done.stderr}", TEXT_WIDTH)
    if out.more:
        notes.append(f"{out.more} more git status lines were not recorded (at most {MAX_GIT_LINES})")
    return out.lines, ""


# --- small helpers -------------------------------------------------------------------------

def _stamp(epoch: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _plain(value: Any, depth: int = 0) -> Any:
    """A JSON-safe, bounded copy of what the caller gave (a record, a dict of anything)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _cut(value, TEXT_WIDTH)
    if depth >= 3:
        return _cut(repr(value), TEXT_WIDTH)
    if isinstance(value, dict):
        return {_cut(str(k), 80): _plain(v, depth + 1) for k, v in list(value.items())[:MAX_KEYS]}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in list(value)[:MAX_KEYS]]
    return _cut(str(value), TEXT_WIDTH)
