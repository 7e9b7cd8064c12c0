"""Claude Code's final message in text mode (`claude -p`), read as a usage limit or an API error.

Only a line that is one of the CLI's own wordings counts, matched from its first character:
an agent that quotes a limit message inside a sentence must not pause the night. A limit
message must be the whole line; an API error starts with the CLI's prefix and goes on in
the API's own words.
"""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from genesis.agents.base import ApiError, Limit

__all__ = ["classify"]

# A wall time without seconds may lie this far behind the true reset, and the message may be
# read a little after it was printed: a time this far in the past is still today's.
CLOCK_SLACK = 5 * 60
# A date more than this far in the past is next year's ("resets Jan 2" read on Dec 31).
DATE_SLACK = dt.timedelta(days=180)

# The parts of a limit message: "You've hit your 5-hour limit · resets 9:17am (UTC) · progress saved".
# The CLI writes "·"; older versions wrote "∙"; "|" and a spaced "-" are tolerated.
SEPARATOR = re.compile(r"\s*[·∙•|]\s*|\s+-\s+")

# The first part of a limit message, which must be all of that part (its kind: KINDS).
LIMIT_HEAD = re.compile(
    r"You(?:'|’)ve hit your (?P<name>[\w'’ -]{0,40}?(?:limit|budget))"  # You've hit your weekly limit
    r"|You(?:'|’)re out of (?P<out>extra usage|usage credits)"          # You're out of extra usage
    r"|(?P<reached>5-hour) limit reached")                              # 5-hour limit reached (older)

KINDS = {"5-hour limit": "five_hour", "5-hour": "five_hour", "weekly limit": "seven_day",
         "session limit": "session", "Opus limit": "seven_day_opus", "Sonnet limit": "seven_day_sonnet",
         "extra usage": "extra_usage", "usage credits": "extra_usage"}

# A part that says when: "resets 9:17am (UTC)", "resets Nov 22, 9:17am", "resets 1pm (Asia/Seoul)".
RESETS = re.compile(r"resets (?P<when>.+)")

# Claude Code 1.0: "Claude AI usage limit reached|1749924000" (epoch seconds; milliseconds past 1e12).
LEGACY_EPOCH = re.compile(r"Claude AI usage limit reached\s*\|\s*(?P<epoch>\d{9,14})")

# Claude Code 1.0, on screen: "Claude usage limit reached. Your limit will reset at 9am (America/Chicago)."
LEGACY_SENTENCE = re.compile(r"Claude usage limit reached\.(?: Your limit will reset at (?P<when>.+?)\.?)?")

# The zone the CLI names after a time: "(Asia/Seoul)".
ZONE = re.compile(r"(?P<rest>.*?)\s*\((?P<zone>[^()]+)\)")

# A date the CLI writes for a reset more than a day away: "Nov 22", "Jan 2, 2027" (another year).
DATE = re.compile(r"(?P<month>[A-Za-z]{3,9})\.?\s+(?P<day>\d{1,2})(?:,\s*(?P<year>\d{4}))?(?:,\s*|\s+|$)")

# A wall time: "9:17am", "1pm", "9:17 PM" (12-hour, as the CLI writes it) or "17:05" (24-hour).
CLOCK = re.compile(r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<half>[ap])\.?m\.?"
                   r"|(?P<hour24>\d{1,2}):(?P<minute24>\d{2})", re.IGNORECASE)

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

# How to read an API error's status: a retry helps only for these, and the CLI's name for each.
RETRYABLE_4XX = {408: "timeout", 409: "conflict", 429: "rate_limit"}
FATAL_4XX = {401: "authentication_failed", 402: "billing_error", 403: "permission_denied",
             404: "not_found", 413: "request_too_large"}


def by_status(status: int) -> tuple[bool, str]:
    if status == 529:
        return True, "overloaded"
    if status >= 500:
        return True, "server_error"
    if status in RETRYABLE_4XX:
        return True, RETRYABLE_4XX[status]
    return False, FATAL_4XX.get(status, "invalid_request")


def auth_status(status: int) -> tuple[bool, str]:
    return False, "permission_denied" if status == 403 else "authentication_failed"


# A session-state error of the CLI's own conversation: a fresh run does not carry it, so it is
# an ordinary failed run, not a reason to stop the night.
NOT_API_ERROR = re.compile(
    r"API Error: 400 (?:due to tool use concurrency issues|orphaned tool_result|duplicate tool_use ID)\b")

# API errors, each matched from the start of the line: (pattern, retryable, status, code). A code
# that is a function reads retryable and code from the status the pattern found (0: none).
API_ERRORS = tuple((re.compile(pattern), retryable, status, code) for pattern, retryable, status, code in (
    # An API key's rate limit (a subscriber's usage limit has its own wording, above).
    (r"API Error: Request rejected \(429\)", True, 429, "rate_limit"),
    (r"API Error: Server is temporarily limiting requests\b", True, 429, "rate_limit"),
    # The CLI gave up its own retries of an overloaded API.
    (r"API Error: Repeated 529 Overloaded errors\b", True, 529, "overloaded"),
    (r"(?:Claude )?\w+ is experiencing high load\b", True, 529, "overloaded"),
    # No answer at all: refused, dropped, unreachable, timed out.
    (r"API Error: (?:Connection\b|Unable to connect\b|Can't reach the API server\b|No internet route\b"
     r"|Couldn't connect through your proxy\b)", True, None, "connection_failed"),
    (r"(?:API Error: )?Request timed out\b", True, None, "timeout"),
    # Any other status the CLI names: 5xx, 408, 409 and 429 pass; the rest of 4xx does not.
    (r"API Error: (?P<status>[45]\d\d)\b", False, None, by_status),
    # Credentials that need a human: "Failed to authenticate. API Error: 401 OAuth token has expired."
    (r"Failed to authenticate\b(?:.*?\bAPI Error: (?P<status>\d{3})\b)?", False, None, auth_status),
    (r"Invalid (?:API key|auth token) · ", False, 401, "authentication_failed"),
    (r"(?:OAuth token revoked|Login expired|Login reached its time limit|Not logged in|Session expired"
     r"|Authentication required)\b.*(?:/login|[Ss]ign in again)", False, None, "authentication_failed"),
    (r"Credit balance is too low\b", False, 400, "billing_error"),
    (r"There's an issue with the selected model\b|The model \S+ is not available on your\b",
     False, 404, "model_not_found"),
))


