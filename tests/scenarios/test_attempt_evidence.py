"""A retried phase's evidence, each attempt its own, through the real loop: the first attempt
hangs inside a tool and is killed by the tool-silent window, its retry succeeds. Each has its
own transcript; each phase_end keeps its own attempt's tail, the incident the same lines, and
the report shows them even once the logs are gone."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import commit_file
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.state import events_of, state_of

from genesis.health.heartbeat import hook_script

# Inside a Bash call that hangs on its first run of a phase; on the next it works and says so.
FLAKY = r"""#!/usr/bin/env bash
set -eu
mark=".tried-$GENESIS_AGENT-$GENESIS_ITERATION"
if [ ! -e "$mark" ]; then
  : >"$mark"
  echo "attempt one: running the test suite"
  printf '\033[31mFAILED\033[0m tests/test_api.py with SHOP_API_TOKEN=tok-9f8e7d6c5b4a3210\n'
  call='{"hook_event_name":"PreToolUse","tool_name":"Bash","session_id":"s-1","tool_use_id":"toolu_1",'
  printf '%s' "$call"'"tool_input":{"command":"pytest -x"}}' | "$HOOK"
  exec sleep 300
fi
echo "attempt two: all green"
echo "result: success"
"""


@pytest.mark.fault(86)
def test_a_retried_phase_keeps_each_attempts_own_evidence_in_its_end_its_incident_and_the_report(project, tmp_path):
    commit_file(project, ".gitignore", ".tried-*\n", "ignore the agent's marks")
    flaky = script(tmp_path / "flaky.sh", FLAKY)
    done = run_loop(project, "--agent-cmd", str(flaky), "--max-iterations", "1",
                    env=loop_env(HOOK=str(hook_script()), GENESIS_PHASES="Builder", TOOL_SILENT="1s",
                                 HEARTBEAT_STALE="30s", HEARTBEAT_COUNT_OUTPUT="false"))
    assert done.returncode == 0, done.stderr

    # Each attempt has its own transcript, named in its start and its end.
    starts, ends = events_of(project, kind="phase_start"), events_of(project, kind="phase_end")
    assert [(e["ending"], e["attempt"]) for e in ends] == [("stuck", 0), ("finished", 1)]
    first, retry = (Path(e["log"]) for e in starts)
    assert (first.name, retry.name) == ("iter-0001-Builder.log", "iter-0001-Builder.attempt-2.log")
    assert [e.get("log") for e in ends] == [str(first), str(retry)]
    assert "attempt one" in first.read_text() and "attempt two" not in first.read_text()
    assert "attempt two" in retry.read_text() and "attempt one" not in retry.read_text()
    assert f"Builder: agent started (log {retry})" in done.stderr

    # Each end keeps its own attempt's tail: the stuck one is not evidenced by the retry's success.
    stuck, finished = (e["tail"] for e in ends)
    assert "attempt one: running the test suite" in stuck
    assert not any("result: success" in line or "attempt two" in line for line in stuck), stuck
    assert stuck[-1] == "FAILED tests/test_api.py with SHOP_API_TOKEN=[redacted]"  # no escape, no secret
    assert finished[-2:] == ["attempt two: all green", "result: success"]
    assert not any("attempt one" in line for line in finished), finished

    # The window that fired is named and recorded; the incident keeps the same lines.
    assert ends[0]["window"] == "tool_silent" and ends[1]["window"] is None
    assert "inside Bash" in ends[0]["detail"] and "tool-silent window 1s" in ends[0]["detail"]
    (event,) = events_of(project, kind="incident")
    assert (event["window"], event["log"]) == ("tool_silent", str(first))
    record = json.loads((state_of(project) / "incidents" / f"{event['id']}.json").read_text())
    assert record["transcript"] == stuck
    assert (record["window"], record["log"]) == ("tool_silent", str(first))
    text = (state_of(project) / "incidents" / f"{event['id']}.txt").read_text()
    assert "window that fired: the tool-silent window" in text
    assert f"== transcript tail ({len(stuck)} lines of {first}) ==" in text

    # The report the loop printed at its end, and `genesis report` once the logs are gone, show
    # the stuck attempt's own tail.
    printed = done.stderr[done.stderr.index("abnormal phases"):]
    assert "| attempt one: running the test suite" in printed and "result: success" not in printed
    shutil.rmtree(first.parent)  # the run's logs deleted (or rotated away)
    report = subprocess.run([*GENESIS, "--project", str(project), "report"], capture_output=True, text=True,
                            timeout=60)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("abnormal phases"))
    section = lines[at:lines.index("", at)]
    assert any("| attempt one: running the test suite" in line for line in section), section
    assert not any("result: success" in line or "attempt two" in line for line in section), section


# Says what it does, leaves a mark for the wrapper below, then works on silently.
WATCHED = r"""#!/usr/bin/env bash
echo "watched attempt: building the parser"
: >".started-$GENESIS_ITERATION"
exec sleep 300
"""

# `genesis` as the loop calls it, but the phase's watcher is SIGKILLed once its agent has begun
# and the watcher has copied the agent's first line into the phase's log (on a busy machine the
# copy can come a moment after the agent's mark).
KILLS_THE_WATCHER = r"""#!/usr/bin/env bash
if [[ " $* " == *" run-phase "* ]]; then
  "{genesis}" "$@" &
  watcher=$!
  for _ in $(seq 600); do
    [[ -e "{project}/.started-1" ]] && grep -rqs "watched attempt: building" "{project}/orchestrator/logs" && break
    sleep 0.05
  done
  kill -KILL "$watcher"
  wait "$watcher"
  exit
fi
exec "{genesis}" "$@"
"""


@pytest.mark.fault(86)
def test_a_watcher_killed_mid_phase_still_leaves_its_attempts_own_evidence(project, tmp_path):
    commit_file(project, ".gitignore", ".started-*\n", "ignore the agent's marks")
    agent = script(tmp_path / "watched.sh", WATCHED)
    genesis = Path(loop_env()["GENESIS_BIN"])
    wrapper = script(tmp_path / "genesis-dies", KILLS_THE_WATCHER.format(genesis=genesis, project=project))
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1",
                    env=loop_env(GENESIS_BIN=str(wrapper), GENESIS_PHASES="Builder", HEARTBEAT_STALE="120s"))
    assert "Builder: the watcher died of signal 9" in done.stderr, done.stderr
    (start,) = events_of(project, kind="phase_start")
    (end,) = events_of(project, kind="phase_end")
    assert (end["status"], end["log"]) == ("watcher_lost", start["log"])
    assert "watched attempt: building the parser" in end["tail"], end
