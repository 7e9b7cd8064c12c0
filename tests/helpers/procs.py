"""Real processes and ports: is it alive, is anyone listening, a port nobody uses."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from typing import Iterator

import psutil

__all__ = ["alive", "free_port", "listening", "carries", "loop_leftovers", "LISTEN"]

# A listener as `python -c LISTEN PORT`: listens on 127.0.0.1:PORT, then sleeps.
LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
          "time.sleep(600)\n")


def alive(pid: int) -> bool:
    """Running (a zombie has ended: only its exit status is left)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def carries(pid: int, markers: dict[str, str]) -> bool:
    """Whether the process's environment holds every KEY=VALUE of `markers`."""
    try:
        env = psutil.Process(pid).environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return all(env.get(k) == v for k, v in markers.items())


def loop_leftovers(project, run_id: str) -> list[str]:
    """Processes of a loop still running: its script and steps (they name the project) and
    anything carrying the run's marker (the agent's tree)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
            if str(project) in line or proc.environ().get("GENESIS_RUN_ID") == run_id:
                found.append(f"pid {proc.pid}: {line}")
        except psutil.Error:
            continue
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


# A loop stand-in: it takes the project's lock for its run, says so, then sleeps.
LOCK_HOLDER = ("import sys, time\n"
               "from pathlib import Path\n"
               "from genesis.store.looplock import hold\n"
               "hold(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])\n"
               "print('locked', flush=True)\n"
               "time.sleep(120)\n")


@contextlib.contextmanager
def lock_held(layout, run_id: str) -> Iterator[subprocess.Popen]:
    """A loop stand-in holding the project's lock for run_id while the block runs (then killed)."""
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(layout.loop_lock), str(layout.loop_record),
                               run_id], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
