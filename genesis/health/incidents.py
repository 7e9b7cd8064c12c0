"""Forensics for every abnormal end: what the agent's tree was doing when it was killed.

The watcher captures an incident just before it kills a stuck, wedged or over-time agent,
so the user can see in the morning why it was judged so and tune the thresholds: the
process tree (state, CPU, memory, wchan, command lines), the ports it listened on, the
tool in flight, the last tool calls, the heartbeat, the transcript's tail and `git status`.
Each incident is a JSON file and a readable text in `<git dir>/genesis/incidents/`.

Capture runs while the agent is still alive and the next phase waits, so every part of it
is bounded: the tree's reading by a time budget, every list by a cap, git by a timeout.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import re
import socket
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil

from genesis.procs.proctree import ProcId
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.progress import measuring_config
from genesis.store.atomicio import CorruptFile, read_bytes, read_json, write_json, write_text
from genesis.store.layout import UnsafeDir, private_dir
from genesis.watch.agentlog import sanitize

__all__ = ["Incident", "Proc", "Listener", "UnknownIncident", "capture", "write", "render", "list_incidents",
           "read_incident", "MAX_INCIDENTS"]

MAX_PROCS = 200
MAX_PORTS = 200
MAX_TOOL_CALLS = 20
MAX_TRANSCRIPT = 40
MAX_GIT_LINES = 200
MAX_INCIDENTS = 200        # kept in the folder; the oldest go first
PROC_BUDGET = 1.0          # seconds for reading the tree and its ports
GIT_BUDGET = 3.0           # seconds for git (its config lookup and status together)
CMD_WIDTH = 200
TEXT_WIDTH = 500           # a transcript, git status or given string longer than this is cut
MAX_KEYS = 40              # keys kept of a given dict (heartbeat, tool call)
MAX_FILE = 1 << 20         # an incident file larger than this is not read

STATUS = {psutil.STATUS_RUNNING: "R", psutil.STATUS_SLEEPING: "S", psutil.STATUS_DISK_SLEEP: "D",
          psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t",
          psutil.STATUS_DEAD: "X", psutil.STATUS_IDLE: "I"}
ID_RE = re.compile(r"^\d{8}T\d{6}Z-[A-Za-z0-9_-]{1,40}-i\d{1,9}(?:-\d{1,4})?$")


class UnknownIncident(LookupError):
    """No incident has this id (or it is not an id at all)."""


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
    kind: str                            # stale, wedged, overtime
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
            budget: float = PROC_BUDGET, git_timeout: float = GIT_BUDGET) -> Incident:
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
                    git_status=tuple(status), git_error=git_error, notes=tuple(notes))


# --- the process tree ------------------------------------------------------------------

def _read_tree(root: ProcId | None, extra: Iterable[ProcId], deadline: float, mono: Callable[[], float],
               notes: list[str]) -> list[Proc]:
    found: list[tuple[psutil.Process, str]] = []
    seen: set[int] = set()
    top = root.process() if root is not None else None
    if top is not None:
        found.append((top, "root"))
        seen.add(top.pid)
        try:
            for kid in top.children(recursive=True):
                if kid.pid not in seen:
                    seen.add(kid.pid)
                    found.append((kid, "tree"))
        except psutil.Error:
            pass  # gone meanwhile: what was found is still worth reading
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


# --- writing and reading -------------------------------------------------------------------

def write(incident: Incident, directory: Path, keep: int = MAX_INCIDENTS) -> Path:
    """Record the incident as `<id>.json` and `<id>.txt` in directory (private, 0700; a
    symlink or someone else's folder there is refused with UnsafeDir); return the JSON's
    path. The id is claimed with O_EXCL, so two incidents in one second never collide.
    Only the newest `keep` incidents are kept."""
    directory = private_dir(Path(directory))
    ident = _claim(directory, incident.base_id)
    write_text(directory / f"{ident}.txt", render(incident, ident), mode=0o600)
    target = directory / f"{ident}.json"
    write_json(target, {"id": ident, **incident.to_json()})
    _prune(directory, max(1, keep))
    return target


def _claim(directory: Path, base: str) -> str:
    for n in range(1, 10000):
        ident = base if n == 1 else f"{base}-{n}"
        if os.path.lexists(directory / f"{ident}.json"):
            continue
        try:
            fd = os.open(directory / f"{ident}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        os.close(fd)
        return ident
    raise FileExistsError(errno.EEXIST, f"no free incident id for {base} in {directory}")


def _stems(directory: Path) -> list[str]:
    stems = set()
    for name in os.listdir(directory):
        stem, dot, suffix = name.rpartition(".")
        if dot and suffix in ("json", "txt") and ID_RE.match(stem):
            stems.add(stem)
    # The id starts with its UTC time, so names sort oldest first; -2 after its base.
    return sorted(stems, key=_order)


def _order(ident: str) -> tuple[str, int]:
    base, _, n = ident.rpartition("-")
    return (base, int(n)) if n.isdigit() else (ident, 1)


def _prune(directory: Path, keep: int) -> None:
    stems = _stems(directory)
    for stem in stems[:max(0, len(stems) - keep)]:
        for suffix in (".json", ".txt"):
            try:
                os.unlink(directory / f"{stem}{suffix}")
            except FileNotFoundError:
                pass


def _checked(directory: Path) -> bool:
    """Whether the folder exists; UnsafeDir when something else than a plain folder is there."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeDir(f"{directory} is not a plain directory (a symlink?); remove it")
    return True


def list_incidents(directory: Path) -> list[dict]:
    """One summary per incident (id, at, phase, iteration, kind, reason), the newest last."""
    directory = Path(directory)
    if not _checked(directory):
        return []
    rows = []
    for stem in _stems(directory):
        try:
            data = read_json(directory / f"{stem}.json", MAX_FILE)
        except (CorruptFile, OSError) as exc:
            data = {"reason": f"(unreadable: {exc})"}
        if data is None:
            continue  # being written, or its JSON was lost: the text may still be shown
        if not isinstance(data, dict):
            data = {"reason": "(unreadable: not a JSON object)"}
        at = data.get("at")
        rows.append({"id": stem, "at": at if isinstance(at, (int, float)) and math.isfinite(at) else None,
                     "phase": str(data.get("phase", "?")), "iteration": data.get("iteration"),
                     "kind": str(data.get("kind", "?")), "reason": _one(data.get("reason", ""), 300)})
    rows.sort(key=lambda r: (r["at"] if r["at"] is not None else -math.inf, _order(r["id"])))
    return rows


def read_incident(directory: Path, ident: str) -> str:
    """The readable text of one incident; UnknownIncident for an unknown or malformed id."""
    if not ID_RE.match(ident or ""):
        raise UnknownIncident(f"{ident!r} is not an incident id (see `genesis incidents`)")
    directory = Path(directory)
    if not _checked(directory):
        raise UnknownIncident(f"no incident {ident}: none has been recorded")
    try:
        data = read_bytes(directory / f"{ident}.txt", MAX_FILE)
    except FileNotFoundError:
        raise UnknownIncident(f"no incident {ident} (see `genesis incidents`)") from None
    return data.decode("utf-8", "replace")


# --- the readable text -----------------------------------------------------------------------

def render(incident: Incident, ident: str) -> str:
    inc = incident
    out = [f"Genesis incident {ident}",
           f"{inc.phase}, iteration {inc.iteration}, run {inc.run_id}, at {_iso(inc.at)}",
           f"ended: {inc.kind}: {_one(inc.reason, 1000)}",
           f"tool in flight: {_tool_in_flight(inc.tool_in_flight, inc.at)}",
           f"project: {_one(inc.project, 300)}"]
    for note in inc.notes:
        out.append(f"note: {_one(note, 300)}")

    out += ["", f"== processes ({len(inc.processes)}) =="]
    if inc.processes:
        out.append(f"{'PID':>7} {'PPID':>7} S {'CPU s':>8} {'RSS MiB':>8}  {'WCHAN':<22} COMMAND")
        for proc, depth in _tree_order(inc.processes):
            mark = " (found by marker)" if proc.origin == "extra" else ""
            out.append(f"{proc.pid:>7} {proc.ppid:>7} {proc.status:<1} {proc.cpu:>8.2f} {proc.rss / 2**20:>8.1f}  "
                       f"{_one(proc.wchan, 22) or '-':<22} {'  ' * depth}{_one(proc.command, CMD_WIDTH)}{mark}")
    else:
        out.append("(none alive)")

    out += ["", "== listening ports =="]
    out += [f"{p.proto} {p.address}:{p.port}  pid {p.pid}" for p in inc.ports] or ["(none)"]

    out += ["", f"== last tool calls ({len(inc.tool_calls)}, newest last) =="]
    out += [_tool_call(c) for c in inc.tool_calls] or ["(none recorded)"]

    out += ["", "== heartbeat =="]
    if isinstance(inc.heartbeat, dict) and inc.heartbeat:
        epoch = inc.heartbeat.get("epoch")
        age = f" (written {inc.at - epoch:.0f}s before the capture)" if _num(epoch) else ""
        out.append(_one(json.dumps(inc.heartbeat, sort_keys=True), 1000) + age)
    else:
        out.append(_one(str(inc.heartbeat), 1000) if inc.heartbeat else "(none)")

    out += ["", f"== transcript tail ({len(inc.transcript)} lines) =="]
    out += [_one(line, TEXT_WIDTH) for line in inc.transcript] or ["(empty)"]

    out += ["", "== git status =="]
    if inc.git_error:
        out.append(f"(git status failed: {_one(inc.git_error, TEXT_WIDTH)})")
    out += list(inc.git_status) or ([] if inc.git_error else ["(nothing)"])
    return "\n".join(out) + "\n"


def _tree_order(procs: Iterable[Proc]) -> list[tuple[Proc, int]]:
    """Parents before their children, each indented by its depth in the tree."""
    procs = list(procs)
    by_pid = {p.pid: p for p in procs}
    kids: dict[int, list[Proc]] = {}
    for p in procs:
        kids.setdefault(p.ppid, []).append(p)
    ordered: list[tuple[Proc, int]] = []
    done: set[int] = set()
    for top in procs:
        if top.pid in done or (top.ppid in by_pid and top.ppid != top.pid):
            continue
        stack = [(top, 0)]
        while stack:
            proc, depth = stack.pop()
            if proc.pid in done:
                continue
            done.add(proc.pid)
            ordered.append((proc, depth))
            stack.extend((k, depth + 1) for k in reversed(kids.get(proc.pid, [])))
    ordered += [(p, 0) for p in procs if p.pid not in done]  # a parent cycle (pid reuse): still shown
    return ordered


def _tool_in_flight(call: dict | None, at: float) -> str:
    if not call:
        return "none"
    if not isinstance(call, dict):
        return _one(str(call), 600)
    tool = call.get("tool") or "?"
    since = call.get("t")
    when = f" since {_iso(since)} ({at - since:.0f}s)" if _num(since) else ""
    what = call.get("cmd") or call.get("command")
    return _one(f"{tool}{when}: {what}" if what else f"{tool}{when} {json.dumps(call, sort_keys=True)}", 600)


def _tool_call(call: dict) -> str:
    if not isinstance(call, dict):
        return _one(str(call), TEXT_WIDTH)
    t = call.get("t")
    ok = call.get("ok")
    parts = [_iso(t)[11:] if _num(t) else "-", str(call.get("event") or call.get("e") or "-"),
             str(call.get("tool") or "?"), "ok" if ok is True else "FAILED" if ok is False else "-"]
    if _num(call.get("ms")):
        parts.append(f"{call['ms']:.0f}ms")
    if call.get("cmd"):
        parts.append(str(call["cmd"]))
    return _one("  ".join(parts), TEXT_WIDTH)


# --- small helpers -------------------------------------------------------------------------

def _stamp(epoch: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _one(text: str, width: int) -> str:
    """One line, safe for a terminal: what the agent wrote may hold escapes and newlines."""
    return sanitize(re.sub(r"\s*[\r\n]+\s*", " ", str(text)).strip(), width)


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
