"""Claude Code's stream-json output read into a transcript and an ending, from recordings of
the real CLI (tests/fixtures/claude) and from records built after them."""

from __future__ import annotations

import calendar
import json
import re
import time

import pytest
from helpers import paths

from genesis.agents.base import MAX_RESULT_CHARS, PERMISSION_REFUSED, ApiError, ApiRetry, Ending, Limit
from genesis.agents.claude import ClaudeCode, ClaudeTextReader
from genesis.agents.claude.stream import MAX_LINE_BYTES, StreamReader
from genesis.loop.ending import how_it_ended
from genesis.watch.supervisor import Outcome

FIXTURES = paths.FIXTURES / "claude"
LIMIT_5H = "You've hit your 5-hour limit · resets 9:22am (UTC)"


def lines_of(name: str) -> list[str]:
    return (FIXTURES / name).read_bytes().decode("utf-8").splitlines()


def records_of(name: str) -> list[dict]:
    return [json.loads(line) for line in lines_of(name)]


def read(lines: list[str], reader: StreamReader | None = None) -> tuple[StreamReader, list[str]]:
    reader = reader or StreamReader()
    transcript: list[str] = []
    for line in lines:
        transcript += reader.feed(line)
    return reader, transcript


def dumps(records: list[dict]) -> list[str]:
    return [json.dumps(r) for r in records]


def assistant(*blocks: dict, parent: str | None = None) -> dict:
    return {"type": "assistant", "message": {"role": "assistant", "content": list(blocks)},
            "parent_tool_use_id": parent, "session_id": "s"}


def api_error_message(error: str, status: int | None, said: str, **extra) -> dict:
    record = assistant({"type": "text", "text": said})
    record.update(error=error, is_api_error_message=True, **extra)
    if status is not None:
        record["api_error_status"] = status
    return record


def result(said: str, is_error: bool = True, subtype: str = "success", **extra) -> dict:
    return {"type": "result", "subtype": subtype, "is_error": is_error, "num_turns": 1, "total_cost_usd": 0,
            "duration_ms": 100, "result": said, "session_id": "s", **extra}


def tool_result(content, is_error: bool) -> dict:
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": content, "is_error": is_error}]}}


def tool_use(name: str, tool_input: dict) -> dict:
    return assistant({"type": "tool_use", "id": "t1", "name": name, "input": tool_input})


# --- the recordings of the real CLI -------------------------------------------------------


def test_a_successful_run_reads_as_its_tool_calls_its_failed_call_and_its_result():
    reader, transcript = read(lines_of("success.jsonl"))
    init = records_of("success.jsonl")[0]
    assert transcript[0] == f"session {init['session_id']}: model {init['model']}"
    assert "tool Bash: $ echo hello from claude > hello.txt" in transcript
    assert "tool Write: /home/user/project/notes.md" in transcript
    failed = transcript.index("tool Bash: $ ls does-not-exist")
    assert transcript[failed + 1:failed + 3] == [
        "  error: Exit code 2", "    ls: cannot access 'does-not-exist': No such file or directory"]
    assert "tool Bash: $ git add -A && git commit -qm 'agent: hello and notes'" in transcript
    assert transcript[-2] == "assistant: Done: wrote hello.txt and notes.md and committed them."
    assert re.fullmatch(r"result: success, 5 turns, \$0\.0030, \d+\.\ds: "
                        r"Done: wrote hello\.txt and notes\.md and committed them\.", transcript[-1])
    assert not any("completed with no output" in line or "File created" in line for line in transcript)
    ending = reader.ending(0)
    assert ending.limit is None and ending.api_error is None
    assert ending.final_text == "Done: wrote hello.txt and notes.md and committed them."
    r = ending.result
    assert (r.subtype, r.is_error, r.num_turns, r.total_cost_usd, r.terminal_reason, r.api_error_status) == \
        ("success", False, 5, 0.003, "completed", None)
    assert r.session_id == init["session_id"] and r.text == ending.final_text


