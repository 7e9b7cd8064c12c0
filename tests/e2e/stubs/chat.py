"""A stub of the OpenAI Chat Completions API, for the CLIs that speak it (Qwen Code,
opencode, Copilot CLI, aider).

`POST {base}/chat/completions` is answered with the scenario's next step, streamed as
server-sent events when the request asks for `stream` (a delta per step, a finish chunk,
a usage chunk, `data: [DONE]`), else as one JSON completion. The step is the one after
the `role: tool` messages already in the request. A shell step calls the shell tool the
request offers (`run_shell_command` for Qwen, `bash` for opencode and Copilot); a request
that offers no tools (opencode's title request, every aider request) gets `plain()`'s text.
`GET {base}/models` lists the one model.

The quota, rate-limit, outage and login errors are OpenAI's own (status, body, headers),
for `refuse`: `stub.refuse(*QUOTA)`, `stub.refuse(*rate_limited(retry_after=2), count=1)`.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any, Callable

from .base import Shell, StubHandler, StubServer, Text, scenario_of, step_for

__all__ = ["ChatStub", "QUOTA", "SERVER_ERROR", "UNAUTHORIZED", "rate_limited", "error", "whole_edit",
           "tool_results", "tool_names", "prompt_of", "MODEL", "USAGE"]

MODEL = "stub-model"
USAGE = {"prompt_tokens": 1200, "completion_tokens": 30, "total_tokens": 1230}


def error(message: str, kind: str, code: str | None) -> dict:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# (status, body, headers) as OpenAI answers them.
QUOTA = (429, error("You exceeded your current quota, please check your plan and billing details. For more "
                    "information on this error, read the docs: "
                    "https://platform.openai.com/docs/guides/error-codes/api-errors.",
                    "insufficient_quota", "insufficient_quota"), {})
SERVER_ERROR = (500, error("The server had an error while processing your request. Sorry about that!",
                           "server_error", None), {})
UNAUTHORIZED = (401, error("Incorrect API key provided: sk-stub. You can find your API key at "
                           "https://platform.openai.com/account/api-keys.", "invalid_request_error",
                           "invalid_api_key"), {})


def rate_limited(retry_after: float | None = None) -> tuple[int, dict, dict]:
    """A rate limit (requests per minute), with the wait in `retry-after` when given."""
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}",
                                               "x-ratelimit-reset-requests": f"{retry_after:g}s"}
    return (429, error("Rate limit reached for stub-model in organization org-stub on requests per min (RPM): "
                       "Limit 3, Used 3, Requested 1. Please try again in 20s.", "requests",
                       "rate_limit_exceeded"), headers)


def content_text(content: Any) -> str:
    """A message's text: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prompt_of(body: dict) -> str:
    """The text of the request's user messages (where the prompt names its scenario)."""
    return "\n".join(content_text(m.get("content")) for m in body.get("messages") or []
                     if isinstance(m, dict) and m.get("role") == "user")


def tool_results(body: dict) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool")


def tool_names(body: dict) -> list[str]:
    return [t["function"].get("name", "") for t in body.get("tools") or []
            if isinstance(t, dict) and isinstance(t.get("function"), dict)]


def whole_edit(files: dict[str, str], text: str = "") -> str:
    """A reply in aider's "whole" edit format: each file's name on a line, then its whole
    new content in a fenced block; then any words."""
    parts = [f"{name}\n```\n{body if body.endswith(chr(10)) else body + chr(10)}```\n" for name, body in files.items()]
    return "\n".join(parts) + (f"\n{text}\n" if text else "")


def shell_call(names: list[str], command: str) -> tuple[str, dict] | None:
    """The shell tool the request offers and its arguments for `command`, or None."""
    if "run_shell_command" in names:          # Qwen Code
        # Its own time limit on the command must not end a hang before the watchdog does.
        return "run_shell_command", {"command": command, "description": command[:40], "timeout": 600000}
    if "bash" in names:                       # opencode, Copilot CLI
        return "bash", {"command": command, "description": command[:40]}
    shell = next((n for n in names if "shell" in n.lower() or "bash" in n.lower()), None)
    return (shell, {"command": command, "description": command[:40]}) if shell else None


class ChatStub(StubServer):
    """Chat Completions: the scenario's steps, a tool call per shell step.

    `plain(body)` gives the text for a request that offers no tools (default: a short
    title); a test (aider's) may pass its own or use `whole_edit` in it.
    """

    def __init__(self, port: int = 0, turn_delay: float | None = None,
                 plain: Callable[[dict], str] | None = None, model: str = MODEL):
        super().__init__(port, **({} if turn_delay is None else {"turn_delay": turn_delay}))
        self.plain = plain or (lambda body: "Stub session")
        self.model = model

    def handle_error(self, request, client_address) -> None:
        """A client killed mid-request (the loop ends agents) is no error of the stub's: quiet."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)

    def on_get(self, path: str) -> dict:
        if path.rstrip("/").split("?")[0].endswith("/models"):
            return {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0,
                                                "owned_by": "stub"}]}
        return {}

    def step(self, body: dict) -> Shell | Text | str:
        """The next step of the scenario the prompt names (a str: plain text, no tools offered)."""
        if not tool_names(body):
            return self.plain(body)
        name, params = scenario_of(prompt_of(body))
        return step_for(name, tool_results(body), params)

    def answer(self, handler: StubHandler, body: dict) -> None:
        if not handler.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
            handler.json(error(f"no route {handler.path}", "invalid_request_error", "not_found"), 404)
            return
        step = self.step(body)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        if isinstance(step, Shell) and (call := shell_call(tool_names(body), step.command)):
            tool, args = call
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                                      "function": {"name": tool, "arguments": json.dumps(args)}}]
            finish = "tool_calls"
        elif isinstance(step, Shell):
            message["content"] = f"(the request offers no shell tool for: {step.command})"
        else:
            message["content"] = step.text if isinstance(step, Text) else step
        model = body.get("model") or self.model
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "created": int(time.time()), "model": model}
        if not body.get("stream"):
            handler.json({**head, "object": "chat.completion", "usage": USAGE,
                          "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
            return
        chunk = {**head, "object": "chat.completion.chunk"}
        delta: dict[str, Any] = {"role": "assistant"}
        if "tool_calls" in message:
            delta["tool_calls"] = [{"index": 0, **message["tool_calls"][0]}]
        else:
            delta["content"] = message["content"]
        want_usage = (body.get("stream_options") or {}).get("include_usage") is True
        ending: dict[str, Any] = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        if not want_usage:
            ending["usage"] = USAGE   # as many compatible providers do, on the last chunk
        events = [{**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}, ending]
        if want_usage:
            events.append({**chunk, "choices": [], "usage": USAGE})
        handler.sse([f"data: {json.dumps(e)}" for e in events] + ["data: [DONE]"])


if __name__ == "__main__":  # run alone: python -m e2e.stubs.chat [PORT]
    stub = ChatStub(int(sys.argv[1]) if len(sys.argv) > 1 else 0).start()
    print(stub.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        stub.shutdown()
