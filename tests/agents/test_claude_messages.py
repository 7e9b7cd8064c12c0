"""Claude Code's text-mode final message read as a usage limit or an API error."""

from __future__ import annotations

import datetime as dt
import time
from zoneinfo import ZoneInfo

import pytest

from genesis.agents.base import ApiError, Limit
from genesis.agents.claude.messages import classify

UTC = dt.timezone.utc
SEOUL = ZoneInfo("Asia/Seoul")
NEW_YORK = ZoneInfo("America/New_York")


def at(zone: dt.tzinfo, *fields: int) -> float:
    return dt.datetime(*fields, tzinfo=zone).timestamp()


NOW = at(UTC, 2026, 11, 21, 8, 24)           # 17:24 in Seoul, 03:24 in New York
NEW_YEARS_EVE = at(UTC, 2026, 12, 31, 20, 0)  # already 05:00 on Jan 1 in Seoul


# What the real Claude Code 2.1.329 printed (exit 1, one line on stdout) against a stub API.
@pytest.mark.parametrize("line, now, kind, resets_at", [
    ("You've hit your 5-hour limit · resets 9:17am (UTC)", NOW, "five_hour", at(UTC, 2026, 11, 21, 9, 17)),
    ("You've hit your 5-hour limit · resets Nov 22, 9:17am (UTC)", NOW, "five_hour", at(UTC, 2026, 11, 22, 9, 17)),
    ("You've hit your weekly limit · resets Nov 25, 11:24pm (UTC)", NOW, "seven_day", at(UTC, 2026, 11, 25, 23, 24)),
    ("You've hit your 5-hour limit · resets 5:27pm (Asia/Seoul)", NOW, "five_hour", at(SEOUL, 2026, 11, 21, 17, 27)),
    ("You've hit your 5-hour limit · resets 5am (America/New_York)", NOW, "five_hour",
     at(NEW_YORK, 2026, 11, 21, 5, 0)),
    ("You've hit your weekly limit · resets Jan 2, 2027, 9am (UTC)", NOW, "seven_day", at(UTC, 2027, 1, 2, 9, 0)),
    ("You've hit your weekly limit · resets Jan 2, 2027, 4am (America/New_York)", NOW, "seven_day",
     at(NEW_YORK, 2027, 1, 2, 4, 0)),
])
def test_the_lines_the_real_cli_printed_are_limits_with_their_reset(line, now, kind, resets_at):
    assert classify(line, now) == Limit(resets_at, kind, line)


# Wordings of other versions and plans, each with the kind it names.
@pytest.mark.parametrize("line, kind, resets_at", [
    ("You've hit your session limit · resets 3:45pm (UTC)", "session", at(UTC, 2026, 11, 21, 15, 45)),
    ("You've hit your limit · resets 1pm (Asia/Seoul)", "", at(SEOUL, 2026, 11, 22, 13, 0)),
    ("You're out of extra usage · resets 9pm (UTC)", "extra_usage", at(UTC, 2026, 11, 21, 21, 0)),
    ("You're out of usage credits · resets 9pm (UTC)", "extra_usage", at(UTC, 2026, 11, 21, 21, 0)),
    ("5-hour limit reached ∙ resets 1am (UTC)", "five_hour", at(UTC, 2026, 11, 22, 1, 0)),
    ("You've hit your usage limit · resets 10am (UTC)", "", at(UTC, 2026, 11, 21, 10, 0)),
    ("You've hit your Opus limit · resets Nov 24, 6pm (UTC)", "seven_day_opus", at(UTC, 2026, 11, 24, 18, 0)),
    ("Claude usage limit reached. Your limit will reset at 9am (America/Chicago).", "",
     at(ZoneInfo("America/Chicago"), 2026, 11, 21, 9, 0)),
    # more parts after the reset, as the CLI adds for some plans
    ("You've hit your 5-hour limit · resets 9:17am (UTC) · progress saved", "five_hour",
     at(UTC, 2026, 11, 21, 9, 17)),
    ("You've hit your weekly limit · resets Nov 25, 11:24pm (UTC) · ask your admin for a higher limit", "seven_day",
     at(UTC, 2026, 11, 25, 23, 24)),
    # other separators, other ways to write the clock
    ("You've hit your 5-hour limit | resets 9:17am (UTC)", "five_hour", at(UTC, 2026, 11, 21, 9, 17)),
    ("You've hit your 5-hour limit - resets 9:17am (UTC)", "five_hour", at(UTC, 2026, 11, 21, 9, 17)),
    ("You've hit your 5-hour limit · resets 9:17 PM (UTC)", "five_hour", at(UTC, 2026, 11, 21, 21, 17)),
    ("You've hit your 5-hour limit · resets 9:17\u202fpm (UTC)", "five_hour", at(UTC, 2026, 11, 21, 21, 17)),
    ("You've hit your 5-hour limit · resets 17:05 (UTC)", "five_hour", at(UTC, 2026, 11, 21, 17, 5)),
    ("You’ve hit your 5-hour limit · resets 9:17am (Etc/UTC)", "five_hour", at(UTC, 2026, 11, 21, 9, 17)),
    ("  You've hit your 5-hour limit · resets 9:17am (UTC)  \n", "five_hour", at(UTC, 2026, 11, 21, 9, 17)),
])
def test_every_known_wording_is_a_limit_of_its_kind(line, kind, resets_at):
    assert classify(line, NOW) == Limit(resets_at, kind, line.strip())


