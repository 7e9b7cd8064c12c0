"""The real opencode CLI through the real loop, offline against a stub Chat Completions API.

The test command installs the pinned `opencode-ai` into .tools/; where it could not, every
test here is skipped with that reason. The user points opencode at the API the usual way
(a provider in ~/.config/opencode/opencode.json) and the command is just `opencode`: the
adapter adds `run --format json --auto --`. The hook is installed the user's way, as a
plugin file in ~/.config/opencode/plugin/.

opencode installs its plugin SDK into its config folder with npm before it loads any
plugin, unless the folder already has it (a node_modules folder, and a package-lock.json
naming @opencode-ai/plugin); offline that install fails after about 70 s, on every start.
The test's HOME is seeded with that record, as a user's online first start leaves it: the
plugin imports nothing from the SDK.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, TOOLS, Loop, as_agent, calls, genesis, installed
from e2e.stubs.chat import MODEL, ChatStub, rate_limited, tool_names
from helpers.state import events_of, state_of

from genesis import exitcodes
from genesis.agents.opencode import OpenCode
from genesis.health.heartbeat import tool_event

OPENCODE = TOOLS / "opencode" / "node_modules" / ".bin" / "opencode"

pytestmark = pytest.mark.opencode


@pytest.fixture(scope="module")
def opencode() -> Path:
    return installed(OPENCODE, TOOLS / "opencode-install.log", "opencode")


class RefusingChat(ChatStub):
    """Refuses the next `refusals` turns that offer tools (opencode's title request, which
    offers none and whose failure opencode ignores, is answered as usual)."""

    refusals = 0
    refused_with: tuple[int, dict, dict] = (429, {}, {})

    def answer(self, handler, body):
        if tool_names(body) and self.refusals > 0:
            self.refusals -= 1
            status, error, headers = self.refused_with
            self.requests[-1]["status"] = status
            handler.json(error, status, headers)
            return
        super().answer(handler, body)


@pytest.fixture
def stub():
    api = RefusingChat().start()
    yield api
    api.shutdown()


def seed(home: Path, base_url: str) -> None:
    """The provider the user configured, and the plugin SDK's record of an earlier start."""
    config = home / ".config" / "opencode"
    (config / "node_modules").mkdir(parents=True)
    (config / "package-lock.json").write_text(json.dumps(
        {"packages": {"": {"dependencies": {"@opencode-ai/plugin": OpenCode.version}}}}))
    (config / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"stub": {"npm": "@ai-sdk/openai-compatible", "name": "Stub",
                              "options": {"baseURL": base_url, "apiKey": "sk-stub"},
                              "models": {MODEL: {"name": "Stub model"}}}},
        "model": f"stub/{MODEL}", "autoupdate": False, "share": "disabled"}, indent=2))


@pytest.fixture
def e2e(opencode, stub, project, hermetic, tmp_path, monkeypatch):
    """A project, opencode pointed at the stub by its config, the plugin installed the user's way."""
    as_agent(project)
    seed(hermetic, f"{stub.url}/v1")
    done = genesis("--project", str(project), "hook", "install", "--agent", "opencode")
    assert str(hermetic / ".config" / "opencode" / "plugin" / "genesis-heartbeat.js") in done.stdout
    # opencode works in $PWD rather than in the directory it was started in: the loop is started
    # from elsewhere, as a user's shell may, and must point it at the project.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    env = {**os.environ, **LOOP_ENV, "PWD": str(elsewhere), "GENESIS_AGENT_CMD": str(opencode),
           "GENESIS_PHASES": "Builder", "OPENCODE_DISABLE_MODELS_FETCH": "1",
           # opencode takes seconds to start before its first tool call: a window for that.
           "HEARTBEAT_STALE": "60s"}
    return Loop(project, env, tmp_path)


def session_of(log: Path) -> str:
    """The session id in the raw JSON events kept beside a phase's transcript (.log -> .jsonl)."""
    for line in log.with_suffix(".jsonl").read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("sessionID"):
            return json.loads(line)["sessionID"]
    raise AssertionError(f"no event in {log.with_suffix('.jsonl')}")


