"""opencode's JSON output (`opencode run --format json`), read line by line into a readable
transcript and, at the end, into how the run ended.

Each line is one event of the session: `step_start` and `step_finish` around each model
turn (the finish carries the turn's tokens and cost), `tool_use` once a tool call has
completed or failed, `text` once a message is whole, `reasoning` with --thinking, and
`error` when the session failed (an API error after opencode's own retries, with the
HTTP status, the provider's body and headers). There is no closing record: the run's
totals are the sum of its turns. Only an `error` event is classified, never the model's
words or a tool's output. stderr shares the stream: its lines are shown as they are.

opencode's own API retries do not show there; Genesis's plugin adds a `genesis_retry`
event for each (its attempt, the API's words, and `next`, when it tries again). A retry
far away (a usage limit, which opencode would sleep through) ends the run as a limit with
that reset, for the loop to wait out.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from typing import Any, Callable

from genesis.agents.base import MAX_RESULT_CHARS, ApiError, ApiRetry, Ending, Limit, OutputReader, Result
from genesis.agents.output import (ERROR_WIDTH, INPUT_WIDTH, MAX_LINE_BYTES, TEXT_WIDTH, integer, number, one_line,
                                   paragraph, parse, text)
from genesis.words import sanitize

__all__ = ["OpenCodeReader", "classify", "MAX_LINE_BYTES"]


RETRIES = 5                # opencode's retries of a failing API call (its RETRY_MAX_RETRIES)
# opencode waits as long as the API's retry-after says, however long. A wait longer than this
# is a limit: Genesis ends the run and waits for the reset itself (its margin, its longest
# wait, its status), rather than leave a CLI asleep inside a phase.
LONG_WAIT = 300.0
# Its words for its own plans' limits when it retries (the reset is the wait, for Go).
GO_LIMIT = re.compile(r"\busage limit reached\. It will reset in\b", re.IGNORECASE)
FREE_LIMIT = "Free usage exceeded"

# opencode's own plans answer with these in the body when their usage limit is reached
# (the wait is in `retry-after`); any other provider's 429 is a rate limit or a quota.
PLAN_LIMITS = {"GoUsageLimitError": "go", "FreeUsageLimitError": "free"}
# An API key out of credit: waiting does not bring it back.
BILLING_CODES = {"insufficient_quota", "billing_hard_limit_reached", "insufficient_balance"}
# opencode's error names for a failure that is not the API's (the run itself, the model's turn).
NOT_API = {"MessageAbortedError", "MessageOutputLengthError", "ContextOverflowError", "StructuredOutputError"}
# Its sentences for an API that did not answer at all (ECONNREFUSED and the like).
NO_ANSWER = ("unable to connect", "fetch failed", "failed to fetch", "econnrefused", "econnreset", "etimedout",
             "socket connection was closed", "connection refused", "network error", "timed out")


class OpenCodeReader(OutputReader):
    """One run's JSON events: feed() each line as it comes, ending() once it is over."""

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic) -> None:
        self.wall, self.mono = wall, mono
        self.retry: ApiRetry | None = None
        self.turns = 0
        self.session = ""
        self.cost: float | None = None
        self.tokens_in: int | None = None
        self.tokens_out: int | None = None
        self.last_text = ""          # the latest whole message of the model
        self.reason = ""             # why the latest turn ended ("stop", "tool-calls", "length", ...)
        self.error: dict[str, Any] | None = None    # the latest `error` event
        self.error_at: float | None = None          # when it came, epoch seconds

    def feed(self, line: str) -> list[str]:
        if len(line) > MAX_LINE_BYTES // 4:
            size = len(line.encode("utf-8", "surrogatepass"))
            if size > MAX_LINE_BYTES:
                return [f"(an output line of {size} bytes was not read)"]
        record = parse(line)
        if record is None or not isinstance(record.get("type"), str):
            return [sanitize(line, TEXT_WIDTH)] if line.strip() else []
        kind = record["type"]
        if kind == "genesis_retry":
            return [self._retry(record)]
        self.retry = None
        if not self.session and text(record.get("sessionID")):
            self.session = text(record["sessionID"])
            return [one_line(f"session {self.session}")] + self._event(kind, record)
        return self._event(kind, record)

    def _event(self, kind: str, record: dict[str, Any]) -> list[str]:
        part = record.get("part") if isinstance(record.get("part"), dict) else {}
        if kind == "step_start":
            self.turns += 1
            return []
        if kind == "step_finish":
            return self._step_finish(part)
        if kind == "text":
            said = text(part.get("text"))
            if said.strip():
                self.last_text = said.strip()[:MAX_RESULT_CHARS]
                self.error = None    # the model answered after it: that error is over
            return paragraph("assistant: ", said, TEXT_WIDTH)
        if kind == "reasoning":
            return paragraph("thinking: ", text(part.get("text")), TEXT_WIDTH)
        if kind == "tool_use":
            return tool_lines(part)
        if kind == "error":
            return [self._error(record)]
        return []

    def _retry(self, record: dict[str, Any]) -> str:
        """opencode waits to retry the API (written by Genesis's plugin): until `next` (epoch ms)."""
        sent, due = number(record.get("timestamp")), number(record.get("next"))
        delay = max(0.0, (due - sent) / 1000) if sent is not None and due is not None else 0.0
        message = text(record.get("message"))
        self.retry = ApiRetry(attempt=integer(record.get("attempt")) or 0, max_retries=RETRIES, delay=delay,
                              status=None, error=message, seen=self.mono())
        if self.hopeless is None and due is not None:
            if GO_LIMIT.search(message) or delay > LONG_WAIT:
                self.hopeless = Limit(resets_at=due / 1000, kind="go" if GO_LIMIT.search(message) else "rate_limit",
                                      message=message)
            elif message.startswith(FREE_LIMIT):
                self.hopeless = Limit(resets_at=None, kind="free", message=message)
        why = f" ({message})" if message else ""
        return one_line(f"API retry {self.retry.attempt}/{RETRIES} in {delay:.1f}s{why}")

    def _step_finish(self, part: dict[str, Any]) -> list[str]:
        self.reason = text(part.get("reason"))
        cost = number(part.get("cost"))
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
        cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
        fresh = [integer(tokens.get("input")), integer(cache.get("read")), integer(cache.get("write"))]
        if any(n is not None for n in fresh):
            self.tokens_in = (self.tokens_in or 0) + sum(n or 0 for n in fresh)
        out = [integer(tokens.get("output")), integer(tokens.get("reasoning"))]
        if any(n is not None for n in out):
            self.tokens_out = (self.tokens_out or 0) + sum(n or 0 for n in out)
        return []

    def _error(self, record: dict[str, Any]) -> str:
        self.error, self.error_at = record, stamp(record.get("timestamp")) or self.wall()
        err = record.get("error") if isinstance(record.get("error"), dict) else {}
        data = err.get("data") if isinstance(err.get("data"), dict) else {}
        status = integer(data.get("statusCode"))
        head = ", ".join(str(p) for p in (text(err.get("name")) or "error", status) if p)
        return one_line(f"error ({head}): {text(data.get('message')) or '(no message)'}")

    def ending(self, returncode: int | None) -> Ending:
        found = classify(self.error, self.error_at or self.wall()) if self.error is not None else None
        failed = self.error is not None or returncode != 0   # None: it was killed
        result = None
        if self.turns or self.error is not None:
            result = Result(subtype="error" if failed else "success", is_error=failed, num_turns=self.turns,
                            total_cost_usd=self.cost, terminal_reason=self.reason,
                            api_error_status=found.status if isinstance(found, ApiError) else None,
                            session_id=self.session, text=self.last_text,
                            input_tokens=self.tokens_in, output_tokens=self.tokens_out)
        said = self.last_text if returncode == 0 and self.error is None else ""
        return Ending.of(found, result, final_text=said)


