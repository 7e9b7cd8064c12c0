"""Codex's JSONL output (`codex exec --json`), read line by line into a readable transcript
and, at the end, into how the run ended.

Each line is one event: `thread.started`, `turn.started`, `item.started` / `item.completed`
(commands, messages, file changes, ...), `turn.completed` with the run's token usage, and on
failure `error` events and a `turn.failed`. Codex names neither the HTTP status nor an error
code in them, only its own sentence; so only the message of an `error` or `turn.failed`
event is classified (never the model's words or a command's output), by the wordings of
the Codex version Genesis tests.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import time
from typing import Any, Callable

from genesis.agents.base import MAX_RESULT_CHARS, ApiError, ApiRetry, Ending, Limit, OutputReader, Result
from genesis.agents.claude.messages import next_clock
from genesis.agents.output import (ERROR_LINES, ERROR_WIDTH, MAX_LINE_BYTES, TEXT_WIDTH, integer, one_line, paragraph,
                                   parse, text, turns)
from genesis.words import sanitize

__all__ = ["CodexReader", "classify", "MAX_LINE_BYTES"]


# Codex runs each command through the user's shell: `/bin/bash -lc '<command>'`.
SHELL_WRAPPER = re.compile(r"^/\S*/(?:ba|z)?sh -l?c (?P<cmd>.+)$", re.DOTALL)

# "Reconnecting... 2/5 (<why>)": Codex retries the model API by itself; "Reconnecting...
# waiting for network (<why>)": it waits, with no end, for the API to answer at all.
RECONNECTING = re.compile(r"Reconnecting\.\.\. (?:(?P<attempt>\d+)/(?P<of>\d+)|waiting for network)"
                          r"(?: \((?P<why>.*)\))?$", re.DOTALL)
# Its retries back off from 0.2 s, doubling, and each try may retry the request itself a few
# times more; waiting for the network, it says so again after 5 s, 10 s, 20 s, ... (measured).
FIRST_BACKOFF = 0.2
REQUEST_RETRIES_SLACK = 5.0
NETWORK_BACKOFF = 5.0
NETWORK_BACKOFF_MAX = 300.0

# A ChatGPT plan's usage limit (the API's 429 `usage_limit_reached`), in every plan's words:
# "You’ve hit your usage limit. Upgrade to Pro (...), visit ... or try again at 3:13 PM."
# "You’ve hit your usage limit. To get more access now, send a request to your admin or try
#  again at Nov 24th, 2026 3:13 PM." (a reset on another day)
# "You’ve hit your usage limit. Try again later."
USAGE_LIMIT = re.compile(r"You(?:'|’)ve hit your usage limit\b")
TRY_AGAIN_AT = re.compile(r"\btry again at (?P<when>[^.]+)\.?\s*$", re.IGNORECASE)
ORDINAL = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)\b")
DATED = ("%b %d, %Y %I:%M %p", "%B %d, %Y %I:%M %p")
CLOCK = "%I:%M %p"


def by_status(status: int) -> tuple[bool, str]:
    """Whether a retry can help an HTTP status, and Genesis's name for it."""
    if status >= 500:
        return True, "server_error"
    if status in (408, 409, 429):
        return True, {408: "timeout", 409: "conflict", 429: "rate_limit"}[status]
    return False, {401: "authentication_failed", 402: "billing_error", 403: "permission_denied",
                   404: "not_found"}.get(status, "invalid_request")


# Codex's sentences for an API failure: (pattern, retryable, status, code), matched from the
# start of the message. A code that is a function reads both from the status found.
API_ERRORS = tuple((re.compile(pattern, re.DOTALL), retryable, status, code) for pattern, retryable, status, code in (
    # An API key's billing quota (429 insufficient_quota): waiting does not bring it back.
    (r"Quota exceeded\. Check your plan and billing details", False, 429, "billing_error"),
    # A ChatGPT plan without Codex (429 usage_not_included).
    (r"To use Codex with your ChatGPT plan, upgrade to Plus\b", False, 429, "usage_not_included"),
    # A 500 from the API, after Codex's own retries.
    (r"We(?:'|’)re currently experiencing high demand\b", True, 500, "server_error"),
    (r"Selected model is at capacity\b|Policy-restricted capacity is unavailable\b"
     r"|Flex capacity unavailable\b", True, None, "overloaded"),
    # A 429 rate limit (or another status) that outlasted Codex's retries.
    (r"exceeded retry limit, last status: (?P<status>\d{3})\b", False, None, by_status),
    # Any other status, with the API's own message: "unexpected status 401 Unauthorized: ...".
    (r"unexpected status (?P<status>\d{3})\b", False, None, by_status),
    # No answer: the connection failed or the stream broke off.
    (r"(?:stream disconnected before completion|error sending request|Connection failed)\b",
     True, None, "connection_failed"),
    (r"(?:[Rr]equest timed out|timeout waiting for)\b", True, None, "timeout"),
    # A 404 for the model: OpenAI's message as Codex passes it on.
    (r"The model `[^`]*` does not exist\b", False, 404, "model_not_found"),
))


