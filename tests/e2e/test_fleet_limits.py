"""Fleets with the real `claude` against the stub API. A limit: of two children, one meets a
5-hour usage limit; the account's limit holds every child (each meets it at most once, mid-turn),
no phase starts while it is known, and both resume after the reset, one by one; every task comes
home. A refused tool permission stops the fleet's launches, with the fix.

A policy refusal (exit 37) sending its task to its next strategy is judged by replay
(tests/fleet/test_ladder.py), the real CLI's refusal read end to end in one loop
(tests/e2e/test_claude_silences.py).

Time is read only as the order of recorded timestamps against the stub's window.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from e2e.harness import LOOP, NIGHT_KNOBS, night_env, plan_night
from helpers.git import git, new_repo

from genesis import exitcodes
from genesis.fleet.ledger import FleetLedger
from genesis.store.layout import state_dir_of

pytestmark = pytest.mark.claude

TASKS = ["Add a /health endpoint", "Log each request", "Add a README section"]


def whose(request: dict, worktrees: list[str]) -> str:
    """The child whose request it is: its worktree is its working directory, in the prompt."""
    text = json.dumps(request["body"])
    found = [w for w in worktrees if w in text]
    assert len(found) == 1, found
    return found[0]


def test_a_limit_one_child_meets_holds_the_whole_fleet_until_the_reset(claude, fast_stub, tmp_path):
    project = new_repo(tmp_path / "project")
    tasks = TASKS[:2]  # two children: one meets the limit, the other is held by it
    plan_night(project, tasks)
    window = fast_stub.limit_after(3, 8)  # the 3rd request from now: both children are mid-phase
    env = night_env(fast_stub, subscriber=True, GENESIS_FLEET_STAGGER_SECONDS="0.5", GENESIS_FLEET_CHECK_SECONDS="0.5",
                    GENESIS_FLEET_MEMORY_FLOOR_MB="0")
    fleet = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--parallel", "2", "--set",
                              "GENESIS_MAX_ITERATIONS=4"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out = fleet.communicate(timeout=400)[0]
    except subprocess.TimeoutExpired:  # never leave a fleet behind
        os.killpg(fleet.pid, signal.SIGTERM)
        out = fleet.communicate(timeout=150)[0]
        pytest.fail(f"the fleet did not end: {out[-4000:]}")
    assert fleet.returncode == exitcodes.OK, out[-4000:]
    with FleetLedger.open(state_dir_of(project) / "fleet" / "ledger.sqlite3", readonly=True) as led:
        assert {r.text: r.state for r in led.tasks() if r.text in tasks} == {t: "merged" for t in tasks}
        every = led.events("launch")  # the tasks' children, then the Planner's once they are done
    launches = [e for e in every if not e.task_id.startswith("planner-")]
    assert len(launches) == 2  # a limit spends no restart: no child was launched twice
    assert all(f"- [x] {t}" in git(project, "show", "HEAD:TASKS.md") for t in tasks)
    margin = float(NIGHT_KNOBS["GENESIS_LIMIT_MARGIN_SECONDS"])
    children = [e.detail["worktree"] for e in every]
    asked = [(r, whose(r, children)) for r in fast_stub.messages()]
    refused = [(r, child) for r, child in asked if r["status"] == 429]
    # Requests that met the limit: each child's at most once (it was mid-turn when the limit began).
    assert refused and len({child for _r, child in refused}) == len(refused) <= 2, refused
    assert window.resets_at is not None
    first = min(r["at"] for r, _child in refused)
    # Nothing asked the API while the limit was known but what met it: no phase started meanwhile.
    assert not [r for r, _child in asked if first <= r["at"] < window.resets_at + margin and r["status"] != 429]
    # Every child worked after the reset plus the margin, and they resumed one by one.
    after = {child: min(r["at"] for r, c in asked if c == child and r["at"] >= window.resets_at + margin)
             for _r, child in refused}
    assert len(set(after.values())) == len(after)


def test_a_refused_tool_permission_stops_the_fleet_launching_with_the_fix_no_breaker_no_cascade(claude, fast_stub,
                                                                                                 tmp_path):
    """GENESIS_AGENT_CMD="claude -p": every child's first call that needs approval is refused (see
    test_night.py's test of one loop). The first child that ends says exit 22 with the fix; the
    fleet launches nothing more (every child would meet it) and ends with 22: no child runs into
    its breaker, no cascade, no probe."""
    project = new_repo(tmp_path / "project")
    plan_night(project, TASKS)
    env = night_env(fast_stub, GENESIS_AGENT_CMD="claude -p", GENESIS_FLEET_STAGGER_SECONDS="0.5",
                    GENESIS_FLEET_CHECK_SECONDS="0.5", GENESIS_FLEET_MEMORY_FLOOR_MB="0")
    fleet = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--parallel", "2"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                             start_new_session=True)
    try:
        out = fleet.communicate(timeout=300)[0]
    except subprocess.TimeoutExpired:  # never leave a fleet behind
        os.killpg(fleet.pid, signal.SIGTERM)
        out = fleet.communicate(timeout=150)[0]
        pytest.fail(f"the fleet did not end: {out[-4000:]}")
    assert fleet.returncode == exitcodes.AGENT_FATAL, out[-4000:]
    fix = "Add --dangerously-skip-permissions to GENESIS_AGENT_CMD"
    assert "the fleet launches nothing more: a child ended with exit 22 (Builder: Claude Code refused a " in out
    assert fix in out and "breaker OPEN" not in out and "cascade" not in out, out[-4000:]
    with FleetLedger.open(state_dir_of(project) / "fleet" / "ledger.sqlite3", readonly=True) as led:
        ends = led.events("child_end")
        launches = led.events("launch")
        assert {e.detail["exit_code"] for e in ends} == {exitcodes.AGENT_FATAL}
        assert all(fix in e.detail["reason"] for e in ends) and {e.detail["outcome"] for e in ends} == {"config"}
        assert len(launches) == len(ends) <= 2 and not led.events("restart") and not led.events("failed_permanently")
