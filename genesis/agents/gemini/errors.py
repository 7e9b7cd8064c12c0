"""A failed Gemini CLI run's error message, read as a usage limit or an API error.

The CLI words every API failure `[API Error: ...]`, then, for a 429, a line of advice. What
is inside depends on how it classified the API's answer:
- a daily quota (a QuotaFailure naming a per-day quota): "You have exhausted your daily quota
  on this model." with no time: the Gemini API resets daily quotas at midnight Pacific time;
- a quota with a wait longer than it retries (over 300 s): the API's message, then
  "Suggested retry after 3600s." (or the API's own "Please retry in 3600s");
- a quota with a short wait, once its own retries ran out: the same, with the short wait;
- any other error: the API's error body as JSON (`{"error": {"code": 400, ...}}`, sometimes
  the body's text inside another `error.message`), or `message (Status: NAME)`.
Its exit code is the HTTP status modulo 256 (400 exits 144), which names the status when
the message does not.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from genesis.agents.base import ApiError, Limit

__all__ = ["classify", "next_pacific_midnight", "FATAL_AUTH_EXIT", "MAX_RETRYABLE_DELAY"]

FATAL_AUTH_EXIT = 41            # the CLI's exit code when it cannot authenticate at all
MAX_RETRYABLE_DELAY = 300       # a quota wait longer than this ends the run at once (the CLI's own bound)

PREFIX = "[API Error: "
# The advice the CLI adds after a 429, by auth type (an API key, Vertex AI, a Google login).
RATE_LIMIT_ADVICE = ("\nPlease wait and try again later.", "\nPossible quota limitations in place")
DAILY = "You have exhausted your daily quota on this model."
SUGGESTED = re.compile(r"(?:Suggested retry after|Please retry in) (?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s)\b")
CAPACITY = re.compile(r"exhausted your capacity|capacity exceeded|MODEL_CAPACITY_EXHAUSTED", re.IGNORECASE)
STATUS_NAME = re.compile(r"^(?P<message>.*) \(Status: (?P<status>[^()]+)\)$", re.DOTALL)
NO_ANSWER = re.compile(r"fetch failed|ECONNREFUSED|ECONNRESET|ENOTFOUND|ETIMEDOUT|EAI_AGAIN|socket hang up")
AUTH = re.compile(r"API key not valid|API key expired|API_KEY_INVALID|invalid authentication credentials",
                  re.IGNORECASE)

# The API's status names (google.rpc.Code) and HTTP statuses: (retryable, code).
BY_NAME = {"RESOURCE_EXHAUSTED": (True, "rate_limit"), "UNAVAILABLE": (True, "overloaded"),
           "INTERNAL": (True, "server_error"), "DEADLINE_EXCEEDED": (True, "timeout"),
           "UNAUTHENTICATED": (False, "authentication_failed"), "PERMISSION_DENIED": (False, "permission_denied"),
           "NOT_FOUND": (False, "model_not_found"), "INVALID_ARGUMENT": (False, "invalid_request"),
           "FAILED_PRECONDITION": (False, "invalid_request")}
BY_STATUS = {401: (False, "authentication_failed"), 403: (False, "permission_denied"),
             404: (False, "model_not_found"), 408: (True, "timeout"), 409: (True, "conflict"),
             429: (True, "rate_limit"), 503: (True, "overloaded"), 504: (True, "timeout")}


def classify(message: str, now: float, returncode: int | None = None) -> Limit | ApiError | None:
    """What a failed run's error message says; None when it is not an API failure (a turn
    limit, a cancelled run, a failed tool, a model answer the CLI could not use)."""
    message = message.strip()
    if not message.startswith(PREFIX):
        return None
    rate_limited = any(advice in message for advice in RATE_LIMIT_ADVICE)
    inside = message[len(PREFIX):]
    inside = inside[:inside.rfind("]")] if "]" in inside else inside
    head = next((line.strip() for line in inside.splitlines() if line.strip()), inside)
    if inside.startswith(DAILY):
        return Limit(next_pacific_midnight(now), "daily", DAILY)
    if rate_limited and (m := SUGGESTED.search(inside)):
        wait = float(m["n"]) / (1000 if m["unit"] == "ms" else 1)
        if wait > MAX_RETRYABLE_DELAY:
            return Limit(now + wait, "quota", head)
        return ApiError(True, 429, "rate_limit", head)  # its own retries through a short wait ran out
    if CAPACITY.search(inside):
        return ApiError(True, 429, "overloaded", head)
    status, name, said, reason = api_body(inside)
    if status is None and not name and NO_ANSWER.search(inside):
        return ApiError(True, None, "connection_failed", said)  # its own retries did not reach the API
    if status is None and rate_limited:
        status = 429
    if status is None and returncode is not None and 144 <= returncode <= 255:
        status = returncode + 256  # it exits with the status modulo 256
    if AUTH.search(reason) or AUTH.search(said):
        return ApiError(False, status, "authentication_failed", said)
    retryable, code = BY_NAME.get(name) or by_status(status)
    return ApiError(retryable, status, code, said)


def api_body(inside: str) -> tuple[int | None, str, str, str]:
    """(HTTP status, status name, message, ErrorInfo reason) of the text inside the brackets."""
    error = json_error(inside)
    if error is not None:
        nested = json_error(error.get("message")) if isinstance(error.get("message"), str) else None
        error = nested or error  # the raw body's text inside another error's message
        code = error.get("code")
        details = error.get("details") if isinstance(error.get("details"), list) else []
        reason = next((d.get("reason") for d in details if isinstance(d, dict) and isinstance(d.get("reason"), str)),
                      "")
        name = error.get("status") if isinstance(error.get("status"), str) else ""
        said = error.get("message") if isinstance(error.get("message"), str) else inside
        return (code if isinstance(code, int) and not isinstance(code, bool) else None), name, said.strip(), reason
    if m := STATUS_NAME.match(inside):
        return None, m["status"].strip(), m["message"].strip(), ""
    return None, "", next((line.strip() for line in inside.splitlines() if line.strip()), inside), ""


def json_error(value: str) -> dict | None:
    start = value.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(value[start:])
    except (ValueError, RecursionError):
        return None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]  # Vertex AI answers with a list of one error
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else None


def by_status(status: int | None) -> tuple[bool, str]:
    if status is None:
        return True, "unknown"  # no status at all: the API may not have been reached
    if status in BY_STATUS:
        return BY_STATUS[status]
    if status >= 500:
        return True, "server_error"
    return False, "invalid_request"


def pacific() -> dt.tzinfo:
    try:
        return ZoneInfo("America/Los_Angeles")
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return dt.timezone(dt.timedelta(hours=-8))  # no zone database: standard time, never early


def next_pacific_midnight(now: float) -> float:
    """When the Gemini API's daily quotas reset next: midnight Pacific time."""
    zone = pacific()
    day = dt.datetime.fromtimestamp(now, zone).date() + dt.timedelta(days=1)
    return dt.datetime.combine(day, dt.time(0, 0), zone).timestamp()
