"""A stub of the OpenAI Responses API, for Codex.

`POST {base}/responses` is answered with the scenario's next step as server-sent events:
`response.created`, the item (`response.output_item.added` / `.done`), `response.completed`
with the usage. A shell step is a `function_call` of Codex's `exec_command` tool; the final
step a `message` with `output_text`. The step is the one after the `function_call_output`
items already in the request's `input`.

Codex is pointed here by a `[model_providers.NAME]` table in `$CODEX_HOME/config.toml`
(`provider_config`); it ignores OPENAI_BASE_URL. Errors for `refuse` are OpenAI's own:
`usage_limit(resets_at)` is a ChatGPT plan's usage limit (429 `usage_limit_reached`, which
Codex turns into "You've hit your usage limit ... try again at 3:13 PM."), QUOTA an API
key's billing quota (429 `insufficient_quota`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from .base import Shell, StubHandler, StubServer, Text, scenario_of, step_for
from .chat import QUOTA, SERVER_ERROR, UNAUTHORIZED, error, rate_limited

__all__ = ["ResponsesStub", "provider_config", "usage_limit", "QUOTA", "SERVER_ERROR", "UNAUTHORIZED", "error",
           "rate_limited", "MODEL", "USAGE", "API_KEY_ENV"]

MODEL = "stub-model"
API_KEY_ENV = "OPENAI_API_KEY"  # one of the codex adapter's key variables: the box passes it
USAGE = {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 200}, "output_tokens": 30,
         "output_tokens_details": {"reasoning_tokens": 10}, "total_tokens": 1230}
# Codex waits this long (at most 30 s) for a command's output before it answers the model
# "still running": longer than a test's stale window, so a hang stays silent.
YIELD_MS = 30_000


def provider_config(url: str, retries: int = 0, model: str = MODEL) -> str:
    """config.toml that points Codex at the stub (`url` without /v1), with `retries` retries
    of a failed request and of a broken stream."""
    return (f'model = "{model}"\nmodel_provider = "stub"\n\n[model_providers.stub]\nname = "Stub"\n'
            f'base_url = "{url}/v1"\nenv_key = "{API_KEY_ENV}"\nwire_api = "responses"\n'
            f"request_max_retries = {retries}\nstream_max_retries = {retries}\n")


def usage_limit(resets_at: float | None, plan: str = "plus") -> tuple[int, dict, dict]:
    """A ChatGPT plan's usage limit, as its backend answers (status, body, headers)."""
    body: dict[str, Any] = {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                            "plan_type": plan}
    headers = {"x-codex-primary-used-percent": "100.0", "x-codex-primary-window-minutes": "300"}
    if resets_at is not None:
        body.update(resets_at=int(resets_at), resets_in_seconds=max(0, int(resets_at - time.time())))
        headers["x-codex-primary-reset-at"] = str(int(resets_at))
    return 429, {"error": body}, headers


def prompt_of(body: dict) -> str:
    """The text of the request's user messages (where the prompt names its scenario)."""
    parts = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                parts.append(content)
            for part in content if isinstance(content, list) else ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
    return "\n".join(parts)


def tool_results(body: dict) -> int:
    return sum(1 for item in body.get("input") or []
               if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"))


def tool_names(body: dict) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]


def shell_item(tools: list[str], command: str, n: int) -> dict | None:
    """A call of the shell tool the request offers (`exec_command`; older Codex: `shell`)."""
    if "exec_command" in tools:
        name, args = "exec_command", {"cmd": command, "yield_time_ms": YIELD_MS}
    elif "shell" in tools:
        name, args = "shell", {"command": ["bash", "-lc", command]}
    else:
        return None
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}", "status": "completed", "name": name,
            "arguments": json.dumps(args), "call_id": f"call_{n}_{uuid.uuid4().hex[:8]}"}


def message_item(text: str) -> dict:
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def event(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}"


class ResponsesStub(StubServer):
    """The Responses API: the scenario's steps, a function call per shell step."""

    def on_get(self, path: str) -> dict:
        if path.rstrip("/").split("?")[0].endswith("/models"):
            return {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "stub"}]}
        return {}

    def answer(self, handler: StubHandler, body: dict) -> None:
        if not handler.path.split("?")[0].rstrip("/").endswith("/responses"):
            handler.json(error(f"no route {handler.path}", "invalid_request_error", "not_found"), 404)
            return
        name, params = scenario_of(prompt_of(body))
        done = tool_results(body)
        step = step_for(name, done, params)
        item = shell_item(tool_names(body), step.command, done) if isinstance(step, Shell) else None
        if item is None:
            item = message_item(step.text if isinstance(step, Text) else
                                f"(the request offers no shell tool for: {step.command})")
        response = {"id": f"resp_{uuid.uuid4().hex[:12]}", "object": "response", "created_at": int(time.time()),
                    "model": body.get("model") or MODEL, "status": "completed"}
        handler.sse([
            event("response.created", {"response": {**response, "status": "in_progress", "output": []}}),
            event("response.output_item.added", {"output_index": 0, "item": item}),
            event("response.output_item.done", {"output_index": 0, "item": item}),
            event("response.completed", {"response": {**response, "output": [item], "usage": USAGE}}),
        ])
