"""The real loop meeting what ends a night early: a usage limit's wait (ended by `genesis
stop` or Ctrl-C, and remembered across a restart), an error retrying cannot fix, the
ceilings, and the breaker's opt-in cooldown.

The agent is a stand-in named `claude` that replays what the real Claude Code printed
(tests/fixtures/claude/, recorded from the real binary), with the reset time moved to
now; the real CLI against a stub API runs the same nights in tests/e2e/test_night.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers.loop import GENESIS, LOOP
from helpers.state import events_of, state_of
from helpers.fakeclaude import replay
from helpers.waits import wait_for


@pytest.fixture
def night(project: Path, tmp_path: Path):
    """A project replaying recorded runs through a stand-in `claude`: (project, env, calls file)."""
    replaying = replay(project, tmp_path)
    return project, replaying.env, replaying.calls


def events(project: Path) -> list[dict]:
    return events_of(project)


def of(project: Path, kind: str) -> list[dict]:
    return [e for e in events(project) if e["event"] == kind]


def start(project: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(LOOP), "--project", str(project), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def waiting(project: Path) -> bool:
    return (state_of(project) / "wait.json").exists() and bool(of(project, "wait_start"))


@pytest.mark.fault(38, 44)
def test_a_limit_is_waited_for_and_genesis_stop_ends_the_wait_and_the_loop(night):
    project, env, calls = night
    loop = start(project, env("limit_five_hour.jsonl", FAKE_RESET_IN="3600"))
    wait_for(lambda: waiting(project), timeout=60, what="the limit's wait")
    stop = subprocess.run(GENESIS + ["--project", str(project), "stop"], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stderr
    out, _ = loop.communicate(timeout=30)
    assert loop.returncode == 0, out
    assert calls.read_text().splitlines() == ["Builder"]  # one call met the limit; none after it
    ended = of(project, "phase_end")[0]
    assert (ended["ending"], ended["limit"]["kind"]) == ("limit", "five_hour")
    assert "usage limit (five_hour)" in out and f"--project {project.resolve()} stop` ends the wait" in out
    wait = of(project, "wait_start")[0]
    assert (wait["kind"], wait["phase"]) == ("limit", "Builder")
    assert wait["until"] == pytest.approx(ended["limit"]["resets_at"] + 60)
    assert of(project, "wait_end")[0]["how"] == "stopped"
    assert "stop flag" in of(project, "loop_end")[0]["reason"]

    # A restart before the reset waits without calling the agent again.
    loop = start(project, env("limit_five_hour.jsonl", FAKE_RESET_IN="3600"))
    wait_for(lambda: len(of(project, "wait_start")) == 2, timeout=60, what="the second run's wait")
    os.killpg(loop.pid, signal.SIGINT)  # Ctrl-C in the loop's terminal
    out, _ = loop.communicate(timeout=30)
    assert loop.returncode == 130, out
    assert calls.read_text().splitlines() == ["Builder"]
    assert "already known, so the agent is not called" in out
    assert of(project, "wait_end")[-1]["how"] == "interrupted"


@pytest.mark.fault(42)
def test_an_error_retrying_cannot_fix_stops_the_loop_at_once(night):
    project, env, calls = night
    done = subprocess.run(["bash", str(LOOP), "--project", str(project)], env=env("auth_401.jsonl"),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 22, done.stderr
    assert calls.read_text().splitlines() == ["Builder"]
    assert "Invalid API key · Fix external API key" in done.stderr
    ended = of(project, "phase_end")[0]
    assert ended["ending"] == "fatal" and ended["api_error"]["code"] == "authentication_failed"


def test_the_cost_ceiling_stops_between_phases(night):
    project, env, calls = night
    # Each phase reports $0.003 (the recorded run's cost): the third phase would pass $0.005.
    done = subprocess.run(["bash", str(LOOP), "--project", str(project)],
                          env=env("success.jsonl", GENESIS_MAX_COST_USD="0.005"),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 24, done.stderr
    assert len(calls.read_text().splitlines()) == 2
    assert [e["cost_usd"] for e in of(project, "phase_end")] == [0.003, 0.003]
    assert "GENESIS_MAX_COST_USD" in done.stderr
    assert "total: $0.0060" in done.stderr  # the summary


def test_the_runtime_ceiling_lets_a_running_phase_finish_then_stops(night):
    project, env, calls = night
    done = subprocess.run(["bash", str(LOOP), "--project", str(project)],
                          env=env("success.jsonl", GENESIS_MAX_RUNTIME_HOURS="0.0015", FAKE_SLEEP="6",
                                  HEARTBEAT_STALE="30s"),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 23, done.stderr
    assert of(project, "phase_end")[0]["ending"] == "finished"  # 6 s, past the 5.4 s ceiling (room for a slow start)
    assert of(project, "ceiling")[0]["code"] == 23


def test_an_open_breaker_cools_down_and_tries_again_with_a_growing_cooldown(night):
    project, env, calls = night
    done = subprocess.run(["bash", str(LOOP), "--project", str(project)],
                          env=env("success.jsonl", CB_COOLDOWN_MINUTES="0.05", CB_MAX_TRIALS="2",
                                  CB_WARNING_THRESHOLD="1", CB_STOP_THRESHOLD="1"),
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr
    cooldowns = [e for e in of(project, "wait_start") if e["kind"] == "cooldown"]
    assert [c["attempt"] for c in cooldowns] == [1, 2]
    assert cooldowns[1]["seconds"] > cooldowns[0]["seconds"]  # 3 s, then 6 s: a gap no slow start closes
    ends = [(e["iteration"], e["breaker"]) for e in of(project, "iteration_end")]
    assert ends == [(1, "OPEN"), (2, "OPEN"), (3, "OPEN")]
    history = json.loads((project / "orchestrator" / ".circuit_breaker.json").read_text())["history"]
    reasons = [h["reason"] for h in history]
    assert any("trial 1 of 2" in r for r in reasons) and any("trial 2 of 2" in r for r in reasons)
    assert "and 2 trial iteration(s): stopping the loop" in done.stderr
