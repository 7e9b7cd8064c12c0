"""The real Qwen Code CLI through the real loop, offline against a stub Chat Completions API.

The test command installs the pinned `@qwen-code/qwen-code` into .tools/; where it could
not, every test here is skipped with that reason. The user points Qwen at the API the usual
way (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL) and the command is just `qwen`: the
adapter adds `--yolo -o stream-json`. The hook is installed the user's way, in
~/.qwen/settings.json.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, TOOLS, Loop, as_agent, calls, genesis, gone, installed
from e2e.stubs.chat import ChatStub, error
from helpers.state import state_of

from genesis import exitcodes

QWEN = TOOLS / "qwen" / "node_modules" / ".bin" / "qwen"

pytestmark = pytest.mark.qwen


@pytest.fixture(scope="module")
def qwen() -> Path:
    return installed(QWEN, TOOLS / "qwen-install.log", "Qwen Code")


@pytest.fixture
def stub():
    api = ChatStub().start()
    yield api
    api.shutdown()


@pytest.fixture
def e2e(qwen, stub, project, hermetic, tmp_path):
    """A project, Qwen pointed at the stub by its environment, the hook installed the user's way."""
    as_agent(project)
    done = genesis("--project", str(project), "hook", "install", "--agent", "qwen")
    assert str(hermetic / ".qwen" / "settings.json") in done.stdout
    env = {**os.environ, **LOOP_ENV, "OPENAI_API_KEY": "sk-stub", "OPENAI_BASE_URL": f"{stub.url}/v1",
           "OPENAI_MODEL": "stub-model", "GENESIS_AGENT_CMD": str(qwen),
           # Qwen Code takes seconds to start (several on a busy machine) before its first sign of life.
           "HEARTBEAT_STALE": "30s"}
    loop = Loop(project, env, tmp_path)
    loop.phase("Planner", "quick")  # the Planner runs too (no TASKS.md): a quick turn, no change
    return loop


def session_of(log: Path) -> str:
    """The session id in the raw stream-json kept beside a phase's transcript (.log -> .jsonl)."""
    for line in log.with_suffix(".jsonl").read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("subtype") == "init":
            return json.loads(line)["session_id"]
    raise AssertionError(f"no init record in {log.with_suffix('.jsonl')}")


def test_every_tool_call_beats_and_a_silent_hung_command_is_killed_in_one_night(e2e):
    """Two Qwen runs in one night: the Builder makes progress, each tool call beating; the Planner
    hangs in a silent shell command, stuck 3 s into it (the tool-silent window) and killed with
    its tool shell and the hooks' parent."""
    e2e.phase("Builder", "progress")
    e2e.phase("Planner", "hang")
    e2e.env.update(TOOL_SILENT="3s", PHASE_RETRIES="0")  # no retry of the stuck phase
    done, beats = e2e.run("--max-iterations", "1", watch=("Builder", "Planner"), trace=True)
    assert [(e["phase"], e["status"]) for e in e2e.ended()] == [("Builder", "exited"), ("Planner", "stuck")]
    # The progress.
    run_id, transcript = e2e.progressed(done)
    session = session_of(e2e.log("Builder"))
    assert f"session {session}" in transcript and "assistant: Done: wrote hello.txt and committed it." in transcript
    assert "tool run_shell_command: $ echo hello from the agent > hello.txt" in transcript
    built = [b for b in beats if b["agent"] == "Builder"]
    logged = e2e.tool_calls("Builder")
    assert calls(logged, "PreToolUse", "run_shell_command") == 2, logged
    assert calls(logged, "PostToolUse", "run_shell_command") == 2, logged
    assert all(b["session_id"] == session for b in built)
    assert {b["run_id"] for b in beats} == {run_id}
    assert len({b["pid"] for b in built}) == 1   # the hooks' parent: the Qwen process that runs the tools
    # The hang.
    assert "Planner: stuck: inside run_shell_command for" in done.stdout and "tool-silent window 3s" in done.stdout
    # The call's start beat; on the kill Qwen ends the call and its PostToolUse hook still runs.
    hung = [b for b in beats if b["agent"] == "Planner" and b["event"] != "SessionStart"]
    assert (hung[0]["event"], hung[0]["tool"]) == ("PreToolUse", "run_shell_command"), beats
    tool_shell, _ = e2e.hung(done, "Planner")
    parents = e2e.told(hung[0]["pid"], "qwen")  # the hooks' parent too, as the host sees it
    assert tool_shell != hung[0]["pid"] and parents and all(gone(p) for p in parents)


def test_a_quota_that_resets_after_the_longest_wait_stops_the_loop_with_its_reset(e2e, stub):
    resets = int(time.time()) + 2 * 3600
    at = dt.datetime.fromtimestamp(resets, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    stub.refuse(429, error(f"Quota exceeded for this API key: daily request quota exhausted. "
                           f"Your quota will reset at {at}.", "insufficient_quota", "insufficient_quota"))
    e2e.phase("Builder", "progress")
    e2e.env["GENESIS_MAX_LIMIT_WAIT"] = "30m"
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == exitcodes.USAGE_LIMIT, done.stdout
    assert "Builder: usage limit (quota) of qwen (config " in done.stdout
    assert "; key OPENAI_API_KEY#" in done.stdout and "sk-stub" not in done.stdout  # a fingerprint, never the key
    assert "): 'Quota exhausted: Quota exceeded for this API key" in done.stdout
    assert "later than GENESIS_MAX_LIMIT_WAIT" in done.stdout
    limit = json.loads((state_of(e2e.project) / "limit.json").read_text())["limits"][0]
    assert limit["resets_at"] == resets and not limit["guessed"] and limit["cli"] == "qwen"
    # Qwen gives up at once on a quota that names its reset (after its HTTP client's own quick tries).
    assert {r["status"] for r in stub.requests if r["path"].endswith("/chat/completions")} == {429}
    assert e2e.leftovers() == []
