"""opencode's adapter: its command line, its heartbeat plugin (run for real under node), and
its JSON events read from real captured output (tests/fixtures/opencode/)."""

import email.utils
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import paths

from genesis.agents import adapter_for, adapter_named
from genesis.agents.base import Limit
from genesis.agents.hook.selftest import NOT_INSTALLED, WORKING, spec_self_test
from genesis.agents.hook.settingsfile import SettingsError
from genesis.agents.opencode import OpenCode
from genesis.agents.opencode.plugin import EVENTS, OPENCODE_HOOKS, config_dir, render
from genesis.agents.opencode.stream import OpenCodeReader, classify, retry_after
from genesis.health.heartbeat import hook_script, tool_event
from genesis.hints import hint
from genesis.phases import Phase, Trigger

FIXTURES = paths.FIXTURES / "opencode"
NODE = shutil.which("node")
COMMAND = OPENCODE_HOOKS.command_for(hook_script())


# --- the command line -----------------------------------------------------------------------

def test_the_program_alone_becomes_an_unattended_json_run_with_the_prompt_after_a_double_dash():
    oc = adapter_for(("/opt/bin/opencode",))
    assert isinstance(oc, OpenCode) and adapter_named("opencode").name == "opencode"
    argv = oc.command(("/opt/bin/opencode",))
    assert argv == ("/opt/bin/opencode", "run", "--format", "json", "--auto", "--")
    assert oc.command(argv) == argv  # never twice
    assert oc.raw_suffix(argv) == ".jsonl" and isinstance(oc.reader(argv), OpenCodeReader)


def test_the_users_own_choices_win():
    oc = OpenCode()
    argv = oc.command(("opencode", "run", "-m", "stub/m", "--format=default", "--yolo"))
    assert argv == ("opencode", "run", "-m", "stub/m", "--format=default", "--yolo", "--")
    assert oc.raw_suffix(argv) is None and type(oc.reader(argv)).__name__ == "TextReader"
    assert oc.command(("opencode", "--print-logs", "run", "--auto"))[:4] == ("opencode", "--print-logs", "run",
                                                                           "--auto")


def test_pure_and_claude_only_phase_options_are_refused_before_the_night():
    oc = OpenCode()
    phase = Phase("Builder", Trigger("always"), Path("b.md"))
    assert oc.options_problem(("opencode",), phase) is None
    assert "--pure" in oc.options_problem(("opencode", "run", "--pure"), phase)
    capped = Phase("Builder", Trigger("always"), Path("b.md"), max_budget_usd=2.0)
    assert "PHASE_Builder_MAX_TURNS" in oc.options_problem(("opencode",), capped)


# --- the plugin file ----------------------------------------------------------------------

def test_the_plugin_goes_where_opencode_loads_plugins_from(hermetic):
    assert config_dir({"HOME": str(hermetic)}) == hermetic / ".config" / "opencode"
    assert config_dir({"HOME": "/h", "XDG_CONFIG_HOME": "/x"}) == Path("/x/opencode")
    assert config_dir({"HOME": "/h", "XDG_CONFIG_HOME": "/x", "OPENCODE_CONFIG_DIR": "/o"}) == Path("/o")
    assert OPENCODE_HOOKS.path({"HOME": str(hermetic)}) == hermetic / ".config/opencode/plugin/genesis-heartbeat.js"


def test_until_opencode_has_its_plugin_sdk_the_user_is_told_its_next_start_fetches_it(hermetic):
    folder = hermetic / ".config" / "opencode"
    assert "@opencode-ai/plugin" in OPENCODE_HOOKS.trust and str(folder) in OPENCODE_HOOKS.trust
    (folder / "node_modules").mkdir(parents=True)
    (folder / "package-lock.json").write_text('{"packages": {"": {"dependencies": {"@opencode-ai/plugin": "1"}}}}')
    assert OPENCODE_HOOKS.trust == ""


