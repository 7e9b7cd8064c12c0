"""The account store from inside the agent's box, in a real loop: an agent that plants a usage
limit in the machine-wide account store cannot write it there (the box binds it read-only).

What the store decides is judged by replay (tests/loop/test_account_limits.py: a limit one loop
meets holds the others of the account; a planted one is set aside without a box); the real
Claude Code runs the night of two loops on one account in tests/e2e/test_shared_limits.py.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import new_repo
from helpers.loop import LOOP, loop_env

from genesis.agents import adapter_named


def planting_agent(tmp_path: Path, store: Path, entry: dict) -> Path:
    """An agent that writes a usage limit into the account store, then reports what it got."""
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"version": 2, "limits": [entry]}))
    return script(tmp_path / "planter.sh", f"""#!/bin/sh
mkdir -p '{store}' 2>/dev/null
if cp '{planted}' '{store}/limits.json'; then echo PLANT-DONE; else echo PLANT-REFUSED; fi
""")


@pytest.mark.fault(95)
def test_an_agent_in_the_box_cannot_plant_a_limit_in_the_account_store(tmp_path, hermetic):
    a = new_repo(tmp_path / "a")
    store = hermetic / ".local" / "state" / "genesis" / "accounts"
    account = adapter_named("claude").account({"HOME": str(hermetic)})
    now = int(time.time())
    entry = {"cli": "claude", "home": account.home, "key": account.key, "resets_at": now + 3600,
             "kind": "five_hour", "message": "You've hit your 5-hour limit", "guessed": False, "seen_at": now,
             "project": str(a.resolve()), "run_id": "night-1"}
    agent = planting_agent(tmp_path, store, entry)
    planter = subprocess.run(["bash", str(LOOP), "--project", str(a), "--max-iterations", "1"],
                             env=loop_env(GENESIS_AGENT_CMD=str(agent), GENESIS_PHASES="Builder",
                                          GENESIS_SANDBOX="auto"),
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert planter.returncode == 0, planter.stderr
    logs = "".join(p.read_text(errors="replace") for p in a.rglob("*Builder*.log"))  # the agent's own log
    assert "PLANT-REFUSED" in logs and "PLANT-DONE" not in logs
    assert not (store / "limits.json").exists()
