"""Supervising real agent processes: normal exit, stuck, over time, stubborn trees."""

import os
import sys
from pathlib import Path

import pytest

from genesis import exitcodes
from genesis.heartbeat import hook_script, read_heartbeat
from genesis.proctree import marked
from genesis.supervisor import AgentRun, Limits, supervise

from conftest import alive

SPAWN = str(Path(__file__).parent / "helpers" / "spawn.py")


def agent(tmp_path, script: str, run_id="run-1", **limits) -> tuple:
    (tmp_path / "agent.sh").write_text(script)
    hb = tmp_path / "hb" / "Builder.json"
    hb.parent.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "GENESIS_RUN_ID": run_id, "GENESIS_HEARTBEAT_FILE": str(hb),
           "GENESIS_AGENT": "Builder", "HOOK": str(hook_script()), "SPAWN": SPAWN, "PY": sys.executable}
    run = AgentRun(("bash", str(tmp_path / "agent.sh"), "the prompt"), tmp_path, env, tmp_path / "agent.log",
                   hb, run_id)
    lim = Limits(**{"check_interval": 0.2, "stale_after": 1.0, "max_runtime": 30.0, "kill_grace": 1.0,
                    "count_output": True, **limits})
    notes: list[str] = []
    return supervise(run, lim, note=notes.append), notes, run


def test_an_agent_that_finishes_keeps_its_status_and_its_output_goes_to_the_log(tmp_path):
    out, _, run = agent(tmp_path, 'echo "working on: $1"; "$HOOK" Edit; exit 0\n')
    assert (out.status, out.returncode, out.exit_code) == ("exited", 0, exitcodes.OK)
    assert "working on: the prompt" in run.log.read_text()
    beat, _ = read_heartbeat(run.heartbeat)
    assert beat.tool == "Edit" and beat.agent == "Builder" and beat.run_id == "run-1"
    out, _, _ = agent(tmp_path, "exit 7\n")
    assert (out.status, out.returncode, out.exit_code) == ("exited", 7, exitcodes.AGENT_FAILED)


@pytest.mark.fault(10)
def test_a_silent_hang_is_stuck_and_the_whole_tree_dies_including_a_setsid_child(tmp_path):
    script = ('"$PY" "$SPAWN" detach "$PWD/daemon.pid" "$PY" "$SPAWN" sleep\n'
              '"$HOOK" Bash </dev/null\n'
              'exec "$PY" -c "import time; time.sleep(600)"\n')
    out, _, _ = agent(tmp_path, script, count_output=False)
    assert out.status == "stale" and out.exit_code == exitcodes.AGENT_STALE
    assert 1.0 < out.idle <= 1.0 + 0.2 + 1.5  # window + one poll, with room for a loaded machine
    assert "no heartbeat" in out.detail
    daemon = int((tmp_path / "daemon.pid").read_text())
    assert out.kill.targets >= 2 and out.kill.survivors == ()
    assert not alive(daemon)
    assert marked({"GENESIS_RUN_ID": "run-1"}) == []


def test_heartbeats_keep_an_agent_alive_until_the_runtime_cap(tmp_path):
    script = 'while true; do "$HOOK" Bash </dev/null; sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, max_runtime=2.0)
    assert out.status == "overtime" and out.exit_code == exitcodes.AGENT_OVERTIME
    assert out.duration >= 2.0
    assert marked({"GENESIS_RUN_ID": "run-1"}) == []


def test_output_counts_as_life_for_agents_without_hooks(tmp_path):
    script = 'for i in $(seq 1 15); do echo "step $i"; sleep 0.2; done\n'
    out, _, _ = agent(tmp_path, script, stale_after=2.0)
    assert out.status == "exited" and out.returncode == 0


@pytest.mark.fault(7)
def test_an_agent_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    script = 'trap "" TERM\n"$PY" "$SPAWN" stubborn &\nwhile true; do sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, count_output=False, kill_grace=0.5)
    assert out.status == "stale"
    assert out.kill.killed >= 2 and out.kill.survivors == ()
    assert marked({"GENESIS_RUN_ID": "run-1"}) == []


def test_a_heartbeat_of_another_run_does_not_count(tmp_path):
    script = 'while true; do GENESIS_RUN_ID=other "$HOOK" Bash </dev/null; sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, count_output=False)
    assert out.status == "stale"


def test_a_missing_agent_command_is_reported_not_raised(tmp_path):
    run = AgentRun(("no-such-agent-cmd", "p"), tmp_path, dict(os.environ), tmp_path / "a.log",
                   tmp_path / "hb.json", "r")
    out = supervise(run, Limits(0.2, 1.0, 5.0, 0.5))
    assert out.status == "not_started" and "no-such-agent-cmd" in out.detail