def classify(line: str, now: float, tz: dt.tzinfo | None = None) -> Limit | ApiError | None:
    """What the final message of a failed `claude -p` run says, or None when it is neither.

    `now` is epoch seconds; `tz` is the machine's zone for a time that names none (None: the
    local zone). The record's message is the line without its surrounding whitespace.
    """
    line = line.strip()
    if not line:
        return None
    return limit(line, now, tz) or api_error(line)


def limit(line: str, now: float, tz: dt.tzinfo | None) -> Limit | None:
    if m := LEGACY_EPOCH.fullmatch(line):
        value = int(m["epoch"])
        return Limit(value / 1000 if value > 1e12 else float(value), "", line)
    if m := LEGACY_SENTENCE.fullmatch(line):
        return Limit(reset_time(m["when"], now, tz) if m["when"] else None, "", line)
    head, *parts = SEPARATOR.split(line)
    m = LIMIT_HEAD.fullmatch(head)
    if not m:
        return None
    kind = KINDS.get(m["name"] or m["out"] or m["reached"] or "", "")
    when = next((r["when"] for r in map(RESETS.fullmatch, parts) if r), None)
    return Limit(reset_time(when, now, tz) if when else None, kind, line)


def api_error(line: str) -> ApiError | None:
    if NOT_API_ERROR.match(line):
        return None
    for pattern, retryable, status, code in API_ERRORS:
        if m := pattern.match(line):
            if callable(code):
                status = int(m["status"]) if m["status"] else None
                retryable, code = code(status or 0)
            return ApiError(retryable, status, code, line)
    return None


def reset_time(when: str, now: float, tz: dt.tzinfo | None) -> float | None:
    """Epoch seconds of a reset the CLI wrote as a wall time, or None when it cannot be read."""
    when = when.strip().rstrip(".")
    if m := ZONE.fullmatch(when):
        when, zone = m["rest"], zone_named(m["zone"].strip())
        if zone is None:
            return None
    else:
        zone = tz
    date = DATE.match(when)
    rest = (when[date.end():] if date else when).strip()
    clock = CLOCK.fullmatch(rest)
    if (rest and not clock) or not (date or clock):
        return None
    hour_minute = read_clock(clock) if clock else (0, 0)  # a date alone: from its start
    if hour_minute is None:
        return None
    if date:
        return dated(date, *hour_minute, now, zone)
    return next_clock(*hour_minute, now, zone)


def zone_named(name: str) -> dt.tzinfo | None:
    if name.upper() in ("UTC", "ETC/UTC"):
        return dt.timezone.utc  # also where the system has no zone database
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def read_clock(m: re.Match[str]) -> tuple[int, int] | None:
    """Hour (0-23) and minute of a wall time, or None when it names no real time."""
    if m["hour24"] is not None:
        hour, minute = int(m["hour24"]), int(m["minute24"])
        return (hour, minute) if hour < 24 and minute < 60 else None
    hour, minute = int(m["hour"]), int(m["minute"] or 0)
    if not 1 <= hour <= 12 or minute >= 60:
        return None
    return hour % 12 + (12 if m["half"].lower() == "p" else 0), minute


def dated(m: re.Match[str], hour: int, minute: int, now: float, zone: dt.tzinfo | None) -> float | None:
    month = m["month"][:3].lower()
    if month not in MONTHS:
        return None
    explicit = m["year"] is not None
    year = int(m["year"]) if explicit else wall(now, zone).year
    try:
        at = dt.datetime(year, MONTHS.index(month) + 1, int(m["day"]), hour, minute)
        if not explicit and at < wall(now, zone) - DATE_SLACK:
            at = at.replace(year=year + 1)
    except ValueError:  # Feb 30, or Feb 29 in a year without it
        return None
    return epoch(at, zone)


def next_clock(hour: int, minute: int, now: float, zone: dt.tzinfo | None) -> float:
    """The first time the wall clock of `zone` shows hour:minute, at or after now - CLOCK_SLACK."""
    start = now - CLOCK_SLACK
    day = wall(start, zone).date()
    at = epoch(dt.datetime.combine(day, dt.time(hour, minute)), zone)
    if at < start:
        at = epoch(dt.datetime.combine(day + dt.timedelta(days=1), dt.time(hour, minute)), zone)
    return at


def wall(ts: float, zone: dt.tzinfo | None) -> dt.datetime:
    """The naive wall-clock time at `ts` in `zone` (None: the local zone)."""
    if zone is None:
        return dt.datetime.fromtimestamp(ts)
    return dt.datetime.fromtimestamp(ts, zone).replace(tzinfo=None)


def epoch(at: dt.datetime, zone: dt.tzinfo | None) -> float:
    """Epoch seconds of a naive wall-clock time in `zone` (None: the local zone)."""
    return at.timestamp() if zone is None else at.replace(tzinfo=zone).timestamp()
