"""The cascade gate of a Temporal fleet, as its memo keeps it, in the home's fleet ledger: the
status shows the pause and the probe as it shows the local monitor's."""

from __future__ import annotations

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from genesis.fleet.ledger import FleetLedger  # noqa: E402
from genesis.fleet.status import _holds  # noqa: E402
from genesis.temporal.mirror import Mirror  # noqa: E402

PAUSE = [100.0, "cascade_pause", "2 of 3 children failed within 300s", None]
PROBE = [160.0, "cascade_probe", "one task probes whether the cause is gone", "t-1"]


def test_the_gates_moves_are_recorded_once_and_the_status_reads_the_pause(tmp_path):
    mirror = Mirror(tmp_path / "ledger.sqlite3", "fleet-1")
    for _ in range(2):   # synced twice: written once
        mirror.sync({"tasks": {}, "cascade": {"state": "paused", "moves": [PAUSE]}}, {}, {})
    with FleetLedger.open(tmp_path / "ledger.sqlite3", readonly=True) as led:
        events = [e for e in led.events() if e.kind.startswith("cascade_")]
    assert [(e.kind, e.at) for e in events] == [("cascade_pause", 100.0)]
    _, hold = _holds(events, 120.0)
    assert hold is not None and hold.state == "paused" and "2 of 3" in hold.reason
    mirror.sync({"tasks": {}, "cascade": {"state": "probing", "moves": [PAUSE, PROBE, ["bad"]]}}, {}, {})
    with FleetLedger.open(tmp_path / "ledger.sqlite3", readonly=True) as led:
        events = [e for e in led.events() if e.kind.startswith("cascade_")]
    assert [(e.kind, e.task_id) for e in events] == [("cascade_pause", None), ("cascade_probe", "t-1")]
    assert _holds(events, 170.0)[1].state == "probing"
