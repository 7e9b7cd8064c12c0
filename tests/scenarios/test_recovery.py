"""The recovery ladder and warn-only mode, through the real loop with real agent processes:
a stuck phase retried (with the fallback command), a spent budget, and a night that only
records what it would have killed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import commit_file, git
from helpers.loop import LOOP, loop_env, run_loop
from helpers.state import events_of, state_of
from helpers.waits import wait_for

# Stuck (silent, asleep) on its first run of a phase; on the next it works and commits.
FLAKY = r"""#!/usr/bin/env bash
set -eu
mark=".tried-$GENESIS_AGENT-$GENESIS_ITERATION"
if [ ! -e "$mark" ]; then : >"$mark"; exec sleep 300; fi
echo "second try of $GENESIS_AGENT by $0" >"done-$GENESIS_AGENT.txt"
git add "done-$GENESIS_AGENT.txt" && git commit -qm "$GENESIS_AGENT: done on the retry"
"""
HANG = "#!/usr/bin/env bash\nexec sleep 300\n"


@pytest.fixture
def agents(project: Path, tmp_path: Path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    commit_file(project, ".gitignore", ".tried-*\n", "ignore the agent's marks")

    def make(name: str, text: str) -> Path:
        return script(tmp_path / name, text)

    return make


FAST = dict(HEARTBEAT_STALE="1.5s", HEARTBEAT_COUNT_OUTPUT="false", GENESIS_PHASES="Builder")


def test_a_stuck_phase_is_retried_and_succeeds_on_the_second_attempt(project, agents):
    flaky = agents("flaky.sh", FLAKY)
    done = run_loop(project, "--agent-cmd", str(flaky), "--max-iterations", "1", env=loop_env(**FAST))
    assert done.returncode == 0, done.stderr
    ends = [(e["phase"], e["ending"], e["attempt"]) for e in events_of(project, kind="phase_end")]
    assert ends == [("Builder", "stuck", 0), ("Builder", "finished", 1)]
    (retry,) = events_of(project, kind="retry")
    assert (retry["type"], retry["count"], retry["new_cmd"]) == ("stuck", 1, str(flaky))
    assert "no heartbeat" in retry["reason"]
    assert (project / "done-Builder.txt").exists()
    (incident,) = events_of(project, kind="incident")
    assert incident["kind"] == "stuck"


def test_a_retry_runs_the_fallback_agent_command(project, agents):
    flaky = agents("flaky.sh", FLAKY)
    fallback = agents("fallback.sh", FLAKY)
    done = run_loop(project, "--agent-cmd", str(flaky), "--max-iterations", "1",
                    env=loop_env(GENESIS_FALLBACK_AGENT_CMD=str(fallback), **FAST))
    assert done.returncode == 0, done.stderr
    (retry,) = events_of(project, kind="retry")
    assert (retry["old_cmd"], retry["new_cmd"]) == (str(flaky), str(fallback))
    assert (project / "done-Builder.txt").read_text() == f"second try of Builder by {fallback}\n"
    assert "with the fallback agent" in done.stderr


def test_a_phase_whose_retries_are_spent_fails_and_a_spent_night_budget_stops_the_loop(project, agents):
    hang = agents("hang.sh", HANG)
    done = run_loop(project, "--agent-cmd", str(hang), "--max-iterations", "3",
                    env=loop_env(GENESIS_MAX_RECOVERIES="1", **FAST))
    assert done.returncode == 25, done.stderr
    # Iteration 1: stuck, retried, stuck again: failed, and the loop went on.
    (failed,) = events_of(project, kind="phase_failed")
    assert (failed["iteration"], failed["kind"], failed["retries"]) == (1, "stuck", 1)
    # Iteration 2: stuck, and the night's one recovery was used: the loop stops as thrashing.
    (spent,) = events_of(project, kind="recovery_spent")
    assert spent["iteration"] == 2
    assert "recovery budget (GENESIS_MAX_RECOVERIES=1) is spent" in done.stderr
    assert events_of(project, kind="loop_end")[-1]["exit_code"] == 25


def test_warn_only_records_classifications_and_would_be_kills_but_kills_nothing(project, agents):
    slow = agents("slow.sh", "#!/usr/bin/env bash\nsleep 4\necho finished after a long silence\n")
    done = run_loop(project, "--agent-cmd", str(slow), "--max-iterations", "1",
                    env=loop_env(GENESIS_HEALTH_ENFORCE="false", HEARTBEAT_STALE="1s",
                                 HEARTBEAT_COUNT_OUTPUT="false", GENESIS_PHASES="Builder"))
    assert done.returncode == 0, done.stderr
    (end,) = events_of(project, kind="phase_end")
    assert (end["status"], end["ending"]) == ("exited", "finished")
    assert end["would_kill"] and "no heartbeat" in end["would_kill"][0]
    assert "would kill as stuck (GENESIS_HEALTH_ENFORCE=false" in done.stderr
    classes = [e["classification"] for e in events_of(project, kind="health")]
    assert classes[:2] == ["slow", "stuck"], classes
    snap = json.loads((state_of(project) / "heartbeats" / "Builder.health.json").read_text())
    assert snap["phase"] == "Builder" and snap["classification"] in ("slow", "stuck", "healthy")
    assert {"stall_score", "last_event", "last_action", "fingerprint", "tool_calls", "last_progress",
            "tool_in_flight", "turns", "severity"} <= set(snap)


def test_warn_only_still_applies_the_runtime_cap(project, agents):
    hang = agents("hang.sh", HANG)
    done = run_loop(project, "--agent-cmd", str(hang), "--max-iterations", "1",
                    env=loop_env(GENESIS_HEALTH_ENFORCE="false", HEARTBEAT_STALE="1s",
                                 AGENT_MAX_RUNTIME="3s", HEARTBEAT_COUNT_OUTPUT="false",
                                 GENESIS_PHASES="Builder"))
    assert done.returncode == 0, done.stderr
    (end,) = events_of(project, kind="phase_end")
    assert end["status"] == "overtime" and end["would_kill"]


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
    import sys

    from genesis.health.heartbeat import hook_script

    inside = agents("inside.sh", "#!/usr/bin/env bash\nprintf '%s' '{\"session_id\":\"s\",\"hook_event_name\":"
                    "\"PreToolUse\",\"tool_name\":\"Bash\",\"tool_input\":{\"command\":\"make test\"},"
                    "\"tool_use_id\":\"toolu_1\"}' | \"$HOOK\"\nexec sleep 300\n")
    env = loop_env(HOOK=str(hook_script()), HEARTBEAT_STALE="60s", GENESIS_PHASES="Builder")
    loop = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(inside),
                             "--max-iterations", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def status() -> str:
            return subprocess.run([sys.executable, "-m", "genesis", "--project", str(project), "status"],
                                  capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}).stdout

        wait_for(lambda: "Bash 'make test'" in status(), timeout=30, what="the tool in flight on the status")
        shown = status()
        assert "Builder" in shown and "running" in shown and "healthy" in shown, shown
    finally:
        os.killpg(loop.pid, signal.SIGTERM)
        loop.wait(timeout=30)
