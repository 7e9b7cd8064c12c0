"""Copilot CLI's adapter: its command line, its JSONL and text output as the real CLI wrote
them (fixtures captured from Copilot CLI 1.0.102 against a stub provider), and its hook file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import paths

from genesis.agents import adapter_for, adapter_named
from genesis.agents.copilot import CopilotCli, CopilotTextReader, text_error
from genesis.agents.copilot.hooks import COPILOT_HOOKS, FILE_NAME, config_dir
from genesis.agents.copilot.stream import CopilotJsonReader, classify
from genesis.agents.hook.selftest import BROKEN, WORKING, spec_self_test
from genesis.agents.hook.settingsfile import SettingsError
from genesis.health.heartbeat import hook_script
from genesis.phases import Phase, Trigger

FIXTURES = paths.FIXTURES / "copilot"
NOW = 1_800_000_000.0
COMMAND = COPILOT_HOOKS.command_for(hook_script())


def read(name: str, reader=None, returncode: int | None = 1):
    reader = reader or CopilotJsonReader(wall=lambda: NOW)
    lines = []
    for line in (FIXTURES / name).read_text().splitlines():
        lines += reader.feed(line)
    return lines, reader.ending(returncode)


# --- the command line ---------------------------------------------------------------------

def test_the_adapter_is_chosen_by_the_programs_name_or_by_name():
    assert isinstance(adapter_for(("/opt/tools/node_modules/.bin/copilot",)), CopilotCli)
    assert isinstance(adapter_named("copilot"), CopilotCli)
    assert type(adapter_for(("copilot-wrapper",))) is not CopilotCli


def test_copilot_gets_auto_approval_json_output_and_the_prompt_flag_last():
    copilot = CopilotCli()
    argv = copilot.command(("copilot",))
    assert argv == ("copilot", "--allow-all-tools", "--output-format", "json", "-p")
    assert copilot.command(argv) == argv   # never twice
    assert copilot.raw_suffix(argv) == ".jsonl" and isinstance(copilot.reader(argv), CopilotJsonReader)


def test_the_users_own_choices_win_and_a_stray_prompt_flag_moves_to_the_end():
    copilot = CopilotCli()
    assert copilot.command(("copilot", "-p", "--yolo", "--output-format=text")) == \
        ("copilot", "--yolo", "--output-format=text", "-p")
    text = copilot.command(("copilot", "--allow-all", "--output-format", "text", "--prompt"))
    assert text == ("copilot", "--allow-all", "--output-format", "text", "-p")
    assert copilot.raw_suffix(text) is None and isinstance(copilot.reader(text), CopilotTextReader)
    assert copilot.command(("copilot", "--model", "gpt-5")) == \
        ("copilot", "--model", "gpt-5", "--allow-all-tools", "--output-format", "json", "-p")


def test_turn_and_budget_caps_are_refused():
    capped = Phase("Builder", Trigger("always"), Path("builder.md"), max_turns=30)
    assert "does not take them" in CopilotCli().options_problem(("copilot",), capped)
    assert CopilotCli().options_problem(("copilot",), Phase("Builder", Trigger("always"), Path("b.md"))) is None


# --- the JSONL output ---------------------------------------------------------------------

def test_a_successful_run_is_a_readable_transcript_with_its_final_words():
    lines, ending = read("success.jsonl", returncode=0)
    assert lines[0] == "model stub-model"
    assert "tool bash: $ echo hello from the agent > hello.txt" in lines
    assert "assistant: Done: wrote hello.txt." in lines
    assert lines[-1].startswith("result: success, 3 turns, ") and "session 837701f7-" in lines[-1]
    assert not [line for line in lines if line.startswith("{")]
    assert ending.final_text == "Done: wrote hello.txt." and ending.limit is None and ending.api_error is None
    result = ending.result
    assert (result.is_error, result.num_turns, result.session_id) == (False, 3, "837701f7-a200-451c-b148-058217fa1ff7")
    assert result.total_cost_usd is None and result.input_tokens is None   # JSONL reports neither


def test_no_credit_left_is_fatal_after_copilots_own_retries():
    lines, ending = read("quota.jsonl")
    assert sum(line.startswith("API call failed (429, try ") for line in lines) == 6
    assert sum(line == "API retry (rate_limit)" for line in lines) == 5
    error = ending.api_error
    assert (error.retryable, error.status, error.code) == (False, 429, "insufficient_quota")
    assert error.message.startswith("Failed to get response from the AI model; retried 5 times")
    assert "You exceeded your current quota" in error.message and ending.limit is None
    assert ending.result.is_error and ending.final_text == ""


def test_a_rate_limit_and_a_server_error_are_retryable():
    _, limited = read("rate-limit.jsonl")
    assert (limited.api_error.retryable, limited.api_error.status, limited.api_error.code) == (True, 429, "rate_limit")
    _, outage = read("server-error.jsonl")
    assert (outage.api_error.retryable, outage.api_error.status, outage.api_error.code) == (True, 500, "server_error")
    assert limited.limit is None and outage.limit is None


def test_a_refused_key_is_fatal_and_an_unreachable_api_is_retryable():
    lines, refused = read("unauthorized.jsonl")
    assert any(line.startswith("API error (authentication, 401): Authentication failed") for line in lines)
    assert (refused.api_error.retryable, refused.api_error.status, refused.api_error.code) == \
        (False, 401, "authentication_failed")
    _, unreachable = read("unreachable.jsonl")
    assert (unreachable.api_error.retryable, unreachable.api_error.status, unreachable.api_error.code) == \
        (True, None, "connection_failed")
    assert unreachable.api_error.message.startswith("Could not connect to local model provider")


def test_a_killed_run_ended_with_nothing_to_say():
    head = [line for line in (FIXTURES / "success.jsonl").read_text().splitlines() if '"type":"result"' not in line]
    reader = CopilotJsonReader()
    for line in head[: len(head) // 2]:
        reader.feed(line)
    ending = reader.ending(None)
    assert (ending.result, ending.limit, ending.api_error, ending.final_text) == (None, None, None, "")


def event(kind: str, **data) -> str:
    return json.dumps({"type": kind, "data": data, "id": "x", "timestamp": "2026-11-21T14:00:00.000Z"})


def result(code: int) -> str:
    return json.dumps({"type": "result", "sessionId": "s1", "exitCode": code, "usage": {"premiumRequests": 0}})


def test_words_in_the_models_text_are_never_a_limit_and_a_subagents_error_never_ends_the_run():
    reader = CopilotJsonReader()
    reader.feed(event("session.error", errorType="rate_limit", errorCode="user_weekly_rate_limited",
                      message="You've reached your weekly rate limit.", statusCode=429) [:-1] + ',"agentId":"a1"}')
    reader.feed(event("assistant.message", content="The log says: You've hit your rate limit.", toolRequests=[]))
    reader.feed(result(0))
    ending = reader.ending(0)
    assert ending.limit is None and ending.api_error is None and ending.final_text.startswith("The log says")


def test_an_error_the_model_answered_after_is_over():
    reader = CopilotJsonReader()
    reader.feed(event("session.error", errorType="query", message="500 boom", statusCode=500))
    reader.feed(event("assistant.message", content="Recovered.", toolRequests=[]))
    reader.feed(result(0))
    assert reader.ending(0).api_error is None and reader.ending(0).final_text == "Recovered."


def test_copilots_own_service_limits_are_usage_limits_with_their_reset_when_named():
    weekly = classify({"errorType": "rate_limit", "errorCode": "user_weekly_rate_limited", "statusCode": 429,
                       "message": "You've reached your weekly rate limit."}, NOW)
    assert (weekly.kind, weekly.resets_at) == ("user_weekly_rate_limited", None)
    credits = classify({"errorType": "quota", "message": "You've run out of your included AI credits for the "
                        "month. Resets 2027-02-01T00:00:00Z."}, NOW)
    assert credits.kind == "quota" and credits.resets_at == 1801440000.0
    assert classify({"errorType": "rate_limit", "message": "You've hit your rate limit. Please wait"}, NOW).kind == \
        "rate_limit"


def test_other_failures_are_fatal_or_not_the_apis():
    assert classify({"errorType": "quota", "errorCode": "session_quota_exceeded",
                     "message": "You've reached the spending limit for this session."}, NOW) is None
    assert classify({"errorType": "context_limit", "message": "too long"}, NOW) is None
    billing = classify({"errorType": "query", "statusCode": 402, "message": "402 You have no quota"}, NOW)
    assert (billing.retryable, billing.code) == (False, "billing_error")
    denied = classify({"errorType": "authorization", "statusCode": 403, "message": "no access"}, NOW)
    assert (denied.retryable, denied.code) == (False, "permission_denied")


# --- the text output ----------------------------------------------------------------------

def test_text_mode_final_words_come_before_the_stats():
    _, ending = read("success.txt", CopilotTextReader(), returncode=0)
    assert ending.final_text == "Done: wrote hello.txt."


def test_text_mode_errors_are_read_from_the_clis_own_sentence():
    _, refused = read("unauthorized.txt", CopilotTextReader())
    assert (refused.api_error.retryable, refused.api_error.status) == (False, 401)
    _, quota = read("quota.txt", CopilotTextReader())
    assert (quota.api_error.retryable, quota.api_error.code) == (False, "insufficient_quota")
    assert text_error("Done: wrote hello.txt.") is None


# --- the hook file ------------------------------------------------------------------------

def test_the_hook_goes_in_copilots_own_directory(tmp_path):
    assert COPILOT_HOOKS.path({"HOME": str(tmp_path)}) == tmp_path / ".copilot" / "hooks" / FILE_NAME
    assert config_dir({"HOME": str(tmp_path), "COPILOT_HOME": str(tmp_path / "cfg")}) == tmp_path / "cfg"
    assert config_dir({"HOME": str(tmp_path), "COPILOT_HOME": "~/cfg"}) == tmp_path / "cfg"


def test_install_writes_one_entry_per_event_passing_its_name_and_is_idempotent(tmp_path):
    path, state = tmp_path / "hooks" / FILE_NAME, tmp_path / "state"
    change = COPILOT_HOOKS.install(path, COMMAND, state, now=NOW)
    assert change.added_events == ("preToolUse", "postToolUse", "postToolUseFailure") and change.backup is None
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert data["hooks"]["preToolUse"] == [{"type": "command", "bash": f"{COMMAND} --event preToolUse || true",
                                            "timeoutSec": 10}]
    assert COPILOT_HOOKS.installed_events(path, COMMAND) == ["postToolUse", "postToolUseFailure", "preToolUse"]
    assert COPILOT_HOOKS.installed_command(path) == f"{COMMAND} --event postToolUse || true"
    before = path.read_text()
    again = COPILOT_HOOKS.install(path, COMMAND, state, now=NOW)
    assert again.added_events == () and again.backup is None and path.read_text() == before


def test_install_merges_into_the_users_file_keeps_its_mode_and_backs_it_up(tmp_path):
    path, state = tmp_path / "hooks" / FILE_NAME, tmp_path / "state"
    path.parent.mkdir()
    theirs = {"type": "command", "bash": "./lint.sh", "timeoutSec": 5}
    old = {"version": 1, "hooks": {"preToolUse": [theirs], "sessionStart": [theirs]}, "note": "mine"}
    path.write_text(json.dumps(old, indent=4) + "\n")
    path.chmod(0o600)
    change = COPILOT_HOOKS.install(path, COMMAND, state, now=NOW)
    data = json.loads(path.read_text())
    assert data["hooks"]["preToolUse"][0] == theirs and len(data["hooks"]["preToolUse"]) == 2
    assert data["hooks"]["sessionStart"] == [theirs] and data["note"] == "mine"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(change.backup.read_text()) == old and '    "version"' in path.read_text()
    # A hook of ours from elsewhere (the script moved) is replaced, not doubled.
    moved = COPILOT_HOOKS.command_for(tmp_path / "new" / "genesis-heartbeat.sh")
    COPILOT_HOOKS.install(path, moved, state, now=NOW + 1)
    assert [e["bash"] for e in json.loads(path.read_text())["hooks"]["preToolUse"]] == \
        ["./lint.sh", f"{moved} --event preToolUse || true"]


def test_uninstall_takes_only_ours_and_the_file_when_it_held_only_ours(tmp_path):
    path, state = tmp_path / "hooks" / FILE_NAME, tmp_path / "state"
    COPILOT_HOOKS.install(path, COMMAND, state, now=NOW)
    change = COPILOT_HOOKS.uninstall(path, state, now=NOW)
    assert set(change.added_events) == {"preToolUse", "postToolUse", "postToolUseFailure"} and not path.exists()
    assert COPILOT_HOOKS.uninstall(path, state, now=NOW).added_events == ()
    theirs = {"type": "command", "bash": "./lint.sh"}
    path.write_text(json.dumps({"hooks": {"postToolUse": [theirs]}}))
    COPILOT_HOOKS.install(path, COMMAND, state, now=NOW)
    COPILOT_HOOKS.uninstall(path, state, now=NOW + 1)
    assert json.loads(path.read_text()) == {"hooks": {"postToolUse": [theirs]}, "version": 1}


def test_a_linked_file_is_edited_at_its_target_and_the_link_stays(tmp_path):
    real = tmp_path / "dotfiles" / "copilot-hooks.json"
    real.parent.mkdir()
    real.write_text('{"version": 1, "hooks": {}}\n')
    path, state = tmp_path / "hooks" / FILE_NAME, tmp_path / "state"
    path.parent.mkdir()
    path.symlink_to(real)
    assert COPILOT_HOOKS.install(path, COMMAND, state, now=NOW).target == real
    assert path.is_symlink() and COPILOT_HOOKS.installed_events(path) == \
        ["postToolUse", "postToolUseFailure", "preToolUse"]
    COPILOT_HOOKS.uninstall(path, state, now=NOW + 1)
    assert path.is_symlink() and json.loads(real.read_text()) == {"version": 1, "hooks": {}}


@pytest.mark.parametrize("text", ["{not json", '{"hooks": {"preToolUse": {"bash": "x"}}}', '{"hooks": []}', ""])
def test_a_malformed_file_is_refused_and_left_untouched(tmp_path, text):
    path = tmp_path / "hooks" / FILE_NAME
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(SettingsError):
        COPILOT_HOOKS.install(path, COMMAND, tmp_path / "state", now=NOW)
    assert path.read_text() == text and COPILOT_HOOKS.installed_events(path) == []


def test_the_self_test_runs_the_installed_hook_as_copilot_would(tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    env = {**os.environ, "HOME": str(home)}
    COPILOT_HOOKS.install(COPILOT_HOOKS.path(env), COMMAND, tmp_path / "state", now=NOW)
    beats = tmp_path / "beats"
    beats.mkdir(mode=0o700)
    check = spec_self_test(COPILOT_HOOKS, project, env, beats / "Builder.json")
    assert check.state == WORKING, check.detail
    # Failing open keeps Copilot's tools working without the script; the self-test still says why.
    gone = COPILOT_HOOKS.command_for(tmp_path / "moved" / "genesis-heartbeat.sh")
    COPILOT_HOOKS.install(COPILOT_HOOKS.path(env), gone, tmp_path / "state", now=NOW + 1)
    check = spec_self_test(COPILOT_HOOKS, project, env, beats / "Builder.json")
    assert check.state == BROKEN and "is missing" in check.detail, check.detail


@pytest.mark.parametrize("event", ["preToolUse", "postToolUse", "postToolUseFailure"])
def test_the_heartbeat_script_reads_each_real_payload(tmp_path, event):
    payload = (FIXTURES / f"hook-{event}.json").read_bytes()
    beat = tmp_path / "beat.json"
    env = {**os.environ, "GENESIS_HEARTBEAT_FILE": str(beat), "GENESIS_AGENT": "Builder", "GENESIS_RUN_ID": "run-copilot-hook"}
    subprocess.run(["/bin/sh", "-c", COPILOT_HOOKS.for_event(COMMAND, event)], input=payload, env=env, check=True,
                   timeout=10)
    got = json.loads(beat.read_text())
    sent = json.loads(payload)
    assert (got["event"], got["tool"], got["session_id"]) == (event, sent["toolName"], sent["sessionId"])


def test_its_json_output_speaks_first_and_its_result_line_is_the_runs_result():
    # Measured against the stub holding every request: its session events come before its first model call.
    reader = CopilotJsonReader(mono=lambda: 7.0, wall=lambda: NOW)
    assert reader.speaks_first and reader.result_at is None
    lines = (FIXTURES / "success.jsonl").read_text().splitlines()
    for line in lines[:-1]:
        reader.feed(line)
    assert reader.result_at is None
    reader.feed(lines[-1])
    assert reader.result_at == 7.0
