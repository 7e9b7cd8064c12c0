"""Two real loops on two projects of one user, one account: a usage limit one of them meets
holds the other too (the machine-wide account store), and a limit an agent plants there is
never believed (without a box) or cannot be written (in the box).

The agent is the stand-in `claude` of test_night_waits.py, which replays what the real Claude
Code printed (tests/fixtures/claude/); the real CLI against the stub API runs the same night in
tests/e2e/test_shared_limits.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.fakeclaude import FIXTURES, replay
from helpers.git import new_repo
from helpers.loop import LOOP, loop_env
from helpers.state import events_of
from helpers.waits import wait_for

from genesis.agents import adapter_named
from genesis.ledger.store import LedgerError

MARGIN = 3  # seconds past the reset; each loop adds up to 20% of it at random


def start(project: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--max-iterations", "1", *args], env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def finish(loop: subprocess.Popen) -> str:
    try:
        out, _ = loop.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # never leave a loop behind
        os.killpg(loop.pid, signal.SIGKILL)
        out, _ = loop.communicate()
        pytest.fail(f"the loop did not end: {out}")
    return out


def of(project: Path, kind: str) -> list[dict]:
    return [e for e in events_of(project) if e["event"] == kind]


def waiting(project: Path) -> bool:
    try:
        return bool(of(project, "wait_start"))
    except LedgerError:  # read while the loop is still making it
        return False


@pytest.mark.fault(94)
def test_a_second_loop_on_the_account_starts_no_phase_until_the_reset_the_first_one_met(tmp_path, hermetic):
    a, b = new_repo(tmp_path / "a"), new_repo(tmp_path / "b")
    (tmp_path / "ra").mkdir()
    (tmp_path / "rb").mkdir()
    ra, rb = replay(a, tmp_path / "ra"), replay(b, tmp_path / "rb")
    stream = tmp_path / "a-stream.jsonl"  # what a's agent prints: the limit, then (after the reset) its work
    shutil.copy(FIXTURES / "limit_five_hour.jsonl", stream)
    knobs = {"GENESIS_LIMIT_MARGIN_SECONDS": str(MARGIN), "FAKE_RESET_IN": "8"}
    loop_a = start(a, {**ra.env("limit_five_hour.jsonl", **knobs), "FAKE_STREAM": str(stream)})
    loop_b = None
    try:
        wait_for(lambda: waiting(a) or loop_a.poll() is not None, timeout=60, what="a's wait for the limit")
        assert loop_a.poll() is None, loop_a.communicate()[0]
        shutil.copy(FIXTURES / "success.jsonl", stream)
        loop_b = start(b, rb.env("success.jsonl", **knobs))
        out_b = finish(loop_b)
        out_a = finish(loop_a)
    finally:
        for loop in (loop_a, loop_b):
            if loop is not None and loop.poll() is None:
                os.killpg(loop.pid, signal.SIGKILL)
    assert loop_a.returncode == 0, out_a
    assert loop_b.returncode == 0, out_b
    reset = of(a, "limit_remembered")[0]["resets_at"]
    # One call met the limit (a's); b called its agent only after the reset, and never met it.
    assert ra.called() == ["Builder", "Builder", "Planner"]
    assert rb.called() == ["Builder", "Planner"]
    assert [e["ending"] for e in of(b, "phase_end")] == ["finished", "finished"]
    # No phase of b started while the limit was known.
    assert all(e["epoch"] >= reset + MARGIN for e in of(b, "phase_start"))
    held = of(b, "wait_start")
    assert [w["kind"] for w in held] == ["limit"]
    assert "already known (met " in out_b and f"by the loop of {a.resolve()}" in out_b
    assert "so the agent is not called" in out_b
    # A limit never counts as a failed phase: b's breaker saw no failure.
    assert not of(b, "phase_retry") and "OPEN" not in out_b
    # They resume one by one: each after the reset plus the margin, a jitter apart.
    until_a, until_b = of(a, "wait_start")[0]["until"], held[0]["until"]
    for until in (until_a, until_b):
        assert reset + MARGIN <= until <= reset + MARGIN * 1.2
    assert until_a != until_b


def planting_agent(tmp_path: Path, store: Path, entry: dict) -> Path:
    """An agent that writes a usage limit into the account store, then reports what it got."""
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"version": 2, "limits": [entry]}))
    return script(tmp_path / "planter.sh", f"""#!/bin/sh
mkdir -p '{store}' 2>/dev/null
if cp '{planted}' '{store}/limits.json'; then echo PLANT-DONE; else echo PLANT-REFUSED; fi
""")


@pytest.mark.fault(95)
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_a_limit_an_agent_plants_in_the_account_store_holds_no_loop(tmp_path, hermetic, sandbox):
    a, b = new_repo(tmp_path / "a"), new_repo(tmp_path / "b")
    (tmp_path / "rb").mkdir()
    rb = replay(b, tmp_path / "rb")
    store = hermetic / ".local" / "state" / "genesis" / "accounts"
    account = adapter_named("claude").account({"HOME": str(hermetic)})
    now = int(time.time())
    entry = {"cli": "claude", "home": account.home, "key": account.key, "resets_at": now + 3600,
             "kind": "five_hour", "message": "You've hit your 5-hour limit", "guessed": False, "seen_at": now,
             "project": str(a.resolve()), "run_id": "night-1"}
    agent = planting_agent(tmp_path, store, entry)
    planter = subprocess.run(["bash", str(LOOP), "--project", str(a), "--max-iterations", "1"],
                             env=loop_env(GENESIS_AGENT_CMD=str(agent), GENESIS_PHASES="Builder",
                                          GENESIS_SANDBOX=sandbox),
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert planter.returncode == 0, planter.stderr
    logs = "".join(p.read_text(errors="replace") for p in a.rglob("*Builder*.log"))  # the agent's own log
    if sandbox == "auto":
        # In the box the store is read-only: the agent cannot write it.
        assert "PLANT-REFUSED" in logs and "PLANT-DONE" not in logs
        assert not (store / "limits.json").exists()
        return
    assert "PLANT-DONE" in logs and (store / "limits.json").exists()
    # Without a box the write lands, but no run of a met that limit: b is not held by it.
    loop_b = start(b, rb.env("success.jsonl"))
    out = finish(loop_b)
    assert loop_b.returncode == 0, out
    assert rb.called() == ["Builder", "Planner"]
    assert "no run of Genesis recorded in its project's ledger" in out and "not applied" in out
    assert not (store / "limits.json").exists()
    assert [json.loads(p.read_text())["limits"][0]["run_id"] for p in store.glob("limits.json.unvouched-*")] == [
        "night-1"]
    assert of(b, "limit_unvouched")[0]["shared"] is True
