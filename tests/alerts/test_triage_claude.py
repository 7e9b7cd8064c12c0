"""The triage command as a model decides: the real Claude Code CLI (`claude -p`) against a
local stub of the Messages API, the ticket JSON on its stdin."""

from __future__ import annotations

import json
import os
import threading
import uuid
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import paths

from genesis.alerts.tickets import Ticket
from genesis.alerts.triage import Verdict, triage

pytestmark = pytest.mark.claude

CLAUDE = paths.TOOLS / "claude" / "node_modules" / ".bin" / "claude"
PROMPT = "Triage this Genesis ticket. Answer dismiss or intervene first, then why, on one line."


class Queen:
    """A Messages API stub that reads the ticket in the prompt: critical intervenes, the rest
    is dismissed. Streams its answer as the real API does (SSE)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        queen = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if "count_tokens" in self.path:
                    return self._send(b'{"input_tokens": 10}', "application/json")
                said = " ".join(b.get("text", "") for m in body.get("messages", []) if m.get("role") == "user"
                                for b in (m["content"] if isinstance(m["content"], list) else [{"text": m["content"]}]))
                queen.prompts.append(said)
                text = ("intervene: a critical ticket, the loop needs a human" if '"severity": "critical"' in said
                        else "dismiss: nothing a human must do now")
                message = {"id": "msg_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant",
                           "model": body.get("model"), "content": [], "stop_reason": None, "stop_sequence": None,
                           "usage": {"input_tokens": 5, "output_tokens": 1}}
                if not body.get("stream"):
                    return self._send(json.dumps({**message, "content": [{"type": "text", "text": text}],
                                                  "stop_reason": "end_turn"}).encode(), "application/json")
                events = [
                    ("message_start", {"type": "message_start", "message": message}),
                    ("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": text}}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                                          "stop_sequence": None},
                                       "usage": {"output_tokens": 9}}),
                    ("message_stop", {"type": "message_stop"}),
                ]
                self._send("".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events).encode(),
                           "text/event-stream")

            def _send(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def queen():
    if not CLAUDE.exists():
        pytest.skip("real Claude Code is not installed (./run-tests.sh installs it)")
    stub = Queen()
    yield stub
    stub.server.shutdown()
    stub.server.server_close()


def ticket(**change) -> Ticket:
    base = Ticket(ticket_id="cd" * 16, created_at="2026-11-21T03:14:00Z", run_id="run-1", iteration=3,
                  phase="Builder", project="/src/myapp", severity="critical", cause="breaker OPEN: the loop makes "
                  "no progress", reasoning="too many iterations changed nothing", suggested_action="fix the tasks",
                  evidence="iteration 7: 5 iteration(s) in a row without a change", steps_since_success=None,
                  stall_minutes=None, kind="iteration_end", final=False)
    return replace(base, **change)


@pytest.mark.whole
@pytest.mark.parametrize("output", ["text", "json"])
def test_claude_p_decides_from_the_ticket_on_its_stdin(queen, output):
    env = {**os.environ, "ANTHROPIC_BASE_URL": queen.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1"}
    argv = (str(CLAUDE), "-p", "--output-format", output, PROMPT)
    assert triage(ticket(), [], argv, 60.0, env) == Verdict("intervene", "a critical ticket, the loop needs a human",
                                                            "command")
    # the command decides, not the rules: a high ticket (the rules would intervene) is dismissed
    high = ticket(severity="high", ticket_id="ef" * 16)
    assert triage(high, [], argv, 60.0, env) == Verdict("dismiss", "nothing a human must do now", "command")
    # claude -p puts its stdin after the prompt: the model saw the ticket
    assert PROMPT in queen.prompts[0] and '"ticket_id": "' + "cd" * 16 in queen.prompts[0]
