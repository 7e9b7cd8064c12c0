"""A fleet's child whose agent died asks its monitor before it starts one again (loop/agentgo.py):
it goes on the monitor's go, waits while the restart budget holds it or the monitor has not
read the death yet, and asks nobody where nobody answers (not a fleet's child, a Temporal
worker's heartbeat, a monitor that looks down, a death left unanswered past the stale window).
The monitor's side, with real ledgers: tests/fleet/test_monitor.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from genesis import exitcodes
from genesis.loop import agentgo

RUN = "20260101T000000Z-78"
TASK_ID = "add-a-greeting-0a1b2c"


@pytest.fixture
def fleet(project: Path) -> Path:
    folder = project / ".git" / "genesis" / "fleet"
    folder.mkdir(parents=True)
    return folder


def beat(folder: Path, at: float, **answers) -> None:
    data = {"pid": 4242, "run_id": "r", "started": at - 100, "at": at}
    if answers:
        data["agent_restarts"] = answers.get("answers", {})
    (folder / "monitor.json").write_text(json.dumps(data))


def env_of(folder: Path) -> dict[str, str]:
    return {"GENESIS_FLEET_DIR": str(folder), "GENESIS_TASK_ID": TASK_ID}


def died(step, returncode: int = 137, killed: int = 0) -> float:
    """The agent's death as its loop records it: when (the ledger's time)."""
    step.event("phase_end", iteration=1, phase="Builder", returncode=returncode, killed=killed)
    return step.events(kinds=("phase_end",))[-1]["epoch"]


def asked(step, folder: Path, now: float) -> tuple[int | None, dict | None]:
    code = agentgo.wait_for_go(step, "Builder", 2, env_of(folder), now)
    wait = json.loads(step.layout.wait_file.read_text()) if code == exitcodes.WAIT else None
    return code, wait


def test_the_go_starts_the_agent_a_hold_waits_until_its_time_an_unread_death_asks_again_soon(step, fleet):
    when = died(step)
    now = when + 2
    beat(fleet, now, answers={})
    code, wait = asked(step, fleet, now)
    assert code == exitcodes.WAIT and (wait["kind"], wait["until"], wait["phase"], wait["iteration"]) == \
        ("budget", now + agentgo.ASK_EVERY, "Builder", 2)
    assert "asked whether it may start again" in wait["reason"]
    beat(fleet, now, answers={TASK_ID: {"died": when - 50}})     # an earlier death's go: not this one's
    assert asked(step, fleet, now)[0] == exitcodes.WAIT
    beat(fleet, now, answers={TASK_ID: {"died": when, "held": now + 40}})
    code, wait = asked(step, fleet, now)
    assert code == exitcodes.WAIT and wait["until"] == now + 40 and "restart budget holds" in wait["reason"]
    beat(fleet, now + 41, answers={TASK_ID: {"died": when, "held": now + 40}})   # its time passed, not yet told
    assert asked(step, fleet, now + 41)[1]["until"] == now + 41 + agentgo.ASK_EVERY
    beat(fleet, now + 42, answers={TASK_ID: {"died": when}})
    assert asked(step, fleet, now + 42) == (None, None)


def test_nobody_is_asked_where_nobody_answers(step, fleet, said):
    step = replace(step, cfg=replace(step.cfg, monitor_stale=60.0))
    when = died(step)
    now = when + 2
    assert agentgo.wait_for_go(step, "Builder", 2, {}, now) is None                       # not a fleet's child
    beat(fleet, now)                                                                       # Temporal's worker
    assert asked(step, fleet, now) == (None, None)
    beat(fleet, now - 61, answers={})                                                      # the monitor looks down
    assert asked(step, fleet, now) == (None, None)
    beat(fleet, when + 59, answers={})                                 # it beats, but never read the death
    assert asked(step, fleet, when + 59)[0] == exitcodes.WAIT
    assert asked(step, fleet, when + 61) == (None, None)
    assert any("did not answer within GENESIS_FLEET_MONITOR_STALE_SECONDS=60" in m for _k, m in said)


@pytest.mark.parametrize("returncode, killed", [(0, 0), (1, 0), (-9, 2)])
def test_an_agent_that_ended_or_that_genesis_killed_asks_nothing(step, fleet, returncode, killed):
    now = died(step, returncode, killed) + 2
    beat(fleet, now, answers={})
    assert asked(step, fleet, now) == (None, None)
