"""The real loop with an agent that cannot start: each phase fails within a second with the
same words, so the loop stops with exit 2 (a configuration error) in the agent's own words,
and the breaker is never moved by it.

The agent is a stand-in `claude` that says what the real Claude Code says for a misspelled
flag (the real one does the same in tests/e2e/test_claude_start.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.loop import GENESIS, LOOP, loop_env
from helpers.state import events_of

START_FAILURES = 3  # genesis/loop/startfail.py: the same failure to start this many times in a row stops the loop

WORDS = "error: unknown option '--dangerously-skip-permisions'"
MISSPELLED = r'''#!{python}
import os, sys
with open(os.environ["FAKE_CALLS"], "a") as fh:
    fh.write(os.environ.get("GENESIS_AGENT", "?") + "\n")
sys.stderr.write("{words}\n")
sys.exit(1)
'''


def breaker(project: Path) -> dict:
    return json.loads((project / "orchestrator" / ".circuit_breaker.json").read_text())


@pytest.mark.fault(63)
@pytest.mark.parametrize("phases", ["Builder", "Builder Criticizer Planner"])
def test_an_agent_that_cannot_start_is_a_configuration_error_and_the_breaker_is_untouched(project, tmp_path, phases):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir / "claude", MISSPELLED.format(python=sys.executable, words=WORDS))
    subprocess.run(GENESIS + ["--project", str(project), "hook", "install", "--scope", "local"], check=True,
                   capture_output=True)
    calls = tmp_path / "calls.txt"
    # A breaker that would open after two idle iterations: the broken agent must not open it.
    env = loop_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_CALLS=str(calls), GENESIS_PHASES=phases,
                   GENESIS_AGENT_CMD="claude -p --dangerously-skip-permisions", CB_WARNING_THRESHOLD="1",
                   CB_STOP_THRESHOLD="2")
    done = subprocess.run(["bash", str(LOOP), "--project", str(project)], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert len(calls.read_text().splitlines()) == START_FAILURES
    out = done.stderr
    assert f"the agent failed to start {START_FAILURES} times in a row" in out
    assert f"saying: {WORDS}. That is a configuration error" in out
    assert "breaker OPEN" not in out and "make a change and restart" not in out
    state = breaker(project)
    assert (state["state"], state["no_progress_count"], state["history"]) == ("CLOSED", 0, [])
    evs = events_of(project)
    assert [e["exit_code"] for e in evs if e["event"] == "loop_end"] == [2]
    assert all(e["breaker"] == "CLOSED" and e["unstarted"] for e in evs if e["event"] == "iteration_end")
    assert [e["failures"] for e in evs if e["event"] == "agent_cannot_start"] == [START_FAILURES]