# A time of day is the first one at or after now - 5 minutes (the message drops the seconds).
@pytest.mark.parametrize("clock, zone, resets_at", [
    ("8:24am (UTC)", None, at(UTC, 2026, 11, 21, 8, 24)),      # now
    ("8:20am (UTC)", None, at(UTC, 2026, 11, 21, 8, 20)),      # 4 minutes ago: today's
    ("8:18am (UTC)", None, at(UTC, 2026, 11, 22, 8, 18)),      # 6 minutes ago: tomorrow's
    ("8:25am (UTC)", None, at(UTC, 2026, 11, 21, 8, 25)),      # just after now
    ("12am (UTC)", None, at(UTC, 2026, 11, 22, 0, 0)),         # midnight
    ("12:30pm (UTC)", None, at(UTC, 2026, 11, 21, 12, 30)),    # noon
    ("5:20pm (Asia/Seoul)", None, at(SEOUL, 2026, 11, 21, 17, 20)),
    ("5:18pm (Asia/Seoul)", None, at(SEOUL, 2026, 11, 22, 17, 18)),
    # no zone named: the machine's zone
    ("3:45pm", NEW_YORK, at(NEW_YORK, 2026, 11, 21, 15, 45)),
    ("3:20am", NEW_YORK, at(NEW_YORK, 2026, 11, 21, 3, 20)),
    ("3:18am", NEW_YORK, at(NEW_YORK, 2026, 11, 22, 3, 18)),
    ("9pm", SEOUL, at(SEOUL, 2026, 11, 21, 21, 0)),
    ("5pm", SEOUL, at(SEOUL, 2026, 11, 22, 17, 0)),
    ("9pm", UTC, at(UTC, 2026, 11, 21, 21, 0)),
    # a zone named in the message wins over the machine's
    ("9:17am (UTC)", NEW_YORK, at(UTC, 2026, 11, 21, 9, 17)),
])
def test_a_time_of_day_is_its_next_occurrence_in_its_zone(clock, zone, resets_at):
    line = f"You've hit your 5-hour limit · resets {clock}"
    assert classify(line, NOW, zone).resets_at == resets_at


def test_a_time_of_day_is_read_on_the_zones_own_date():
    evening_in_new_york = at(UTC, 2026, 11, 22, 2, 0)  # 21:00 on Nov 21 in New York, Nov 22 in UTC
    line = "You've hit your 5-hour limit · resets 10pm"
    assert classify(line, evening_in_new_york, NEW_YORK).resets_at == at(NEW_YORK, 2026, 11, 21, 22, 0)
    assert classify(line + " (UTC)", evening_in_new_york, NEW_YORK).resets_at == at(UTC, 2026, 11, 22, 22, 0)


def test_a_time_of_day_is_a_wall_time_across_a_daylight_saving_change():
    before_fall_back = at(UTC, 2026, 11, 1, 5, 30)  # 01:30 EDT; clocks go back at 06:00 UTC
    line = "You've hit your 5-hour limit · resets 9am"
    assert classify(line, before_fall_back, NEW_YORK).resets_at == at(UTC, 2026, 11, 1, 14, 0)  # 09:00 EST


