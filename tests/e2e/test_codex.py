"""The real Codex CLI through the real loop, offline against a stub Responses API.

The test command installs the pinned `@openai/codex` into .tools/; where it could not,
every test here is skipped with that reason. The user's command is just `codex`: the
adapter makes it `codex exec --json ...`. The hook is installed the user's way and trusted
by that install, so Codex runs it without `--dangerously-bypass-hook-trust`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, TOOLS, Loop, as_agent, calls, genesis, gone, installed
from e2e.stubs.responses import API_KEY_ENV, ResponsesStub, provider_config, usage_limit
from helpers.state import events_of, state_of

from genesis import exitcodes

CODEX = TOOLS / "codex" / "node_modules" / ".bin" / "codex"

pytestmark = pytest.mark.codex


@pytest.fixture(scope="module")
def codex() -> Path:
    return installed(CODEX, TOOLS / "codex-install.log", "Codex")


@pytest.fixture
def stub():
    api = ResponsesStub().start()
    yield api
    api.shutdown()


@pytest.fixture
def e2e(codex, stub, project, hermetic, tmp_path):
    """A project, Codex pointed at the stub in its own home, the hook installed the user's way."""
    as_agent(project)
    codex_home = hermetic / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(provider_config(stub.url))
    done = genesis("--project", str(project), "hook", "install", "--agent", "codex")
    assert str(codex_home / "hooks.json") in done.stdout
    # As the README says: GENESIS_AGENT_CLI alone, the program found on PATH.
    env = {**os.environ, **LOOP_ENV, API_KEY_ENV: "sk-stub", "GENESIS_AGENT_CLI": "codex",
           "PATH": f"{codex.parent}{os.pathsep}{os.environ['PATH']}"}
    loop = Loop(project, env, tmp_path)
    loop.phase("Planner", "quick")  # the Planner runs too (no TASKS.md): a quick turn, no change
    return loop


def thread_of(log: Path) -> str:
    """The thread (session) id in the raw JSONL kept beside a phase's transcript."""
    for line in log.with_suffix(".jsonl").read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("type") == "thread.started":
            return json.loads(line)["thread_id"]
    raise AssertionError(f"no thread.started in {log.with_suffix('.jsonl')}")


def test_the_install_records_the_trust_codex_checks(e2e, hermetic):
    config = (hermetic / ".codex" / "config.toml").read_text()
    hooks = str(hermetic / ".codex" / "hooks.json")
    for event in ("pre_tool_use", "post_tool_use", "session_start"):
        assert f'[hooks.state."{hooks}:{event}:0:0"]\ntrusted_hash = "sha256:' in config
    assert config.startswith('model = "stub-model"\nmodel_provider = "stub"\n')  # the user's settings kept


