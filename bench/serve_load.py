"""The dashboard under load: `genesis serve` streaming a 50-child fleet to one browser's event stream.

Usage: .venv/bin/python bench/serve_load.py [--children 50] [--seconds 60] [--every 2]

The fleet is bench/fleet_load.py's: each child a real Genesis loop (bash loop, companion,
watcher, the default box) in its own worktree, the monitor with the shipped defaults but for a
0.2 s launch stagger. Once every agent runs, each fires the real heartbeat hook every
`--every` seconds for `--seconds`, while `genesis serve --port 0 --project P` (started as a
user starts it) streams `/api/events` to one client, this script. Printed, over that window:
the server's CPU (its own process and any it started, as a share of one core), its resident
memory (the peak of samples every 0.5 s), the events received, how many of the children the
latest event showed, and the time from a heartbeat's write (its epoch, as the hook wrote it)
to the first event that carried it (median and the worst).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_load import start_fleet, started_agents  # noqa: E402

GENESIS = Path(sys.executable).parent / "genesis"
FIRST_LINE = "genesis serve: "
SAMPLE = 0.5     # seconds between two samples of the server's memory


@dataclass(frozen=True)
class ServeLoad:
    children: int
    window: float              # s the measurement lasted
    cpu_seconds: float         # the server's CPU in the window
    cpu_share: float           # of one core
    rss_peak_mb: float         # the server's resident memory, the highest sample
    rss_start_mb: float        # at the window's start
    events: int                # `state` events received in the window
    events_last_quarter: int   # of which in its last quarter: the stream kept coming
    tasks_shown: int           # the children the window's last event showed
    beats_carried: int         # heartbeats (written in the window) an event carried
    latency_median: float      # s, a heartbeat's write to the first event carrying it
    latency_max: float
    serve_exit: int            # `genesis serve`'s exit code after SIGTERM


def start_serve(project: Path, log: Path, timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """`genesis serve --port 0 --project P` and the URL its first line gives."""
    out = open(log, "ab")
    proc = subprocess.Popen([str(GENESIS), "serve", "--port", "0", "--project", str(project)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=out, start_new_session=True)
    out.close()
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=timeout).decode(errors="replace").strip()
    except queue.Empty:
        first = ""
    if not first.startswith(FIRST_LINE):
        stop_serve(proc)
        raise RuntimeError(f"genesis serve said {first!r}, not its URL: see {log}")
    return proc, first[len(FIRST_LINE):].strip()


def stop_serve(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event name, data) of each event of a server-sent event stream; comments skipped."""
    name, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


class Listener:
    """One client of /api/events in a thread: every `state` event with the time it came."""

    def __init__(self, url: str):
        self.url = url.rstrip("/") + "/api/events"
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(30.0, read=30.0)) as client:
                with client.stream("GET", self.url, headers={"Accept": "text/event-stream"}) as answer:
                    answer.raise_for_status()
                    for name, data in sse_events(answer.iter_lines()):
                        if name == "state":
                            self.received.append((time.time(), json.loads(data)))
                        if self._stop.is_set():
                            return
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            if not self._stop.is_set():
                self.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(35)


def shown(doc: dict[str, Any], project: Path) -> dict[str, Any]:
    """The project's part of an /api/state document (the page shows this machine's other loops too)."""
    want = str(project.resolve())
    return next((p for p in doc.get("projects") or [] if p.get("path") == want), {})


def fleet_tasks(doc: dict[str, Any], project: Path) -> list[dict[str, Any]]:
    return (shown(doc, project).get("fleet") or {}).get("tasks") or []


def task_tiles(doc: dict[str, Any], project: Path) -> int:
    return sum(1 for t in shown(doc, project).get("tiles") or [] if t.get("kind") == "task")