def test_a_call_refused_for_want_of_an_approval_makes_the_run_hopeless_at_that_call():
    """`claude -p` without --dangerously-skip-permissions: its first refused call (a Bash
    redirection) ends the run, whatever its result says; the message names the fix."""
    lines = lines_of("permission_refused.jsonl")
    first = next(i for i, r in enumerate(records_of("permission_refused.jsonl"))
                 if r["type"] == "user" and r.get("tool_result_meta", [{}])[0].get("non_execution_kind"))
    reader, _ = read(lines[:first])
    assert reader.hopeless is None
    reader, transcript = read(lines[first:first + 1], reader)
    refused = reader.hopeless
    assert isinstance(refused, ApiError) and (refused.retryable, refused.status, refused.code) == (
        False, None, PERMISSION_REFUSED)
    assert refused.message.startswith(
        "Claude Code refused a Bash call that needs approval: an unattended run has nobody to approve it. Add "
        "--dangerously-skip-permissions to GENESIS_AGENT_CMD (or --permission-mode bypassPermissions, or allow the "
        "tool in Claude Code's permissions.allow), then restart. Claude Code said: Output redirection to "
        "'/home/user/project/hello.txt' needs approval.")
    assert transcript == ["  error: Output redirection to '/home/user/project/hello.txt' needs approval. The path is "
                          "inside the working directories for this session ('/home/user/project'), and Claude Code "
                          "asks before a shell command creates, changes or removes files there."]
    read(lines[first + 1:], reader)  # the run went on to a "success" result: the first refusal stands
    assert reader.hopeless is refused and reader.result.subtype == "success"
    assert reader.ending(0) == Ending(result=reader.result, api_error=refused)


def test_a_deny_rule_of_the_users_settings_is_no_reason_to_end_the_run():
    reader, transcript = read(lines_of("permission_rule.jsonl"))
    assert "  error: Permission to use Bash with command echo hello from claude > hello.txt has been denied." in \
        transcript
    assert reader.hopeless is None
    assert records_of("permission_rule.jsonl")[-1]["permission_denials"]  # counted there all the same
    ending = reader.ending(0)
    assert ending.api_error is None and ending.final_text.startswith("Done:")


@pytest.mark.parametrize("name, kind", [("limit_five_hour.jsonl", "five_hour"),
                                        ("limit_seven_day.jsonl", "seven_day")])
def test_a_usage_limit_ends_with_its_reset_from_the_refusal_event(name, kind):
    event = next(r for r in records_of(name) if r["type"] == "rate_limit_event")["rate_limit_info"]
    said = next(r for r in records_of(name) if r["type"] == "result")["result"]
    reader, transcript = read(lines_of(name))
    ending = reader.ending(1)
    assert ending.limit == Limit(resets_at=float(event["resetsAt"]), kind=kind, message=said)
    assert ending.api_error is None and ending.final_text == ""
    assert ending.result.is_error and ending.result.api_error_status == 429
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event["resetsAt"]))
    assert f"usage limit reached ({kind}): resets {reset}" in transcript
    assert f"API error (rate_limit, 429): {said}" in transcript
    assert f"result: error (api_error, 429): {said}" in transcript


@pytest.mark.parametrize("name, retryable, status, code, retry", [
    ("overloaded_529.jsonl", True, 529, "server_error", "(529 overloaded)"),
    ("connection_refused.jsonl", True, None, "connection_failed", "(unknown)"),
    ("auth_401.jsonl", False, 401, "authentication_failed", "(401 authentication_failed)"),
    ("credit_400.jsonl", False, 400, "billing_error", None),
    ("model_404.jsonl", False, 404, "model_not_found", None),
    ("invalid_400.jsonl", False, 400, "unknown", None),
])
def test_an_api_error_ends_retryable_or_fatal_with_the_agents_words(name, retryable, status, code, retry):
    said = next(r for r in records_of(name) if r["type"] == "result")["result"]
    reader, transcript = read(lines_of(name))
    ending = reader.ending(1)
    assert ending.api_error == ApiError(retryable=retryable, status=status, code=code, message=said)
    assert ending.limit is None and ending.final_text == ""
    assert ending.result.is_error and ending.result.terminal_reason == "api_error"
    retries = [line for line in transcript if line.startswith("API retry")]
    if retry is None:
        assert retries == []
    else:  # CLAUDE_CODE_MAX_RETRIES=2 when recorded
        assert [re.sub(r"in \d+\.\ds", "in Ns", line) for line in retries] == \
            [f"API retry 1/2 in Ns {retry}", f"API retry 2/2 in Ns {retry}"]
    assert any(line.startswith("API error (") and line.endswith(said) for line in transcript)
    assert transcript[-1].startswith("result: error (api_error") and transcript[-1].endswith(said)