def classify(record: dict[str, Any], now: float) -> Limit | ApiError | None:
    """What an `error` event says: a usage limit, an API error, or None (a failure that is not
    the API's: an aborted run, the context window ran out). `now`: when it came (epoch s)."""
    err = record.get("error") if isinstance(record.get("error"), dict) else {}
    name = text(err.get("name"))
    data = err.get("data") if isinstance(err.get("data"), dict) else {}
    message = text(data.get("message")).strip()
    if name in NOT_API:
        return None
    if name == "ProviderAuthError":
        return ApiError(False, None, "authentication_failed", message or "the provider refused the login")
    status = integer(data.get("statusCode"))
    body = text(data.get("responseBody"))
    code = body_code(body)
    headers = data.get("responseHeaders") if isinstance(data.get("responseHeaders"), dict) else {}
    plan = next((kind for marker, kind in PLAN_LIMITS.items() if marker in body), None)
    if plan is not None:
        wait = retry_after(headers, now)
        return Limit(resets_at=now + wait if wait is not None else None, kind=plan, message=message or body)
    if name != "APIError":
        if any(s in message.lower() for s in NO_ANSWER):
            return ApiError(True, None, "connection_failed", message)
        return None
    if code in BILLING_CODES:
        return ApiError(False, status, "billing_error", message)
    if status is None:
        return ApiError(True, None, "connection_failed" if any(s in message.lower() for s in NO_ANSWER)
                        else code or "unknown", message)
    if status >= 500 or status in (408, 409):
        return ApiError(True, status, "overloaded" if status in (503, 529) else "server_error", message)
    if status == 429:
        # A rate limit that outlasted opencode's retries (it honours the API's wait itself):
        # when the API named its reset, the loop waits for it; else it backs off.
        wait = retry_after(headers, now)
        if wait is not None:
            return Limit(resets_at=now + wait, kind="rate_limit", message=message)
        return ApiError(True, status, "rate_limit", message)
    fatal = {401: "authentication_failed", 402: "billing_error", 403: "permission_denied",
             404: "model_not_found" if code == "model_not_found" or "model" in message.lower() else "not_found"}
    return ApiError(False, status, fatal.get(status, code or "invalid_request"), message)


