"""Is the tool in flight working or waiting? Read from the OS, not from the agent.

A tool that runs a 20-minute build or test suite is silent (no tool call, so no heartbeat)
but busy: its processes use CPU, read and write, start compilers. A `pytest` hung on a
socket is silent and idle. At each check the watcher samples the agent CLI's descendants
(the tool's tree; the CLI itself is left out, its own event loop ticks even while it only
waits) and compares with the previous sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psutil

from genesis.procs.proctree import ProcId, descendant_pids

__all__ = ["Usage", "Sample", "sample", "Change", "compare", "CPU_BUSY", "IO_BUSY"]

CPU_BUSY = 0.02        # CPU seconds the tree used since the last check: above this it is working
IO_BUSY = 4096         # bytes it read or wrote (files, pipes, sockets) since the last check


@dataclass(frozen=True)
class Usage:
    cpu: float           # user + system seconds of the process
    io: int              # bytes read and written (all descriptors), where the OS tells
    command: str


@dataclass(frozen=True)
class Sample:
    procs: dict[ProcId, Usage] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    busy: bool
    cpu: float           # CPU seconds used since the previous sample, by processes seen in both
    io: int              # bytes moved since the previous sample
    new: int             # processes that appeared
    busiest: str         # the command line of the process that did most, for the console

    def describe(self) -> str:
        parts = [f"{self.cpu:.2f}s CPU" if self.cpu else "", f"{self.io} bytes of I/O" if self.io else "",
                 f"{self.new} new process(es)" if self.new else ""]
        return ", ".join(p for p in parts if p) or "idle"


def sample(root: ProcId | None) -> Sample:
    """Every descendant of root (not root itself) with its CPU time and I/O so far."""
    proc = root.process() if root is not None else None
    if proc is None:
        return Sample()
    found: dict[ProcId, Usage] = {}
    for pid in descendant_pids(proc):
        try:
            kid = psutil.Process(pid)
            with kid.oneshot():
                ident = ProcId(kid.pid, kid.create_time())
                times = kid.cpu_times()
                try:
                    counters = kid.io_counters()
                    moved = getattr(counters, "read_chars", counters.read_bytes) + \
                        getattr(counters, "write_chars", counters.write_bytes)
                except (psutil.AccessDenied, AttributeError, NotImplementedError):
                    moved = 0  # macOS has no per-process I/O counters: CPU and new processes tell
                command = " ".join(kid.cmdline())[:200] or kid.name()
            found[ident] = Usage(times.user + times.system, moved, command)
        except psutil.Error:
            continue  # gone, a zombie, or not ours to read
    return Sample(found)


def compare(before: Sample, after: Sample, cpu_busy: float = CPU_BUSY, io_busy: int = IO_BUSY) -> Change:
    """What the tree did between two samples. A process that ended took its last CPU with it;
    the ones that appeared count as activity (a build starting a compiler per file)."""
    cpu, io, best, best_score = 0.0, 0, "", 0.0
    for ident, now in after.procs.items():
        was = before.procs.get(ident)
        if was is None:
            continue
        d_cpu, d_io = max(0.0, now.cpu - was.cpu), max(0, now.io - was.io)
        cpu, io = cpu + d_cpu, io + d_io
        score = d_cpu + d_io / 1e6
        if score > best_score:
            best, best_score = now.command, score
    new = [u for ident, u in after.procs.items() if ident not in before.procs]
    if new and not best:
        best = new[0].command
    busy = cpu > cpu_busy or io > io_busy or (bool(new) and bool(before.procs))
    return Change(busy, round(cpu, 3), io, len(new), best)