def test_a_usage_warning_is_said_and_ignored():
    reader, transcript = read(lines_of("limit_warning.jsonl"))
    warning = next(line for line in transcript if line.startswith("usage limit"))
    assert re.fullmatch(r"usage limit warning \(five_hour\): 91% used, resets \d{4}-\d\d-\d\dT[\d:]{8}Z", warning)
    ending = reader.ending(0)
    assert ending.limit is None and ending.api_error is None and ending.final_text == "Hi."


def test_an_allowed_warning_before_a_failed_run_makes_no_limit():
    warning = next(r for r in records_of("limit_warning.jsonl") if r["type"] == "rate_limit_event")
    allowed = {**warning, "rate_limit_info": {"status": "allowed", "resetsAt": 1, "rateLimitType": "five_hour"}}
    reader, transcript = read(dumps([warning, allowed, api_error_message("server_error", 500, "API Error: 500"),
                                     result("API Error: 500", api_error_status=500)]))
    ending = reader.ending(1)
    assert ending.limit is None
    assert ending.api_error == ApiError(True, 500, "server_error", "API Error: 500")
    assert sum(line.startswith("usage limit") for line in transcript) == 1  # the warning; "allowed" says nothing


def test_every_transcript_line_is_one_line_and_nothing_is_a_raw_json_dump():
    for path in sorted(FIXTURES.glob("*.jsonl")):
        _, transcript = read(lines_of(path.name))
        for line in transcript:
            assert line.splitlines() == [line], (path.name, line)
            assert not line.startswith("{"), (path.name, line)


def test_the_recordings_hold_no_machine_paths():
    for path in sorted(FIXTURES.glob("*.*")):
        if path.suffix in (".jsonl", ".txt"):
            data = path.read_text(encoding="utf-8")
            assert not re.search(r"/tmp/tmp|/private/|/root\b|/work/|/Users/", data), path.name


def test_the_text_mode_recordings_are_read_by_the_text_reader():
    line = lines_of("limit_five_hour.txt")[-1]
    now = 1_795_000_000.0
    reader = ClaudeTextReader(now=lambda: now)
    assert reader.feed(line) == [line]
    limit = reader.ending(1).limit
    assert limit is not None and limit.kind == "five_hour" and limit.message == line
    hour, minute, half = re.search(r"resets (\d+):(\d\d)([ap])m \(UTC\)", line).groups()
    at = time.gmtime(limit.resets_at)
    assert (at.tm_hour, at.tm_min) == (int(hour) % 12 + (12 if half == "p" else 0), int(minute))
    assert now - 600 < limit.resets_at <= now + 86400

    line = lines_of("overloaded_529.txt")[-1]
    reader = ClaudeTextReader(now=lambda: now)
    reader.feed(line)
    error = reader.ending(1).api_error
    assert error is not None and error.retryable and error.status == 529 and error.message == line


def test_text_mode_output_fed_to_the_stream_reader_is_shown_and_never_a_limit():
    reader, transcript = read(lines_of("limit_five_hour.txt") + lines_of("overloaded_529.txt"))
    assert transcript == lines_of("limit_five_hour.txt") + lines_of("overloaded_529.txt")
    assert reader.ending(1) == Ending()


# --- retries ------------------------------------------------------------------------------


def test_the_retry_is_set_by_each_api_retry_and_cleared_by_the_next_event():
    clock = iter([100.0, 103.5])
    reader = StreamReader(mono=lambda: next(clock))
    lines = lines_of("overloaded_529.jsonl")
    first, second = [line for line in lines if '"api_retry"' in line]
    reader.feed(lines[0])
    assert reader.retry is None
    reader.feed(first)
    assert reader.retry == ApiRetry(attempt=1, max_retries=2, delay=json.loads(first)["retry_delay_ms"] / 1000,
                                    status=529, error="overloaded", seen=100.0)
    reader.feed("node: a warning on stderr")   # not an event: the retry is still under way
    assert reader.retry is not None and reader.retry.seen == 100.0
    reader.feed(second)
    assert reader.retry.attempt == 2 and reader.retry.seen == 103.5
    reader.feed(next(line for line in lines if '"type":"assistant"' in line))
    assert reader.retry is None


