"""Qwen Code: `qwen --yolo -o stream-json PROMPT`, its Claude-like stream-json, and its hooks.

Its stream-json has Claude Code's records (system init, assistant, user tool results, a
final result with usage; no cost), so Claude Code's reader reads it, with three
differences read here:
- a failed run's result carries no `result` text but `error.message`, in the CLI's own
  words: `[API Error: 429 <the provider's message>]` (plus a sentence on quotas for a 429),
  or `Quota exhausted: <message>` when the provider's message says when its quota resets
  (the CLI then gives up at once instead of retrying);
- it retries a 429 or 503 by itself (up to 10 times, 60 s doubling up to 5 minutes, each
  after its HTTP client's own quiet retries) and says so twice: a record
  `{"type":"system","subtype":"retry","data":{"attempt":1,"maxRetries":10,"delayMs":60000}}`
  and a stderr line (stderr shares the stream) `Retrying in 60s (attempt 1/10): [API Error: 429 ...]`;
- its usage's input_tokens already include the cached ones.
OpenAI's `insufficient_quota` (no credit left) is retried for the best part of an hour with
no reset to wait for: it is read as a fatal billing error at its first retry.

Only the records' own fields and the CLI's retry lines count: the model's text and tool
output are never searched for a limit or an error.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from genesis.agents.base import Adapter, ApiError, ApiRetry, Ending, Limit, OutputReader, TextReader
from genesis.agents.claude.stream import StreamReader, keyed_tool_line
from genesis.agents.hook.spec import GroupedHooks, home_dir
from genesis.agents.output import (MAX_LINE_BYTES, TEXT_WIDTH, integer, iso_time_ahead, number, one_line, paragraph,
                                   parse, text)

if TYPE_CHECKING:
    from genesis.phases import Phase

__all__ = ["QwenCode", "QwenStreamReader", "QwenTextReader", "QWEN_HOOKS", "config_dir", "classify"]

HOOK_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart")
TOOL_EVENTS = frozenset(HOOK_EVENTS[:3])
PROMPT_FLAGS = ("-p", "--prompt")
STRUCTURED = ("-o", "stream-json")

API_ERROR = re.compile(r"\[API Error: (?:(?P<status>\d{3}) )?(?P<message>.*?)\]", re.S)
QUOTA_EXHAUSTED = "Quota exhausted: "
RETRYING = re.compile(r"^Retrying in (?P<s>\d+)s \(attempt (?P<n>\d+)/(?P<of>\d+)\)(?:: (?P<why>.*))?$")
# OpenAI's words for an account with no credit left (its code is `insufficient_quota`).
NO_CREDIT = ("exceeded your current quota", "check your plan and billing")
# What Qwen's shell and file tools show in the transcript.
SHOWN = {"run_shell_command": "command", "write_file": "file_path", "read_file": "file_path", "edit": "file_path",
         "glob": "pattern", "grep_search": "pattern"}


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Qwen Code's own directory: $QWEN_HOME when set (a leading ~ is the home), else ~/.qwen."""
    env = os.environ if env is None else env
    value = env.get("QWEN_HOME", "")
    if value == "~" or value.startswith("~/"):
        return home_dir(env) / value[2:]
    return Path(value).absolute() if value else home_dir(env) / ".qwen"


QWEN_HOOKS = GroupedHooks("qwen", config_dir, "settings.json", HOOK_EVENTS, "PostToolUse", matcher="*",
                          matched=TOOL_EVENTS)


def option(argv: tuple[str, ...], *names: str) -> str | None:
    """The value of the first of `names` in argv (`-o X`, `--output-format=X`), or None."""
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def classify(message: str, now: float) -> Limit | ApiError | None:
    """What the CLI's error message says: a quota with its reset, an API error, or None."""
    said = message.strip()
    if said.startswith(QUOTA_EXHAUSTED):
        return Limit(resets_at=iso_time_ahead(said, now), kind="quota", message=said)
    found = API_ERROR.search(said) if said.startswith("[API Error: ") else None
    if found is None:
        return None
    status = int(found.group("status")) if found.group("status") else None
    words = found.group("message").lower()
    if status == 429 and all(part in words for part in NO_CREDIT):
        return ApiError(False, status, "insufficient_quota", said)
    if status is None:
        return ApiError(True, None, "connection_failed", said)   # the API did not answer
    if status in (401, 403):
        return ApiError(False, status, "authentication_failed", said)
    if status == 429:
        return ApiError(True, status, "rate_limit", said)
    if status >= 500 or status in (408, 409):
        return ApiError(True, status, "server_error", said)
    return ApiError(False, status, "model_not_found" if status == 404 else "invalid_request", said)