def test_install_is_idempotent_and_uninstall_removes_only_ours(tmp_path, hermetic):
    path, state = OPENCODE_HOOKS.path(), tmp_path / "state"
    assert OPENCODE_HOOKS.installed_events(path) == [] and OPENCODE_HOOKS.installed_command(path) is None
    change = OPENCODE_HOOKS.install(path, COMMAND, state)
    assert change.added_events == EVENTS and change.backup is None
    assert OPENCODE_HOOKS.installed_events(path, COMMAND) == sorted(EVENTS)
    assert OPENCODE_HOOKS.installed_events(path, "bash /elsewhere/genesis-heartbeat.sh") == []
    assert OPENCODE_HOOKS.installed_command(path) == COMMAND
    assert str(hook_script()) in path.read_text()
    again = OPENCODE_HOOKS.install(path, COMMAND, state)
    assert again.added_events == () and again.backup is None
    assert list(path.parent.iterdir()) == [path]

    removed = OPENCODE_HOOKS.uninstall(path, state)
    assert removed.added_events == EVENTS and not path.exists()
    assert OPENCODE_HOOKS.uninstall(path, state).added_events == ()
    # A plugin of the user's that happens to carry the name is not ours to remove.
    path.write_text("export const Mine = async () => ({})\n")
    assert OPENCODE_HOOKS.uninstall(path, state).added_events == () and path.exists()
    assert OPENCODE_HOOKS.installed_events(path) == []


def test_an_edited_plugin_is_backed_up_before_it_is_replaced_and_its_mode_is_kept(tmp_path, hermetic):
    path = OPENCODE_HOOKS.path()
    OPENCODE_HOOKS.install(path, COMMAND, tmp_path / "state")
    edited = path.read_text().replace("ARG_CHARS = 512", "ARG_CHARS = 9")
    path.write_text(edited)
    os.chmod(path, 0o600)
    change = OPENCODE_HOOKS.install(path, COMMAND, tmp_path / "state", now=0)
    assert change.added_events == EVENTS and change.backup == path.with_name(path.name + ".bak-19700101T000000Z")
    assert change.backup.read_text() == edited and path.read_text() == render(COMMAND)
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_an_edited_plugin_fails_the_self_test_until_it_is_installed_again(tmp_path, project, hermetic):
    heartbeat = tmp_path / "beats" / "Builder.json"
    heartbeat.parent.mkdir(mode=0o700)
    path = OPENCODE_HOOKS.path()
    OPENCODE_HOOKS.install(path, COMMAND, tmp_path / "state")
    path.write_text(path.read_text().replace("async ({ event }) => {", "async ({ event }) => {{"))  # no longer loads
    check = spec_self_test(OPENCODE_HOOKS, project, os.environ, heartbeat)
    assert check.state == NOT_INSTALLED and hint(project, "hook", "install", "--agent", "opencode") in check.detail
    assert OPENCODE_HOOKS.installed_events(path, COMMAND) == sorted(EVENTS)  # still ours: uninstall takes it


def test_a_plugin_path_that_is_no_regular_file_is_refused_untouched(tmp_path, hermetic):
    path = OPENCODE_HOOKS.path()
    path.mkdir(parents=True)
    with pytest.raises(SettingsError, match="not a regular file"):
        OPENCODE_HOOKS.install(path, COMMAND, tmp_path / "state")
    assert path.is_dir() and OPENCODE_HOOKS.installed_events(path) == []
    path.rmdir()
    path.write_bytes(b"\xff\xfe not text")  # not UTF-8: nothing Genesis wrote, and nothing it can back up as text
    with pytest.raises(SettingsError, match="not UTF-8"):
        OPENCODE_HOOKS.install(path, COMMAND, tmp_path / "state")
    assert path.read_bytes() == b"\xff\xfe not text" and OPENCODE_HOOKS.installed_command(path) is None


def test_the_self_test_plays_what_the_plugin_writes_through_the_installed_command(tmp_path, project, hermetic):
    heartbeat = tmp_path / "beats" / "Builder.json"
    heartbeat.parent.mkdir(mode=0o700)
    env = {**os.environ, "GENESIS_AGENT": "Builder", "GENESIS_RUN_ID": "run-opencode-check"}
    check = spec_self_test(OPENCODE_HOOKS, project, env, heartbeat)
    assert check.state == NOT_INSTALLED and hint(project, "hook", "install", "--agent", "opencode") in check.detail
    OPENCODE_HOOKS.install(OPENCODE_HOOKS.path(env), COMMAND, tmp_path / "state")
    check = spec_self_test(OPENCODE_HOOKS, project, env, heartbeat)
    assert check.state == WORKING, check.detail
    assert not heartbeat.exists()
    payload = json.loads(OPENCODE_HOOKS.payload("genesis-self-test.x", project))
    assert payload["hook_event_name"] == "tool.execute.after" and payload["session_id"] == "genesis-self-test.x"