def classify(message: str, now: float, tz: dt.tzinfo | None = None) -> Limit | ApiError | None:
    """What the message of Codex's `error` / `turn.failed` event says: a usage limit, an API
    error, or None (a failure that is not the API's, e.g. the context window ran out).
    `now` is epoch seconds; `tz` the machine's zone, in which Codex writes a reset (None: local)."""
    message = message.strip()
    if not message:
        return None
    if USAGE_LIMIT.match(message):
        found = TRY_AGAIN_AT.search(message)
        return Limit(reset_time(found["when"], now, tz) if found else None, "", message)
    for pattern, retryable, status, code in API_ERRORS:
        if m := pattern.match(message):
            if callable(code):
                status = int(m["status"])
                retryable, code = code(status)
            return ApiError(retryable, status, code, message)
    return _raw_body(message)


def _raw_body(message: str) -> ApiError | None:
    """A 400 whose body Codex passes on whole: `{"error": {"type": "invalid_request_error", ...}}`."""
    if not message.startswith("{"):
        return None
    try:
        body = json.loads(message)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    kind = text(error.get("type")) or text(error.get("code"))
    if kind == "invalid_request_error":
        return ApiError(False, 400, "invalid_request", text(error.get("message")) or message)
    if kind in ("server_error", "overloaded_error"):
        return ApiError(True, None, "server_error", text(error.get("message")) or message)
    return None


def reset_time(when: str, now: float, tz: dt.tzinfo | None = None) -> float | None:
    """Epoch seconds of "3:13 PM" (the next such time) or "Nov 24th, 2026 3:13 PM", in `tz`."""

    when = ORDINAL.sub(r"\1", " ".join(when.split()))
    for fmt in DATED:
        try:
            at = dt.datetime.strptime(when, fmt)
        except ValueError:
            continue
        return at.timestamp() if tz is None else at.replace(tzinfo=tz).timestamp()
    try:
        clock = dt.datetime.strptime(when, CLOCK)
    except ValueError:
        return None
    return next_clock(clock.hour, clock.minute, now, tz)


