"""Copilot CLI's JSONL output (`-p --output-format json`), read line by line into a readable
transcript and, at the end, into how the run ended.

Each line is one event `{"type", "data", "id", "timestamp", ...}`; a subagent's events carry
an `agentId` and never end the run. What counts:
- `assistant.message`: the model's text (`content`) and tool calls (`toolRequests`);
- `tool.execution_complete` with `success: false`: a tool that could not run;
- `model.call_failure` and `assistant.turn_retry`: the CLI retries a failed model call by
  itself (5 times; a 429's Retry-After is honoured, a 5xx backs off for ~15 s in all);
- `session.error` `{"errorType", "errorCode"?, "statusCode"?, "message"}`: how a failed run
  failed, in the CLI's words. errorType is "rate_limit" (a 429 after its retries), "quota",
  "authentication", "authorization", "policy", "context_limit" or "query" (any other);
- the last line, `{"type": "result", "sessionId", "exitCode", "usage": {"premiumRequests",
  "totalApiDurationMs", "sessionDurationMs", "codeChanges"}}`: no cost in money and no tokens.

Text inside an event (the model's words, a tool's output) is never searched for a limit.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from genesis.agents.base import MAX_RESULT_CHARS, ApiError, Ending, Limit, OutputReader, Result
from genesis.agents.claude.stream import keyed_tool_line, retryable_status
from genesis.agents.output import (ERROR_WIDTH, MAX_LINE_BYTES, TEXT_WIDTH, integer, iso_time_ahead, number, one_line,
                                   paragraph, parse, text, turns)
from genesis.words import sanitize

__all__ = ["CopilotJsonReader", "classify", "NO_CREDIT"]

# OpenAI's words for an account with no credit left (its code is `insufficient_quota`): no reset to wait for.
NO_CREDIT = ("exceeded your current quota", "check your plan and billing")
# The run's own AI-credit cap (--max-ai-credits) was spent: a failed run, not a limit of the account.
SESSION_CAP = ("session_quota_exceeded", "spending limit for this session")
SHOWN = {"bash": "command", "view": "path", "create": "path", "edit": "path", "str_replace": "path"}
FATAL = {"authentication": "authentication_failed", "authorization": "permission_denied", "policy": "policy"}
BY_STATUS = {401: "authentication_failed", 402: "billing_error", 403: "permission_denied", 404: "model_not_found"}



def classify(error: dict[str, Any], now: float) -> Limit | ApiError | None:
    """What a session.error's data says: a usage limit, an API error, or None (the run failed
    for another reason: the context window, its own credit cap)."""
    kind, code, said = text(error.get("errorType")), text(error.get("errorCode")), text(error.get("message")).strip()
    status = integer(error.get("statusCode"))
    if code == SESSION_CAP[0] or SESSION_CAP[1] in said:
        return None
    if kind == "quota":
        return Limit(iso_time_ahead(said, now), code or "quota", said)
    if kind == "rate_limit":
        # Copilot's own service names the plan's limit (user_weekly_rate_limited ...) in its words;
        # a provider of the user's own (BYOK) gets only its 429, already retried 5 times.
        if code or said.startswith(("You've hit", "You've reached")):
            return Limit(iso_time_ahead(said, now), code or "rate_limit", said)
        if all(part in said.lower() for part in NO_CREDIT):
            return ApiError(False, status, "insufficient_quota", said)
        return ApiError(True, status or 429, "rate_limit", said)
    if kind in FATAL:
        return ApiError(False, status, FATAL[kind], said)
    if kind == "context_limit":
        return None
    if status is None:
        return ApiError(True, None, "connection_failed", said)  # the API did not answer
    if retryable_status(status):
        return ApiError(True, status, "server_error" if status >= 500 else "rate_limit", said)
    return ApiError(False, status, BY_STATUS.get(status, "invalid_request"), said)


def provider_words(message: str) -> str:
    """A failed call's errorMessage: the provider's JSON error body, or the CLI's own words."""
    try:
        body = json.loads(message)
    except (ValueError, RecursionError):
        return message
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return message if not isinstance(body, str) else body