def test_a_rate_limit_is_waited_out_every_tool_call_beats_and_a_hung_command_is_killed_in_one_night(e2e, stub):
    """Three opencode runs in one night. The Builder's first meets a rate limit that outlasts
    opencode's own retries: it retries a 429 five times by itself, each after the API's
    retry-after (the plugin tells the loop so), and the sixth refusal ends its run with the error,
    whose reset the loop waits for. The phase runs again and makes progress, each tool call
    beating. The Planner then hangs in a silent shell command: stuck, and killed with its tool shell."""
    stub.refused_with, stub.refusals = rate_limited(retry_after=0.6), 6
    e2e.phase("Builder", "progress")
    e2e.phase("Planner", "hang")
    del e2e.env["GENESIS_PHASES"]   # the Builder and the Planner (no TASKS.md: no Criticizer)
    e2e.env.update(GENESIS_LIMIT_MARGIN_SECONDS="0", TOOL_SILENT="3s", PHASE_RETRIES="0")
    done, beats = e2e.run("--max-iterations", "1", watch=("Builder", "Planner"), trace=True)
    ended = e2e.ended()
    assert [(e["phase"], e["status"], e.get("ending")) for e in ended] == [
        ("Builder", "exited", "limit"), ("Builder", "exited", "finished"), ("Planner", "stuck", "stuck")], ended
    # The rate limit: opencode's retries, then its error, and the wait for the reset.
    assert "the agent retries by itself (attempt 1 of 5" in done.stdout, done.stdout
    assert "Builder: usage limit (rate_limit) of opencode (config " in done.stdout and ") until " in done.stdout
    assert "the agent said 'Rate limit reached for stub-model" in done.stdout
    assert len([r for r in stub.requests if r["status"] == 429]) == 6
    first = [e["log"] for e in events_of(e2e.project) if e["event"] == "phase_start"][0]
    assert "API retry 5/5 in 0.6s (Rate limit reached" in Path(first).read_text()
    # The run after the wait: progress.
    run_id, transcript = e2e.progressed(done)
    session = session_of(e2e.log("Builder"))
    assert f"session {session}" in transcript and "tool bash: $ echo hello from the agent > hello.txt" in transcript
    assert "assistant: Done: wrote hello.txt and committed it." in transcript
    # Two bash calls, each beating before and after: every one of them in the hook's tool log (by
    # their common names). The beats polled from the one heartbeat file may miss one that the next
    # overwrote within a poll (opencode's after and before can come milliseconds apart).
    built = [b for b in beats if b["agent"] == "Builder"]
    logged = e2e.tool_calls("Builder")
    assert calls(logged, "PreToolUse", "bash") == 2 and calls(logged, "PostToolUse", "bash") == 2, logged
    assert {tool_event(b["event"]) for b in built} == {"PreToolUse", "PostToolUse"}
    assert all(b["session_id"] == session for b in built)
    assert {b["run_id"] for b in beats} == {run_id}
    builder = ended[1]  # the plugin's process: the opencode the box runs, its pid there
    assert {b["pid"] for b in built} == {builder["box_pid"]} and e2e.agent(builder).pid == builder["pid"]
    # The hang.
    assert "Planner: stuck: inside bash" in done.stdout, done.stdout
    hung = [b for b in beats if b["agent"] == "Planner"]
    assert (hung[-1]["event"], hung[-1]["tool"]) == ("tool.execute.before", "bash")
    e2e.hung(done, "Planner")
    assert hung[-1]["pid"] == ended[2]["box_pid"]  # the plugin runs in opencode itself


def test_a_limit_an_hour_away_ends_opencodes_wait_and_the_loop_stops_with_its_reset(e2e, stub):
    # opencode would sleep through the API's retry-after itself, an hour, five times over, saying
    # nothing; the plugin tells the loop, which ends the run and keeps the reset.
    stub.refused_with, stub.refusals = rate_limited(retry_after=3600), 1
    e2e.phase("Builder", "progress")
    e2e.env["GENESIS_MAX_LIMIT_WAIT"] = "30m"
    asked = time.time()
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == exitcodes.USAGE_LIMIT, done.stdout
    assert "Builder: usage limit (rate_limit) of opencode (config " in done.stdout
    assert "): 'Rate limit reached for stub-model" in done.stdout
    assert "later than GENESIS_MAX_LIMIT_WAIT" in done.stdout
    limit = json.loads((state_of(e2e.project) / "limit.json").read_text())["limits"][0]
    assert asked + 3600 <= limit["resets_at"] <= time.time() + 3600 and not limit["guessed"]
    ended = [(e["phase"], e["status"], e.get("ending")) for e in events_of(e2e.project) if e["event"] == "phase_end"]
    assert ended == [("Builder", "api_fatal", "limit")], ended
    assert not (e2e.project / "hello.txt").exists()
    assert e2e.leftovers() == []
