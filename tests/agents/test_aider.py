"""aider's adapter: its unattended command line, and its text output read on real captures.

The fixtures are aider 0.86.2's own output (`--no-pretty`, through a pipe) against a stub
of the Chat Completions API answering with each provider error.
"""

from __future__ import annotations


import pytest
from helpers import paths

from genesis.agents import adapter_for, adapter_named
from genesis.agents.aider import MAX_RETRIES, Aider, AiderReader, classify, wait_of
from genesis.agents.base import ApiError, Limit
from genesis.phases import Phase, Trigger

FIXTURES = paths.FIXTURES / "aider"
UNATTENDED = ("--yes-always", "--no-pretty", "--no-check-update", "--no-show-release-notes", "--no-analytics",
              "--no-auto-commits")
NOW = 1_800_000_000.0


def read(name: str, returncode: int | None = 0, stop: str | None = None) -> tuple[AiderReader, object]:
    """A reader fed a fixture (up to the first line starting with `stop`), and its ending."""
    reader = AiderReader(mono=lambda: 100.0, wall=lambda: NOW)
    for line in (FIXTURES / name).read_text().splitlines():
        assert reader.feed(line) == [line]  # the transcript is the output as it is
        if stop is not None and line.startswith(stop):
            break
    return reader, reader.ending(returncode)


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


# --- the command line --------------------------------------------------------------------

def test_the_bare_program_gets_every_unattended_flag_and_ends_with_the_message_flag():
    assert Aider().command(("aider",)) == ("aider", *UNATTENDED, "--message")


def test_the_command_is_idempotent_and_keeps_the_users_message_flag_last():
    once = Aider().command(("aider", "--model", "openai/x", "-m"))
    assert once == ("aider", "--model", "openai/x", *UNATTENDED, "-m")
    assert Aider().command(once) == once
    assert Aider().command(("/opt/aider/bin/aider", "--yes-always", "--msg"))[-1] == "--msg"


def test_the_users_own_choices_win():
    argv = Aider().command(("aider", "--pretty", "--auto-commits", "--analytics-disable", "--check-update",
                            "--show-release-notes", "--message"))
    assert argv == ("aider", "--pretty", "--auto-commits", "--analytics-disable", "--check-update",
                    "--show-release-notes", "--yes-always", "--message")


def test_aider_is_recognised_has_no_hooks_and_refuses_claudes_per_phase_options(tmp_path):
    adapter = adapter_for(("/home/u/.local/bin/aider", "--model", "x"))
    assert isinstance(adapter, Aider) and isinstance(adapter_named("aider"), Aider)
    assert adapter.hooks is None and not adapter.hook_required and adapter.version == "0.86.2"
    assert adapter.hook_check(tmp_path, {}, tmp_path / "hb.json") is None
    assert adapter.raw_suffix(adapter.command(("aider",))) is None  # the output is its own transcript
    assert adapter.environment() == {"BROWSER": "true"}  # no browser opened for a URL in an error
    plain = Phase("Builder", Trigger("always"), tmp_path / "b.md")
    capped = Phase("Builder", Trigger("always"), tmp_path / "b.md", max_turns=3)
    assert adapter.options_problem(("aider",), plain) is None
    assert "MAX_TURNS" in adapter.options_problem(("aider",), capped)


# --- replies, tokens and cost ------------------------------------------------------------

def test_two_replies_sum_their_tokens_and_take_the_sessions_cost():
    reader, end = read("reply-test-reply.txt")  # an edit, a failing test, the fix
    result = end.result
    assert (result.num_turns, result.input_tokens, result.output_tokens) == (2, 595 + 851, 24)
    assert result.total_cost_usd == 0.0047 and not result.is_error and result.subtype == "success"
    # The final message is the last reply, not the test's output nor aider's own lines.
    assert end.final_text == "hello.txt\n```\nhello from the agent\n```" == result.text
    assert end.limit is None and end.api_error is None and reader.turns == 2


def test_a_model_without_prices_reports_tokens_and_no_cost():
    _, end = read("no-prices.txt")
    assert (end.result.num_turns, end.result.input_tokens, end.result.output_tokens) == (1, 595, 12)
    assert end.result.total_cost_usd is None


def test_rounded_counts_cache_tokens_and_a_cost_on_its_own_line():
    reader = AiderReader()
    for line in ("reply", "", "Tokens: 2.5k sent, 1.1k cache write, 3.2k cache hit, 120 received.",
                 "Cost: $0.0123 message, $0.0456 session.", "", "more", "Tokens: 12k sent, 1.0k received. "
                 "Cost: $0.04 message, $0.09 session."):
        reader.feed(line)
    result = reader.ending(0).result
    assert (result.input_tokens, result.output_tokens, result.total_cost_usd) == (14500, 1120, 0.09)
    assert reader.ending(0).final_text == "more"


def test_a_killed_run_keeps_its_cost_but_has_no_final_message():
    _, end = read("reply-test-reply.txt", returncode=None)
    assert end.result.total_cost_usd == 0.0047 and end.result.is_error and end.final_text == ""