class CopilotJsonReader(OutputReader):
    """One run's JSONL output: feed() each line as it comes, ending() once it is over."""

    speaks_first = True  # its session.* events come within seconds, before its first model call (measured)

    def __init__(self, mono: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.mono, self.wall = mono, wall
        self.turns = 0
        self.result: Result | None = None
        self.final = ""                              # the main agent's last words
        self._error: dict[str, Any] | None = None    # the last session.error of the main agent
        self._model = ""
        self.result_at: float | None = None          # when its result line came (the run's last: it exits then)

    def feed(self, line: str) -> list[str]:
        if len(line) > MAX_LINE_BYTES // 4 and len(line.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
            return [f"(an output line of {len(line.encode('utf-8', 'surrogatepass'))} bytes was not read)"]
        record = parse(line)
        if record is None:
            # Not an event (stderr shares the stream): shown as it is.
            return [sanitize(line, TEXT_WIDTH)] if line.strip() else []
        kind = text(record.get("type"))
        data = record.get("data") if isinstance(record.get("data"), dict) else {}
        if kind == "result":
            self.result_at = self.mono()
            return [self._result(record)]
        if "agentId" in record:
            return []  # a subagent's: its parent reports what matters
        if kind == "session.tools_updated" and text(data.get("model")) and data.get("model") != self._model:
            self._model = text(data.get("model"))
            return [one_line(f"model {self._model}")]
        if kind == "assistant.message":
            return self._assistant(data)
        if kind == "tool.execution_complete" and data.get("success") is False:
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            return [sanitize("  error: " + (text(error.get("message")) or "(no message)"), ERROR_WIDTH)]
        if kind == "model.call_failure":
            status = integer(data.get("statusCode"))
            said = provider_words(text(data.get("errorMessage")))
            return [one_line(f"API call failed ({status or text(data.get('failureKind')) or '?'}, try "
                             f"{(integer(data.get('retryAttempt')) or 0) + 1}): {said}")]
        if kind == "assistant.turn_retry":
            return [one_line(f"API retry ({text(data.get('reason')) or 'unknown'})")]
        if kind == "session.error":
            self._error = data
            head = ", ".join(str(p) for p in (text(data.get("errorType")) or "error", data.get("errorCode"),
                                              integer(data.get("statusCode"))) if p)
            return paragraph(f"API error ({head}): " if data.get("statusCode") is not None else f"error ({head}): ",
                             text(data.get("message")), TEXT_WIDTH)
        if kind == "session.warning":
            return paragraph(f"warning ({text(data.get('warningType')) or '?'}): ", text(data.get("message")),
                             TEXT_WIDTH)
        return []

    def _assistant(self, data: dict[str, Any]) -> list[str]:
        self.turns += 1
        self._error = None  # the model answered after it: that error is over
        said = text(data.get("content"))
        if said.strip():
            self.final = said.strip()[:MAX_RESULT_CHARS]
        lines = paragraph("assistant: ", said, TEXT_WIDTH)
        for call in data.get("toolRequests") or []:
            if isinstance(call, dict):
                lines.append(keyed_tool_line(text(call.get("name")), call.get("arguments"), SHOWN))
        return lines

    def _result(self, record: dict[str, Any]) -> str:
        usage = record.get("usage") if isinstance(record.get("usage"), dict) else {}
        code = integer(record.get("exitCode"))
        failed = code != 0 or self._error is not None
        said = text((self._error or {}).get("message")).strip() if failed else self.final
        self.result = Result(subtype="error" if failed else "success", is_error=failed, num_turns=self.turns,
                             session_id=text(record.get("sessionId")), text=said[:MAX_RESULT_CHARS],
                             api_error_status=integer((self._error or {}).get("statusCode")))
        first = next((part.strip() for part in said.splitlines() if part.strip()), "")
        ms = number(usage.get("sessionDurationMs"))
        premium = number(usage.get("premiumRequests"))
        parts = ["error" if failed else "success", turns(self.turns),
                 f"{premium:g} premium requests" if premium else None,
                 f"{ms / 1000:.1f}s" if ms is not None else None, f"session {self.result.session_id}"]
        return one_line("result: " + ", ".join(p for p in parts if p) + (f": {first}" if first else ""))

    def ending(self, returncode: int | None) -> Ending:
        result = self.result
        if self._error is None:
            if result is not None and not result.is_error:
                return Ending(result=result, final_text=result.text)
            return Ending(result=result)  # killed, or failed away from the API
        found = classify(self._error, self.wall())
        return Ending.of(found, result)