def beat_latencies(received: list[tuple[float, dict[str, Any]]], project: Path, since: float) -> list[float]:
    """For each heartbeat written after `since`: from its epoch to the first event carrying it."""
    seen: set[tuple[str, float]] = set()
    lags = []
    for at, doc in received:
        for task in fleet_tasks(doc, project):
            epoch = (task.get("child") or {}).get("heartbeat_at_epoch")
            if epoch is None or epoch < since or (task["id"], epoch) in seen:
                continue
            seen.add((task["id"], epoch))
            lags.append(max(0.0, at - epoch))
    return lags


def _tree_cpu(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def run_serve_load(workdir: Path, children: int = 50, seconds: float = 60.0, every: float = 2.0,
                   timeout: float = 600.0) -> ServeLoad:
    """A fleet of `children` beating every `every` s for `seconds`, streamed by `genesis serve`."""
    started = time.monotonic()
    beats = math.ceil(seconds / every) + 1
    project, gates, fleet = start_fleet(workdir, children, {"BEATS": str(beats), "EVERY": str(every)})
    serve = listener = None
    try:
        serve, url = start_serve(project, workdir / "serve.log")
        server = psutil.Process(serve.pid)
        listener = Listener(url).start()
        while started_agents(gates / "started") < children:
            if fleet.poll() is not None or time.monotonic() - started > timeout:
                raise RuntimeError(f"the fleet did not start {children} agents: see {workdir / 'fleet.log'}")
            time.sleep(0.5)
        # Every child ends after this one phase; the agents beat from now on.
        subprocess.run([str(GENESIS), "--project", str(project), "stop"], capture_output=True, timeout=60)
        (gates / "closed").unlink()
        window_start, cpu_start = time.time(), _tree_cpu(server)
        rss_start = rss_peak = server.memory_info().rss
        first_event = len(listener.received)
        while time.time() - window_start < seconds:
            time.sleep(SAMPLE)
            try:
                rss_peak = max(rss_peak, server.memory_info().rss)
            except psutil.Error:
                break
        window = time.time() - window_start
        cpu = _tree_cpu(server) - cpu_start
        listener.stop()
        received = [(at, doc) for at, doc in listener.received[first_event:] if at <= window_start + window]
        if listener.error:
            raise RuntimeError(f"the event stream broke: {listener.error}")
        lags = beat_latencies(received, project, window_start)
        last_quarter = sum(1 for at, _ in received if at >= window_start + 0.75 * window)
        tiles = task_tiles(received[-1][1], project) if received else 0
        code = stop_serve(serve)
    finally:
        if listener is not None:
            listener.stop()
        if serve is not None:
            stop_serve(serve)
        if fleet.poll() is None:
            os.killpg(fleet.pid, signal.SIGINT)
            try:
                fleet.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(fleet.pid, signal.SIGKILL)
                fleet.wait()
    return ServeLoad(children, window, cpu, cpu / window if window else 0.0, rss_peak / (1 << 20),
                     rss_start / (1 << 20), len(received), last_quarter, tiles, len(lags),
                     statistics.median(lags) if lags else float("nan"), max(lags, default=float("nan")), code)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=2.0, help="seconds between an agent's heartbeats")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="genesis-serve-load.") as tmp:
        load = run_serve_load(Path(tmp), args.children, args.seconds, args.every)
    print(f"children                         {load.children} ({load.tasks_shown} shown by the last event)")
    print(f"window                           {load.window:.1f} s, one event-stream client")
    print(f"server CPU                       {load.cpu_seconds:.1f} s ({100 * load.cpu_share:.1f}% of one core)")
    print(f"server memory (RSS)              {load.rss_peak_mb:.0f} MB peak ({load.rss_start_mb:.0f} MB at the start)")
    print(f"events received                  {load.events} ({load.events_last_quarter} in the last quarter)")
    print(f"heartbeat write to its event     median {load.latency_median:.2f} s, worst {load.latency_max:.2f} s "
          f"({load.beats_carried} heartbeats carried)")
    print(f"genesis serve exit on SIGTERM    {load.serve_exit}")
    return 0 if load.tasks_shown == load.children and load.serve_exit == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
