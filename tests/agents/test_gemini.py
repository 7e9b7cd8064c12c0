"""Gemini CLI's adapter: its command line, its stream-json output read from real captures, the
way it words API errors and quotas, and its heartbeat hook in ~/.gemini/settings.json.

The fixtures are real output of `gemini` 0.61.0 (stdout and stderr as one stream, as the loop
reads it) against a stub Gemini API: a run with two shell calls, a failed read_file call, and
the API refusing with a daily quota, an hourly quota, a per-minute quota it retried, a 503,
an invalid key, no server at all, and no usable auth before any request.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from helpers import paths

from genesis.agents import adapter_for, adapter_named
from genesis.agents.base import ApiError, Limit, TextReader
from genesis.agents.gemini import GEMINI_HOOKS, GeminiCli
from genesis.agents.gemini.errors import classify, next_pacific_midnight
from genesis.agents.gemini.stream import GeminiStreamReader
from genesis.agents.hook.settingsfile import SettingsError
from genesis.agents.hook.spec import self_test_session
from genesis.phases import Phase, Trigger

FIXTURES = paths.FIXTURES / "gemini"
SCRIPT = paths.HOOK
NOW = dt.datetime(2026, 11, 21, 14, 18, 30, tzinfo=dt.timezone.utc).timestamp()  # when they were captured
# The exit codes the CLI gave: the HTTP status modulo 256 (429 -> 173, 503 -> 247, 400 -> 144).
EXIT = {"success": 0, "tool-error": 0, "quota-daily": 173, "quota-hour": 173, "quota-minute-retried": 173,
        "unavailable-503": 247, "key-invalid-400": 144, "unreachable": 1, "auth-gateway-refused": 41,
        "auth-missing": 41}


class Mono:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read(name: str) -> tuple[GeminiStreamReader, list[str], list]:
    """The fixture fed line by line: the reader, its transcript, and each retry as it was seen."""
    reader = GeminiStreamReader(Mono(), lambda: NOW)
    transcript, retries = [], []
    for line in (FIXTURES / f"{name}.log").read_text().splitlines():
        transcript += reader.feed(line)
        if reader.retry is not None and reader.retry not in retries:
            retries.append(reader.retry)
    return reader, transcript, retries


# --- the command line ------------------------------------------------------------------

def test_gemini_is_chosen_by_its_program_and_by_name():
    assert isinstance(adapter_for(("/opt/node_modules/.bin/gemini", "-m", "gemini-2.5-flash")), GeminiCli)
    assert isinstance(adapter_named("gemini"), GeminiCli)
    assert isinstance(adapter_for(("node", "gemini.js"), "gemini"), GeminiCli)


def test_a_bare_program_gets_stream_json_yolo_and_the_prompt_flag_last():
    gemini = GeminiCli()
    argv = gemini.command(("gemini",))
    assert argv == ("gemini", "--output-format", "stream-json", "--yolo", "-p")
    assert gemini.command(argv) == argv  # never twice
    assert gemini.raw_suffix(argv) == ".jsonl" and isinstance(gemini.reader(argv), GeminiStreamReader)
    # The model stays the user's choice (-m, GEMINI_MODEL or settings.json): none is added.
    assert gemini.command(("gemini", "-m", "gemini-2.5-pro"))[:3] == ("gemini", "-m", "gemini-2.5-pro")
    assert "-m" not in argv and "--model" not in argv


def test_the_users_own_format_approval_and_prompt_flag_are_kept():
    gemini = GeminiCli()
    text = gemini.command(("gemini", "-o", "text", "--approval-mode=auto_edit"))
    assert text == ("gemini", "-o", "text", "--approval-mode=auto_edit", "-p")
    assert gemini.raw_suffix(text) is None and type(gemini.reader(text)) is TextReader
    assert gemini.command(("gemini", "-p", "-y", "--output-format=stream-json")) == \
        ("gemini", "-y", "--output-format=stream-json", "-p")


def test_the_workspace_is_trusted_through_the_environment():
    assert GeminiCli().environment() == {"GEMINI_CLI_TRUST_WORKSPACE": "true"}


def test_turn_and_budget_caps_are_refused_it_has_no_flag_for_them():
    capped = Phase("Builder", Trigger("always"), Path("builder.md"), max_turns=30)
    assert "does not take them" in GeminiCli().options_problem(("gemini",), capped)
    assert GeminiCli().options_problem(("gemini",), Phase("Builder", Trigger("always"), Path("b.md"))) is None


# --- the stream-json output --------------------------------------------------------------

def test_a_successful_run_reads_as_a_transcript_with_its_result_and_tokens():
    reader, transcript, retries = read("success")
    assert "session be133766-ff40-49ef-8efb-0645216c299a: model gemini-2.5-flash" in transcript
    assert "tool run_shell_command: $ echo hello > hello.txt" in transcript
    assert "assistant: Done: wrote hello.txt." in transcript
    assert transcript[-1] == "result: success, 3 turns, 303 in / 21 out tokens, 1.9s: Done: wrote hello.txt."
    assert not [line for line in transcript if line.startswith("{") or "[STARTUP]" in line]
    assert retries == []
    ending = reader.ending(EXIT["success"])
    assert ending.final_text == "Done: wrote hello.txt." and ending.limit is None and ending.api_error is None
    result = ending.result
    assert (result.subtype, result.is_error, result.num_turns, result.session_id) == \
        ("success", False, 3, "be133766-ff40-49ef-8efb-0645216c299a")
    assert (result.input_tokens, result.output_tokens, result.total_cost_usd) == (303, 21, None)


def test_a_failed_tool_shows_its_error_and_the_final_text_joins_its_pieces():
    reader, transcript, _ = read("tool-error")
    assert transcript[transcript.index("tool read_file: missing.txt") + 1] == \
        "  error: File not found: /home/user/project/missing.txt"
    # The final message came in two pieces, "The file is missing.\nNothing" and " to do.".
    assert transcript[-3:-1] == ["assistant: The file is missing.", "assistant: Nothing to do."]
    ending = reader.ending(0)
    assert ending.final_text == "The file is missing.\nNothing to do." and reader.turns == 2


def test_a_daily_quota_is_a_usage_limit_until_midnight_pacific():
    reader, transcript, _ = read("quota-daily")
    assert "result: error: [API Error: You have exhausted your daily quota on this model.]" in transcript
    ending = reader.ending(EXIT["quota-daily"])
    # Captured at 06:18 Pacific standard time: the quota resets at the next midnight there.
    assert ending.limit == Limit(dt.datetime(2026, 11, 22, 8, tzinfo=dt.timezone.utc).timestamp(), "daily",
                                 "You have exhausted your daily quota on this model.")
    assert ending.api_error is None and ending.final_text == ""


def test_a_quota_with_a_wait_longer_than_the_cli_retries_is_a_limit_with_that_reset():
    ending = read("quota-hour")[0].ending(EXIT["quota-hour"])
    assert ending.limit is not None and ending.limit.kind == "quota" and ending.limit.resets_at == NOW + 3600
    assert ending.limit.message.startswith("You exceeded your current quota")


def test_a_short_quota_the_cli_retried_until_it_gave_up_is_a_retryable_rate_limit():
    reader, _, retries = read("quota-minute-retried")
    # Each wait the CLI announced on stderr was read, the watcher's cue that it is not stuck.
    assert [(r.attempt, r.delay, r.error, r.max_retries) for r in retries] == [(1, 5.407, "quota", 10),
                                                                               (2, 10.972, "quota", 10)]
    assert reader.retry is None  # the result came after: it is over
    ending = reader.ending(EXIT["quota-minute-retried"])
    assert ending.limit is None
    assert ending.api_error == ApiError(True, 429, "rate_limit", "Resource has been exhausted (e.g. check quota).")


def test_an_overloaded_api_is_retryable_and_its_status_comes_from_the_exit_code():
    reader, transcript, retries = read("unavailable-503")
    assert [(r.attempt, r.status, r.error, r.delay) for r in retries] == [(1, 503, "server_error", 6.5),
                                                                          (2, 503, "server_error", 13.0)]
    assert not [line for line in transcript if line.lstrip().startswith("at ")]
    ending = reader.ending(EXIT["unavailable-503"])
    assert ending.api_error == ApiError(True, 503, "overloaded", "The model is overloaded. Please try again later.")


def test_an_invalid_key_is_fatal():
    ending = read("key-invalid-400")[0].ending(EXIT["key-invalid-400"])
    assert ending.api_error == ApiError(False, 400, "authentication_failed",
                                        "API key not valid. Please pass a valid API key.")


def test_an_unreachable_api_is_retryable():
    reader, _, retries = read("unreachable")
    assert [(r.attempt, r.status, r.error) for r in retries] == [(1, None, "no_answer"), (2, None, "no_answer")]
    ending = reader.ending(EXIT["unreachable"])
    assert ending.api_error is not None and ending.api_error.retryable
    assert ending.api_error.code == "connection_failed"


@pytest.mark.parametrize("name, said", [
    ("auth-gateway-refused", "Invalid auth method selected."),
    ("auth-missing", "Please set an Auth method in your /home/user/.gemini/settings.json or specify one of the "
                     "following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, "
                     "GOOGLE_GENAI_USE_GCA")])
def test_no_usable_auth_before_any_request_is_fatal(name, said):
    reader, _, _ = read(name)
    assert reader.result is None
    assert reader.ending(EXIT[name]).api_error == ApiError(False, None, "authentication_failed", said)
    assert reader.ending(1).api_error is None  # another exit without a result: a crash, not the API


def test_words_inside_the_models_text_or_a_tools_output_never_count():
    reader = GeminiStreamReader(Mono(), lambda: NOW)
    echoed = "Attempt 1 failed with status 503. Retrying with backoff..."
    reader.feed(json.dumps({"type": "tool_result", "tool_id": "t", "status": "success", "output": echoed}))
    assert reader.retry is None
    reader.feed(json.dumps({"type": "message", "role": "assistant", "delta": True,
                            "content": "[API Error: You have exhausted your daily quota on this model.]"}))
    reader.feed(json.dumps({"type": "result", "status": "success", "stats": {}}))
    ending = reader.ending(0)
    assert ending.limit is None and ending.api_error is None and ending.final_text.startswith("[API Error")


def test_a_killed_run_says_nothing_of_the_api():
    reader, _, _ = read("quota-daily")
    assert reader.ending(None).limit is None and reader.ending(None).api_error is None


def test_a_retry_is_forgotten_at_the_next_record():
    reader = GeminiStreamReader(Mono(), lambda: NOW)
    reader.feed("Attempt 4 failed with status 500. Retrying with backoff... _ApiError: {}")
    assert (reader.retry.attempt, reader.retry.status, reader.retry.delay) == (4, 500, 39.0)  # 30 s + jitter
    reader.feed(json.dumps({"type": "tool_use", "tool_name": "glob", "tool_id": "g", "parameters": {"pattern": "*"}}))
    assert reader.retry is None


def test_a_failed_turn_without_an_error_field_reads_the_error_record():
    reader = GeminiStreamReader(Mono(), lambda: NOW)
    assert reader.feed(json.dumps({"type": "error", "severity": "error", "message": "Model stream ended with an "
                                   "invalid chunk or missing finish reason."})) == \
        ["error: Model stream ended with an invalid chunk or missing finish reason."]
    reader.feed(json.dumps({"type": "result", "status": "error", "stats": {}}))
    ending = reader.ending(1)
    assert ending.result.is_error and ending.result.text.startswith("Model stream ended")
    assert ending.api_error is None and ending.limit is None  # not the API's refusal


# --- the CLI's other wordings (from its source: errors it builds from the API's answer) ----

@pytest.mark.parametrize("message, rc, expected", [
    # The real API's body, as text inside another error (a non-JSON content type).
    ('[API Error: {"error":{"message":"{\\n  \\"error\\": {\\n    \\"code\\": 403,\\n    \\"message\\": \\"Permission '
     'denied on resource project.\\",\\n    \\"status\\": \\"PERMISSION_DENIED\\"\\n  }\\n}\\n","code":403,'
     '"status":"Forbidden"}}]', 147,
     ApiError(False, 403, "permission_denied", "Permission denied on resource project.")),
    ("[API Error: Requested entity was not found. (Status: NOT_FOUND)]", 1,
     ApiError(False, None, "model_not_found", "Requested entity was not found.")),
    ("[API Error: Internal error encountered.]", 244,
     ApiError(True, 500, "server_error", "Internal error encountered.")),
    ("[API Error: You have exhausted your capacity on this model.]\nPlease wait and try again later.", 173,
     ApiError(True, 429, "overloaded", "You have exhausted your capacity on this model.")),
    ("[API Error: An unknown error occurred.]", 1, ApiError(True, None, "unknown", "An unknown error occurred.")),
])
def test_other_api_errors(message, rc, expected):
    assert classify(message, NOW, rc) == expected


def test_a_wait_named_by_the_apis_own_words_is_read_too():
    said = "[API Error: Quota exceeded. Please retry in 5400s.]\nPlease wait and try again later."
    assert classify(said, NOW, 173) == Limit(NOW + 5400, "quota", "Quota exceeded. Please retry in 5400s.")


@pytest.mark.parametrize("message", [
    "Reached max session turns for this session. Increase the number of turns by specifying maxSessionTurns "
    "in settings.json.", "Operation cancelled.", "Error executing tool run_shell_command: boom", ""])
def test_what_is_not_an_api_error(message):
    assert classify(message, NOW, 53) is None


def test_midnight_pacific_follows_daylight_saving_time():
    summer = dt.datetime(2026, 7, 1, 12, tzinfo=dt.timezone.utc).timestamp()   # 05:00 PDT
    assert next_pacific_midnight(summer) == dt.datetime(2026, 7, 2, 7, tzinfo=dt.timezone.utc).timestamp()
    late = dt.datetime(2026, 11, 22, 7, 59, tzinfo=dt.timezone.utc).timestamp()  # 23:59 PST
    assert next_pacific_midnight(late) == dt.datetime(2026, 11, 22, 8, tzinfo=dt.timezone.utc).timestamp()
    at = dt.datetime.fromtimestamp(next_pacific_midnight(NOW), ZoneInfo("America/Los_Angeles"))
    assert (at.hour, at.minute) == (0, 0)


# --- the hook -----------------------------------------------------------------------------

COMMAND = "bash '/opt/genesis/genesis-heartbeat.sh'"


def test_the_hook_file_honours_gemini_cli_home():
    assert GEMINI_HOOKS.path({"HOME": "/home/u"}) == Path("/home/u/.gemini/settings.json")
    assert GEMINI_HOOKS.path({"HOME": "/home/u", "GEMINI_CLI_HOME": "/srv/g"}) == Path("/srv/g/.gemini/settings.json")


def test_install_merges_before_and_after_tool_with_a_timeout_in_milliseconds(tmp_path):
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir()
    theirs = {"security": {"auth": {"selectedType": "gemini-api-key"}},
              "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "lint"}]}]}}
    path.write_text(json.dumps(theirs))
    os.chmod(path, 0o640)
    change = GEMINI_HOOKS.install(path, COMMAND, tmp_path / "state")
    assert change.added_events == ("BeforeTool", "AfterTool")
    data = json.loads(path.read_text())
    assert data["security"] == theirs["security"]
    ours = {"matcher": ".*", "hooks": [{"type": "command", "command": COMMAND, "timeout": 10_000}]}
    assert data["hooks"]["BeforeTool"] == theirs["hooks"]["BeforeTool"] + [ours]
    assert data["hooks"]["AfterTool"] == [ours]
    assert path.stat().st_mode & 0o777 == 0o640
    assert GEMINI_HOOKS.installed_events(path, COMMAND) == ["AfterTool", "BeforeTool"]
    assert GEMINI_HOOKS.installed_command(path) == COMMAND
    again = GEMINI_HOOKS.install(path, COMMAND, tmp_path / "state")
    assert again.added_events == () and json.loads(path.read_text()) == data

    removed = GEMINI_HOOKS.uninstall(path, tmp_path / "state")
    assert set(removed.added_events) == {"BeforeTool", "AfterTool"}
    assert json.loads(path.read_text()) == theirs


def test_a_malformed_settings_file_is_refused_untouched(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"hooks": ')
    with pytest.raises(SettingsError):
        GEMINI_HOOKS.install(path, COMMAND, tmp_path / "state")
    assert path.read_text() == '{"hooks": '


@pytest.mark.parametrize("fixture, event, tool", [("hook-before-tool.json", "BeforeTool", "read_file"),
                                                  ("hook-after-tool.json", "AfterTool", "run_shell_command"),
                                                  ("hook-after-tool-failed.json", "AfterTool", "read_file")])
def test_the_heartbeat_script_reads_what_gemini_sends(tmp_path, fixture, event, tool):
    payload = (FIXTURES / fixture).read_bytes()
    beat = beat_of(tmp_path, payload)
    session = json.loads(payload)["session_id"]
    assert (beat["event"], beat["tool"], beat["session_id"], beat["agent"]) == (event, tool, session, "Builder")


def test_the_self_tests_payload_is_read_like_the_real_one(tmp_path):
    beat = beat_of(tmp_path, GEMINI_HOOKS.payload(self_test_session("t0k"), tmp_path))
    assert (beat["event"], beat["session_id"]) == ("AfterTool", "genesis-self-test.t0k")


def beat_of(tmp_path: Path, payload: bytes) -> dict:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GENESIS_AGENT": "Builder",
           "GENESIS_HEARTBEAT_FILE": str(state / "Builder.json")}
    subprocess.run(["bash", str(SCRIPT)], input=payload, env=env, check=True, timeout=10)
    return json.loads((state / "Builder.json").read_text())


def test_it_speaks_first_and_its_result_is_its_runs_last_record():
    # Measured against the stub holding every request: its init record comes before its first request.
    reader = GeminiStreamReader(Mono(), lambda: NOW)
    assert reader.speaks_first and reader.result_at is None
    lines = (FIXTURES / "success.log").read_text().splitlines()
    for line in lines:
        reader.feed(line)
        if '"type":"result"' in line.replace(" ", ""):
            break
    assert reader.result_at == 100.0


def test_the_model_used_is_the_one_its_init_names():
    reader, _, _ = read("success")
    assert reader.result is not None and reader.result.model == "gemini-2.5-flash"