# --- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture, retryable, status, code, words", [
    ("auth.txt", False, 401, "authentication_failed", "Incorrect API key provided: sk-stub."),
    ("model-not-found.txt", False, 404, "model_not_found", "The model `nomodel` does not exist or you"),
    ("forbidden.txt", False, 404, "model_not_found", "Project does not have access to model."),
    ("bad-request.txt", False, 400, "invalid_request", "Invalid value for messages: bad request."),
    ("overloaded.txt", True, 503, "overloaded", "The server is overloaded or not ready yet."),
    ("connection-error.txt", True, None, "connection_failed", "OpenAIException - Connection error."),
    ("quota.txt", False, 429, "billing_error", "You exceeded your current quota, please check your plan"),
    ("credits.txt", False, 402, "billing_error", "Insufficient credits. Add more using https://"),
])
def test_the_error_aider_gave_up_on_is_read_in_its_own_words(fixture, retryable, status, code, words):
    _, end = read(fixture)
    err = end.api_error
    assert (err.retryable, err.status, err.code) == (retryable, status, code)
    assert err.message.startswith("litellm.") and words in err.message  # its wrapped lines joined
    assert end.limit is None and end.final_text == "" and end.result.is_error


def test_a_rate_limit_that_says_when_is_a_limit_from_the_time_it_was_said():
    _, end = read("rate-limit.txt")
    assert end.api_error is None
    assert end.limit.kind == "rate_limit" and end.limit.resets_at == NOW + 2
    # A break right at the 80th column dropped its space: it is put back.
    assert "Rate limit reached for gpt-4o in organization org-abc" in end.limit.message


def test_a_limit_past_aiders_own_retries_ends_the_run_at_its_first_retry():
    reader, _ = read("rate-limit.txt", stop="Retrying in")
    assert reader.hopeless is None  # 2 s away: aider's retries wait it out
    far = AiderReader(mono=lambda: 100.0, wall=lambda: NOW)
    for line in lines("rate-limit.txt"):
        far.feed(line.replace("try again in 2s", "try again in 6m0s"))
        if line.startswith("Retrying in"):
            break
    assert far.hopeless.kind == "rate_limit" and far.hopeless.resets_at == NOW + 360


def test_aiders_retries_are_read_as_waiting_on_the_api():
    reader, _ = read("overloaded.txt", stop="Retrying in 2.0")
    retry = reader.retry
    assert (retry.attempt, retry.max_retries, retry.delay, retry.status, retry.error, retry.seen) == (
        4, MAX_RETRIES, 2.0, 503, "ServiceUnavailableError", 100.0)
    reader.feed("litellm.ServiceUnavailableError: ServiceUnavailableError: OpenAIException - The ")
    assert reader.retry is not None  # the next try's error is still the same wait
    reader, _ = read("overloaded.txt")
    assert reader.retry.attempt == MAX_RETRIES and reader.hopeless is None


def test_no_credit_is_hopeless_at_aiders_first_retry_not_before():
    quota = lines("quota.txt")
    first = quota.index("Retrying in 0.2 seconds...")
    reader = AiderReader()
    for line in quota[:first]:
        reader.feed(line)
    assert reader.hopeless is None
    reader.feed(quota[first])
    assert (reader.hopeless.code, reader.hopeless.retryable) == ("billing_error", False)
    assert read("credits.txt", stop="Retrying in 0.2")[0].hopeless.status == 402
    assert read("rate-limit.txt", stop="Retrying in 0.2")[0].hopeless is None  # a wait may fix it


def test_a_reply_after_retries_ends_the_error():
    reader = AiderReader()
    overloaded = lines("overloaded.txt")
    for line in overloaded[:overloaded.index("Retrying in 0.5 seconds...") + 1]:
        reader.feed(line)
    reply = lines("no-prices.txt")
    for line in reply[reply.index("Repo-map: using 1024 tokens, auto refresh") + 1:]:
        reader.feed(line)
    end = reader.ending(0)
    assert end.api_error is None and end.limit is None and reader.retry is None
    assert end.result.num_turns == 1 and end.final_text.startswith("hello.txt")


def test_the_models_words_about_an_error_are_not_an_error():
    reader = AiderReader()
    for line in ("I saw this in the log:", "litellm.RateLimitError: RateLimitError: OpenAIException - You exceeded "
                 "your current quota, please check your plan and billing details.", "It is not ours.", "",
                 "Tokens: 1.0k sent, 20 received."):
        reader.feed(line)
    end = reader.ending(0)
    assert end.api_error is None and end.limit is None and reader.hopeless is None
    assert not end.result.is_error
    # An aider-like line alone, with no error before it, is no retry either.
    reader.feed("Retrying in 2.0 seconds...")
    assert reader.retry is None


@pytest.mark.parametrize("message, seconds", [
    ("Please try again in 6m0s.", 360.0), ("try again in 7m12.5s. Visit", 432.5), ("Please try again in 120ms", 0.12),
    ("Please try again in 1h2m3s", 3723.0), ("Please retry after 7 seconds.", 7.0), ("Try again in 5 minutes", 300.0),
    ("Rate limited.", None),
])
def test_the_wait_a_provider_names(message, seconds):
    assert wait_of(message) == pytest.approx(seconds) if seconds is not None else wait_of(message) is None


def test_what_is_not_the_apis_fault_is_not_an_api_error():
    assert classify("ContentPolicyViolationError", "refused", NOW) is None
    assert classify("RateLimitError", "Rate limited.", NOW) == ApiError(True, 429, "rate_limit",
                                                                          "litellm.RateLimitError: Rate limited.")
    assert isinstance(classify("RateLimitError", "Please try again in 20s.", NOW), Limit)