def body_code(body: str) -> str:
    """The provider's error code in an OpenAI-style body ({"error": {"code", "type"}}), or ""."""
    try:
        data = json.loads(body) if body.lstrip().startswith("{") else None
    except (ValueError, RecursionError):
        return ""
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict):
        return ""
    return text(err.get("code")) or text(err.get("type"))


def retry_after(headers: dict[str, Any], now: float) -> float | None:
    """Seconds until the API said to come back, or None: the latest of `retry-after-ms`,
    `retry-after` (seconds or an HTTP date) and OpenAI's `x-ratelimit-reset-*` (Go durations)."""
    headers = {str(k).lower(): text(v).strip() for k, v in headers.items()}
    waits = []
    if headers.get("retry-after-ms"):
        waits.append(seconds(headers["retry-after-ms"], 0.001))
    if headers.get("retry-after"):
        value = headers["retry-after"]
        waits.append(seconds(value, 1.0) if seconds(value, 1.0) is not None else http_date(value, now))
    waits += [go_duration(v) for k, v in headers.items() if k.startswith("x-ratelimit-reset-")]
    known = [w for w in waits if w is not None]
    return max(known) if known else None


def seconds(value: str, scale: float) -> float | None:
    try:
        number_ = float(value)
    except ValueError:
        return None
    return max(0.0, number_ * scale) if number_ == number_ and abs(number_) != float("inf") else None


def http_date(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now) if when is not None and when.tzinfo is not None else None


GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def go_duration(value: str) -> float | None:
    """"1h2m3.5s", "6m0s", "20ms" -> seconds; None for anything else."""
    parts = GO_DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    return sum(float(n) * GO_UNITS[u] for n, u in parts)


def tool_lines(part: dict[str, Any]) -> list[str]:
    """A completed or failed tool call: what it was called with, and a failure's error."""
    name = text(part.get("tool")) or "?"
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    args = state.get("input") if isinstance(state.get("input"), dict) else {}
    if isinstance(args.get("command"), str):
        shown = "$ " + " ⏎ ".join(p for p in args["command"].splitlines() if p.strip())
    elif isinstance(args.get("filePath"), str):
        shown = args["filePath"]
    elif isinstance(args.get("pattern"), str):
        shown = args["pattern"]
    else:
        shown = sanitize(json.dumps(args, ensure_ascii=False, separators=(",", ":")), INPUT_WIDTH)
    lines = [one_line(f"tool {name}: {shown}")]
    if state.get("status") == "error":
        said = [p for p in text(state.get("error")).splitlines() if p.strip()]
        lines.append(sanitize("  error: " + (said[0] if said else "(no message)"), ERROR_WIDTH))
    return lines








def stamp(value: Any) -> float | None:
    """Epoch seconds of an event's `timestamp` (epoch milliseconds), or None."""
    ms = number(value)
    return ms / 1000 if ms is not None and ms > 0 else None