# The plugin itself, loaded by node as opencode loads it (an ES module), its hooks called with
# the arguments opencode passes them (as captured from opencode 1.18.33).
HARNESS = """
import { GenesisHeartbeat } from "./genesis-heartbeat.mjs"
const hooks = await GenesisHeartbeat({ directory: process.cwd() })
const step = process.argv[2]
const input = { tool: "bash", sessionID: "ses_1", callID: "call_1" }
const args = { command: "echo hi > hi.txt", description: "write", content: "x".repeat(100000) }
if (step === "before") await hooks["tool.execute.before"](input, { args })
if (step === "after") await hooks["tool.execute.after"]({ ...input, args }, { title: "t", output: "", metadata: {} })
if (step === "error") await hooks.event({ event: { type: "message.part.updated", properties: { part: {
  type: "tool", tool: "read", sessionID: "ses_1", callID: "call_2",
  state: { status: "error", input: { filePath: "/nope" }, error: "File not found: /nope" } } } } })
if (step === "noise") {
  await hooks.event({ event: { type: "message.part.delta", properties: {} } })
  await hooks.event({})
  await hooks.event({ event: { type: "message.part.updated", properties: { part: { type: "tool", state: {
    status: "completed" } } } } })
}
if (step === "empty") await hooks["tool.execute.before"](undefined, undefined)
if (step === "retry") await hooks.event({ event: { type: "session.status", properties: { sessionID: "ses_1",
  status: { type: "retry", attempt: 2, message: "Provider is overloaded", next: Date.now() + 3000 } } } })
console.log(process.pid)
"""


