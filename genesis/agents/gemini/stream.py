"""Gemini CLI's stream-json output (`-p --output-format stream-json`), read line by line into
a readable transcript and, at the end, into how the run ended.

Records: `init` (session, model), `message` (the user's prompt; the model's text in
`delta` pieces), `tool_use`, `tool_result`, `error` (a warning or a failed turn) and the
final `result` (`status` success or error, the error's message, token stats; no cost).
The CLI retries 429 and 5xx answers itself, and says so only on stderr (which shares the
stream): "Attempt 2 failed with status 503. Retrying with backoff..." or, for a quota
with a suggested wait, "Attempt 1 failed: ... Retrying after 5040ms...".

Only the records' own fields and the CLI's retry lines count: the model's text and tool
output are never searched for a limit or an error.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable

from genesis.agents.base import MAX_RESULT_CHARS, MODEL_CHARS, ApiError, ApiRetry, Ending, OutputReader, Result
from genesis.agents.gemini.errors import FATAL_AUTH_EXIT, classify
from genesis.agents.output import (ERROR_LINES, ERROR_WIDTH, INPUT_WIDTH, MAX_LINE_BYTES, TEXT_WIDTH, integer, number,
                                   one_line, paragraph, parse, text)
from genesis.words import sanitize

__all__ = ["GeminiStreamReader", "MAX_ATTEMPTS"]

# The CLI's own tries of one request (general.maxAttempts in its settings may lower it).
MAX_ATTEMPTS = 10
# Its backoff when the API names no wait: 5 s doubling up to 30 s, up to 30% longer by jitter.
BACKOFF_FIRST, BACKOFF_MAX, BACKOFF_JITTER = 5.0, 30.0, 1.3

RETRY_AFTER = re.compile(r"Retrying after (?P<ms>\d+)ms\.\.\.\s*$")
ATTEMPT = re.compile(r"Attempt (?P<n>\d+) failed(?P<how>: |\. Retrying with backoff|"
                     r" with status (?P<status>\d{3})\. Retrying with backoff|"
                     r" with (?P<kind>429|5xx) error\b.*?Retrying with backoff)")
GAVE_UP = re.compile(r"Max attempts reached\s*$")
STACK_FRAME = re.compile(r"\s+at \S")
# Said on every run, and of no use in a transcript: its start-up profiler, a terminal warning.
NOISE = re.compile(r"\[STARTUP\] |Warning: 256-color support not detected\b")

# Which field of a tool's parameters shows what it did.
SHOWN_PARAMETER = {"run_shell_command": "command", "write_file": "file_path", "read_file": "file_path",
                   "replace": "file_path", "read_many_files": "include", "glob": "pattern",
                   "search_file_content": "pattern", "grep": "pattern", "list_directory": "path",
                   "web_fetch": "prompt", "google_web_search": "query"}


class GeminiStreamReader(OutputReader):
    """One run's stream-json output: feed() each line as it comes, ending() once it is over."""

    speaks_first = True  # its `init` record comes before its first API request (seconds; 11 s on a loaded machine)

    def __init__(self, mono: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.mono, self.wall = mono, wall
        self.retry: ApiRetry | None = None
        self.result: Result | None = None
        self.turns = 0
        self.session = ""
        self.model = ""                # the model its `init` record named
        self._record: dict[str, Any] = {}   # the result record
        self._errors: list[str] = []         # messages of the error records with severity "error"
        self._final = ""                     # the model's text since its last tool call
        self._pending = ""                   # text of the current message not yet shown (no newline yet)
        self._in_turn = False
        self._attempt: int | None = None     # a retry line whose wait is still to come
        self._said = ""                      # the last line of stderr that was not about a retry
        self.result_at: float | None = None  # when its result record came (the run's last: it exits then)

    def feed(self, line: str) -> list[str]:
        if len(line) > MAX_LINE_BYTES // 4 and len(line.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
            return [f"(an output line of {len(line.encode('utf-8', 'surrogatepass'))} bytes was not read)"]
        record = parse(line)
        if record is None or not isinstance(record.get("type"), str):
            return self._stderr(line)
        self.retry, self._attempt = None, None
        kind = record["type"]
        if kind == "message" and record.get("role") == "assistant":
            return self._text(text(record.get("content")))
        lines = self._flush()
        if kind == "init":
            self.session = text(record.get("session_id"))
            self.model = text(record.get("model"))[:MODEL_CHARS]
            lines.append(one_line(f"session {self.session}: model {text(record.get('model'))}"))
        elif kind == "tool_use":
            self._turn()
            self._final = ""
            lines.append(tool_line(text(record.get("tool_name")), record.get("parameters")))
        elif kind == "tool_result":
            self._in_turn = False
            lines += tool_error(record)
        elif kind == "error":
            said = text(record.get("message")).strip()
            if record.get("severity") == "error":
                self._errors.append(said)
            lines += paragraph(f"{text(record.get('severity')) or 'error'}: ", said, TEXT_WIDTH)
        elif kind == "result":
            self.result_at = self.mono()
            lines.append(self._result(record))
        return lines

    # --- the model's text -------------------------------------------------------------

    def _turn(self) -> None:
        if not self._in_turn:
            self.turns += 1
            self._in_turn = True

    def _text(self, piece: str) -> list[str]:
        """The model's text comes in pieces: shown a whole line at a time."""
        self._turn()
        self._final += piece
        self._pending += piece
        whole, sep, rest = self._pending.rpartition("\n")
        if not sep:
            return []
        self._pending = rest
        return paragraph("assistant: ", whole, TEXT_WIDTH)

    def _flush(self) -> list[str]:
        said, self._pending = self._pending, ""
        return paragraph("assistant: ", said, TEXT_WIDTH)

    # --- stderr: the CLI's retries, and whatever else it says --------------------------

    def _stderr(self, line: str) -> list[str]:
        if not line.strip() or STACK_FRAME.match(line) or NOISE.match(line):
            return []  # a stack trace's frames, and the start-up noise, say nothing to a reader
        if m := ATTEMPT.search(line):
            n = int(m["n"])
            if m["how"] == ": ":
                self._attempt = n  # a quota error: the wait it names comes at the end of its message
            else:
                self._attempt = None
                status = int(m["status"]) if m["status"] else 429 if m["kind"] == "429" else None
                self._retry(n, status, backoff(n), "server_error" if m["kind"] == "5xx" else "")
        elif self._attempt is None:
            self._said = line.strip()
        if self._attempt is not None:
            if w := RETRY_AFTER.search(line):
                self._retry(self._attempt, None, int(w["ms"]) / 1000, "quota")
                self._attempt = None
            elif GAVE_UP.search(line):
                self._attempt = None
        return [sanitize(line, TEXT_WIDTH)]

    def _retry(self, attempt: int, status: int | None, delay: float, error: str) -> None:
        if not error:
            error = "rate_limit" if status == 429 else "server_error" if status and status >= 500 else "no_answer"
        self.retry = ApiRetry(attempt=attempt, max_retries=MAX_ATTEMPTS, delay=delay, status=status,
                              error=error, seen=self.mono())

    # --- the end ----------------------------------------------------------------------

    def _result(self, record: dict[str, Any]) -> str:
        self._record = record
        stats = record.get("stats") if isinstance(record.get("stats"), dict) else {}
        status = text(record.get("status"))
        said = self._error_message()
        self.result = Result(subtype=status, is_error=status != "success", num_turns=self.turns,
                             session_id=self.session, text=(said if status != "success" else self._final)
                             [:MAX_RESULT_CHARS], input_tokens=integer(stats.get("input_tokens")),
                             output_tokens=integer(stats.get("output_tokens")), model=self.model)
        r = self.result
        if r.is_error:
            first = next((ln.strip() for ln in said.splitlines() if ln.strip()), "")
            return one_line(f"result: {status or 'error'}" + (f": {first}" if first else ""))
        ms = number(stats.get("duration_ms"))
        tokens = (f"{r.input_tokens} in / {r.output_tokens} out tokens"
                  if r.input_tokens is not None and r.output_tokens is not None else None)
        turns = f"{r.num_turns} turn" + ("s" if r.num_turns != 1 else "")
        parts = [status or "done", turns, tokens, f"{ms / 1000:.1f}s" if ms else None]
        first = next((ln.strip() for ln in r.text.splitlines() if ln.strip()), "")
        return one_line("result: " + ", ".join(p for p in parts if p) + (f": {first}" if first else ""))

    def _error_message(self) -> str:
        """The failed run's own words: the result's error, else the last error record's."""
        error = self._record.get("error")
        said = text(error.get("message")) if isinstance(error, dict) else ""
        return said.strip() or (self._errors[-1] if self._errors else "")

    def ending(self, returncode: int | None) -> Ending:
        result = self.result
        if result is not None and not result.is_error:
            return Ending(result=result, final_text=result.text)
        if returncode is None:
            return Ending(result=result)
        if result is not None:
            said = self._error_message()
            found = classify(said, self.wall(), returncode) if said else None
        elif returncode == FATAL_AUTH_EXIT:
            # Refused before it started (no key, or an auth type it cannot use): it says why on stderr.
            said = self._said or "Gemini CLI could not authenticate"
            found = ApiError(False, None, "authentication_failed", said)
        else:
            found = None
        return Ending.of(found, result)


def backoff(attempt: int) -> float:
    """The longest the CLI waits after its `attempt`-th try when the API named no wait."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, attempt - 1)) * BACKOFF_JITTER


def tool_line(name: str, parameters: Any) -> str:
    args = parameters if isinstance(parameters, dict) else {}
    key = SHOWN_PARAMETER.get(name)
    value = args.get(key) if key else None
    if name == "run_shell_command" and isinstance(value, str):
        shown = "$ " + " ⏎ ".join(part for part in value.splitlines() if part.strip())
    elif isinstance(value, str):
        shown = value
    else:
        shown = sanitize(json.dumps(parameters, ensure_ascii=False, separators=(",", ":")), INPUT_WIDTH)
    return one_line(f"tool {name or '?'}: {shown}")


def tool_error(record: dict[str, Any]) -> list[str]:
    """A failed tool call's error (a successful one shows nothing)."""
    if record.get("status") == "success":
        return []
    error = record.get("error") if isinstance(record.get("error"), dict) else {}
    said = text(error.get("message")) or text(record.get("output"))
    shown = [line for line in said.splitlines() if line.strip()]
    lines = [sanitize("  error: " + (shown[0] if shown else "(no output)"), ERROR_WIDTH)]
    lines += [sanitize("    " + line, ERROR_WIDTH) for line in shown[1:ERROR_LINES]]
    if len(shown) > ERROR_LINES:
        lines.append(f"    ({len(shown) - ERROR_LINES} more lines)")
    return lines
