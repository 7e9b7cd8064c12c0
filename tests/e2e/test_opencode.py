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


def test_progress_every_tool_call_beats_and_the_breaker_stays_closed(e2e):
    e2e.phase("Builder", "progress")
    done, beats = e2e.run("--max-iterations", "1", watch="Builder", trace=True)
    run_id, transcript = e2e.progressed(done)
    session = session_of(e2e.project / "orchestrator" / "logs" / run_id / "iter-0001-Builder.log")
    assert f"session {session}" in transcript and "tool bash: $ echo hello from the agent > hello.txt" in transcript
    assert "assistant: Done: wrote hello.txt and committed it." in transcript
    # Two bash calls, each beating before and after. The beats are read by polling the one heartbeat
    # file, so a beat the next one overwrote within a poll (opencode's after and before can come
    # milliseconds apart) may go unseen: each event is seen, never more often than it fired.
    assert 1 <= calls(beats, "tool.execute.before", "bash") <= 2, beats
    assert 1 <= calls(beats, "tool.execute.after", "bash") <= 2, beats
    assert {tool_event(b["event"]) for b in beats} == {"PreToolUse", "PostToolUse"}
    assert all(b["session_id"] == session and b["agent"] == "Builder" for b in beats)
    assert {b["run_id"] for b in beats} == {run_id}
    builder = e2e.ended()[0]  # the plugin's process: the opencode the box runs, its pid there
    assert {b["pid"] for b in beats} == {builder["box_pid"]} and e2e.agent(builder).pid == builder["pid"]


def test_a_hung_shell_command_gets_stuck_and_opencode_and_the_tool_shell_are_killed(e2e):
    e2e.phase("Builder", "hang")
    e2e.env.update(TOOL_SILENT="3s", PHASE_RETRIES="0")
    done, beats = e2e.run("--max-iterations", "1", watch="Builder", trace=True)
    assert done.returncode == 0, done.stdout
    assert "Builder: stuck: inside bash" in done.stdout, done.stdout
    assert (beats[-1]["event"], beats[-1]["tool"]) == ("tool.execute.before", "bash")
    _, ended = e2e.hung(done)
    assert [(e["phase"], e["status"]) for e in ended] == [("Builder", "stuck")]
    assert beats[-1]["pid"] == ended[0]["box_pid"]  # the plugin runs in opencode itself


def test_a_rate_limit_that_outlasts_opencodes_retries_is_waited_out_and_the_phase_runs_again(e2e, stub):
    # opencode retries a 429 five times by itself, each after the API's retry-after (the plugin
    # tells the loop so); the sixth refusal ends its run with the error, whose reset the loop waits for.
    stub.refused_with, stub.refusals = rate_limited(retry_after=0.6), 6
    e2e.phase("Builder", "progress")
    e2e.env["GENESIS_LIMIT_MARGIN_SECONDS"] = "0"
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "the agent retries by itself (attempt 1 of 5" in done.stdout, done.stdout
    assert "Builder: usage limit (rate_limit) of opencode (config " in done.stdout and ") until " in done.stdout
    assert "the agent said 'Rate limit reached for stub-model" in done.stdout
    assert "Builder: finished" in done.stdout
    assert (e2e.project / "hello.txt").read_text() == "hello from the agent\n"
    ended = [(e["phase"], e.get("ending")) for e in events_of(e2e.project) if e["event"] == "phase_end"]
    assert ended[0] == ("Builder", "limit"), ended
    refused = [r for r in stub.requests if r["status"] == 429]
    assert len(refused) == 6
    run_id = events_of(e2e.project)[0]["run_id"]
    log = e2e.project / "orchestrator" / "logs" / run_id / "iter-0001-Builder.log"
    assert "API retry 5/5 in 0.6s (Rate limit reached" in log.read_text()
    assert e2e.leftovers() == []


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