class CodexReader(OutputReader):
    """One run's `--json` output: feed() each line as it comes, ending() once it is over."""

    speaks_first = True  # `thread.started` and `turn.started` come within seconds, before its first API request

    def __init__(self, mono: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 tz: dt.tzinfo | None = None) -> None:
        self.mono, self.wall, self.tz = mono, wall, tz   # tz: the zone Codex writes a reset in (None: local)
        self.retry: ApiRetry | None = None
        self.turns = 0
        self.session = ""
        self.final = ""                     # the last agent message
        self.completed = False              # a turn.completed came after the last failure
        self.failure = ""                   # the message of the last turn.failed (or fatal error)
        self.tokens: dict[str, int] = {}
        self.result_at: float | None = None  # when its turn completed (the run's last event: it exits then)

    def feed(self, line: str) -> list[str]:
        if len(line) > MAX_LINE_BYTES // 4:
            size = len(line.encode("utf-8", "surrogatepass"))
            if size > MAX_LINE_BYTES:
                self.retry = None
                return [f"(an output line of {size} bytes was not read)"]
        record = parse(line)
        if record is None:
            # Not an event (stderr shares the stream): shown as it is.
            return [sanitize(line, TEXT_WIDTH)] if line.strip() else []
        kind = text(record.get("type"))
        if kind == "error":
            return self._error(text(record.get("message")))
        self.retry = None
        if kind == "thread.started":
            self.session = text(record.get("thread_id"))
            return [one_line(f"session {self.session}")]
        if kind == "turn.started":
            self.turns += 1
            self.result_at = None
            return []
        if kind in ("item.started", "item.completed"):
            item = record.get("item")
            return self._item(kind, item) if isinstance(item, dict) else []
        if kind == "turn.completed":
            self.result_at = self.mono()
            return [self._completed(record.get("usage"))]
        if kind == "turn.failed":
            error = record.get("error")
            self.failure = text(error.get("message")) if isinstance(error, dict) else ""
            self.completed = False
            return [one_line("result: error" + (f": {first(self.failure)}" if self.failure else ""))]
        return []

    def _error(self, message: str) -> list[str]:
        m = RECONNECTING.match(message.strip())
        if m is None:
            self.retry = None
            self.failure = message
            return [one_line(f"API error: {message}")]
        why = " ".join((m["why"] or "").split())
        if m["attempt"] is not None:
            attempt, of = int(m["attempt"]), int(m["of"])
            delay = FIRST_BACKOFF * 2 ** min(attempt - 1, 10) + REQUEST_RETRIES_SLACK
        else:
            attempt, of = (self.retry.attempt + 1 if self.retry else 1), 0
            delay = min(NETWORK_BACKOFF * 2 ** min(attempt - 1, 10), NETWORK_BACKOFF_MAX) + 2.0
        found = classify(why, self.wall(), self.tz)
        status = found.status if isinstance(found, ApiError) else None
        self.retry = ApiRetry(attempt=attempt, max_retries=of, delay=delay, status=status,
                              error=why or "connection_failed", seen=self.mono())
        head = f"API retry {attempt}/{of}" if of else "API unreachable, waiting for the network"
        return [one_line(head + (f" ({why})" if why else ""))]

    def _item(self, kind: str, item: dict[str, Any]) -> list[str]:
        what = text(item.get("type"))
        done = kind == "item.completed"
        if what == "command_execution":
            if not done:
                return [one_line(f"tool Bash: $ {shown_command(text(item.get('command')))}")]
            return command_failure(item)
        if not done:
            return []
        if what == "agent_message":
            self.final = text(item.get("text"))[:MAX_RESULT_CHARS]
            return paragraph("assistant: ", self.final, TEXT_WIDTH)
        if what == "file_change":
            changes = item.get("changes") if isinstance(item.get("changes"), list) else []
            paths = ", ".join(f"{text(c.get('kind')) or 'update'} {text(c.get('path'))}"
                              for c in changes if isinstance(c, dict))
            return [one_line(f"tool apply_patch: {paths or '(no files)'}")]
        if what == "mcp_tool_call":
            return [one_line(f"tool {text(item.get('server'))}.{text(item.get('tool'))}")]
        if what == "web_search":
            return [one_line(f"tool web_search: {text(item.get('query'))}")]
        if what == "error":
            # A warning in the run (an unknown model's metadata, ...): the run goes on.
            return [one_line(f"warning: {text(item.get('message'))}")]
        return []

    def _completed(self, usage: Any) -> str:
        self.completed, self.failure = True, ""
        if isinstance(usage, dict):
            for key in ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"):
                value = integer(usage.get(key))
                if value is not None:
                    self.tokens[key] = self.tokens.get(key, 0) + value
        parts = ["done", turns(self.turns)]
        if "input_tokens" in self.tokens or "output_tokens" in self.tokens:
            parts.append(f"{self.tokens.get('input_tokens', 0)} in / {self.tokens.get('output_tokens', 0)} out tokens")
        return one_line("result: " + ", ".join(p for p in parts if p)
                        + (f": {first(self.final)}" if self.final else ""))

    def ending(self, returncode: int | None) -> Ending:
        tokens = {"input_tokens": self.tokens.get("input_tokens"), "output_tokens": self.tokens.get("output_tokens")}
        if self.completed and not self.failure:
            result = Result(subtype="success", num_turns=self.turns, session_id=self.session, text=self.final,
                            **tokens)
            return Ending(result=result, final_text=self.final)
        if not self.failure:
            return Ending()   # killed, or it ended without saying how
        result = Result(subtype="error", is_error=True, num_turns=self.turns, session_id=self.session,
                        text=self.failure[:MAX_RESULT_CHARS], **tokens)
        found = classify(self.failure, self.wall(), self.tz)
        return Ending.of(found, result)


def shown_command(command: str) -> str:
    """The command the model asked for, without the shell wrapper Codex puts around it."""
    m = SHELL_WRAPPER.match(command)
    if m:
        inner = m["cmd"].strip()
        try:
            words = shlex.split(inner)
            inner = words[0] if len(words) == 1 else inner
        except ValueError:
            pass
        command = inner
    return " ⏎ ".join(part for part in command.splitlines() if part.strip())


def command_failure(item: dict[str, Any]) -> list[str]:
    """A command that failed: its exit code and the first lines of its output."""
    code = integer(item.get("exit_code"))
    if text(item.get("status")) != "failed" and (code is None or code == 0):
        return []
    said = [line for line in text(item.get("aggregated_output")).splitlines() if line.strip()]
    lines = [sanitize(f"  error: exit {code if code is not None else '?'}" + (f": {said[0]}" if said else ""),
                      ERROR_WIDTH)]
    lines += [sanitize("    " + line, ERROR_WIDTH) for line in said[1:ERROR_LINES]]
    if len(said) > ERROR_LINES:
        lines.append(f"    ({len(said) - ERROR_LINES} more lines)")
    return lines




def first(said: str) -> str:
    return next((line.strip() for line in said.splitlines() if line.strip()), "")



