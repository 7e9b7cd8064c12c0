"""`genesis temporal dev`: the dev server for trying the engine on one machine, on loopback,
stopped with everything it started by Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from genesis.temporal.binary import free_port  # noqa: E402

from .conftest import dev_binary  # noqa: E402


def test_genesis_temporal_dev_serves_on_loopback_until_ctrl_c(project, tmp_path):
    dev_binary()
    port = free_port()
    out = tmp_path / "dev.out"
    with open(out, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "genesis", "--project", str(project), "temporal", "dev",
                                 "--port", str(port), "--db", str(tmp_path / "dev.sqlite")],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Ctrl-C stops it" not in out.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"127.0.0.1:{port}" in out.read_text(), out.read_text()
        server = [p for p in psutil.Process(proc.pid).children(recursive=True) if "start-dev" in p.cmdline()]
        assert len(server) == 1
        ports = {c.laddr.port for c in server[0].net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        assert port in ports
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0, out.read_text()
        assert "stopped" in out.read_text()
        assert not server[0].is_running() or server[0].status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
