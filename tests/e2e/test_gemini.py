"""The real Gemini CLI through the real loop, offline against a stub Gemini API.

The test command installs the pinned `@google/gemini-cli` into .tools/; where it could not,
every test here is skipped with that reason. The hook is installed the user's way
(`genesis hook install --agent gemini`) into a settings.json that already holds the user's
own settings: an API key's auth type (with GOOGLE_GEMINI_BASE_URL set and no auth type
named, the CLI takes it for a gateway and refuses to start), no update checks, no usage
statistics. The loop itself adds GEMINI_CLI_TRUST_WORKSPACE (the adapter's environment).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, TOOLS, Loop, as_agent, genesis, installed
from e2e.stubs.gemini import MODEL, GeminiStub, quota
from helpers.state import events_of

GEMINI = TOOLS / "gemini" / "node_modules" / ".bin" / "gemini"
USAGE_LIMIT_EXIT = 20

pytestmark = pytest.mark.gemini


@pytest.fixture(scope="module")
def gemini() -> Path:
    return installed(GEMINI, TOOLS / "gemini-install.log", "Gemini CLI")


@pytest.fixture
def stub():
    api = GeminiStub().start()
    yield api
    api.shutdown()


def user_settings(home: Path) -> Path:
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}},
                                "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                                "privacy": {"usageStatisticsEnabled": False}}, indent=2))
    return path


@pytest.fixture
def e2e(gemini, stub, project, hermetic, tmp_path):
    """A project with the hook installed the user's way, and the loop's environment: the
    Builder alone, so that each test starts the CLI as few times as it can."""
    as_agent(project)
    settings = user_settings(hermetic)
    done = genesis("--project", str(project), "hook", "install", "--agent", "gemini")
    assert str(settings) in done.stdout
    assert json.loads(settings.read_text())["security"]["auth"]["selectedType"] == "gemini-api-key"
    # The CLI starts Node twice (it relaunches itself with a larger heap): 3 s before its first
    # output on an idle machine, over 6 s on a busy one. A window the start fits in, where
    # staleness is not what a test is about.
    env = {**os.environ, **LOOP_ENV, "GENESIS_PHASES": "Builder", "HEARTBEAT_STALE": "30s",
           "GOOGLE_GEMINI_BASE_URL": stub.url, "GEMINI_API_KEY": "stub-key", "TMPDIR": str(tmp_path),
           "GENESIS_AGENT_CLI": "gemini", "GENESIS_AGENT_CMD": f"{gemini} -m {MODEL}"}
    env.pop("GEMINI_CLI_TRUST_WORKSPACE", None)
    return Loop(project, env, tmp_path)


def session_of(log: Path) -> str:
    """The session id in the raw stream-json kept beside a phase's transcript (.log -> .jsonl)."""
    for line in log.with_suffix(".jsonl").read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("type") == "init":
            return json.loads(line)["session_id"]
    raise AssertionError(f"no init record in {log.with_suffix('.jsonl')}")