@pytest.mark.parametrize("when, now, zone, resets_at", [
    ("Nov 22, 9:17am (UTC)", NOW, None, at(UTC, 2026, 11, 22, 9, 17)),
    ("Nov 20, 9am (UTC)", NOW, None, at(UTC, 2026, 11, 20, 9, 0)),           # just passed: not next year
    ("Nov 23, 2:05pm", NOW, NEW_YORK, at(NEW_YORK, 2026, 11, 23, 14, 5)),
    ("Nov 23, 2:05pm", NOW, SEOUL, at(SEOUL, 2026, 11, 23, 14, 5)),
    ("Nov 22 (UTC)", NOW, None, at(UTC, 2026, 11, 22, 0, 0)),                 # a date alone: its start
    # the year turns: a January date read on Dec 31 is next year's
    ("Jan 2, 9:17am (UTC)", NEW_YEARS_EVE, None, at(UTC, 2027, 1, 2, 9, 17)),
    ("Jan 2, 9:17am", NEW_YEARS_EVE, NEW_YORK, at(NEW_YORK, 2027, 1, 2, 9, 17)),
    ("Jan 2, 9:17am (Asia/Seoul)", NEW_YEARS_EVE, None, at(SEOUL, 2027, 1, 2, 9, 17)),  # Jan 1 there already
    ("Dec 31, 11pm (UTC)", NEW_YEARS_EVE, None, at(UTC, 2026, 12, 31, 23, 0)),
    ("Jan 2, 2028, 9am (UTC)", NEW_YEARS_EVE, None, at(UTC, 2028, 1, 2, 9, 0)),  # a year named: that year
    ("Jan 2, 2026, 9am (UTC)", NEW_YEARS_EVE, None, at(UTC, 2026, 1, 2, 9, 0)),
])
def test_a_date_is_read_with_its_year(when, now, zone, resets_at):
    line = f"You've hit your weekly limit · resets {when}"
    assert classify(line, now, zone).resets_at == resets_at