class QwenStreamReader(StreamReader):
    """One run's stream-json output: Claude Code's reader, with Qwen's retries and errors."""

    failure = ""    # the failed result's error message, in the CLI's words (never the model's)

    def feed(self, line: str) -> list[str]:
        if len(line) > MAX_LINE_BYTES // 4:
            return super().feed(line)
        record = parse(line)
        if record is None:
            retrying = RETRYING.match(line.strip())
            if retrying:
                return [self._retrying(retrying)]
            return super().feed(line)
        if record.get("type") == "system" and record.get("subtype") == "retry":
            return self._retry(record)
        if record.get("type") == "result" and record.get("is_error") is True and not text(record.get("result")):
            error = record.get("error") if isinstance(record.get("error"), dict) else {}
            self.failure = text(error.get("message"))
            record = {**record, "result": self.failure}
            self.retry = None
            return [self._result(record)]
        return super().feed(line)

    def _result(self, record: dict[str, Any]) -> str:
        shown = super()._result(record)
        usage = record.get("usage") if isinstance(record.get("usage"), dict) else {}
        if self.result is not None and integer(usage.get("input_tokens")) is not None:
            self.result = replace(self.result, input_tokens=integer(usage.get("input_tokens")))
        return shown

    def _retry(self, record: dict[str, Any]) -> list[str]:
        data = record.get("data") if isinstance(record.get("data"), dict) else {}
        if integer(data.get("attempt")) is None:
            self.retry = None    # it tries again now (the wait, if any, is over)
            return []
        delay = (number(data.get("delayMs")) or 0.0) / 1000
        self.retry = ApiRetry(attempt=integer(data.get("attempt")) or 0,
                              max_retries=integer(data.get("maxRetries")) or 0,
                              delay=delay, status=None, error="", seen=self.mono())
        return [one_line(f"API retry {self.retry.attempt}/{self.retry.max_retries} in {delay:.1f}s")]

    def _retrying(self, found: re.Match) -> str:
        """The stderr line of the same retry: it names the error."""
        why = (found.group("why") or "").strip()
        seen = classify(why, self.wall()) if why else None
        status = seen.status if isinstance(seen, ApiError) else None
        code = seen.code if isinstance(seen, ApiError) else ""
        attempt = int(found.group("n"))
        if self.retry is None or self.retry.attempt != attempt:
            self.retry = ApiRetry(attempt=attempt, max_retries=int(found.group("of")), delay=float(found.group("s")),
                                  status=status, error=code, seen=self.mono())
        else:
            self.retry = ApiRetry(self.retry.attempt, self.retry.max_retries, self.retry.delay, status, code,
                                  self.retry.seen)
        if isinstance(seen, ApiError) and not seen.retryable and self.hopeless is None:
            self.hopeless = ApiError(False, seen.status, seen.code,
                                     f"{why}; the agent retries it by itself, but no retry can fix it")
        return one_line(f"API retry {attempt}/{found.group('of')} in {found.group('s')}s: {why}")

    def _assistant(self, record: dict[str, Any]) -> list[str]:
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        lines: list[str] = []
        for block in [b for b in message.get("content") or [] if isinstance(b, dict)]:
            if block.get("type") == "text":
                lines += paragraph("assistant: ", text(block.get("text")), TEXT_WIDTH)
            elif block.get("type") == "tool_use":
                lines.append(keyed_tool_line(text(block.get("name")), block.get("input"), SHOWN))
        return lines

    def ending(self, returncode: int | None) -> Ending:
        result = self.result
        if result is not None and not result.is_error:
            return Ending(result=result, final_text=result.text)
        found = classify(self.failure, self.wall()) if self.failure else None
        if found is None:
            found = self.hopeless
        return Ending.of(found, result)



class QwenTextReader(TextReader):
    """Text output: only the final message; on a failed run the CLI's error is the last line."""

    def __init__(self, now=time.time) -> None:
        super().__init__()
        self.now = now
        self.error = ""

    def feed(self, line: str) -> list[str]:
        stripped = line.strip()
        if stripped.startswith(("[API Error: ", QUOTA_EXHAUSTED)):
            self.error = stripped
        return super().feed(line)

    def ending(self, returncode: int | None) -> Ending:
        if returncode in (0, None) or not self.error:
            return super().ending(returncode)
        found = classify(self.error, self.now())
        return Ending.of(found)


class QwenCode(Adapter):
    name = "qwen"
    program = "qwen"
    version = "0.24.4"
    hook_required = True         # without the hook a healthy Qwen Code looks stuck
    hooks = QWEN_HOOKS
    home_var = "QWEN_HOME"
    key_vars = ("OPENAI_API_KEY", "DASHSCOPE_API_KEY")
    api_hosts = ("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com", "chat.qwen.ai", "portal.qwen.ai")
    base_url_vars = ("OPENAI_BASE_URL",)
    install = "npm install -g @qwen-code/qwen-code"
    login_command = "qwen"
    login_files = ("oauth_creds.json",)

    def home(self, env: Mapping[str, str]) -> Path:
        return config_dir(env)

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        """Auto-approval and structured output unless the user chose otherwise; the turn cap.
        A trailing -p keeps its place: the prompt is appended after it."""
        argv = tuple(argv)
        head, tail = (argv[:-1], argv[-1:]) if argv and argv[-1] in PROMPT_FLAGS else (argv, ())
        added: tuple[str, ...] = ()
        if not any(a in ("-y", "--yolo") for a in argv) and option(argv, "--approval-mode") is None:
            added += ("--yolo",)
        if option(argv, "-o", "--output-format") is None:
            added += STRUCTURED
        if phase is not None and phase.max_turns is not None:
            added += ("--max-session-turns", str(phase.max_turns))
        return head + added + tail

    def structured(self, argv: tuple[str, ...]) -> bool:
        return option(argv, "-o", "--output-format") == "stream-json"

    def raw_suffix(self, argv: tuple[str, ...]) -> str | None:
        return ".jsonl" if self.structured(argv) else None

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        if self.structured(argv):
            return QwenStreamReader(clock.mono, clock.wall) if clock is not None else QwenStreamReader()
        return QwenTextReader(clock.wall if clock is not None else time.time)

    def options_problem(self, argv: tuple[str, ...], phase: "Phase") -> str | None:
        if phase.max_budget_usd is not None:
            return (f"PHASE_{phase.name}_MAX_BUDGET_USD is not a Qwen Code option (it reports no cost): unset it; "
                    f"PHASE_{phase.name}_MAX_TURNS works (--max-session-turns)")
        return None