def run_plugin(tmp_path: Path, command: str, step: str, heartbeat: Path, *args: str, run_id: str = "run-opencode-plugin",
               out: list | None = None) -> int:
    """Run one step of the harness; its stdout's JSON lines (what the plugin wrote) go to `out`."""
    (tmp_path / "genesis-heartbeat.mjs").write_text(render(command))
    (tmp_path / "harness.mjs").write_text(HARNESS)
    env = {**os.environ, "GENESIS_HEARTBEAT_FILE": str(heartbeat), "GENESIS_AGENT": "Builder",
           "GENESIS_RUN_ID": run_id}
    done = subprocess.run([NODE, "harness.mjs", step, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    *written, pid = done.stdout.splitlines()
    if out is not None:
        out += [json.loads(line) for line in written]
    return int(pid)


def beat_of(heartbeat: Path, event: str) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            beat = json.loads(heartbeat.read_text())
            if beat["event"] == event:
                return beat
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"no {event} heartbeat in {heartbeat}")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_plugin_beats_before_after_and_on_a_failed_call_with_opencodes_names(tmp_path):
    beats = tmp_path / "beats"
    beats.mkdir(mode=0o700)
    heartbeat = beats / "Builder.json"
    pid = run_plugin(tmp_path, COMMAND, "before", heartbeat)
    beat = beat_of(heartbeat, "tool.execute.before")
    assert (beat["tool"], beat["session_id"], beat["agent"], beat["run_id"]) == ("bash", "ses_1", "Builder", "run-opencode-plugin")
    assert beat["pid"] == pid  # the script's parent is the process that loaded the plugin: opencode itself
    assert tool_event(beat["event"]) == "PreToolUse"
    run_plugin(tmp_path, COMMAND, "after", heartbeat)
    assert tool_event(beat_of(heartbeat, "tool.execute.after")["event"]) == "PostToolUse"
    run_plugin(tmp_path, COMMAND, "error", heartbeat)
    failed = beat_of(heartbeat, "tool.execute.error")
    assert (failed["tool"], failed["session_id"]) == ("read", "ses_1")
    log = [json.loads(line) for line in heartbeat.with_name("Builder.tools.jsonl").read_text().splitlines()]
    assert [(e["e"], e["tool"], e.get("id")) for e in log] == [
        ("tool.execute.before", "bash", "call_1"), ("tool.execute.after", "bash", "call_1"),
        ("tool.execute.error", "read", "call_2")]
    assert log[0]["cmd"] == "echo hi > hi.txt"


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_broken_hook_command_or_odd_events_never_throw_into_opencode(tmp_path):
    heartbeat = tmp_path / "Builder.json"
    for step in ("before", "after", "error", "noise", "empty"):
        run_plugin(tmp_path, "/nonexistent/genesis-heartbeat.sh", step, heartbeat)
    run_plugin(tmp_path, COMMAND, "noise", heartbeat)  # events that are no failed tool call: no beat
    time.sleep(0.5)  # a beat would be a detached process's: give one the time to land
    assert not heartbeat.exists()
    run_plugin(tmp_path, COMMAND, "empty", heartbeat)  # a call opencode never makes still beats, and no more
    assert beat_of(heartbeat, "tool.execute.before")["tool"] == ""


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_opencodes_api_retries_are_written_into_its_json_events_under_genesis_only(tmp_path):
    heartbeat = tmp_path / "Builder.json"
    written: list = []
    run_plugin(tmp_path, COMMAND, "retry", heartbeat, "run", "--format", "json", "--", "prompt", out=written)
    assert [(w["type"], w["sessionID"], w["attempt"], w["message"]) for w in written] == [
        ("genesis_retry", "ses_1", 2, "Provider is overloaded")]
    assert 2900 <= written[0]["next"] - written[0]["timestamp"] <= 3000
    # Not under Genesis, or not in JSON mode (the TUI, text output): opencode's output is left alone.
    for args, run_id in ((("run", "--format", "json"), ""), (("run", "--format", "default"), "run-opencode-plugin"),
                         (("run", "--", "--format", "json"), "run-opencode-plugin"), ((), "run-opencode-plugin")):
        written = []
        run_plugin(tmp_path, COMMAND, "retry", heartbeat, *args, run_id=run_id, out=written)
        assert written == [], args
    assert not heartbeat.exists()


# What opencode 1.18.33 gave the plugin's command on its stdin, one per event (a bash call,
# then a read of a missing file), and what the heartbeat makes of it.
@pytest.mark.parametrize("event, tool, call", [("tool.execute.before", "bash", "call_0"),
                                               ("tool.execute.after", "bash", "call_0"),
                                               ("tool.execute.error", "read", "call_1")])
def test_the_heartbeat_reads_what_the_plugin_writes(tmp_path, event, tool, call):
    payload = (FIXTURES / "hooks" / f"{event}.json").read_bytes()
    heartbeat = tmp_path / "beats" / "Builder.json"
    heartbeat.parent.mkdir(mode=0o700)
    env = {**os.environ, "GENESIS_HEARTBEAT_FILE": str(heartbeat), "GENESIS_AGENT": "Builder", "GENESIS_RUN_ID": "run-opencode-r"}
    subprocess.run(["bash", str(hook_script())], input=payload, env=env, check=True, timeout=30)
    beat = json.loads(heartbeat.read_text())
    assert (beat["event"], beat["tool"], beat["session_id"]) == (event, tool, "ses_e01795702ffel5i0JErwUREWNx")
    logged = json.loads(heartbeat.with_name("Builder.tools.jsonl").read_text())
    assert (logged["e"], logged["id"]) == (event, call)
    # The self-test plays the same shape.
    played = json.loads(OPENCODE_HOOKS.payload("genesis-self-test.x", tmp_path))
    assert list(played) == [k for k in json.loads(payload) if k != "duration_ms"]


# --- the JSON events, from real runs ----------------------------------------------------------

def read(name: str, returncode: int | None) -> tuple[OpenCodeReader, list[str]]:
    reader = OpenCodeReader(wall=lambda: 1_800_000_000.0)
    lines = []
    for line in (FIXTURES / name).read_text().splitlines():
        lines += reader.feed(line)
    return reader, lines


def test_a_quick_run_is_one_turn_and_its_text():
    reader, lines = read("quick.jsonl", 0)
    ending = reader.ending(0)
    assert ending.final_text == "Nothing needed." and ending.result.num_turns == 1
    assert lines == [f"session {ending.result.session_id}", "assistant: Nothing needed."]


def test_an_api_retry_the_plugin_wrote_is_a_wait_on_the_api_until_the_cli_goes_on():
    reader = OpenCodeReader(wall=lambda: 0.0, mono=lambda: 50.0)
    events = (FIXTURES / "retried.jsonl").read_text().splitlines()
    assert reader.feed(events[0])[-1:] == [
        "API retry 1/5 in 0.3s (Rate limit reached for stub-model in organization org-stub on requests per min "
        "(RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.)"]
    retry = reader.retry
    assert (retry.attempt, retry.max_retries, retry.delay, retry.seen) == (1, 5, 0.3, 50.0)
    assert retry.error.startswith("Rate limit reached")
    reader.feed(events[2])
    assert reader.retry.attempt == 3
    reader.feed(events[3])  # the model answered: the retries are over
    assert reader.retry is None
    for line in events[4:]:
        reader.feed(line)
    ending = reader.ending(0)
    assert ending.final_text == "Done: wrote hello.txt and committed it." and ending.api_error is None


def retry_line(message: str, wait_ms: int) -> str:
    """A genesis_retry event as the plugin writes it (see retried.jsonl)."""
    return json.dumps({"type": "genesis_retry", "timestamp": 1_800_000_000_000, "sessionID": "ses_1", "attempt": 1,
                       "message": message, "next": 1_800_000_000_000 + wait_ms})


@pytest.mark.parametrize("message, wait_ms, limit", [
    # A rate limit whose retry-after is an hour away: opencode would sleep it through, silent.
    ("Rate limit reached for stub-model", 3_600_000, Limit(1_800_003_600.0, "rate_limit",
                                                            "Rate limit reached for stub-model")),
    # opencode's own Go plan: its words name the reset, which is the wait.
    ("5-hour usage limit reached. It will reset in 2 hours 5 minutes. To continue using this model now, enable "
     "usage from your available balance - https://opencode.ai/workspace/w/go", 7_500_000, Limit(
        1_800_007_500.0, "go", "5-hour usage limit reached. It will reset in 2 hours 5 minutes. To continue using "
        "this model now, enable usage from your available balance - https://opencode.ai/workspace/w/go")),
    ("Usage limit reached. It will reset in 3 minutes. To continue using this model now, enable usage from your "
     "available balance - https://opencode.ai/workspace/w/go", 180_000, Limit(1_800_000_180.0, "go", "Usage limit "
     "reached. It will reset in 3 minutes. To continue using this model now, enable usage from your available "
     "balance - https://opencode.ai/workspace/w/go")),
    ("Free usage exceeded, subscribe to Go", 2_000, Limit(None, "free", "Free usage exceeded, subscribe to Go")),
    ("Rate limit reached for stub-model", 300_000, None),   # five minutes: opencode's own retry is the wait
    ("Provider is overloaded", 30_000, None),
])
def test_a_retry_that_waits_for_a_limit_ends_the_run_so_the_loop_waits_instead(message, wait_ms, limit):
    reader = OpenCodeReader()
    reader.feed(retry_line(message, wait_ms))
    assert reader.hopeless == limit
    assert reader.retry is not None and reader.retry.delay == wait_ms / 1000


def test_a_finished_run_reads_its_final_text_turns_tokens_and_cost():
    reader, lines = read("progress.jsonl", 0)
    ending = reader.ending(0)
    assert ending.final_text == "Done: wrote hello.txt and committed it."
    r = ending.result
    assert (r.subtype, r.is_error, r.num_turns, r.terminal_reason) == ("success", False, 3, "stop")
    assert r.session_id.startswith("ses_") and r.total_cost_usd == 0.0
    assert (r.input_tokens, r.output_tokens) == (3 * 1200, 3 * 30)
    assert ending.limit is None and ending.api_error is None
    assert "tool bash: $ echo hello from the agent > hello.txt" in lines
    assert "tool bash: $ git add -A && git commit -qm 'agent: hello'" in lines
    assert lines[-1] == "assistant: Done: wrote hello.txt and committed it."


def test_a_failed_tool_call_shows_its_error():
    _, lines = read("tool-error.jsonl", 0)
    assert lines[1:3] == ["tool read: /srv/project/nope.txt", "  error: File not found: /srv/project/nope.txt"]


@pytest.mark.parametrize("fixture, retryable, status, code", [
    ("quota.jsonl", False, 429, "billing_error"),          # an API key out of credit: waiting is no help
    ("server-error.jsonl", True, 500, "server_error"),
    ("unauthorized.jsonl", False, 401, "authentication_failed"),
    ("unreachable.jsonl", True, None, "connection_failed"),
])
def test_an_api_failure_after_opencodes_own_retries_is_read_from_its_error_event(fixture, retryable, status, code):
    reader, lines = read(fixture, 1)
    ending = reader.ending(1)
    assert ending.limit is None and ending.final_text == ""
    err = ending.api_error
    assert (err.retryable, err.status, err.code) == (retryable, status, code), err
    assert err.message and any(line.startswith("error (") for line in lines)
    assert ending.result is None or ending.result.is_error


def test_a_rate_limit_that_outlasts_the_retries_is_a_limit_until_the_reset_the_api_named():
    reader, _ = read("rate-limit.jsonl", 1)
    ending = reader.ending(1)
    assert ending.api_error is None
    limit = ending.limit
    assert limit.kind == "rate_limit" and "Rate limit reached" in limit.message
    assert limit.resets_at == pytest.approx(reader.error_at + 1)


def test_opencodes_own_plan_limit_is_a_usage_limit_with_its_reset():
    record = {"type": "error", "error": {"name": "APIError", "data": {
        "message": "Usage limit reached", "statusCode": 429, "isRetryable": True,
        "responseHeaders": {"retry-after": "7200"},
        "responseBody": json.dumps({"type": "error", "error": {"type": "GoUsageLimitError"}})}}}
    assert classify(record, 1000.0) == Limit(resets_at=8200.0, kind="go", message="Usage limit reached")


@pytest.mark.parametrize("name, message, expected", [
    ("ProviderAuthError", "No API key for provider stub", (False, None, "authentication_failed")),
    ("UnknownError", "fetch failed", (True, None, "connection_failed")),
    ("UnknownError", "Cannot read properties of undefined", None),     # opencode's own failure, not the API's
    ("ContextOverflowError", "prompt is too long", None),
    ("MessageAbortedError", "Aborted", None),
])
def test_opencodes_other_errors_are_api_errors_only_when_the_api_failed(name, message, expected):
    found = classify({"type": "error", "error": {"name": name, "data": {"message": message}}}, 0.0)
    assert (found if found is None else (found.retryable, found.status, found.code)) == expected


def test_a_wait_is_read_from_every_header_form():
    now = 1_800_000_000.0
    assert retry_after({"retry-after-ms": "1500"}, now) == 1.5
    assert retry_after({"Retry-After": "20"}, now) == 20.0
    assert retry_after({"retry-after": email.utils.formatdate(now + 20, usegmt=True)}, now) == 20.0
    # OpenAI's own reset headers, in Go's duration notation: the latest of them counts.
    assert retry_after({"x-ratelimit-reset-requests": "1m30s", "x-ratelimit-reset-tokens": "250ms"}, now) == 90.0
    assert retry_after({"retry-after": "2", "x-ratelimit-reset-tokens": "1h0m0s"}, now) == 3600.0
    assert retry_after({"retry-after": "soon"}, now) is None and retry_after({}, now) is None


def test_a_killed_run_and_stderr_lines_are_read_as_they_are():
    reader = OpenCodeReader()
    assert reader.feed("\x1b[93m! \x1b[0mpermission requested: bash (rm -rf x); auto-rejecting") != []
    assert reader.feed("") == [] and reader.feed("{not json") == ["{not json"]
    ending = reader.ending(None)
    assert ending.final_text == "" and ending.limit is None and ending.api_error is None
