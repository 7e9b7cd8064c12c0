"""Codex's adapter: its command line, its `exec --json` output read from real captures, the way
it words usage limits and API errors, and its heartbeat hook in hooks.json with the trust
Codex checks in config.toml.

The fixtures are real output of `codex exec --json` 0.169.0 against a stub Responses API,
captured 2026-11-21 around 14:13 UTC (the machine's zone): a run with two shell calls, one
with a failed command, one killed inside a hung command, and the API refusing: a ChatGPT
plan's usage limit (429 `usage_limit_reached`) for each kind of plan and with no reset,
an API key's quota (429 `insufficient_quota`), a rate limit, a 500 (with and without
Codex's own retries), a 503, a 401, a 404 and a 400, and no server at all. hooks/ holds
what Codex sent its hooks (paths replaced by /home/user).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
from helpers import paths

from genesis.agents import adapter_for, adapter_named
from genesis.agents.base import ApiError, Limit
from genesis.agents.codex import CODEX_HOOKS, Codex
from genesis.agents.codex.hooks import hook_hash, trust_entries
from genesis.agents.codex.stream import CodexReader, classify
from genesis.agents.hook.settingsfile import SettingsError
from genesis.agents.hook.spec import self_test_session
from genesis.hints import hint
from genesis.phases import Phase, Trigger

FIXTURES = paths.FIXTURES / "codex"
SCRIPT = paths.HOOK
UTC = dt.timezone.utc
NOW = dt.datetime(2026, 11, 21, 14, 13, 30, tzinfo=UTC).timestamp()  # when the errors were captured
COMMAND = "bash '/opt/genesis/data/genesis-heartbeat.sh'"


class Mono:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read(name: str, mono: Mono | None = None) -> tuple[CodexReader, list[str], list]:
    """The fixture fed line by line: the reader, its transcript, and each retry as it was seen."""
    reader = CodexReader(mono or Mono(), lambda: NOW, UTC)
    transcript, retries = [], []
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        transcript += reader.feed(line)
        if reader.retry is not None and reader.retry not in retries:
            retries.append(reader.retry)
    return reader, transcript, retries


def at(*args: int) -> float:
    return dt.datetime(*args, tzinfo=UTC).timestamp()


# --- the command line ------------------------------------------------------------------

def test_codex_is_chosen_by_its_program_and_by_name():
    assert isinstance(adapter_for(("/opt/bin/codex",)), Codex)
    assert isinstance(adapter_named("codex"), Codex)
    assert Codex.version == "0.169.0"


def test_a_bare_program_becomes_an_unattended_exec_with_json_and_the_prompt_after_dashes():
    assert Codex().command(("codex",)) == ("codex", "exec", "--json", "--skip-git-repo-check",
                                           "--dangerously-bypass-approvals-and-sandbox", "--")
    assert Codex.prompt_on_stdin  # measured: with nothing after `--`, it reads the prompt from stdin


def test_the_command_is_idempotent_and_the_users_own_choices_win():
    adapter = Codex()
    once = adapter.command(("codex", "-m", "gpt-5", "exec", "--sandbox", "workspace-write"))
    assert once == ("codex", "-m", "gpt-5", "exec", "--sandbox", "workspace-write", "--json",
                    "--skip-git-repo-check", "--")
    assert adapter.command(once) == once
    assert adapter.command(("codex", "e", "--full-auto", "--json")) == (
        "codex", "e", "--full-auto", "--json", "--skip-git-repo-check", "--")
    # A user who bypasses hook trust keeps doing so; Genesis never adds it.
    kept = adapter.command(("codex", "--dangerously-bypass-hook-trust"))
    assert kept.count("--dangerously-bypass-hook-trust") == 1
    assert "--dangerously-bypass-hook-trust" not in adapter.command(("codex",))


def test_the_json_output_is_kept_raw_and_read_by_the_codex_reader():
    adapter = Codex()
    argv = adapter.command(("codex",))
    assert adapter.raw_suffix(argv) == ".jsonl"
    assert isinstance(adapter.reader(argv), CodexReader)
    assert adapter.raw_suffix(("codex", "exec")) is None


def test_turn_and_budget_caps_are_refused_it_has_no_flag_for_them():
    capped = Phase("Builder", Trigger("always"), Path("builder.md"), max_budget_usd=2.0)
    assert "does not take them" in Codex().options_problem(("codex",), capped)
    assert Codex().options_problem(("codex",), Phase("Builder", Trigger("always"), Path("b.md"))) is None


def test_it_needs_nothing_in_the_environment_and_its_hook_is_required():
    assert Codex().environment() == {}
    assert Codex.hook_required and Codex().hooks is CODEX_HOOKS


# --- the output --------------------------------------------------------------------------

def test_a_successful_run_reads_as_a_transcript_with_its_result_and_tokens():
    reader, transcript, _ = read("progress")
    assert transcript[0] == "session 01a1fe73-338d-7e01-bc8c-2b5679c7bfa3"
    assert "tool Bash: $ echo hello from the agent > hello.txt" in transcript
    assert "tool Bash: $ git add -A && git commit -qm 'agent: hello'" in transcript
    assert "assistant: Done: wrote hello.txt and committed it." in transcript
    assert transcript[-1] == "result: done, 1 turn, 300 in / 30 out tokens: Done: wrote hello.txt and committed it."
    ending = reader.ending(0)
    assert ending.final_text == "Done: wrote hello.txt and committed it."
    result = ending.result
    assert (result.subtype, result.is_error, result.num_turns, result.input_tokens, result.output_tokens,
            result.total_cost_usd) == ("success", False, 1, 300, 30, None)
    assert result.session_id == "01a1fe73-338d-7e01-bc8c-2b5679c7bfa3"
    assert ending.limit is None and ending.api_error is None


def test_a_failed_command_shows_its_exit_code_and_output_and_the_run_still_succeeds():
    reader, transcript, _ = read("failed-command")
    assert transcript[transcript.index("tool Bash: $ echo oops >&2; exit 3") + 1] == "  error: exit 3: oops"
    assert reader.ending(0).result.subtype == "success"


def test_a_run_killed_in_a_hung_command_says_nothing_of_the_api():
    reader, transcript, _ = read("killed-in-hang")
    assert transcript[-1].startswith("tool Bash: $ echo $$ > tool-shell.pid;")
    ending = reader.ending(None)
    assert (ending.result, ending.limit, ending.api_error, ending.final_text) == (None, None, None, "")


@pytest.mark.parametrize("name, resets_at", [
    ("error-usage", at(2026, 11, 21, 15, 13)),          # a Plus plan: "... or try again at 3:13 PM."
    ("error-usage-free", at(2026, 11, 21, 16, 13)),     # a free plan: "Upgrade to Plus ..."
    ("error-usage-team", at(2026, 11, 21, 16, 13)),     # a team plan: "send a request to your admin"
    ("error-usage-far", at(2026, 11, 24, 15, 13)),      # more than a day away: "Nov 24th, 2026 3:13 PM"
    ("error-usage-none", None),                         # no reset given: "Try again later."
])
def test_a_plans_usage_limit_is_a_limit_with_its_reset(name, resets_at):
    reader, transcript, _ = read(name)
    ending = reader.ending(1)
    assert ending.api_error is None
    assert ending.limit.resets_at == resets_at
    assert ending.limit.message.startswith("You’ve hit your usage limit.")
    assert ending.result.is_error and ending.result.text == ending.limit.message
    assert transcript[-1].startswith("result: error: You’ve hit your usage limit.")


@pytest.mark.parametrize("name, retryable, status, code", [
    ("error-quota", False, 429, "billing_error"),       # an API key's quota: waiting does not help
    ("error-rate", True, 429, "rate_limit"),
    ("error-500", True, 500, "server_error"),
    ("error-500-retried", True, 500, "server_error"),
    ("error-503", True, 503, "server_error"),
    ("error-401", False, 401, "authentication_failed"),
    ("error-404", False, 404, "model_not_found"),
    ("error-400", False, 400, "invalid_request"),
])
def test_api_errors_are_read_from_codexs_words(name, retryable, status, code):
    ending = read(name)[0].ending(1)
    assert ending.limit is None
    assert (ending.api_error.retryable, ending.api_error.status, ending.api_error.code) == (retryable, status, code)


def test_codexs_own_retries_are_seen_as_they_happen_and_forgotten_at_the_next_event():
    mono = Mono()
    reader = CodexReader(mono, lambda: NOW, UTC)
    lines = (FIXTURES / "error-500-retried.jsonl").read_text().splitlines()
    seen = []
    for line in lines:
        reader.feed(line)
        mono.now += 1
        if reader.retry is not None:
            seen.append((reader.retry.attempt, reader.retry.max_retries, reader.retry.status))
    assert seen == [(1, 4, 500), (2, 4, 500), (3, 4, 500), (4, 4, 500)]
    assert reader.retry is None  # the final error and turn.failed ended them


def test_an_unreachable_api_is_an_open_ended_wait_for_the_network():
    reader, transcript, retries = read("unreachable")
    assert [r.attempt for r in retries] == [1, 2, 3, 4]
    assert [r.delay for r in retries] == [7.0, 12.0, 22.0, 42.0]  # it says so again after 5, 10, 20 s, ...
    assert transcript[-1] == "API unreachable, waiting for the network (Connection failed: error sending request)"
    assert reader.ending(None).api_error is None


def test_words_inside_the_models_text_or_a_commands_output_never_count():
    said = "You’ve hit your usage limit. Try again later."
    reader = CodexReader(Mono(), lambda: NOW, UTC)
    for event in ({"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
                  {"type": "item.completed", "item": {"id": "i1", "type": "command_execution", "command": "cat log",
                                                      "aggregated_output": said, "exit_code": 1, "status": "failed"}},
                  {"type": "item.completed", "item": {"id": "i2", "type": "agent_message", "text": said}},
                  {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}}):
        reader.feed(json.dumps(event))
    ending = reader.ending(0)
    assert (ending.limit, ending.api_error, ending.final_text) == (None, None, said)


@pytest.mark.parametrize("message, expected", [
    ("You've hit your usage limit. To get more access now, send a request to your admin or try again at 9:05 AM.",
     Limit(at(2026, 11, 22, 9, 5), "", "")),          # a time earlier today: tomorrow's
    ("To use Codex with your ChatGPT plan, upgrade to Plus: https://chatgpt.com/explore/plus.",
     ApiError(False, 429, "usage_not_included", "")),
    ("Selected model is at capacity. Please try a different model.", ApiError(True, None, "overloaded", "")),
    ("stream disconnected before completion: error decoding response body",
     ApiError(True, None, "connection_failed", "")),
    ("unexpected status 403 Forbidden: nope, url: http://127.0.0.1:1/v1/responses",
     ApiError(False, 403, "permission_denied", "")),
])
def test_other_wordings(message, expected):
    found = classify(message, NOW, UTC)
    assert type(found) is type(expected)
    if isinstance(expected, Limit):
        assert found.resets_at == expected.resets_at
    else:
        assert (found.retryable, found.status, found.code) == (expected.retryable, expected.status, expected.code)


@pytest.mark.parametrize("message", [
    "Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying.",
    "turn aborted. Something went wrong? Hit `/feedback` to report the issue.",
    "I said: You’ve hit your usage limit.",
])
def test_what_is_not_an_api_error(message):
    assert classify(message, NOW, UTC) is None


# --- the hook and its trust ----------------------------------------------------------------

MEASURED = 'echo "$(cat)" >> "$CODEX_HOME/fired.jsonl"'


def test_the_trust_hash_is_the_one_codex_checks():
    # Measured: Codex 0.169.0 ran these hooks (and no untrusted one) with exactly these hashes.
    assert hook_hash("PreToolUse", None, {"type": "command", "command": MEASURED, "timeout": 10}) == \
        "sha256:c6ba3e2c149618020ac2de991d0ceb6a65c806df3a63683c57e92dbb4444c6c2"
    assert hook_hash("PostToolUse", "^Bash$", {"type": "command", "command": MEASURED, "timeout": 10}) == \
        "sha256:d18020cfe9c3ce88031ae3dcce6620afd4bec376023927164fc9c2069f243a6d"


def test_the_hook_file_honours_codex_home(tmp_path):
    assert CODEX_HOOKS.path({"HOME": str(tmp_path)}) == tmp_path / ".codex" / "hooks.json"
    own = {"HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "ch")}
    assert CODEX_HOOKS.path(own) == tmp_path / "ch" / "hooks.json"


USER_CONFIG = '''# my settings
model = "gpt-5"   # the default

[projects."/home/me/app"]
trust_level = "trusted"

[hooks.state."/home/me/other/hooks.json:stop:0:0"]
trusted_hash = "sha256:theirs"
'''
USER_HOOKS = {"hooks": {"PreToolUse": [{"matcher": "^Bash$", "hooks": [{"type": "command", "command": "audit.sh"}]}],
                        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}


def codex_home(tmp_path: Path) -> Path:
    home = tmp_path / ".codex"
    home.mkdir()
    (home / "config.toml").write_text(USER_CONFIG)
    os.chmod(home / "config.toml", 0o640)
    (home / "hooks.json").write_text(json.dumps(USER_HOOKS, indent=2))
    return home


def test_install_adds_our_groups_last_and_trusts_only_them(tmp_path):
    home = codex_home(tmp_path)
    change = CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    assert set(change.added_events) == {"PreToolUse", "PostToolUse", "SessionStart"}
    hooks = json.loads((home / "hooks.json").read_text())["hooks"]
    assert hooks["PreToolUse"][0] == USER_HOOKS["hooks"]["PreToolUse"][0]   # the user's stays first
    assert hooks["PreToolUse"][1] == {"hooks": [{"type": "command", "command": COMMAND, "timeout": 10}]}
    config = (home / "config.toml").read_text()
    assert config.startswith(USER_CONFIG)  # the user's text, byte for byte
    source = home / "hooks.json"
    for key, event, group in ((f"{source}:pre_tool_use:1:0", "PreToolUse", 1),
                              (f"{source}:post_tool_use:0:0", "PostToolUse", 0),
                              (f"{source}:session_start:0:0", "SessionStart", 0)):
        digest = hook_hash(event, None, {"command": COMMAND, "timeout": 10})
        assert f'[hooks.state."{key}"]\ntrusted_hash = "{digest}"\n' in config
    assert "audit.sh" not in config and config.count("trusted_hash") == 4
    assert stat.S_IMODE(os.stat(home / "config.toml").st_mode) == 0o640
    assert CODEX_HOOKS.untrusted(source) == []


def test_install_twice_changes_nothing(tmp_path):
    home = codex_home(tmp_path)
    CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    before = {p.name: p.read_text() for p in home.iterdir()}
    change = CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    assert change.added_events == () and change.backup is None
    assert {p.name: p.read_text() for p in home.iterdir()} == before


def test_a_moved_script_is_installed_again_and_its_trust_replaced(tmp_path):
    home = codex_home(tmp_path)
    CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    moved = "bash '/srv/genesis/data/genesis-heartbeat.sh'"
    CODEX_HOOKS.install(home / "hooks.json", moved, tmp_path / "state")
    config = (home / "config.toml").read_text()
    assert config.count("trusted_hash") == 4
    assert hook_hash("PostToolUse", None, {"command": moved, "timeout": 10}) in config
    assert hook_hash("PostToolUse", None, {"command": COMMAND, "timeout": 10}) not in config
    assert CODEX_HOOKS.untrusted(home / "hooks.json") == []


def test_a_users_own_state_for_our_hook_is_kept(tmp_path):
    home = codex_home(tmp_path)
    key = f"{home / 'hooks.json'}:post_tool_use:0:0"
    with open(home / "config.toml", "a") as fh:
        fh.write(f'\n[hooks.state."{key}"]\nenabled = true\ntrusted_hash = "sha256:old"\n')
    CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    config = (home / "config.toml").read_text()
    assert f'[hooks.state."{key}"]\nenabled = true\ntrusted_hash = "sha256:' in config
    assert "sha256:old" not in config


def test_uninstall_gives_back_the_users_files_as_they_were(tmp_path):
    home = codex_home(tmp_path)
    CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    change = CODEX_HOOKS.uninstall(home / "hooks.json", tmp_path / "state")
    assert set(change.added_events) == {"PreToolUse", "PostToolUse", "SessionStart"}
    assert (home / "config.toml").read_text() == USER_CONFIG
    assert json.loads((home / "hooks.json").read_text()) == USER_HOOKS
    assert stat.S_IMODE(os.stat(home / "config.toml").st_mode) == 0o640


def test_install_into_an_empty_home_creates_both_files(tmp_path):
    home = tmp_path / ".codex"
    CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    entries = trust_entries(home / "hooks.json")
    assert len(entries) == 3 and CODEX_HOOKS.untrusted(home / "hooks.json") == []
    states = tomllib.loads((home / "config.toml").read_text())["hooks"]["state"]
    assert {k: v["trusted_hash"] for k, v in states.items()} == entries


@pytest.mark.parametrize("config", ['model = "gpt-5"\n[broken', 'hooks = "off"\n',
                                    'hooks = { state = { } }\n'])
def test_a_config_that_cannot_take_the_trust_is_refused_and_nothing_changes(tmp_path, config):
    home = tmp_path / ".codex"
    home.mkdir()
    (home / "config.toml").write_text(config)
    (home / "hooks.json").write_text(json.dumps(USER_HOOKS))
    with pytest.raises(SettingsError):
        CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    assert (home / "config.toml").read_text() == config
    assert json.loads((home / "hooks.json").read_text()) == USER_HOOKS  # refused before it was touched


def test_a_malformed_hooks_file_is_refused_untouched(tmp_path):
    home = tmp_path / ".codex"
    home.mkdir()
    (home / "hooks.json").write_text('{"hooks": ')
    with pytest.raises(SettingsError):
        CODEX_HOOKS.install(home / "hooks.json", COMMAND, tmp_path / "state")
    assert (home / "hooks.json").read_text() == '{"hooks": ' and not (home / "config.toml").exists()


def test_the_self_test_says_broken_when_codex_would_skip_the_hook_as_untrusted(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    command = CODEX_HOOKS.command_for(SCRIPT)
    CODEX_HOOKS.install(home / ".codex" / "hooks.json", command, state)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GENESIS_AGENT": "Builder"}
    project = tmp_path / "project"
    project.mkdir()
    check = Codex().hook_check(project, env, state / "Builder.json")
    assert check.ok, check.detail
    config = home / ".codex" / "config.toml"
    config.write_text(config.read_text().replace("trusted_hash", "# trusted_hash"))
    check = Codex().hook_check(project, env, state / "Builder.json")
    assert check.state == "broken" and "Codex skips it" in check.detail
    assert hint(project, "hook", "install", "--agent", "codex") in check.detail


@pytest.mark.parametrize("fixture, event, tool", [("pre_tool_use-1.json", "PreToolUse", "Bash"),
                                                  ("post_tool_use-1.json", "PostToolUse", "Bash"),
                                                  ("post_tool_use-failed.json", "PostToolUse", "Bash"),
                                                  ("session_start-1.json", "SessionStart", "")])
def test_the_heartbeat_script_reads_what_codex_sends(tmp_path, fixture, event, tool):
    payload = (FIXTURES / "hooks" / fixture).read_bytes()
    beat = beat_of(tmp_path, payload)
    session = json.loads(payload)["session_id"]
    assert (beat["event"], beat["tool"], beat["session_id"], beat["agent"]) == (event, tool, session, "Builder")


def test_the_self_tests_payload_is_read_like_the_real_one(tmp_path):
    beat = beat_of(tmp_path, CODEX_HOOKS.payload(self_test_session("t0k"), tmp_path))
    assert (beat["event"], beat["tool"], beat["session_id"]) == ("PostToolUse", "Bash", "genesis-self-test.t0k")


def beat_of(tmp_path: Path, payload: bytes) -> dict:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GENESIS_AGENT": "Builder",
           "GENESIS_HEARTBEAT_FILE": str(state / "Builder.json")}
    subprocess.run(["bash", str(SCRIPT)], input=payload, env=env, check=True, timeout=10)
    return json.loads((state / "Builder.json").read_text())


def test_it_speaks_first_and_a_completed_turn_is_its_result_until_another_starts():
    # Measured against the stub holding every request: thread.started and turn.started come before it.
    clock = iter(range(1000, 2000))
    reader = CodexReader(mono=lambda: float(next(clock)))
    assert reader.speaks_first and reader.result_at is None
    for line in (FIXTURES / "progress.jsonl").read_text().splitlines():
        reader.feed(line)
    assert reader.result_at is not None and reader.ending(0).final_text
    reader.feed(json.dumps({"type": "turn.started"}))
    assert reader.result_at is None