@pytest.fixture
def local_zone(monkeypatch):
    """The process's local zone set to New York for one test."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_without_a_zone_the_local_zone_is_the_machines(local_zone):
    evening_in_new_york = at(UTC, 2026, 11, 22, 2, 0)
    assert classify("You've hit your limit · resets 10pm", evening_in_new_york).resets_at == \
        at(NEW_YORK, 2026, 11, 21, 22, 0)
    assert classify("You've hit your limit · resets 8pm", evening_in_new_york).resets_at == \
        at(NEW_YORK, 2026, 11, 22, 20, 0)
    assert classify("You've hit your limit · resets Nov 23, 2:05pm", NOW).resets_at == \
        at(NEW_YORK, 2026, 11, 23, 14, 5)
    before_fall_back = at(UTC, 2026, 11, 1, 5, 30)
    assert classify("You've hit your limit · resets 9am", before_fall_back).resets_at == at(UTC, 2026, 11, 1, 14, 0)
    summer = at(UTC, 2026, 7, 1, 12, 0)
    assert classify("You've hit your limit · resets 9am", summer).resets_at == at(UTC, 2026, 7, 1, 13, 0)  # EDT


@pytest.mark.parametrize("line, resets_at", [
    ("Claude AI usage limit reached|1749924000", 1749924000.0),
    ("Claude AI usage limit reached|1749924000123", 1749924000.123),
])
def test_the_legacy_epoch_in_seconds_or_milliseconds(line, resets_at):
    assert classify(line, NOW) == Limit(resets_at, "", line)


@pytest.mark.parametrize("line, kind", [
    ("You've hit your 5-hour limit · resets 9:17am (Mars/Olympus)", "five_hour"),  # an unknown zone
    ("You've hit your 5-hour limit · resets 9:17am (../etc/passwd)", "five_hour"),
    ("You've hit your 5-hour limit · resets 13pm (UTC)", "five_hour"),
    ("You've hit your 5-hour limit · resets 9:75am (UTC)", "five_hour"),
    ("You've hit your 5-hour limit · resets 25:00 (UTC)", "five_hour"),
    ("You've hit your weekly limit · resets Feb 30, 9am (UTC)", "seven_day"),
    ("You've hit your weekly limit · resets Smarch 3, 9am (UTC)", "seven_day"),
    ("You've hit your weekly limit · resets soon", "seven_day"),
    ("You've hit your weekly limit · resets Nov 22, whenever (UTC)", "seven_day"),
    ("You've hit your weekly limit", "seven_day"),                                # no reset named
    ("You've hit your usage limit · contact your admin to increase it", ""),
    ("Claude usage limit reached.", ""),
])
def test_a_limit_whose_reset_cannot_be_read_has_none(line, kind):
    assert classify(line, NOW) == Limit(None, kind, line)


@pytest.mark.parametrize("line, retryable, status, code", [
    # what the real CLI printed
    ("API Error: Request rejected (429) · Rate limited", True, 429, "rate_limit"),
    ("API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment. If it "
     "persists, check your inference gateway (127.0.0.1:21025).", True, 529, "overloaded"),
    ("API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a "
     "moment. If it persists, check your inference gateway (127.0.0.1:31418).", True, 500, "server_error"),
    ("API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)",
     True, None, "connection_failed"),
    ("API Error: Connection dropped (ECONNRESET). Check the gateway set in ANTHROPIC_BASE_URL, then try again.",
     True, None, "connection_failed"),
    ("Invalid API key · Fix external API key", False, 401, "authentication_failed"),
    ("Failed to authenticate. API Error: 401 OAuth token has expired. Please obtain a new token or refresh your "
     "existing token.", False, 401, "authentication_failed"),
    ("Failed to authenticate. API Error: 403 Your API key does not have permission to use the specified resource.",
     False, 403, "permission_denied"),
    ("There's an issue with the selected model (claude-opus-5-5). It may not exist or you may not have access to "
     "it. Run --model to pick a different model.", False, 404, "model_not_found"),
    ("Credit balance is too low", False, 400, "billing_error"),
    ("API Error: 400 messages: at least one message is required", False, 400, "invalid_request"),
    # other wordings of the same CLI
    ("API Error: Server is temporarily limiting requests (not your usage limit) · Rate limited",
     True, 429, "rate_limit"),
    ("API Error: Repeated 529 Overloaded errors. The API is at capacity — this is usually temporary.",
     True, 529, "overloaded"),
    ("Opus is experiencing high load, please use /model to switch to Sonnet", True, 529, "overloaded"),
    ("API Error: 503 Service unavailable. This is a server-side issue", True, 503, "server_error"),
    ("API Error: 502 Bad gateway.", True, 502, "server_error"),
    ("API Error: 408 Request timeout", True, 408, "timeout"),
    ("API Error: 409 Conflict", True, 409, "conflict"),
    ("API Error: 429 Too many requests", True, 429, "rate_limit"),
    ("API Error: Unable to connect to API (ECONNREFUSED)", True, None, "connection_failed"),
    ("API Error: Can't reach the API server — check your internet or DNS (ENOTFOUND)",
     True, None, "connection_failed"),
    ("API Error: No internet route — check your connection or VPN (ENETUNREACH)", True, None, "connection_failed"),
    ("Request timed out", True, None, "timeout"),
    ("Request timed out. If the API is slow to answer, or a proxy or gateway holds responses, set API_TIMEOUT_MS "
     "above 600000.", True, None, "timeout"),
    ("API Error: Request timed out.", True, None, "timeout"),
    ("API Error: 401 Invalid bearer token", False, 401, "authentication_failed"),
    ("API Error: 403 Forbidden", False, 403, "permission_denied"),
    ("API Error: 404 Not found", False, 404, "not_found"),
    ("API Error: 413 Request too large", False, 413, "request_too_large"),
    ("API Error: 422 Unprocessable", False, 422, "invalid_request"),
    ("Invalid auth token · Fix external auth token", False, 401, "authentication_failed"),
    ("Failed to authenticate: OAuth token revoked. Please log in again or contact your administrator.",
     False, None, "authentication_failed"),
    ("OAuth token revoked · Please run /login", False, None, "authentication_failed"),
    ("Login expired · Please run /login", False, None, "authentication_failed"),
    ("Not logged in · Please run /login", False, None, "authentication_failed"),
    ("Session expired. Please run /login to sign in again.", False, None, "authentication_failed"),
    ("The model claude-nope is not available on your bedrock deployment. Try switching to sonnet.",
     False, 404, "model_not_found"),
])
def test_api_errors_retryable_or_fatal(line, retryable, status, code):
    assert classify(line, NOW) == ApiError(retryable, status, code, line)


@pytest.mark.parametrize("line", [
    "",
    "   ",
    # a known wording inside other text: an agent quoting or describing a limit
    "The log said: You've hit your 5-hour limit · resets 9:17am (UTC)",
    "> You've hit your 5-hour limit · resets 9:17am (UTC)",
    "You've hit your 5-hour limit, so I stopped here.",
    "you've hit your 5-hour limit · resets 9:17am (UTC)",
    "I hit the usage limit while testing the rate limiter; resets happen at 9pm.",
    "Usage limit reached",
    "5-hour limit reached in the load test",
    "Added a 5-hour limit to the session store.",
    "Claude AI usage limit reached|soon",
    "Documented how Claude usage limit reached. Your limit will reset at 9am is handled.",
    # API Error mid-line
    "The client now reports API Error: 500 Internal server error to the user",
    "Handled API Error: 529 Overloaded with a retry.",
    "Error: API Error: Connection refused",
    "Request timed outside the window",
    "A 401: Invalid API key is shown for a bad key.",
    # an error a fresh run does not carry: an ordinary failed run
    "API Error: 400 due to tool use concurrency issues. Run /rewind to recover the conversation.",
    "API Error: 400 orphaned tool_result in conversation history.",
    # other final messages
    "Done: wrote hello.txt and notes.md and committed them.",
    "Error: Reached max turns (3)",
])
def test_anything_else_is_neither(line):
    assert classify(line, NOW) is None