def test_a_quota_wait_is_not_stuck_every_tool_call_beats_and_a_hung_call_is_killed_in_one_night(e2e, stub, gemini):
    """Two Gemini CLI runs in one night. The Builder's first turn meets a per-minute quota with a
    14 s wait: the CLI waits it out by itself, with no tool call and nothing on stdout meanwhile,
    longer than the stale window. It says so on stderr ("Retrying after 15234ms..."): the loop
    lets it be, and the run makes progress, each tool call beating. The Planner then hangs in a
    shell call: stuck, and killed with its tool shell."""
    stub.refuse(*quota(retry_delay="14s"), count=1, path=":streamGenerateContent")
    e2e.phase("Builder", "progress")
    e2e.phase("Planner", "hang")
    del e2e.env["GENESIS_PHASES"]   # the Builder and the Planner (no TASKS.md: no Criticizer)
    e2e.env.update(GENESIS_AGENT_CMD=str(gemini),  # just the program: the adapter adds the rest; no model
                   HEARTBEAT_STALE="10s",  # shorter than the CLI's wait; its start fits in it
                   PHASE_RETRIES="0")
    done, beats = e2e.run("--max-iterations", "1", watch=("Builder", "Planner"), trace=True)
    ended = [(e["phase"], e["status"]) for e in events_of(e2e.project) if e["event"] == "phase_end"]
    assert ended == [("Builder", "exited"), ("Planner", "stuck")], ended
    # The quota wait inside the CLI.
    assert "the agent retries by itself (attempt 1 of 10" in done.stdout
    assert "waiting on the API, not stuck" in done.stdout
    asked = stub.generations()
    assert [r["status"] for r in asked] == [429, 200, 200, 200, 200]  # the Builder's four, the Planner's one
    assert asked[1]["at"] - asked[0]["at"] >= 14
    assert {r["status"] for r in stub.requests if r not in asked} == {200}  # the routing questions
    # The progress.
    run_id, transcript = e2e.progressed(done)
    session = session_of(e2e.log("Builder"))
    assert f"session {session}: model auto" in transcript  # the CLI routes each turn itself
    assert "tool run_shell_command: $ echo hello from the agent > hello.txt" in transcript
    # A beat before and after each shell call, named as Gemini CLI names them.
    built = [b for b in beats if b["agent"] == "Builder"]
    assert {(b["event"], b["tool"]) for b in built} == {("BeforeTool", "run_shell_command"),
                                                       ("AfterTool", "run_shell_command")}
    assert all(b["session_id"] == session for b in built)
    assert {b["run_id"] for b in beats} == {run_id}
    # The hang.
    assert "Planner: stuck: no heartbeat for" in done.stdout, done.stdout
    hung = [b for b in beats if b["agent"] == "Planner"]
    assert (hung[-1]["event"], hung[-1]["tool"]) == ("BeforeTool", "run_shell_command")
    e2e.hung(done, "Planner")


def test_a_quota_the_cli_will_not_wait_for_is_a_usage_limit_and_its_reset_is_read(e2e, stub):
    """The CLI waits out a quota of up to 300 s by itself; a longer one ends its run at once.
    Past GENESIS_MAX_LIMIT_WAIT the loop stops, naming the reset. (A daily quota, which ends the
    run at once too, is read until midnight Pacific: tests/agents/test_gemini.py.)"""
    stub.refuse(*quota(retry_delay="3600s"))
    e2e.phase("Builder", "progress")
    e2e.env["GENESIS_MAX_LIMIT_WAIT"] = "60s"
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == USAGE_LIMIT_EXIT, done.stdout
    asked = stub.generations()
    assert [r["status"] for r in asked] == [429]  # one request: no retry inside the CLI
    stop = [e for e in events_of(e2e.project) if e["event"] == "limit_stop"]
    assert len(stop) == 1 and stop[0]["phase"] == "Builder" and stop[0]["kind"] == "quota"
    assert asked[0]["at"] + 3600 <= stop[0]["resets_at"] <= stop[0]["epoch"] + 3600
    assert "usage limit" in done.stdout and "GENESIS_MAX_LIMIT_WAIT" in done.stdout
    assert not (e2e.project / "hello.txt").exists()
    assert e2e.leftovers() == []


def test_an_api_that_never_answers_is_no_silent_start_gemini_spoke_first_and_the_stale_window_judges(e2e, stub):
    """The stub holds every request: Gemini CLI prints its init record before its request (seconds
    after its start, which launches Node twice), so the first-event window (30 s here) does not
    fire; the stale window ends it."""
    stub.hold()
    e2e.phase("Builder", "progress")
    e2e.env.update(PHASE_RETRIES="0", AGENT_FIRST_EVENT_WINDOW="30s", HEARTBEAT_STALE="45s")
    done, _ = e2e.run("--max-iterations", "1")
    ended = [e for e in events_of(e2e.project) if e["event"] == "phase_end" and e["phase"] == "Builder"]
    assert [(e["status"], e["window"]) for e in ended] == [("stuck", "stale")], done.stdout
    assert "no first event" not in done.stdout and ended[0]["duration"] >= 45
    assert stub.requests and {r["status"] for r in stub.requests} == {0}  # every request held, unanswered
    assert e2e.leftovers() == []
