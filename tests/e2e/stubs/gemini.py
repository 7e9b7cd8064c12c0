"""A stub of the Gemini API, for Gemini CLI.

`POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse` is answered with the
scenario's next step as one server-sent event: a `functionCall` of the CLI's shell tool
(`run_shell_command`) or the final text, with `usageMetadata`. The step is the one after
the `functionResponse` parts already in the request. A plain `:generateContent` is one of
the CLI's own side questions (which model to route a turn to, when no model is named): it
asks for JSON, and gets `{}`, which it reads as no answer and goes on with its default.

The errors are the Gemini API's own (status, body), for `refuse`: `stub.refuse(*QUOTA_DAILY)`,
`stub.refuse(*quota(retry_delay="3600s"))`, `stub.refuse(*UNAVAILABLE, count=1)`.
"""

from __future__ import annotations

import json
from typing import Any

from .base import Shell, StubHandler, StubServer, Text, scenario_of, step_for

__all__ = ["GeminiStub", "MODEL", "USAGE", "QUOTA_DAILY", "UNAVAILABLE", "KEY_INVALID", "quota", "error",
           "function_responses", "prompt_of"]

MODEL = "gemini-2.5-flash"
USAGE = {"promptTokenCount": 1200, "candidatesTokenCount": 30, "totalTokenCount": 1230}
QUOTA_METRIC = "generativelanguage.googleapis.com/generate_content_free_tier_requests"


def error(code: int, status: str, message: str, details: list[dict] | None = None) -> dict:
    """The Gemini API's error body (google.rpc.Status)."""
    body: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        body["details"] = details
    return {"error": body}


def quota(quota_id: str = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", retry_delay: str | None = None,
          limit: int = 10) -> tuple[int, dict]:
    """A quota refusal as the API words it: a QuotaFailure naming the quota, and a RetryInfo
    with the wait when given."""
    details: list[dict] = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
        {"quotaMetric": QUOTA_METRIC, "quotaId": quota_id,
         "quotaDimensions": {"location": "global", "model": MODEL}, "quotaValue": str(limit)}]}]
    if retry_delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay})
    message = (f"You exceeded your current quota, please check your plan and billing details. "
               f"* Quota exceeded for metric: {QUOTA_METRIC}, limit: {limit}, model: {MODEL}")
    return 429, error(429, "RESOURCE_EXHAUSTED", message, details)


QUOTA_DAILY = quota("GenerateRequestsPerDayPerProjectPerModel-FreeTier", retry_delay="43200s", limit=250)
UNAVAILABLE = (503, error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."))
KEY_INVALID = (400, error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", [
    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com",
     "metadata": {"service": "generativelanguage.googleapis.com"}}]))


def parts_of(body: dict) -> list[dict]:
    return [p for c in body.get("contents") or [] if isinstance(c, dict)
            for p in c.get("parts") or [] if isinstance(p, dict)]


def prompt_of(body: dict) -> str:
    """The text of the request's user turns (where the prompt names its scenario)."""
    return "\n".join(p["text"] for c in body.get("contents") or [] if isinstance(c, dict) and c.get("role") == "user"
                     for p in c.get("parts") or [] if isinstance(p, dict) and isinstance(p.get("text"), str))


def function_responses(body: dict) -> int:
    return sum(1 for p in parts_of(body) if "functionResponse" in p)


def response(step: Shell | Text) -> dict:
    if isinstance(step, Shell):
        part = {"functionCall": {"name": "run_shell_command",
                                 "args": {"command": step.command, "description": "a step of the scenario"}}}
    else:
        part = {"text": step.text}
    return {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": USAGE, "modelVersion": MODEL}


class GeminiStub(StubServer):
    """The Gemini API's generateContent, streamed or not; every answer is the scenario's next step."""

    def step(self, body: dict) -> Shell | Text:
        name, params = scenario_of(prompt_of(body))
        return step_for(name, function_responses(body), params)

    def answer(self, handler: StubHandler, body: dict) -> None:
        if ":streamGenerateContent" in handler.path:
            handler.sse([f"data: {json.dumps(response(self.step(body)))}"])
        else:
            handler.json(response(Text("{}")))

    def generations(self) -> list[dict]:
        """The recorded turns of the agent (each with its status), oldest first."""
        return [r for r in self.requests if ":streamGenerateContent" in r["path"]]
