"""Qwen Code's adapter: its command line, its output read from real captured runs, its hook."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import paths

from genesis.agents import adapter_for, adapter_named
from genesis.agents.base import ApiError, Limit
from genesis.agents.qwen import QWEN_HOOKS, QwenCode, QwenStreamReader, QwenTextReader, classify, config_dir
from genesis.health.heartbeat import hook_script
from genesis.phases import Phase, Trigger

FIXTURES = paths.FIXTURES / "qwen"
PHASE = Phase("Builder", Trigger("always"), Path("builder.md"))
NOW = dt.datetime(2026, 11, 21, 14, 0, tzinfo=dt.timezone.utc).timestamp()


def read(name: str, now: float = NOW) -> tuple[QwenStreamReader, list[str]]:
    """A captured run (its stdout and stderr, one stream as the loop reads it), fed line by line."""
    mono = iter(range(1000))
    reader = QwenStreamReader(mono=lambda: float(next(mono)), wall=lambda: now)
    transcript = []
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        transcript += reader.feed(line)
    return reader, transcript


# --- the command line -------------------------------------------------------------------------

def test_qwen_is_recognised_and_gets_auto_approval_and_stream_json_once():
    qwen = adapter_for(("/usr/local/bin/qwen",))
    assert isinstance(qwen, QwenCode) and adapter_named("qwen").name == "qwen"
    argv = qwen.command(("qwen",))
    assert argv == ("qwen", "--yolo", "-o", "stream-json")
    assert qwen.command(argv) == argv and qwen.raw_suffix(argv) == ".jsonl"
    assert isinstance(qwen.reader(argv), QwenStreamReader)
    keyed = ("qwen", "--auth-type", "openai", "-m", "qwen3-coder-plus")
    assert qwen.command(keyed) == keyed + ("--yolo", "-o", "stream-json")


def test_the_users_own_approval_mode_and_format_win():
    qwen = QwenCode()
    assert qwen.command(("qwen", "-y", "--output-format=stream-json")) == ("qwen", "-y", "--output-format=stream-json")
    assert qwen.command(("qwen", "--approval-mode", "auto-edit")) == \
        ("qwen", "--approval-mode", "auto-edit", "-o", "stream-json")
    text = qwen.command(("qwen", "-o", "text"))
    assert text == ("qwen", "-o", "text", "--yolo")
    assert qwen.raw_suffix(text) is None and isinstance(qwen.reader(text), QwenTextReader)


def test_a_trailing_prompt_flag_stays_last_so_the_prompt_follows_it():
    assert QwenCode().command(("qwen", "-m", "m", "-p")) == ("qwen", "-m", "m", "--yolo", "-o", "stream-json", "-p")


def test_a_turn_cap_maps_to_max_session_turns_and_a_budget_is_refused():
    capped = Phase("Builder", Trigger("always"), Path("builder.md"), max_turns=30)
    assert QwenCode().command(("qwen",), capped)[-2:] == ("--max-session-turns", "30")
    assert QwenCode().options_problem(("qwen",), capped) is None
    budget = Phase("Builder", Trigger("always"), Path("builder.md"), max_budget_usd=2.0)
    assert "MAX_BUDGET_USD" in QwenCode().options_problem(("qwen",), budget)
    assert QwenCode().options_problem(("qwen",), PHASE) is None


# --- the output -------------------------------------------------------------------------------

def test_a_real_run_reads_as_a_transcript_with_its_result_and_tokens():
    reader, transcript = read("progress")
    assert transcript[0].startswith("Ripgrep not available")   # stderr shares the stream: shown as it is
    assert any(line.startswith("session ") and line.endswith("model stub-model") for line in transcript)
    assert "tool run_shell_command: $ echo hello from the agent > hello.txt" in transcript
    assert "tool run_shell_command: $ git add -A && git commit -qm 'agent: hello'" in transcript
    assert "assistant: Done: wrote hello.txt and committed it." in transcript
    assert not [line for line in transcript if line.startswith("{")]
    ending = reader.ending(0)
    assert ending.final_text == "Done: wrote hello.txt and committed it."
    assert ending.limit is None and ending.api_error is None and reader.turns == 3
    record = json.loads((FIXTURES / "progress.jsonl").read_text().splitlines()[-1])
    # Qwen's input_tokens already count the cached ones: taken as they are, not summed again.
    assert (ending.result.input_tokens, ending.result.output_tokens) == \
        (record["usage"]["input_tokens"], record["usage"]["output_tokens"])
    assert ending.result.total_cost_usd is None


def test_a_failed_tool_call_shows_its_output():
    _, transcript = read("failing-tool")
    assert "tool run_shell_command: $ ls does-not-exist" in transcript
    assert any(line.startswith("  error: ") for line in transcript)


def test_a_quota_that_names_its_reset_is_a_usage_limit_until_then():
    reader, transcript = read("quota-reset")
    ending = reader.ending(1)
    assert ending.api_error is None and ending.limit is not None
    assert ending.limit.resets_at == dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc).timestamp()
    assert ending.limit.kind == "quota" and ending.limit.message.startswith("Quota exhausted: ")
    assert ending.final_text == "" and any(line.startswith("result: error") for line in transcript)


def test_no_credit_left_is_fatal_at_the_first_of_the_clis_retries():
    reader, transcript = read("no-credit")
    assert "API retry 1/1 in 1.0s" in transcript
    assert reader.hopeless is not None and reader.hopeless.code == "insufficient_quota"
    assert not reader.hopeless.retryable and reader.hopeless.status == 429
    ending = reader.ending(1)
    assert ending.limit is None and ending.api_error is not None
    assert (ending.api_error.retryable, ending.api_error.status, ending.api_error.code) == \
        (False, 429, "insufficient_quota")


def test_the_clis_retry_says_how_long_it_waits_and_why():
    reader = QwenStreamReader(mono=lambda: 5.0)
    reader.feed(json.dumps({"type": "system", "subtype": "retry", "session_id": "s",
                            "data": {"reason": "retry", "attempt": 2, "maxRetries": 10, "delayMs": 120000}}))
    retry = reader.retry
    assert (retry.attempt, retry.max_retries, retry.delay, retry.seen) == (2, 10, 120.0, 5.0)
    reader.feed("Retrying in 120s (attempt 2/10): [API Error: 429 Rate limit reached for requests]")
    assert (reader.retry.status, reader.retry.error, reader.retry.seen) == (429, "rate_limit", 5.0)
    assert reader.hopeless is None   # a rate limit passes: the CLI's own retries may get through
    reader.feed(json.dumps({"type": "system", "subtype": "retry", "data": {"reason": "retry"}}))
    assert reader.retry is None      # the wait is over: it tries again now


def test_an_outage_the_cli_retried_in_silence_ends_as_a_retryable_error():
    reader, transcript = read("outage")
    assert reader.retry is None and reader.hopeless is None   # 5xx: its HTTP client's quiet retries only
    ending = reader.ending(1)
    assert ending.limit is None and ending.api_error is not None
    assert (ending.api_error.retryable, ending.api_error.status, ending.api_error.code) == (True, 500, "server_error")


def test_a_refused_login_is_fatal():
    ending = read("unauthorized")[0].ending(1)
    assert ending.api_error is not None and not ending.api_error.retryable
    assert (ending.api_error.status, ending.api_error.code) == (401, "authentication_failed")


@pytest.mark.parametrize("message, expected", [
    ("[API Error: 429 Rate limit reached]\nPossible quota limitations in place or slow response times detected.",
     (True, 429, "rate_limit")),
    ("[API Error: 500 The server had an error while processing your request.]", (True, 500, "server_error")),
    ("[API Error: 503 Service Unavailable]", (True, 503, "server_error")),
    ("[API Error: Connection error.]", (True, None, "connection_failed")),
    ("[API Error: 403 Forbidden]", (False, 403, "authentication_failed")),
    ("[API Error: 404 The model `m` does not exist]", (False, 404, "model_not_found")),
    ("[API Error: 400 Invalid request]", (False, 400, "invalid_request")),
])
def test_the_clis_api_error_words_are_classified(message, expected):
    found = classify(message, NOW)
    assert isinstance(found, ApiError) and (found.retryable, found.status, found.code) == expected


def test_a_reset_already_past_or_missing_leaves_the_wait_to_the_loop():
    assert classify("Quota exhausted: quota exceeded, will reset at 2026-11-20T00:00:00Z", NOW) == \
        Limit(None, "quota", "Quota exhausted: quota exceeded, will reset at 2026-11-20T00:00:00Z")
    assert classify("Quota exhausted: quota exceeded, resets soon", NOW).resets_at is None
    assert classify("Max session turns reached", NOW) is None


def test_the_models_words_are_never_read_as_an_error():
    reader = QwenStreamReader()
    said = "[API Error: 429 You exceeded your current quota, please check your plan and billing details.]"
    reader.feed(json.dumps({"type": "assistant", "parent_tool_use_id": None,
                            "message": {"content": [{"type": "text", "text": said}]}}))
    reader.feed(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": said}))
    ending = reader.ending(0)
    assert ending.limit is None and ending.api_error is None and ending.final_text == said


def test_text_output_reads_the_clis_error_line_only_on_a_failed_run():
    reader = QwenTextReader(now=lambda: NOW)
    reader.feed("[API Error: 401 Incorrect API key provided]")
    assert reader.ending(1).api_error.code == "authentication_failed"
    assert reader.ending(0).api_error is None


# --- the hook ---------------------------------------------------------------------------------

def test_the_hook_file_follows_qwen_home(tmp_path):
    assert config_dir({"HOME": str(tmp_path)}) == tmp_path / ".qwen"
    assert config_dir({"HOME": str(tmp_path), "QWEN_HOME": "~/qh"}) == tmp_path / "qh"
    assert config_dir({"HOME": str(tmp_path), "QWEN_HOME": str(tmp_path / "abs")}) == tmp_path / "abs"
    assert QWEN_HOOKS.path({"HOME": str(tmp_path)}) == tmp_path / ".qwen" / "settings.json"


def test_install_merges_the_tool_events_with_a_matcher_keeps_the_rest_and_uninstall_restores(tmp_path):
    path = tmp_path / ".qwen" / "settings.json"
    path.parent.mkdir()
    theirs = {"model": {"name": "qwen3-coder-plus"},
              "hooks": {"PreToolUse": [{"matcher": "run_shell_command",
                                        "hooks": [{"type": "command", "command": "x"}]}]}}
    path.write_text(json.dumps(theirs, indent=2))
    path.chmod(0o600)
    command = QWEN_HOOKS.command_for(hook_script())
    change = QWEN_HOOKS.install(path, command, tmp_path / "state", now=NOW)
    assert set(change.added_events) == {"PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart"}
    data = json.loads(path.read_text())
    assert data["model"] == theirs["model"] and data["hooks"]["PreToolUse"][0] == theirs["hooks"]["PreToolUse"][0]
    assert data["hooks"]["PostToolUse"] == [{"matcher": "*", "hooks": [{"type": "command", "command": command,
                                                                         "timeout": 10}]}]
    assert "matcher" not in data["hooks"]["SessionStart"][0]
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert QWEN_HOOKS.install(path, command, tmp_path / "state", now=NOW).added_events == ()
    assert QWEN_HOOKS.installed_events(path, command) == sorted(change.added_events)
    QWEN_HOOKS.uninstall(path, tmp_path / "state", now=NOW)
    assert json.loads(path.read_text()) == theirs


def test_the_heartbeat_script_reads_qwens_real_payloads(tmp_path):
    beats = tmp_path / "beats"
    beats.mkdir(mode=0o700)
    target = beats / "Builder.json"
    env = {**os.environ, "GENESIS_HEARTBEAT_FILE": str(target), "GENESIS_AGENT": "Builder", "GENESIS_RUN_ID": "run-qwen-hook"}
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        payload = (FIXTURES / f"hook-{event}.json").read_bytes()
        subprocess.run(["bash", str(hook_script())], input=payload, env=env, check=True, timeout=30)
        beat = json.loads(target.read_text())
        assert (beat["event"], beat["tool"], beat["agent"], beat["run_id"]) == \
            (event, "run_shell_command", "Builder", "run-qwen-hook")
        assert beat["session_id"] == json.loads(payload)["session_id"]
    calls = [json.loads(line) for line in (beats / "Builder.tools.jsonl").read_text().splitlines()]
    # Qwen's own call id pairs each tool call's start with its end.
    assert [(c["e"], c.get("ok")) for c in calls] == [("PreToolUse", None), ("PostToolUse", True),
                                                      ("PostToolUseFailure", False)]
    assert calls[0]["id"] == calls[1]["id"] != calls[2]["id"]
