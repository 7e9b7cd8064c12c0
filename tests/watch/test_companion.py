"""The loop is watched too: the real bash loop SIGKILLed (mid-phase, between phases) or
SIGSTOPped is noticed by the running phase's watcher or the loop's companion; the end is
recorded, the run's processes ended, an alert sent, the lock let go, and `genesis status`
says STOPPED or FROZEN (exit 5), never RUNNING. A SIGTERM the agent sends the loop is
recorded as the agent's, not the user's stop. Without the box (GENESIS_SANDBOX=off)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers.loop import GENESIS, LOOP, loop_env
from helpers.procs import alive
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.config import default_layout
from genesis.health.heartbeat import hook_script
from genesis.ledger.store import Ledger, LedgerError
from genesis.store.looplock import current_holder

# The agent says who it is, then works quietly (a long tool call) until it is ended.
AGENT = '#!/bin/bash\necho $$ > "$MARKS/agent.pid"\nsleep 300\n'
NOTIFY = "sh -c 'cat > \"$0/alert.$$.json\"' {marks}"


def start(project: Path, tmp_path: Path, procs, script: str = AGENT, **knobs: str) -> tuple[subprocess.Popen, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    agent = tmp_path / "agent.sh"
    agent.write_text(script)
    agent.chmod(0o755)
    env = loop_env(GENESIS_SANDBOX="off", GENESIS_PHASES="Builder", HEARTBEAT_STALE="120s",
                   TOOL_SILENT="0", GENESIS_NOTIFY_DESKTOP="false", MARKS=str(marks),
                   GENESIS_NOTIFY_CMD=NOTIFY.format(marks=marks), **knobs)
    loop = procs(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(agent)], env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return loop, marks


def events(project: Path, kind: str) -> list[dict]:
    path = default_layout(project).ledger_file
    if not path.exists():
        return []
    try:
        with Ledger.open(path, readonly=True) as led:
            return led.events(kinds=(kind,))
    except LedgerError:
        return []


def alerts(marks: Path) -> list[dict]:
    found = []
    for path in marks.glob("alert.*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:
            continue  # being written
    return found


def status(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run(GENESIS + ["--project", str(project), "status"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})


def companion_of(loop: subprocess.Popen) -> int:
    for proc in psutil.Process(loop.pid).children():
        if "companion" in proc.cmdline():
            return proc.pid
    raise AssertionError("the loop started no companion")


@pytest.mark.whole
@pytest.mark.fault(78)
def test_a_loop_sigkilled_mid_phase_is_recorded_reaped_alerted_and_shown_stopped(project, tmp_path, procs):
    loop, marks = start(project, tmp_path, procs)
    wait_for((marks / "agent.pid").exists, 60, "the agent to run")
    agent = int((marks / "agent.pid").read_text())
    companion = companion_of(loop)
    assert os.getsid(companion) == companion  # a session of its own, outside the agent's tree
    os.kill(loop.pid, signal.SIGKILL)
    loop.wait(10)
    wait_for(lambda: events(project, "loop_end"), 60, "the lost loop's end to be recorded")
    end = events(project, "loop_end")[-1]
    assert end["reason"].startswith("the loop was killed (SIGKILL?) by someone") and end["exit_code"] == 137
    wait_for(lambda: not alive(agent), 30, "the agent to be ended")
    lay = default_layout(project)
    wait_for(lambda: current_holder(lay.loop_lock, lay.loop_record) is None, 30, "the lock to be let go")
    wait_for(lambda: any(a["kind"] == "loop_end" for a in alerts(marks)), 30, "the alert")
    told = next(a for a in alerts(marks) if a["kind"] == "loop_end")
    assert told["cause"].startswith("loop ended: the loop was killed") and told["severity"] == "high"
    shown = status(project)
    assert shown.returncode == exitcodes.NOT_RUNNING
    assert "STOPPED" in shown.stdout and "killed at " in shown.stdout and "RUNNING" not in shown.stdout
    wait_for(lambda: not alive(companion), 60, "the companion to exit")


@pytest.mark.whole
@pytest.mark.fault(78)
def test_a_loop_sigkilled_between_phases_is_settled_by_its_companion(project, tmp_path, procs):
    # A short phase, then the long pause between iterations.
    loop, marks = start(project, tmp_path, procs, '#!/bin/bash\necho $$ > "$MARKS/agent.pid"\n',
                        ITERATION_PAUSE_SECONDS="300")
    wait_for(lambda: events(project, "iteration_end"), 60, "the first iteration to end")
    wait_for(lambda: any(p.name() == "sleep" for p in psutil.Process(loop.pid).children()), 30, "the pause")
    pause = next(p.pid for p in psutil.Process(loop.pid).children() if p.name() == "sleep")
    # The companion sees the loop's tree once a check (0.2 s): what is younger it cannot prove,
    # and rightly leaves alone. On a loaded machine a check can come seconds late: give it many.
    time.sleep(3)
    os.kill(loop.pid, signal.SIGKILL)
    loop.wait(10)
    wait_for(lambda: events(project, "loop_end"), 60, "the lost loop's end to be recorded")
    end = events(project, "loop_end")[-1]
    assert end["reason"] == ("the loop was killed (SIGKILL?) by someone: it ended without recording its end "
                             "(seen by its companion)")
    assert not alive(pause)
    wait_for(lambda: any(a["kind"] == "loop_end" for a in alerts(marks)), 30, "the alert")
    shown = status(project)
    assert shown.returncode == exitcodes.NOT_RUNNING and "STOPPED" in shown.stdout


@pytest.mark.whole
@pytest.mark.fault(78)
def test_a_frozen_loop_is_recorded_alerted_once_and_shown_frozen_until_it_runs_again(project, tmp_path, procs):
    loop, marks = start(project, tmp_path, procs)
    wait_for((marks / "agent.pid").exists, 60, "the agent to run")
    os.kill(loop.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: events(project, "loop_frozen"), 30, "the freeze to be recorded")
        shown = status(project)
        assert shown.returncode == exitcodes.NOT_RUNNING
        assert "FROZEN" in shown.stdout and "stopped by a signal for " in shown.stdout
        assert "RUNNING" not in shown.stdout
        wait_for(lambda: any(a["kind"] == "loop_frozen" for a in alerts(marks)), 30, "the alert")
        assert next(a for a in alerts(marks) if a["kind"] == "loop_frozen")["severity"] == "critical"
        time.sleep(2.0)  # ten more checks (0.2 s each) of a loop still frozen
        assert len(events(project, "loop_frozen")) == 1
        assert sum(a["kind"] == "loop_frozen" for a in alerts(marks)) == 1
    finally:
        os.kill(loop.pid, signal.SIGCONT)
    wait_for(lambda: events(project, "loop_thawed"), 30, "the thaw to be recorded")
    assert status(project).returncode == exitcodes.OK


# The agent signals the loop that runs it (its watcher's parent) from a tool call, as Claude
# Code would run `kill`: the hook first (PreToolUse, the command in its payload), then the call.
KILLER = r'''#!/bin/bash
loop=$(ps -o ppid= -p "$PPID" | tr -d ' ')
printf '{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"kill -TERM %s"}}' "$loop" \
  | "$GENESIS_HOOK_SCRIPT" --event PreToolUse Bash
echo $$ > "$MARKS/agent.pid"
kill -TERM "$loop"
sleep 300
'''


@pytest.mark.whole
@pytest.mark.fault(78)
def test_sigterm_the_agent_sends_the_loop_is_recorded_as_the_agents_not_the_users_stop(project, tmp_path, procs):
    loop, marks = start(project, tmp_path, procs, KILLER, GENESIS_HOOK_SCRIPT=str(hook_script()))
    assert loop.wait(60) == 143
    (phase,) = events(project, "phase_end")
    assert phase["status"] == "interrupted"
    assert phase["detail"].startswith("the agent sent SIGTERM to the loop: its tool call `kill -TERM ")
    end = events(project, "loop_end")[-1]
    assert end["reason"] == phase["detail"] and end["exit_code"] == 143
    assert not alive(int((marks / "agent.pid").read_text()))
