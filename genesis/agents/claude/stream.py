"""Claude Code's stream-json output (`-p --output-format stream-json --verbose`), read line by
line into a readable transcript and, at the end, into how the run ended.

Each output line is one JSON record; only the type of the record itself counts. Text inside a
record (the model's words, a tool's output) is never searched for a limit or an error: an
agent that reads a log full of "You've hit your limit" must not pause the night.

A tool call Claude Code refused because it needs an approval (`claude -p` without
--dangerously-skip-permissions has nobody to ask) ends the run at once: every later call would
be refused the same way. Claude Code 2.1 says so in three records: a `system` record
`permission_denied` (the tool, and its words), the `user` record of the call's result, whose
`tool_result_meta` entry says `"non_execution_kind": "user-rejected"`, and at the end the
result's `permission_denials`. Only the second tells the refusal from a deny rule of the user's
settings (`"permission-rule"`), which the agent works around, so only it counts.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any, Callable

from genesis.agents.base import (MAX_RESULT_CHARS, MODEL_CHARS, PERMISSION_REFUSED, REFUSAL, ApiError, ApiRetry,
                                 Ending, Limit, OutputReader, Result)
from genesis.agents.claude.messages import classify
from genesis.agents.output import (ERROR_LINES, ERROR_WIDTH, INPUT_WIDTH, MAX_LINE_BYTES, TEXT_WIDTH, integer, number,
                                   one_line, paragraph, parse, text, turns)
from genesis.words import sanitize

__all__ = ["StreamReader", "MAX_LINE_BYTES"]

FILE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "Read": "file_path",
              "NotebookEdit": "notebook_path"}
PATTERN_TOOLS = {"Grep", "Glob"}

# The CLI's `error` field of an API error message: what a retry can fix and what it cannot.
RETRYABLE_CODES = {"server_error", "overloaded", "rate_limit"}
FATAL_CODES = {"authentication_failed", "oauth_org_not_allowed", "account_on_hold", "verification_required",
               "billing_error", "model_not_found", "invalid_request", "cloud_credential_error",
               "permission_denied", "permission_error"}
# Its `api_error` field (the typed cause) for an API that did not answer at all.
NO_ANSWER = {"connection_failed", "no_response", "stream_idle_timeout", "computer_slept"}
# Its tasks (a command or a sub-agent it tracks), as stream-json reports them.
TASK_EVENTS = {"task_started", "task_updated", "task_notification"}
WAKEUP_TOOL = "ScheduleWakeup"  # the model schedules its own wake-up: the session waits, idle, until it fires
WAKEUP_DELAYS = (60.0, 3600.0)  # the delays the CLI accepts (it clamps any other into them)
AGENT_TOOLS = {"Agent", "Task"}  # the sub-agent tool's names (Task before 2.1)
# The CLI's own words when its stream watchdog dropped an answer that had shown nothing: it asks
# the model again with this synthetic message (and may end with an empty `success` after it).
NO_OUTPUT = "Your previous response had no visible output"

USAGE_LIMIT = "usage_limit_reached"
# A call's `non_execution_kind` when Claude Code refused it for want of an approval.
UNAPPROVED = "user-rejected"
# Claude Code retries a refused login too (for minutes, with its default retries), in case a
# token refresh helps; once this many tries in a row were refused, none will help.
HOPELESS_AFTER = 3


def retryable_status(status: int) -> bool:
    return status >= 500 or status in (408, 409, 429)


class StreamReader(OutputReader):
    """One run's stream-json output: feed() each line as it comes, ending() once it is over."""

    speaks_first = True  # its hook and `init` records come within seconds, before the first API request

    def __init__(self, mono: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.mono, self.wall = mono, wall
        self.retry: ApiRetry | None = None
        self.result: Result | None = None
        self.turns = 0
        self._result_record: dict[str, Any] = {}
        self._rejected: dict[str, Any] | None = None   # the last rate_limit_event that refused work
        self._error: dict[str, Any] | None = None      # the last API error message of the main agent
        self._refused = 0                              # retries in a row the API refused as fatal
        self._denied: tuple[str, str] = ("", "")       # the last refused call said: (its id, its tool)
        self._unapproved: ApiError | None = None       # the first call refused for want of an approval
        self._tasks: dict[str, str] = {}               # background tasks in flight: task id -> what it is
        self._agents: set[str] = set()                 # tool_use ids of the Agent (Task) tool's calls
        self._refusal: dict[str, Any] | None = None    # the model refused and no other model was tried
        self._dead_streams = 0                         # answers that came to nothing (the CLI's watchdog)
        self._model = ""                               # the model the last `init` record named
        self.result_at: float | None = None
        self._wakeups: set[str] = set()                # tool_use ids of the main agent's ScheduleWakeup calls
        self._wakeup: float | None = None              # the wake-up it scheduled, due at (epoch; None: none)
        self.wakeup_at: float | None = None            # the same on the monotonic clock

    def feed(self, line: str) -> list[str]:
        if len(line) > MAX_LINE_BYTES // 4:
            size = len(line.encode("utf-8", "surrogatepass"))
            if size > MAX_LINE_BYTES:
                self.retry = None
                return [f"(an output line of {size} bytes was not read)"]
        record = parse(line)
        if record is None:
            # Not a record (stderr shares the stream): shown as it is, and it says nothing of retries.
            return [sanitize(line, TEXT_WIDTH)] if line.strip() else []
        kind = record.get("type")
        subtype = record.get("subtype")
        if kind == "system" and subtype == "api_retry":
            return [self._api_retry(record)]
        self.retry = None
        if kind == "system" and subtype == "permission_denied":
            self._denied = (text(record.get("tool_use_id")), text(record.get("tool_name")))
            return []
        if kind == "system" and subtype in TASK_EVENTS:
            return self._task(record, subtype)
        if kind == "system" and subtype == "model_refusal_no_fallback":
            self._refusal = record
            return [one_line(f"the model refused ({text(record.get('api_refusal_category')) or 'no category'}); "
                             f"no other model was tried")]
        if kind == "command_lifecycle":
            return self._lifecycle(record)
        if kind == "system" and subtype == "init":
            self.result_at = None  # a new turn (a background task's end woke the model)
            self._model = text(record.get("model"))[:MODEL_CHARS] or self._model
            return [one_line(f"session {text(record.get('session_id'))}: model {text(record.get('model'))}")]
        if kind == "assistant":
            if record.get("parent_tool_use_id") is None:
                self.turns += 1
                self.result_at = None
            return self._assistant(record)
        if kind == "user":
            self._unapproved_call(record)
            self._scheduled(record)
            if record.get("isSynthetic") is True and NO_OUTPUT in block_text(
                    (record.get("message") if isinstance(record.get("message"), dict) else {}).get("content")):
                self._dead_streams += 1
                return ["(the model's answer came to nothing: a dead stream; the CLI asks again)"]
            return tool_errors(record)
        if kind == "rate_limit_event":
            return self._rate_limit(record)
        if kind == "result":
            return [self._result(record)]
        return []

    def _api_retry(self, record: dict[str, Any]) -> str:
        delay = (number(record.get("retry_delay_ms")) or 0.0) / 1000
        self.retry = ApiRetry(attempt=integer(record.get("attempt")) or 0,
                              max_retries=integer(record.get("max_retries")) or 0,
                              delay=delay, status=integer(record.get("error_status")),
                              error=text(record.get("error")), seen=self.mono())
        fatal = self.retry.error in FATAL_CODES or self.retry.status in (401, 403)
        self._refused = self._refused + 1 if fatal else 0
        if self._refused >= HOPELESS_AFTER and self.hopeless is None:
            self.hopeless = ApiError(False, self.retry.status, self.retry.error or "unknown",
                                     f"the API refused {self._refused} tries in a row "
                                     f"({self.retry.status or '-'} {self.retry.error}); retrying cannot fix it")
        why = " ".join(str(part) for part in (self.retry.status, self.retry.error) if part)
        return one_line(f"API retry {self.retry.attempt}/{self.retry.max_retries} in {delay:.1f}s"
                        + (f" ({why})" if why else ""))

    @property
    def background(self) -> tuple[str, ...]:
        return tuple(self._tasks.values())

    def _task(self, record: dict[str, Any], subtype: str) -> list[str]:
        """A task of the CLI's: a command or a sub-agent, in the foreground (its tool call waits) or the
        background (the turn goes on, or ends, while it runs). Only background ones are kept."""
        task = text(record.get("task_id"))
        what = ("sub-agent" if text(record.get("tool_use_id")) in self._agents or record.get("subagent_type")
                else "command")
        if subtype == "task_started" and record.get("is_backgrounded") is True and task:
            self._tasks[task] = f"{what} {text(record.get('description')) or task}"
            return [one_line(f"background {self._tasks[task]}: started")]
        if subtype == "task_updated" and task:
            patch = record.get("patch") if isinstance(record.get("patch"), dict) else {}
            if patch.get("is_backgrounded") is True and task not in self._tasks:
                self._tasks[task] = f"{what} {text(record.get('description')) or task}"
                return [one_line(f"background {self._tasks[task]}: moved to the background")]
        if subtype == "task_notification" and task in self._tasks:
            return [one_line(f"background {self._tasks.pop(task)}: {text(record.get('status')) or 'ended'}")]
        return []

    def _assistant(self, record: dict[str, Any]) -> list[str]:
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
        main = record.get("parent_tool_use_id") is None  # a subagent's own messages do not end the run
        if record.get("error") is not None or record.get("is_api_error_message") is True:
            said = "\n".join(text(b.get("text")) for b in blocks if b.get("type") == "text").strip()
            if main:
                self._error = {**record, "text": said}
            code, status = text(record.get("error")) or "unknown", integer(record.get("api_error_status"))
            head = ", ".join(str(part) for part in (code, status) if part is not None)
            return [one_line(f"API error ({head}): {said}")]
        if main and blocks:
            self._error = None       # the model answered after it: that error is over
            self._rejected = None
        lines: list[str] = []
        for block in blocks:
            if block.get("type") == "text":
                lines += paragraph("assistant: ", text(block.get("text")), TEXT_WIDTH)
            elif block.get("type") == "tool_use":
                if text(block.get("name")) in AGENT_TOOLS:
                    self._agents.add(text(block.get("id")))
                if text(block.get("name")) == WAKEUP_TOOL and main:
                    self._schedule_call(block)
                lines.append(tool_line(text(block.get("name")), block.get("input")))
        return lines

    def _schedule_call(self, block: dict[str, Any]) -> None:
        """A ScheduleWakeup call: `stop` cancels the pending wake-up; else it is due at about its
        delay, clamped as the CLI clamps it, and rounded up to the next minute (its result says when)."""
        given = block.get("input") if isinstance(block.get("input"), dict) else {}
        if given.get("stop") is True:
            self._set_wakeup(None)
            return
        self._wakeups.add(text(block.get("id")))
        delay = min(max(number(given.get("delaySeconds")) or WAKEUP_DELAYS[0], WAKEUP_DELAYS[0]), WAKEUP_DELAYS[1])
        self._set_wakeup(self.wall() + delay + 60)

    def _scheduled(self, record: dict[str, Any]) -> None:
        """The result of a ScheduleWakeup call: when its wake-up is due (`scheduledFor`, epoch ms)."""
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        content = message.get("content") if isinstance(message.get("content"), list) else []
        if not any(isinstance(b, dict) and text(b.get("tool_use_id")) in self._wakeups for b in content):
            return
        meta = record.get("tool_use_result") if isinstance(record.get("tool_use_result"), dict) else {}
        due = number(meta.get("scheduledFor"))
        if due is not None:
            self._set_wakeup(due / 1000)
        elif any(isinstance(b, dict) and b.get("is_error") is True for b in content):
            self._set_wakeup(None)  # refused: nothing was scheduled

    def _lifecycle(self, record: dict[str, Any]) -> list[str]:
        """A scheduled fire started: a new turn, and the wake-up it was set for is no longer
        pending (one armed later, while it waited in the queue, still is)."""
        if record.get("state") != "started" or not record.get("wakeup_source"):
            return []
        fired = number(record.get("scheduled_for"))
        if self._wakeup is not None and (fired is None or fired / 1000 >= self._wakeup - 1):
            self._set_wakeup(None)
        # A new turn starts now: the last result is no longer the final one, however long the
        # CLI takes to send the turn's first record (its init) on a loaded machine.
        self.result_at = None
        return [one_line(f"woken by its scheduled wake-up ({text(record.get('wakeup_source'))})")]

    def _set_wakeup(self, due: float | None) -> None:
        self._wakeup = due
        self.wakeup_at = None if due is None else self.mono() + (due - self.wall())

    def _unapproved_call(self, record: dict[str, Any]) -> None:
        """The first tool call refused for want of an approval: the run ends now (hopeless)."""
        metas = record.get("tool_result_meta")
        if self._unapproved is not None or not isinstance(metas, list):
            return
        ids = {text(m.get("id")) for m in metas if isinstance(m, dict) and m.get("non_execution_kind") == UNAPPROVED}
        if not ids:
            return
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        content = message.get("content") if isinstance(message.get("content"), list) else []
        said = next((block_text(b.get("content")) for b in content
                     if isinstance(b, dict) and text(b.get("tool_use_id")) in ids), "")
        tool = self._denied[1] if self._denied[0] in ids else ""
        self._unapproved = ApiError(False, None, PERMISSION_REFUSED, unapproved(tool, said))
        if self.hopeless is None:
            self.hopeless = self._unapproved

    def _rate_limit(self, record: dict[str, Any]) -> list[str]:
        info = record.get("rate_limit_info") if isinstance(record.get("rate_limit_info"), dict) else {}
        status, kind = info.get("status"), text(info.get("rateLimitType")) or "unknown"
        resets = number(info.get("resetsAt"))
        when = f"resets {iso(resets)}" if resets is not None else "reset time unknown"
        if status == "rejected":
            self._rejected = info
            return [one_line(f"usage limit reached ({kind}): {when}")]
        if status == "allowed_warning":
            used = number(info.get("utilization"))
            return [one_line(f"usage limit warning ({kind}): "
                             + (f"{used:.0%} used, " if used is not None else "") + when)]
        return []

    def _result(self, record: dict[str, Any]) -> str:
        self._result_record = record
        self.result_at = self.mono()
        self.result = Result(subtype=text(record.get("subtype")), is_error=record.get("is_error") is True,
                             num_turns=integer(record.get("num_turns")),
                             total_cost_usd=number(record.get("total_cost_usd")),
                             terminal_reason=text(record.get("terminal_reason")),
                             api_error_status=integer(record.get("api_error_status")),
                             session_id=text(record.get("session_id")),
                             text=text(record.get("result"))[:MAX_RESULT_CHARS],
                             model=_model_used(record.get("modelUsage")) or self._model,
                             **_tokens(record.get("usage")))
        r = self.result
        first = next((line.strip() for line in r.text.splitlines() if line.strip()), "")
        if r.is_error:
            head = ", ".join(str(p) for p in (r.terminal_reason or r.subtype or None, r.api_error_status) if p)
            return one_line("result: error" + (f" ({head})" if head else "") + (f": {first}" if first else ""))
        ms = number(record.get("duration_ms"))
        parts = [r.subtype or "done", turns(r.num_turns),
                 f"${r.total_cost_usd:.4f}" if r.total_cost_usd is not None else None,
                 f"{ms / 1000:.1f}s" if ms is not None else None]
        return one_line("result: " + ", ".join(p for p in parts if p) + (f": {first}" if first else ""))

    def ending(self, returncode: int | None) -> Ending:
        result = self.result
        if self._unapproved is not None:  # whatever the result says: its tool calls were refused
            return Ending(result=result, api_error=self._unapproved)
        if result is not None and not result.is_error and self._dead_streams and not result.text.strip():
            # An empty success after the API's stream went dead: no work was done; an outage, not a finish.
            return Ending(result=result, api_error=ApiError(
                True, None, "stream_idle_timeout", f"the API's stream went dead {self._dead_streams} time(s) and the "
                                                   f"run ended with an empty result"))
        if result is not None and not result.is_error:
            return Ending(result=result, final_text=result.text)
        if self._refusal is not None:
            said = self._said() or text(self._refusal.get("content")) or "the model refused the request"
            return Ending(result=result, api_error=ApiError(False, None, REFUSAL, said))
        limit = self._limit()
        return Ending(result=result, limit=limit, api_error=None if limit else self._api_error())

    def _said(self) -> str:
        """The agent's words for how it failed: the result's, else its error message's."""
        if self.result is not None and self.result.text.strip():
            return self.result.text.strip()
        return text((self._error or {}).get("text")).strip()

    def _limit(self) -> Limit | None:
        info = self._rejected
        if info is None:
            # No refusal event: the error itself may still name a usage limit (and carry its reset).
            source = self._error if self._error is not None else self._result_record
            if source.get("api_error") != USAGE_LIMIT or source.get("error", "rate_limit") != "rate_limit":
                return None
            params = source.get("api_error_params")
            info = params.get("rate_limit_info") if isinstance(params, dict) else None
            if not isinstance(info, dict) or info.get("status") != "rejected":
                return self._limit_from_words(source)
        kind = text(info.get("rateLimitType"))
        return Limit(resets_at=number(info.get("resetsAt")), kind=kind,
                     message=self._said() or f"usage limit reached ({kind or 'unknown'})")

    def _limit_from_words(self, source: dict[str, Any]) -> Limit:
        """A usage limit with no reset in the records: the CLI's sentence says when."""

        said = self._said()
        found = classify(said, stamp(source.get("timestamp")) or self.wall()) if said else None
        return found if isinstance(found, Limit) else Limit(resets_at=None, kind="", message=said)

    def _api_error(self) -> ApiError | None:
        record = self._error
        if record is not None:
            code, cause = text(record.get("error")) or "unknown", text(record.get("api_error"))
        elif self._result_record.get("is_error") is True:
            record = self._result_record
            code, cause = "", text(record.get("api_error"))
            if integer(record.get("api_error_status")) is None and cause not in NO_ANSWER:
                return None  # failed, but not at the API (max turns, budget, a crash)
        else:
            return None
        status = integer(record.get("api_error_status"))
        if code in FATAL_CODES:
            retryable = False
        elif code in RETRYABLE_CODES or cause in NO_ANSWER:
            retryable = True
        elif status is not None:
            retryable = retryable_status(status)
        elif code in ("unknown", ""):
            retryable = True       # no status at all: the API was not reached
        else:
            return None            # a failure of the model's turn (max_output_tokens ...), not of the API
        name = cause if cause in NO_ANSWER else code or cause or "unknown"
        return ApiError(retryable=retryable, status=status, code=name, message=self._said())



def unapproved(tool: str, said: str) -> str:
    """What a call refused for want of an approval means and its fix, then Claude Code's words."""
    first = next((line.strip() for line in said.splitlines() if line.strip()), "")
    return (f"Claude Code refused a {tool or 'tool'} call that needs approval: an unattended run has nobody to "
            f"approve it. Add --dangerously-skip-permissions to GENESIS_AGENT_CMD (or --permission-mode "
            f"bypassPermissions, or allow the tool in Claude Code's permissions.allow), then restart"
            + (f". Claude Code said: {sanitize(first, ERROR_WIDTH)}" if first else ""))


def tool_line(name: str, tool_input: Any) -> str:
    args = tool_input if isinstance(tool_input, dict) else {}
    shown = None
    if name == "Bash" and isinstance(args.get("command"), str):
        shown = "$ " + " ⏎ ".join(part for part in args["command"].splitlines() if part.strip())
    elif name in FILE_TOOLS and isinstance(args.get(FILE_TOOLS[name]), str):
        shown = args[FILE_TOOLS[name]]
    elif name in PATTERN_TOOLS and isinstance(args.get("pattern"), str):
        shown = args["pattern"]
    if shown is None:
        shown = sanitize(json.dumps(tool_input, ensure_ascii=False, separators=(",", ":")), INPUT_WIDTH)
    return one_line(f"tool {name or '?'}: {shown}")


def keyed_tool_line(name: str, tool_input: Any, keys: dict[str, str]) -> str:
    """A CLI's tool call by the input key that names its subject (a shell tool's command, a
    file tool's path), else as tool_line shows it."""
    key = keys.get(name)
    args = tool_input if isinstance(tool_input, dict) else {}
    if key and isinstance(args.get(key), str):
        value = args[key]
        if key == "command":
            value = "$ " + " ⏎ ".join(part for part in value.splitlines() if part.strip())
        return one_line(f"tool {name}: {value}")
    return tool_line(name, tool_input)


def tool_errors(record: dict[str, Any]) -> list[str]:
    """The output of each failed tool call in a user record (a successful one shows nothing)."""
    message = record.get("message") if isinstance(record.get("message"), dict) else {}
    content = message.get("content")
    lines: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error") is True:
            said = block_text(block.get("content"))
            shown = [line for line in said.splitlines() if line.strip()]
            lines.append(sanitize("  error: " + (shown[0] if shown else "(no output)"), ERROR_WIDTH))
            lines += [sanitize("    " + line, ERROR_WIDTH) for line in shown[1:ERROR_LINES]]
            if len(shown) > ERROR_LINES:
                lines.append(f"    ({len(shown) - ERROR_LINES} more lines)")
    return lines


def block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text(b.get("text")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""








def iso(epoch: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    except (OverflowError, OSError, ValueError):
        return f"epoch {epoch:g}"


def stamp(value: Any) -> float | None:
    """Epoch seconds of a record's ISO timestamp ("2026-11-21T08:22:11.210Z"), or None."""
    if not isinstance(value, str):
        return None
    try:
        at = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at.timestamp() if at.tzinfo is not None else None


def _model_used(usage: Any) -> str:
    """The model a run used, from its result's `modelUsage` (the model the API billed, which
    may not be the one `init` asked for): the one that cost the most when several answered
    (a subagent's smaller model beside the main one)."""
    if not isinstance(usage, dict):
        return ""
    costs = {str(k): number(v.get("costUSD")) or 0.0 for k, v in usage.items()
             if isinstance(k, str) and k.strip() and isinstance(v, dict)}
    return max(costs, key=lambda k: (costs[k], k))[:MODEL_CHARS] if costs else ""


def _tokens(usage: Any) -> dict[str, int | None]:
    """The run's tokens from the result's usage: every prompt token counts as input (fresh,
    cache reads and cache writes alike); None when the record has no usage."""
    if not isinstance(usage, dict):
        return {"input_tokens": None, "output_tokens": None}
    parts = [integer(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    known = [p for p in parts if p is not None]
    return {"input_tokens": sum(known) if known else None, "output_tokens": integer(usage.get("output_tokens"))}