def test_an_unknown_event_and_a_huge_line_also_end_the_retry():
    retry = next(line for line in lines_of("connection_refused.jsonl") if '"api_retry"' in line)
    reader = StreamReader(mono=lambda: 5.0)
    reader.feed(retry)
    assert reader.retry == ApiRetry(1, 2, json.loads(retry)["retry_delay_ms"] / 1000, None, "unknown", 5.0)
    assert reader.feed(json.dumps({"type": "stream_event", "event": {}})) == []
    assert reader.retry is None
    reader.feed(retry)
    reader.feed('{"type":"user","pad":"' + "x" * MAX_LINE_BYTES + '"}')
    assert reader.retry is None


# --- lines that are not records -----------------------------------------------------------


def test_a_line_that_is_not_json_is_shown_as_it_is():
    reader, transcript = read(["Error: something on stderr", "", "42", "[1, 2]", "   "])
    assert transcript == ["Error: something on stderr", "42", "[1, 2]"]
    assert reader.ending(1).result is None


def test_a_cut_json_line_is_shown_as_text_and_not_read():
    line = json.dumps(result("all done", is_error=False))
    cut = line[:len(line) // 2]
    reader, transcript = read([cut])
    assert transcript == [cut]
    assert reader.ending(0).result is None and reader.ending(0).final_text == ""


def test_json_nested_too_deep_to_parse_is_shown_as_text():
    line = '{"a":' * 100_000
    reader, transcript = read([line])
    assert len(transcript) == 1 and transcript[0].startswith('{"a":{"a":') and transcript[0].endswith("\u2026")
    assert reader.ending(1).result is None


def test_a_line_over_the_cap_is_not_parsed():
    line = json.dumps(result("x" * MAX_LINE_BYTES, is_error=False))
    reader, transcript = read([line])
    assert transcript == [f"(an output line of {len(line.encode())} bytes was not read)"]
    assert reader.ending(0).result is None
    # counted in bytes: a line of fewer characters but more bytes than the cap is not read either
    wide = json.dumps(result("é" * (MAX_LINE_BYTES // 2 + 10), is_error=False), ensure_ascii=False)
    assert len(wide) < MAX_LINE_BYTES
    assert read([wide])[1] == [f"(an output line of {len(wide.encode())} bytes was not read)"]


def test_an_unknown_record_type_says_nothing():
    reader, transcript = read(dumps([{"type": "control_request"}, {"no": "type"},
                                     {"type": "system", "subtype": "hook_response"}]))
    assert transcript == []


# --- the transcript -----------------------------------------------------------------------


def test_tool_calls_are_shown_by_what_matters_in_them():
    _, transcript = read(dumps([
        tool_use("Bash", {"command": "cd src &&\nmake test\n", "description": "x"}),
        tool_use("Read", {"file_path": "/p/a.py"}),
        tool_use("Edit", {"file_path": "/p/b.py", "old_string": "a", "new_string": "b"}),
        tool_use("NotebookEdit", {"notebook_path": "/p/n.ipynb", "new_source": "x"}),
        tool_use("Grep", {"pattern": "def main", "path": "src"}),
        tool_use("Glob", {"pattern": "**/*.py"}),
        tool_use("WebFetch", {"url": "https://example.com", "prompt": "p" * 300}),
        tool_use("TodoWrite", {"todos": []}),
    ]))
    assert transcript[:6] == ["tool Bash: $ cd src && ⏎ make test", "tool Read: /p/a.py", "tool Edit: /p/b.py",
                              "tool NotebookEdit: /p/n.ipynb", "tool Grep: def main", "tool Glob: **/*.py"]
    fetch = transcript[6]
    assert fetch.startswith('tool WebFetch: {"url":"https://example.com","prompt":"ppp')
    assert len(fetch) == len("tool WebFetch: ") + 200 and fetch.endswith("\u2026")
    assert transcript[7] == 'tool TodoWrite: {"todos":[]}'


def test_assistant_text_over_several_lines_is_indented_and_control_characters_go():
    _, transcript = read(dumps([assistant({"type": "text", "text": "First.\n\n- one\n- two\x1b[31m red\x1b[0m\r\n"},
                                          {"type": "thinking", "thinking": "hidden"})]))
    assert transcript == ["assistant: First.", "  - one", "  - two red"]


def test_a_failed_tool_shows_its_first_lines_and_a_good_one_nothing():
    out = "\n".join(f"line {i}" for i in range(1, 10))
    _, transcript = read(dumps([tool_result("fine", False), tool_result([{"type": "text", "text": out}], True),
                                tool_result("", True)]))
    assert transcript == ["  error: line 1", "    line 2", "    line 3", "    line 4", "    (5 more lines)",
                          "  error: (no output)"]


def test_a_failed_result_names_its_reason():
    _, transcript = read(dumps([result("", subtype="error_max_turns", num_turns=3)]))
    assert transcript == ["result: error (error_max_turns)"]
    _, transcript = read(dumps([result("Stopped.\nmore", terminal_reason="max_turns")]))
    assert transcript == ["result: error (max_turns): Stopped."]


# --- the ending ---------------------------------------------------------------------------


ECHO = next(line for line in lines_of("limit_five_hour.jsonl") if '"rate_limit_event"' in line)


@pytest.mark.parametrize("failed", [False, True])
def test_a_limit_quoted_in_tool_output_or_by_the_model_is_never_a_limit(failed):
    """An agent reading a log that holds a refusal event and the limit sentence."""
    reader, transcript = read(dumps([
        tool_use("Bash", {"command": f"grep limit night.log  # {LIMIT_5H}"}),
        tool_result(f"{ECHO}\n{LIMIT_5H}\nAPI Error: 529 Overloaded.", True),
        tool_result([{"type": "text", "text": ECHO}], False),
        assistant({"type": "text", "text": f"{LIMIT_5H}\n{ECHO}"}),
        result(LIMIT_5H, subtype="error_max_turns", terminal_reason="max_turns") if failed else
        result(f"Found: {LIMIT_5H}", is_error=False),
    ]))
    ending = reader.ending(1 if failed else 0)
    assert ending.limit is None and ending.api_error is None
    assert ending.final_text == ("" if failed else f"Found: {LIMIT_5H}")
    assert not any(line.startswith(("usage limit", "API error")) for line in transcript)


@pytest.mark.fault(43)
def test_a_successful_run_quoting_the_recorded_limit_finishes_in_stream_json_and_in_text():
    """A task that names a limit: the agent `cat`s it and its final message quotes it. The real
    CLI's recorded run with the recorded refusal event and limit sentence in its tool output and
    its result, and its text-mode answer ending in that sentence: the phase finished, no wait."""
    said = lines_of("limit_five_hour.txt")[-1]
    quoting = records_of("success.jsonl")
    quoting[2]["message"]["content"][0]["content"] = f"{ECHO}\n{said}"  # the first Bash call's output
    lines = [line.replace("Done: wrote hello.txt and notes.md and committed them.", f"In the FAQ: {said}")
             for line in dumps(quoting)]
    stream = ClaudeCode().reader(ClaudeCode().command(("claude", "-p", "--dangerously-skip-permissions")))
    read(lines, stream)
    text = ClaudeCode().reader(("claude", "-p", "--output-format", "text"))
    read(["In the FAQ, as Claude Code says it:", said], text)
    for reader in (stream, text):
        ending = reader.ending(0)
        assert ending.limit is None and ending.final_text.endswith(said), ending
        assert how_it_ended(Outcome("exited", 0, 1.0, ending=ending)) == "finished"
    # The same last line from a run that failed is the limit itself.
    assert how_it_ended(Outcome("exited", 1, 1.0, ending=text.ending(1))) == "limit"


def test_a_killed_run_after_a_refusal_event_is_a_limit():
    reader, _ = read(lines_of("limit_five_hour.jsonl")[:2])  # init and the refusal event, then killed
    ending = reader.ending(None)
    assert ending.result is None
    assert ending.limit == Limit(ending.limit.resets_at, "five_hour", "usage limit reached (five_hour)")
    assert ending.limit.resets_at is not None


def test_a_killed_run_inside_the_clis_retries_has_no_ending_but_its_retry():
    reader, _ = read(lines_of("overloaded_529.jsonl")[:2], StreamReader(mono=lambda: 1.0))
    ending = reader.ending(None)
    assert ending.result is None and ending.limit is None and ending.api_error is None
    assert reader.retry is not None and reader.retry.status == 529


def test_a_usage_limit_without_a_refusal_event_takes_its_reset_from_the_error():
    records = [r for r in records_of("limit_five_hour.jsonl") if r["type"] != "rate_limit_event"]
    info = next(r for r in records if r["type"] == "assistant")["api_error_params"]["rate_limit_info"]
    ending = read(dumps(records))[0].ending(1)
    assert ending.limit is not None
    assert (ending.limit.resets_at, ending.limit.kind) == (float(info["resetsAt"]), "five_hour")


def test_a_usage_limit_with_no_reset_anywhere_is_read_from_the_clis_words():
    records = [r for r in records_of("limit_five_hour.jsonl") if r["type"] != "rate_limit_event"]
    error = next(r for r in records if r["type"] == "assistant")
    del error["api_error_params"]
    error["message"]["content"] = [{"type": "text", "text": LIMIT_5H}]
    error["timestamp"] = "2026-11-21T08:22:11.210Z"   # when the CLI said it: the reset is the next 9:22am
    next(r for r in records if r["type"] == "result")["result"] = LIMIT_5H
    ending = read(dumps(records), StreamReader(wall=lambda: 0.0))[0].ending(1)
    assert ending.limit == Limit(float(calendar.timegm((2026, 11, 21, 9, 22, 0))), "five_hour", LIMIT_5H)
    assert ending.api_error is None


@pytest.mark.parametrize("error, status, api_error, retryable", [
    ("server_error", 500, None, True),
    ("overloaded", 529, None, True),
    ("server_error", None, "connection_failed", True),
    ("rate_limit", 429, None, True),                  # an API key's rate limit, not a usage limit
    ("unknown", None, None, True),
    ("unknown", 503, None, True),
    ("unknown", 408, None, True),
    ("unknown", 429, None, True),
    ("authentication_failed", 401, None, False),
    ("oauth_org_not_allowed", 403, None, False),
    ("billing_error", 400, None, False),
    ("billing_error", None, None, False),             # fatal by its name alone
    ("authentication_failed", None, None, False),
    ("model_not_found", 404, None, False),
    ("invalid_request", 400, None, False),
    ("unknown", 403, None, False),
    ("unknown", 413, None, False),
])
def test_api_errors_are_retryable_or_fatal(error, status, api_error, retryable):
    said = f"API Error: {status} something"
    extra = {"api_error": api_error} if api_error else {}
    reader, _ = read(dumps([api_error_message(error, status, said, **extra), result(said)]))
    found = reader.ending(1).api_error
    assert found is not None and found.retryable is retryable and found.status == status
    assert found.message == said


def test_without_an_error_message_the_result_status_decides():
    reader, _ = read(dumps([result("API Error: 503 busy", api_error_status=503)]))
    assert reader.ending(1).api_error == ApiError(True, 503, "unknown", "API Error: 503 busy")
    reader, _ = read(dumps([result("API Error: 403 no", api_error_status=403)]))
    assert reader.ending(1).api_error.retryable is False
    reader, _ = read(dumps([result("", subtype="error_during_execution")]))
    assert reader.ending(1).api_error is None


def test_an_error_the_run_went_past_or_a_subagents_error_does_not_end_it():
    said = "API Error: 500 Internal server error."
    reader, _ = read(dumps([api_error_message("server_error", 500, said), assistant({"type": "text", "text": "Back."}),
                            result("", subtype="error_max_turns")]))
    assert reader.ending(1).api_error is None
    sub = api_error_message("authentication_failed", 401, "Invalid API key")
    sub["parent_tool_use_id"] = "toolu_1"
    reader, transcript = read(dumps([sub, result("", subtype="error_during_execution")]))
    assert reader.ending(1).api_error is None
    assert transcript[0] == "API error (authentication_failed, 401): Invalid API key"


def test_a_failed_model_turn_is_not_an_api_error():
    reader, _ = read(dumps([api_error_message("max_output_tokens", None, "Response exceeded the output limit"),
                            result("Response exceeded the output limit", terminal_reason="max_output_tokens")]))
    assert reader.ending(1).api_error is None


def test_the_result_text_is_capped_and_kept_only_for_a_successful_run():
    long = "done " * MAX_RESULT_CHARS
    reader, _ = read(dumps([result(long, is_error=False)]))
    assert reader.ending(0).final_text == long[:MAX_RESULT_CHARS]
    reader, _ = read(dumps([result("half done")]))
    assert reader.ending(1).final_text == "" and reader.ending(1).result.text == "half done"


def test_refused_retries_in_a_row_make_the_run_hopeless():
    def retry(n: int, status, error: str) -> str:
        return json.dumps({"type": "system", "subtype": "api_retry", "attempt": n, "max_retries": 10,
                           "retry_delay_ms": 500, "error_status": status, "error": error})

    reader = StreamReader(mono=lambda: 0.0)
    reader.feed(retry(1, 401, "authentication_failed"))
    reader.feed(retry(2, 529, "overloaded"))  # not a refusal: the count starts again
    reader.feed(retry(3, 401, "authentication_failed"))
    reader.feed(retry(4, 401, "authentication_failed"))
    assert reader.hopeless is None
    reader.feed(retry(5, 401, "authentication_failed"))
    assert reader.hopeless is not None and not reader.hopeless.retryable and reader.hopeless.status == 401
    overloaded = StreamReader(mono=lambda: 0.0)
    for n in range(1, 11):
        overloaded.feed(retry(n, 529, "overloaded"))
    assert overloaded.hopeless is None


# --- silences on purpose and the hang classes (docs/concepts/silences.md) --------------------

class Ticks:
    """A monotonic clock that moves one second per reading."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_background_command_is_in_flight_from_its_start_to_its_notification_past_the_first_result():
    reader, seen = StreamReader(mono=Ticks()), []
    for line in lines_of("background.jsonl"):
        reader.feed(line)
        record = json.loads(line) if line.startswith("{") else {}
        seen.append((record.get("type"), record.get("subtype"), reader.background, reader.result_at is not None))
    started = next(i for i, s in enumerate(seen) if s[1] == "task_started")
    first_result = next(i for i, s in enumerate(seen) if s[0] == "result")
    notified = next(i for i, s in enumerate(seen) if s[1] == "task_notification")
    assert started < first_result < notified
    assert seen[started][2] == ("command Build in the background",)
    assert seen[first_result][2:] == (("command Build in the background",), True)  # the result, and work left
    assert seen[notified][2] == ()
    after = seen[notified + 1:]
    assert ("system", "init", (), False) in after  # the new turn takes the first result back
    assert after[-1] == ("result", "success", (), True)
    assert reader.ending(0).result.text == "Started the build in the background."


def test_an_async_sub_agent_is_background_work_until_its_notification_and_its_turns_are_not_the_agents():
    reader, transcript = read(lines_of("async_agent.jsonl"), StreamReader(mono=Ticks()))
    assert "background sub-agent Build in a sub-agent: started" in transcript
    assert "background sub-agent Build in a sub-agent: completed" in transcript
    assert reader.background == () and reader.result_at is not None
    partway, _ = read(lines_of("async_agent.jsonl")[:8], StreamReader(mono=Ticks()))
    assert partway.background == ("sub-agent Build in a sub-agent",) and partway.result_at is None


def test_a_scheduled_wake_up_is_pending_from_its_call_to_its_fire_and_due_when_its_result_says():
    due = records_of("wakeup.jsonl")[2]["tool_use_result"]["scheduledFor"] / 1000
    reader, seen = StreamReader(mono=lambda: 1000.0, wall=lambda: due - 90), []
    for line in lines_of("wakeup.jsonl"):
        said = reader.feed(line)
        record = json.loads(line)
        seen.append((record.get("type"), reader.wakeup_at, reader.result_at is not None, said))
    call, scheduled, _, first_result, fired = seen[1:6]
    assert call[1] == 1000.0 + 60 + 60  # its delay and up to a minute, until its result says when
    assert (scheduled[1], first_result[0], first_result[1:3]) == (1090.0, "result", (1090.0, True))
    assert (fired[0], fired[1], fired[3]) == ("command_lifecycle", None, ["woken by its scheduled wake-up "
                                                                          "(loop_wakeup)"])
    assert fired[2] is False  # the fire begins a turn: the first result is no longer the final one
    assert seen[-1][1] is None and reader.ending(0).result.text == "Woken: the build is done."


def test_a_wake_up_cancelled_or_refused_is_not_pending_and_a_sub_agents_is_not_the_runs():
    call = tool_use("ScheduleWakeup", {"delaySeconds": 120, "reason": "r", "prompt": "p"})
    reader, _ = read(dumps([call]), StreamReader(mono=lambda: 0.0, wall=lambda: 0.0))
    assert reader.wakeup_at == 180.0
    tool_id = call["message"]["content"][0]["id"]
    refused = {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_id, "content": "ScheduleWakeup refused", "is_error": True}]}}
    read(dumps([refused]), reader)
    assert reader.wakeup_at is None
    read(dumps([call, tool_use("ScheduleWakeup", {"stop": True})]), reader)
    assert reader.wakeup_at is None
    block = {"type": "tool_use", "id": "t2", "name": "ScheduleWakeup", "input": {"delaySeconds": 60}}
    read(dumps([assistant(block, parent="toolu_agent")]), reader)
    assert reader.wakeup_at is None


def test_a_refusal_by_the_models_safeguards_ends_as_its_own_error_not_as_a_fatal_api_error():
    reader, transcript = read(lines_of("refusal.jsonl"))
    assert "the model refused (cyber); no other model was tried" in transcript
    ending = reader.ending(1)
    assert ending.limit is None and ending.api_error.code == "refusal" and not ending.api_error.retryable
    assert ending.api_error.message.startswith("API Error: Opus 4.8's safeguards flagged this message.")


def test_a_limit_weeks_away_reads_as_a_limit_with_its_far_reset():
    reader, _ = read(lines_of("limit_far.jsonl"))
    limit = reader.ending(1).limit
    assert limit.kind == "seven_day"
    said = records_of("limit_far.jsonl")
    event = next(r for r in said if r.get("type") == "rate_limit_event")
    assert limit.resets_at == event["rate_limit_info"]["resetsAt"]
    assert re.fullmatch(r"You've hit your weekly limit · resets \w{3} \d{1,2}, \d{1,2}(:\d\d)?[ap]m \(UTC\)",
                        limit.message)


def test_an_empty_success_after_a_dead_stream_is_an_outage_not_a_finished_run():
    # Recorded with the CLI's stream watchdog at 10 s against a stub whose answers stop mid-stream.
    reader, transcript = read(lines_of("dead_stream.jsonl"))
    assert "(the model's answer came to nothing: a dead stream; the CLI asks again)" in transcript
    assert reader.result.subtype == "success" and not reader.result.is_error and reader.result.text == ""
    ending = reader.ending(0)
    assert ending.final_text == "" and ending.api_error == ApiError(
        True, None, "stream_idle_timeout", "the API's stream went dead 1 time(s) and the run ended with an empty "
                                           "result")


def test_a_result_with_words_after_a_dead_stream_is_the_runs_own():
    lines = lines_of("dead_stream.jsonl")
    said = [line.replace('"result":""', '"result":"Recovered."') for line in lines]
    ending = read(said)[0].ending(0)
    assert ending.api_error is None and ending.final_text == "Recovered."


def test_the_model_used_is_the_one_the_result_bills_else_the_one_init_names():
    """Recorded from the pinned CLI: its result's modelUsage names the model it used; a run
    whose result names none (a subagent's smaller model beside it costs less) keeps init's."""
    reader, _ = read(lines_of("limit_warning.jsonl"))
    assert reader.result.model == "claude-sonnet-5-5"
    records = records_of("limit_warning.jsonl")
    init, result = records[0], records[-1]
    two = {**result, "modelUsage": {"claude-haiku-4-5": {"costUSD": 0.0001},
                                    "claude-opus-4-5": {"costUSD": 0.2}}}
    assert read(dumps([init, two]))[0].result.model == "claude-opus-4-5"
    none = {**result, "modelUsage": {}}
    assert read(dumps([{**init, "model": "claude-sonnet-4-5"}, none]))[0].result.model == \
        "claude-sonnet-4-5"
    assert read(dumps([none]))[0].result.model == ""
