"""Warn-only mode and a doom loop, through the real loop with real agent processes, and the
status of a running loop. The recovery ladder's rules (a retry, with the fallback command when
one is set; a spent phase or night budget) are replayed in tests/loop/test_recovery.py; end to
end, a stuck phase retried and stuck again is in test_loop_defaults.py, a spent budget
stopping the loop (exit 25) in test_fail_closed.py, and the fallback agent running a retry in
tests/e2e/test_claude_silences.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import LOOP, loop_env, run_loop
from helpers.state import events_of, state_of
from helpers.waits import wait_for

HANG = "#!/usr/bin/env bash\nexec sleep 300\n"


@pytest.fixture
def agents(project: Path, tmp_path: Path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")

    def make(name: str, text: str) -> Path:
        return script(tmp_path / name, text)

    return make


def test_warn_only_records_classifications_and_would_be_kills_and_only_the_runtime_cap_ends_the_phase(
        project, agents):
    hang = agents("hang.sh", HANG)
    done = run_loop(project, "--agent-cmd", str(hang), "--max-iterations", "1",
                    env=loop_env(GENESIS_HEALTH_ENFORCE="false", HEARTBEAT_STALE="1s", AGENT_MAX_RUNTIME="3s",
                                 HEARTBEAT_COUNT_OUTPUT="false", GENESIS_PHASES="Builder"))
    assert done.returncode == 0, done.stderr
    (end,) = events_of(project, kind="phase_end")
    # Silent past its 1 s window, it ran on to the 3 s cap: stuck was said, never acted on.
    assert end["status"] == "overtime" and end["duration"] >= 3
    assert end["would_kill"] and "no heartbeat" in end["would_kill"][0]
    assert "would kill as stuck (GENESIS_HEALTH_ENFORCE=false" in done.stderr
    classes = [e["classification"] for e in events_of(project, kind="health")]
    assert classes[:2] == ["slow", "stuck"], classes
    snap = json.loads((state_of(project) / "heartbeats" / "Builder.health.json").read_text())
    assert snap["phase"] == "Builder" and snap["classification"] in ("slow", "stuck", "healthy")
    assert {"stall_score", "last_event", "last_action", "fingerprint", "tool_calls", "last_progress",
            "tool_in_flight", "turns", "severity"} <= set(snap)


# Calls the same failing command over and over: every call is a heartbeat, so its heartbeat
# never goes stale; the tool log shows the loop.
DOOM = r"""#!/usr/bin/env bash
n=0
while [ $n -lt 200 ]; do
  n=$((n + 1))
  for event in PreToolUse PostToolUseFailure; do
    printf '{"session_id":"s","hook_event_name":"%s","tool_name":"Bash","tool_input":{"command":"pytest -x tests/test_api.py"},"tool_use_id":"toolu_%s"}' \
      "$event" "$n" | "$HOOK"
  done
  sleep 0.2
done
"""


@pytest.mark.fault(47)
def test_the_same_failing_command_repeated_ends_the_phase_as_a_doom_loop_before_the_stale_window(project, agents):
    from genesis.health.heartbeat import hook_script

    doom = agents("doom.sh", DOOM)
    done = run_loop(project, "--agent-cmd", str(doom), "--max-iterations", "1",
                    env=loop_env(HOOK=str(hook_script()), HEARTBEAT_STALE="60s", PHASE_RETRIES="0",
                                 GENESIS_PHASES="Builder"))
    assert done.returncode == 0, done.stderr
    (end,) = events_of(project, kind="phase_end")
    assert (end["status"], end["ending"]) == ("wedged", "wedged"), end
    assert end["detail"].startswith("stall_same_tool: Bash") and "failed 6 times in a row" in end["detail"]
    assert "pytest -x tests/test_api.py" in end["detail"]
    classes = [e["classification"] for e in events_of(project, kind="health")]
    assert "wedged" in classes
    (incident,) = events_of(project, kind="incident")
    assert incident["kind"] == "wedged"


def test_the_status_of_a_running_loop_shows_its_phase_health_and_tool_in_flight(project, agents):
    import os
    import signal
    import subprocess

    from click.testing import CliRunner

    from genesis.cli import cli
    from genesis.health.heartbeat import hook_script

    inside = agents("inside.sh", "#!/usr/bin/env bash\nprintf '%s' '{\"session_id\":\"s\",\"hook_event_name\":"
                    "\"PreToolUse\",\"tool_name\":\"Bash\",\"tool_input\":{\"command\":\"make test\"},"
                    "\"tool_use_id\":\"toolu_1\"}' | \"$HOOK\"\nexec sleep 300\n")
    env = loop_env(HOOK=str(hook_script()), HEARTBEAT_STALE="60s", GENESIS_PHASES="Builder")
    loop = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(inside),
                             "--max-iterations", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def status() -> str:  # the user's `genesis status`, in this process: polled, it costs no start each time
            return CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["--project", str(project), "status"],
                                                            catch_exceptions=False).stdout

        wait_for(lambda: "Bash 'make test'" in status(), timeout=30, what="the tool in flight on the status")
        shown = status()
        assert "Builder" in shown and "running" in shown and "healthy" in shown, shown
    finally:
        os.killpg(loop.pid, signal.SIGTERM)
        loop.wait(timeout=30)
