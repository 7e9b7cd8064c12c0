"""Reaping: find what this loop's agents left behind, prove it is ours, and end it."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import psutil

from genesis.procs.markers import markers_for
from genesis.procs.proctree import KillReport, ProcId, descendants, kill_all, marked, protected_pids

__all__ = ["Leftover", "ForeignPort", "ReapPlan", "markers_for", "plan_reap", "execute", "live_tree", "port_range",
           "MAX_RANGE"]

MAX_RANGE = 1000  # ports in a fleet child's range, at most (each is looked at after every phase)


@dataclass(frozen=True)
class Leftover:
    ident: ProcId
    cmdline: str
    why: str


@dataclass(frozen=True)
class ForeignPort:
    port: int
    pid: int | None
    cmdline: str


@dataclass(frozen=True)
class ReapPlan:
    leftovers: tuple[Leftover, ...]
    foreign_ports: tuple[ForeignPort, ...]


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "?"


def _listeners(ports: tuple[int, ...], owned: set[ProcId]) -> dict[int, list[int | None]]:
    """Pids listening on the given ports (None: a listener whose owner we cannot see).

    The system-wide table needs privileges on macOS; without them, our own processes'
    sockets are read one by one, and a port that answers without a visible owner is
    reported as held by someone else.
    """
    holders: dict[int, list[int | None]] = {}
    if not ports:
        return holders
    try:
        conns = [(c, c.pid) for c in psutil.net_connections(kind="inet")]
    except psutil.AccessDenied:
        conns = []
        for ident in owned:
            proc = ident.process()
            try:
                listing = getattr(proc, "net_connections", None) or proc.connections
                conns += [(c, ident.pid) for c in listing(kind="inet")]
            except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
                continue
    for conn, pid in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port in ports:
            pids = holders.setdefault(conn.laddr.port, [])
            if pid not in pids:
                pids.append(pid)
    for port in ports:
        if port not in holders and _answers(port):
            holders[port] = [None]
    return holders


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def port_range(env: Mapping[str, str]) -> tuple[int, ...]:
    """A fleet's child's own ports, [GENESIS_PORT_BASE, +GENESIS_PORT_COUNT), from its environment
    (none when unset or not a range of real ports): watched as REAP_PORTS are."""
    base, count = env.get("GENESIS_PORT_BASE", "").strip(), env.get("GENESIS_PORT_COUNT", "").strip()
    if not (base.isdigit() and count.isdigit()):
        return ()
    first, many = int(base), min(int(count), MAX_RANGE)
    return tuple(p for p in range(first, first + many) if 1 <= p <= 65535)


def plan_reap(project: Path, run_id: str | None, scope: str, patterns: str,
              ports: tuple[int, ...]) -> ReapPlan:
    """What would be killed and why; ports held by processes that are not ours are reported.

    Only processes proven ours are ever listed: processes of this user that carry this
    project's loop markers in their environment.
    """
    protected = protected_pids()
    owned = {i for i in marked(markers_for(project, run_id)) if i.pid not in protected}
    by_pid = {i.pid: i for i in owned}
    regex = re.compile(patterns) if patterns else None
    port_of: dict[int, int] = {}
    foreign: list[ForeignPort] = []
    for port, pids in sorted(_listeners(ports, owned).items()):
        for pid in pids:
            if pid is not None and pid in by_pid:
                port_of[pid] = port
            else:
                foreign.append(ForeignPort(port, pid, _cmdline(pid) if pid else "(owner not visible)"))
    leftovers = []
    for ident in sorted(owned):
        cmd = _cmdline(ident.pid)
        if ident.pid in port_of:
            why = f"listens on port {port_of[ident.pid]}"
        elif regex is not None and regex.search(cmd):
            why = "matches REAP_PATTERNS"
        elif scope == "all":
            why = "left behind by an agent of this loop"
        else:
            continue
        leftovers.append(Leftover(ident, cmd, why))
    return ReapPlan(tuple(leftovers), tuple(foreign))


def live_tree(loop) -> set[ProcId]:
    """A running loop's own processes: its descendants (watcher, agent, adopted orphans) and
    everything carrying its run's marker. `loop` is the lock holder (pid, create_time, run_id)."""
    root = ProcId(loop.pid, loop.create_time)
    return set(descendants(root)) | set(marked({"GENESIS_RUN_ID": loop.run_id}))


def execute(plan: ReapPlan, grace: float) -> KillReport:
    """Kill the planned leftovers and anything they fork meanwhile (their descendants)."""
    targets = {lo.ident for lo in plan.leftovers}
    if not targets:
        return KillReport(0, 0, 0, ())
    return kill_all(lambda: [i for t in targets for i in descendants(t)], grace)
