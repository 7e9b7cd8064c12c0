"""The real aider through the real loop, offline against a stub Chat Completions API.

The test command installs the pinned `aider-chat` into .tools/aider (a venv); where it
could not, every test here is skipped with that reason. aider has no hooks: its output is
its only sign of life, so no heartbeat is expected. It is set up the way its users do, with
its own AIDER_* variables (the model, the API base, a model metadata file that names the
stub model's prices so that it fetches none); the loop's command is just the program, and
the adapter adds the unattended flags and `--message`.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, TOOL_SHELL, TOOLS, Loop, as_agent, genesis, gone, installed
from e2e.stubs.base import scenario_of
from e2e.stubs.chat import MODEL, QUOTA, ChatStub, prompt_of, rate_limited, whole_edit
from helpers.git import git
from helpers.state import events_of

from genesis import exitcodes

AIDER = TOOLS / "aider" / "bin" / "aider"
# aider's test command for the hang: silent; its shell writes its pid, and its parent (aider),
# process group and session and aider's, for the test to look for.
HANGING_TEST = ("echo $$ > tool-shell.pid; python3 -c 'import os, sys; a = int(sys.argv[1]); "
                "print(a, os.getpgid(0), os.getsid(0), os.getpgid(a), os.getsid(a))' $PPID > layout.txt; "
                "python3 -c 'import time; time.sleep(600)'")
PRICES = {"input_cost_per_token": 0.000003, "output_cost_per_token": 0.000015}

pytestmark = pytest.mark.aider


@pytest.fixture(scope="module")
def aider() -> Path:
    return installed(AIDER, TOOLS / "aider-install.log", "aider")


def reply(body: dict) -> str:
    """The model's answer in aider's "whole" edit format (aider offers the model no tools)."""
    name, _params = scenario_of(prompt_of(body))
    if name == "progress":
        return whole_edit({"hello.txt": "hello from the agent\n"}, "Done: wrote hello.txt.")
    if name == "hang":
        return whole_edit({"hang.txt": "an edit, so that aider runs its test command\n"})
    return "Nothing needed."


@pytest.fixture
def stub():
    api = ChatStub(plain=reply).start()
    yield api
    api.shutdown()


@pytest.fixture
def e2e(aider, stub, project, tmp_path):
    as_agent(project)
    prices = tmp_path / "model-metadata.json"
    prices.write_text(json.dumps({f"openai/{MODEL}": {"max_input_tokens": 128000, "max_output_tokens": 8192,
                                                      "litellm_provider": "openai", "mode": "chat", **PRICES}}))
    env = {**os.environ, **LOOP_ENV, "GENESIS_AGENT_CMD": str(aider),
           # Quiet start-ups can be long on a busy machine (aider imports a lot before it speaks).
           "HEARTBEAT_STALE": "30s",
           "OPENAI_API_KEY": "sk-stub", "AIDER_MODEL": f"openai/{MODEL}", "AIDER_OPENAI_API_BASE": f"{stub.url}/v1",
           "AIDER_MODEL_METADATA_FILE": str(prices), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "GENESIS_PHASES": "Builder"}   # one aider start per phase is the bulk of a test's time
    return Loop(project, env, tmp_path)


def phase_ends(project: Path) -> list[dict]:
    return [e for e in events_of(project) if e["event"] == "phase_end"]


def test_there_is_no_hook_to_install(e2e):
    done = genesis("--project", str(e2e.project), "hook", "install", "--agent", "aider", check=False)
    assert done.returncode == exitcodes.USAGE and "aider has no per-tool-call hooks" in done.stderr


def test_aiders_own_retries_are_waiting_on_the_api_and_its_edit_is_committed_with_its_cost(e2e, stub):
    """A short rate limit first: aider's HTTP client retries twice by itself, quietly; aider says
    the third refusal and retries, which the loop reads as waiting on the API. Then the model
    answers: the edit is committed by the loop, its cost read, and the breaker stays closed."""
    stub.refuse(*rate_limited(retry_after=0.5), count=3)
    e2e.phase("Builder", "progress")
    done, beats = e2e.run("--max-iterations", "1", watch="Builder")
    assert done.returncode == 0, done.stdout
    assert "Builder: the model API is failing (429 RateLimitError); the agent retries by itself" in done.stdout
    assert [r["status"] for r in stub.requests][:4] == [429, 429, 429, 200]
    assert "Builder: finished" in done.stdout
    assert "no per-tool-call hook" in done.stdout   # said at start: its output is its sign of life
    project = e2e.project
    assert (project / "hello.txt").read_text() == "hello from the agent\n"
    # aider made no commit of its own (--no-auto-commits): the loop's commit holds the edit.
    subjects = git(project, "log", "--format=%s").splitlines()
    assert subjects[0].startswith("genesis: Builder, iteration 1 (finished)"), subjects
    assert "hello.txt" in git(project, "show", "--name-only", "--format=", "HEAD")
    assert beats == []   # no hook, no heartbeat: aider's output kept it alive
    builder = phase_ends(project)[0]
    assert (builder["phase"], builder["status"], builder["ending"]) == ("Builder", "exited", "finished")
    assert builder["api_retries"] == 1
    assert builder["num_turns"] == 1 and builder["cost_usd"] > 0 and builder["input_tokens"] > 0
    assert builder["result"].startswith("hello.txt")
    # The command the loop ran: the user's program, with the unattended flags and the prompt last.
    argv = next(r for r in stub.requests if r["path"].endswith("/chat/completions"))
    assert argv["body"]["model"] == MODEL and not argv["body"].get("tools")
    run_id = events_of(project)[0]["run_id"]
    log = project / "orchestrator" / "logs" / run_id / "iter-0001-Builder.log"
    transcript = log.read_text()
    assert "--yes-always --no-pretty" in transcript and "--no-auto-commits --message <prompt, " in transcript
    assert "Applied edit to hello.txt" in transcript and "Cost: $" in transcript
    assert "\x1b[" not in transcript   # plain text
    breaker = e2e.breaker()
    assert breaker["state"] == "CLOSED" and breaker["last_progress_iteration"] == 1
    assert e2e.leftovers() == []


def test_a_silent_hung_test_command_gets_stuck_and_aider_and_its_tree_are_killed(e2e):
    e2e.phase("Builder", "hang")
    e2e.env.update(GENESIS_AGENT_CMD=shlex.join([e2e.env["GENESIS_AGENT_CMD"], "--auto-test", "--test-cmd",
                                                 HANGING_TEST]),
                   HEARTBEAT_STALE="15s", PHASE_RETRIES="0")
    done, _ = e2e.run("--max-iterations", "1", trace=True)
    assert done.returncode == 0, done.stdout
    assert "Builder: stuck: no heartbeat for" in done.stdout
    tool_shell = int((e2e.project / "tool-shell.pid").read_text())
    ended = phase_ends(e2e.project)
    assert [(e["phase"], e["status"]) for e in ended] == [("Builder", "stuck")]
    aider, aider_pid = e2e.agent(ended[0]), ended[0]["box_pid"]  # the pids it tells are its box's
    shells = e2e.told(tool_shell, *TOOL_SHELL)
    assert tool_shell != aider_pid and ended[0]["killed"] >= 3   # aider, its test's shell, the sleeper
    # aider runs its test command in its own process group and session (the box's, which the
    # box's first process leads): no setsid, unlike the other CLIs' shell tools.
    parent, *layout = (e2e.project / "layout.txt").read_text().split()
    assert parent == str(aider_pid) and layout[:2] == layout[2:], layout
    assert shells and all(gone(s) for s in shells) and gone(aider)
    # The edit aider made before its test hung is kept, as partial work.
    assert (e2e.project / "hang.txt").exists()
    assert "(ended: stuck, killed; partial work)" in git(e2e.project, "log", "-1", "--format=%s")
    assert e2e.leftovers() == []


def test_no_credit_left_ends_aider_at_its_first_retry_and_stops_the_loop(e2e, stub):
    stub.refuse(*QUOTA)
    e2e.phase("Builder", "progress")
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == exitcodes.AGENT_FATAL, done.stdout
    assert "Builder: the agent reported an error that retrying cannot fix: litellm.RateLimitError" in done.stdout
    assert "You exceeded your current quota" in done.stdout and "(billing_error, HTTP 429)" in done.stdout
    ended = phase_ends(e2e.project)
    assert [(e["phase"], e["status"], e["ending"]) for e in ended] == [("Builder", "api_fatal", "fatal")]
    # aider would have retried for about two minutes (each try is three requests: its HTTP
    # client retries twice by itself); it was ended at its first retry.
    assert 3 <= len(stub.requests) <= 6 and ended[0]["duration"] < 60
    assert e2e.leftovers() == []
