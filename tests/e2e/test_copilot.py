"""The real GitHub Copilot CLI through the real loop, offline against a stub Chat Completions API.

The test command installs the pinned `@github/copilot` into .tools/; where it could not,
every test here is skipped with that reason. The user points Copilot at a model provider of
their own the documented way (COPILOT_PROVIDER_BASE_URL, COPILOT_PROVIDER_API_KEY,
COPILOT_MODEL, COPILOT_OFFLINE=true) and the command is just `copilot`: the adapter adds
`--allow-all-tools --output-format json -p`. The hook is installed the user's way, in
~/.copilot/hooks/genesis-heartbeat.json.

On its first start Copilot unpacks its 235 MB runtime into a cache; COPILOT_CACHE_HOME keeps
that cache in .tools/, unpacked once, not in each test's throwaway HOME.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, TOOLS, Loop, as_agent, calls, genesis, gone, installed
from e2e.stubs.chat import QUOTA, ChatStub, rate_limited

from genesis import exitcodes

COPILOT = TOOLS / "copilot" / "node_modules" / ".bin" / "copilot"
CACHE = TOOLS / "copilot" / "cache"

pytestmark = pytest.mark.copilot


@pytest.fixture(scope="module")
def copilot() -> Path:
    # The version check unpacks its runtime there, once.
    return installed(COPILOT, TOOLS / "copilot-install.log", "Copilot CLI", env={"COPILOT_CACHE_HOME": str(CACHE)})


@pytest.fixture
def stub():
    api = ChatStub().start()
    yield api
    api.shutdown()


@pytest.fixture
def e2e(copilot, stub, project, hermetic, tmp_path):
    """A project, Copilot pointed at the stub by its environment, the hook installed the user's way."""
    as_agent(project)
    done = genesis("--project", str(project), "hook", "install", "--agent", "copilot")
    assert str(hermetic / ".copilot" / "hooks" / "genesis-heartbeat.json") in done.stdout
    env = {**os.environ, **LOOP_ENV, "COPILOT_PROVIDER_BASE_URL": f"{stub.url}/v1",
           "COPILOT_PROVIDER_API_KEY": "sk-stub", "COPILOT_MODEL": "stub-model", "COPILOT_OFFLINE": "true",
           "COPILOT_CACHE_HOME": str(CACHE), "GENESIS_AGENT_CMD": str(copilot)}
    loop = Loop(project, env, tmp_path)
    loop.phase("Planner", "quick")  # the Planner runs too (no TASKS.md): a quick turn, no change
    return loop


def session_of(log: Path) -> str:
    """The session id in the result event of the raw JSONL kept beside a phase's transcript."""
    for line in log.with_suffix(".jsonl").read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("type") == "result":
            return json.loads(line)["sessionId"]
    raise AssertionError(f"no result event in {log.with_suffix('.jsonl')}")


def test_a_rate_limit_is_backed_off_every_tool_call_beats_and_a_hung_command_is_killed_in_one_night(e2e, stub):
    """Three Copilot runs in one night. The Builder's first meets a rate limit that outlasts
    Copilot's own five retries: the loop backs off and runs the phase again, which makes progress,
    each tool call beating. The Planner then hangs in a shell command: stuck, and killed with its
    tool shell and the hook's parents."""
    stub.refuse(*rate_limited(retry_after=1), count=6)   # every try of the first run
    e2e.phase("Builder", "progress")
    e2e.phase("Planner", "hang")
    e2e.env.update(GENESIS_BACKOFF_FIRST_SECONDS="1", GENESIS_BACKOFF_MAX_SECONDS="1", PHASE_RETRIES="0")
    done, beats = e2e.run("--max-iterations", "1", watch=("Builder", "Planner"), trace=True)
    # The rate limit, read from Copilot's words, and the backoff.
    assert "Builder: API error (429 rate_limit): Failed to get response from the AI model" in done.stdout
    ended = [(e["phase"], e["status"]) for e in e2e.ended()]
    assert ended == [("Builder", "exited"), ("Builder", "exited"), ("Planner", "stuck")], ended
    # The run after the backoff: progress.
    run_id, transcript = e2e.progressed(done)
    session = session_of(e2e.log("Builder"))
    assert f"session {session}" in transcript and "assistant: Done: wrote hello.txt and committed it." in transcript
    assert "tool bash: $ echo hello from the agent > hello.txt" in transcript
    # Copilot's own event names and tool name, passed by the hook command (its payload names no event).
    built = [b for b in beats if b["agent"] == "Builder"]
    logged = e2e.tool_calls("Builder")  # the tool log keeps the common event names
    assert calls(logged, "PreToolUse", "bash") == 2 and calls(logged, "PostToolUse", "bash") == 2, logged
    assert all(b["session_id"] == session for b in built)
    assert {b["run_id"] for b in beats} == {run_id}
    # The hang.
    assert "Planner: stuck: no heartbeat for" in done.stdout
    assert 'the tool in flight: bash "echo $$ > tool-shell.pid;' in done.stdout
    # Ended by SIGTERM, Copilot may still fire postToolUse for the killed call as it shuts down.
    hung = [b for b in beats if b["agent"] == "Planner"]
    assert [b["tool"] for b in hung if b["event"] == "preToolUse"][-1] == "bash"
    tool_shell, _ = e2e.hung(done, "Planner")
    # The hook's parent too: a shell of a moment under Copilot, so its ancestors, as the host sees them.
    parents = [ident for pid in hung[-1]["ppids"] for ident in e2e.told(pid, "copilot")]
    assert tool_shell != hung[-1]["pid"] and parents and all(gone(p) for p in parents)


def test_a_quota_with_no_credit_left_stops_the_loop_with_copilots_words(e2e, stub):
    status, body, _ = QUOTA
    stub.refuse(status, body, {"retry-after": "1"})  # Copilot honours it: its 5 retries take seconds
    e2e.phase("Builder", "progress")
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == exitcodes.AGENT_FATAL, done.stdout
    assert ("Builder: the agent reported an error that retrying cannot fix: Failed to get response from the AI "
            "model; retried 5 times") in done.stdout
    assert "You exceeded your current quota" in done.stdout and "(insufficient_quota, HTTP 429)" in done.stdout
    calls = [r for r in stub.requests if r["path"].endswith("/chat/completions")]
    assert [r["status"] for r in calls] == [429] * 6    # one try and Copilot's own 5 retries; no other phase
    assert e2e.leftovers() == []