def test_a_limit_is_waited_out_every_tool_call_beats_and_a_hung_command_is_killed_in_one_night(e2e, stub):
    """Three Codex runs in one night. The Builder's first meets a usage limit that resets at once
    (Codex does not retry it): the loop waits it out and runs the phase again, which makes progress,
    each tool call beating. The Planner then hangs in a shell command: stuck, and killed with its
    tool shell and the hooks' parent."""
    stub.refuse(*usage_limit(time.time() + 1), count=1)
    e2e.phase("Builder", "progress")
    e2e.phase("Planner", "hang")
    e2e.env.update(GENESIS_LIMIT_MARGIN_SECONDS="0", PHASE_RETRIES="0")
    done, beats = e2e.run("--max-iterations", "1", watch=("Builder", "Planner"), trace=True)
    # The limit, in Codex's words, and the wait for its reset.
    assert "Builder: usage limit of codex (config " in done.stdout and ") until " in done.stdout
    assert "the agent said 'You’ve hit your usage limit" in done.stdout
    ended = [(e["phase"], e["status"], e.get("ending")) for e in e2e.ended()]
    assert ended == [("Builder", "exited", "limit"), ("Builder", "exited", "finished"),
                     ("Planner", "stuck", "stuck")], ended
    # The run after the wait: progress.
    run_id, transcript = e2e.progressed(done)
    assert "agent: codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --" in done.stdout
    thread = thread_of(e2e.log("Builder"))
    assert f"session {thread}" in transcript and "assistant: Done: wrote hello.txt and committed it." in transcript
    assert "tool Bash: $ echo hello from the agent > hello.txt" in transcript
    # Its tool calls (each run beats SessionStart too, the refused one with a thread of its own).
    built = [b for b in beats if b["agent"] == "Builder" and b["event"] != "SessionStart"]
    logged = e2e.tool_calls("Builder")
    assert calls(logged, "PreToolUse", "Bash") == 2 and calls(logged, "PostToolUse", "Bash") == 2, logged
    assert all(b["session_id"] == thread for b in built)
    assert {b["run_id"] for b in beats} == {run_id}
    # The hooks' parent: Codex's native binary, which the `codex` launcher the loop started runs.
    assert len({b["pid"] for b in built}) == 1
    # The hang.
    assert "Planner: stuck: no heartbeat for" in done.stdout
    hung = [b for b in beats if b["agent"] == "Planner"]
    assert (hung[-1]["event"], hung[-1]["tool"]) == ("PreToolUse", "Bash")
    tool_shell, _ = e2e.hung(done, "Planner")
    parents = e2e.told(hung[-1]["pid"], "codex")  # the hooks' parent too, as the host sees it
    assert tool_shell != hung[-1]["pid"] and parents and all(gone(p) for p in parents)


def minute(epoch: float) -> float:
    """Codex writes a reset to the minute, in the machine's zone."""
    return dt.datetime.fromtimestamp(epoch).replace(second=0, microsecond=0).timestamp()


def test_a_usage_limit_beyond_the_longest_wait_stops_the_loop_with_its_reset(e2e, stub):
    resets = time.time() + 2 * 3600
    stub.refuse(*usage_limit(resets))
    e2e.phase("Builder", "progress")
    e2e.env["GENESIS_MAX_LIMIT_WAIT"] = "30m"
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == exitcodes.USAGE_LIMIT, done.stdout
    assert "Builder: usage limit of codex (config " in done.stdout  # the CLI and the account it belongs to
    assert "): 'You’ve hit your usage limit. Upgrade to Pro" in done.stdout
    assert "later than GENESIS_MAX_LIMIT_WAIT" in done.stdout
    limit = json.loads((state_of(e2e.project) / "limit.json").read_text())["limits"][0]
    assert limit["resets_at"] == minute(resets) and not limit["guessed"] and limit["cli"] == "codex"
    assert [r["status"] for r in stub.requests if r["path"].endswith("/responses")] == [429]  # no retry
    assert e2e.leftovers() == []


def test_an_api_that_never_answers_is_no_silent_start_codex_spoke_first_and_the_stale_window_judges(e2e, stub):
    """The stub holds every request: Codex prints thread.started and turn.started before its request,
    so its silence is not a hang at start-up (the first-event window, 15 s here, does not fire): the
    stale window, which cannot tell a held request from a model that thinks, ends it."""
    stub.hold()
    e2e.phase("Builder", "progress")
    e2e.env.update(PHASE_RETRIES="0", AGENT_FIRST_EVENT_WINDOW="15s", HEARTBEAT_STALE="40s",
                   PHASE_Planner_TRIGGER="never")
    done, _ = e2e.run("--max-iterations", "1")
    ended = [e for e in events_of(e2e.project) if e["event"] == "phase_end" and e["phase"] == "Builder"]
    assert [(e["status"], e["window"]) for e in ended] == [("stuck", "stale")], done.stdout
    assert "no first event" not in done.stdout and ended[0]["duration"] >= 40
    assert [r["status"] for r in stub.requests if r["path"].endswith("/responses")][:1] == [0]  # held, unanswered
    assert e2e.leftovers() == []
