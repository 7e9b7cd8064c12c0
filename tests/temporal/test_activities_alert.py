"""The home's `alert` activity: a Temporal fleet's ticket reaches the user's alert command as the
local monitor's does (the channels are the home's configuration)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.waits import wait_for  # noqa: E402

from genesis.config import resolve  # noqa: E402
from genesis.temporal.activities import HomeActivities  # noqa: E402
from genesis.temporal.records import AlertInput  # noqa: E402


def test_an_alert_of_the_fleet_reaches_the_users_alert_command(project, tmp_path):
    told = tmp_path / "told.json"
    notify = tmp_path / "notify.sh"
    notify.write_text(f"#!/bin/sh\ncat >{told}\n")
    notify.chmod(0o755)
    home = HomeActivities(project, resolve(project, flags={"GENESIS_NOTIFY_CMD": str(notify)}), "origin", "fleet-1")
    pid = home.alert(AlertInput("cascade", "critical", "cascade: many children failed at once",
                                "2 of 3 children failed\nwithin 300s; " + "x" * 400, "look at\ntheir attempts"))
    assert pid > 0
    wait_for(lambda: told.exists() and told.stat().st_size > 0, 30, "the alert command")
    ticket = json.loads(told.read_text())
    assert (ticket["severity"], ticket["cause"], ticket["kind"]) == ("critical", "cascade: many children failed at "
                                                                     "once", "fleet")
    assert ticket["run_id"] == "fleet-1" and all(len(line) <= 200 and "\n" not in line for line in ticket["lines"])
