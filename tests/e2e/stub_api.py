"""A stub of the Anthropic Messages API that plays scripted model turns to Claude Code.

Stateless, as the real API is: the scenario is named in the prompt (`SCENARIO: name`), and
the next turn is chosen by counting the assistant messages already in the request, so
one stub serves any number of concurrent `claude` processes. Streaming responses follow
the Messages SSE protocol (message_start, content_block_start/delta/stop, message_delta,
message_stop); any other request (a side query, a count) gets a short text answer.

Genesis's own phase prompts ("You are the Builder", "... Criticizer", "... Planner") are
played like a competent model over a TASKS.md checklist (`- [ ]` open, `- [?]` built and
awaiting review, `- [x]` verified): the first turn is `cat TASKS.md`, and every later turn
follows from that call's output, which Claude Code sends back in each request, so the
plan stays stateless and deterministic. The Builder implements the first open task (a
file named after it), marks it `- [?]` and commits; the Criticizer reads each built file,
marks every `- [?]` task `- [x]` and commits; the Planner changes nothing, so a night
whose tasks are all done ends by the breaker.

Run alone: python stub_api.py [PORT]   (prints the port it listens on)
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "claude-sonnet-4-5"
TURN_DELAY = 0.4  # seconds before each answer: keeps every heartbeat visible for a while


def bash(command: str, timeout_ms: int | None = None, description: str = "") -> dict:
    tool_input = {"command": command, "description": description or command[:40]}
    if timeout_ms:
        tool_input["timeout"] = timeout_ms
    return {"tool": "Bash", "input": tool_input}


SCENARIOS: dict[str, list[dict]] = {
    "progress": [
        bash("echo hello from claude > hello.txt"),
        {"tool": "Write", "input": {"file_path": "{cwd}/notes.md", "content": "# Notes\n\nWritten by the agent.\n"}},
        bash("ls does-not-exist"),  # fails: PostToolUseFailure
        bash("git add -A && git commit -qm 'agent: hello and notes'"),
        {"text": "Done: wrote hello.txt and notes.md and committed them."},
    ],
    "hang": [
        bash("echo $$ > tool-shell.pid; python3 -c 'import time; time.sleep(600)'", timeout_ms=600000),
        {"text": "unreachable"},
    ],
    "server": [
        bash("nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > server.pid"),
        bash("sleep 1; python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/')\""),
        {"text": "Started the dev server on {port} and checked it answers."},
    ],
    "idle": [
        bash("git status --short"),
        {"text": "Nothing to do."},
    ],
    "quick": [
        {"text": "Nothing needed."},
    ],
}


PHASE_RE = re.compile(r"You are the (Builder|Criticizer|Planner)\b")
TASK_RE = re.compile(r"^- \[([ ?x])\] (.+?)\s*$", re.M)
CWD_RE = re.compile(r"Primary working directory: (\S+)")
# Checkbox edits as real commands, portable (no `sed -i`): the first open task, or every one awaiting review.
MARK_BUILT = ("python3 -c 'import pathlib, re; p = pathlib.Path(\"TASKS.md\"); "
              "p.write_text(re.sub(r\"^- \\[ \\]\", \"- [?]\", p.read_text(), count=1, flags=re.M))'")
MARK_VERIFIED = ("python3 -c 'import pathlib, re; p = pathlib.Path(\"TASKS.md\"); "
                 "p.write_text(re.sub(r\"^- \\[\\?\\]\", \"- [x]\", p.read_text(), flags=re.M))'")


def slug(title: str) -> str:
    """The file a task is implemented in: `Add a /health endpoint` -> `add-a-health-endpoint.txt`."""
    return (re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-") or "task") + ".txt"


def builder(tasks: list[tuple[str, str]], cwd: str) -> list[dict]:
    todo = [title for mark, title in tasks if mark == " "]
    if not todo:
        return [{"text": "No open task in TASKS.md: nothing to build, nothing changed."}]
    title = todo[0]
    return [
        {"tool": "Write", "input": {"file_path": f"{cwd}/{slug(title)}", "content": f"{title}\n\nBuilt.\n"}},
        bash(MARK_BUILT, description="Mark the task built: - [?]"),
        bash(f"git add -A && git commit -qm {shlex.quote('build: ' + title)}"),
        {"text": f"Built '{title}' in {slug(title)}, marked it [?] and committed."},
    ]


def criticizer(tasks: list[tuple[str, str]], cwd: str) -> list[dict]:
    review = [title for mark, title in tasks if mark == "?"]
    if not review:
        return [{"text": "Nothing awaits review."}]
    reads = [{"tool": "Read", "input": {"file_path": f"{cwd}/{slug(title)}"}} for title in review]
    return reads + [
        bash(MARK_VERIFIED, description="Mark the reviewed tasks verified: - [x]"),
        bash(f"git add TASKS.md && git commit -qm {shlex.quote('verified: ' + '; '.join(review))}"),
        {"text": f"Verified and marked [x]: {'; '.join(review)}."},
    ]


def planner(tasks: list[tuple[str, str]], cwd: str) -> list[dict]:
    todo = sum(1 for mark, _ in tasks if mark == " ")
    if todo:
        return [{"text": f"{todo} task(s) still open: the plan stands, nothing changed."}]
    if not tasks:
        return [{"text": "TASKS.md lists no task and I have nothing to add; nothing changed."}]
    return [{"text": "Every task is verified and nothing is left to plan; nothing changed."}]


PLAYS = {"Builder": builder, "Criticizer": criticizer, "Planner": planner}


def blocks_text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def play(phase: str, body: dict, turn: int) -> dict:
    """The next turn of a phase prompt: `cat TASKS.md` first, then a plan made from its output."""
    if turn == 0:
        return bash("cat TASKS.md")
    messages = body.get("messages", [])
    results = [b for m in messages if m.get("role") == "user" and isinstance(m.get("content"), list)
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    listing = "" if not results or results[0].get("is_error") else blocks_text(results[0].get("content"))
    context = blocks_text(body.get("system")) + "\n" + "\n".join(text_of(m) for m in messages)
    cwd = CWD_RE.search(context)
    if not cwd:
        return {"text": "stub: no working directory in the request, cannot play the phase."}
    steps = PLAYS[phase](TASK_RE.findall(listing), cwd.group(1))
    return steps[min(turn - 1, len(steps) - 1)]


def fill(value, params: dict):
    if isinstance(value, str):
        for key, val in params.items():
            value = value.replace("{" + key + "}", str(val))
        return value
    if isinstance(value, dict):
        return {k: fill(v, params) for k, v in value.items()}
    return value


def text_of(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stub-anthropic/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        self._json({"ok": True})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.server.requests.append({"path": self.path, "body": body})
        if "count_tokens" in self.path:
            return self._json({"input_tokens": 100})
        messages = body.get("messages", [])
        first_user = next((text_of(m) for m in messages if m.get("role") == "user"), "")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        found = re.search(r"SCENARIO: (\w+)", first_user)
        phase = PHASE_RE.search(first_user)
        if not found and phase:
            time.sleep(self.server.turn_delay)
            return self._reply(body, play(phase.group(1), body, turn))
        if not found:
            return self._reply(body, {"text": "OK"})
        params = dict(re.findall(r"(\w+)=(\S+)", first_user.split("PARAMS:", 1)[-1])) if "PARAMS:" in first_user else {}
        params.setdefault("cwd", re.search(r"CWD=(\S+)", first_user).group(1) if "CWD=" in first_user else ".")
        script = SCENARIOS[found.group(1)]
        step = script[min(turn, len(script) - 1)]
        time.sleep(self.server.turn_delay)
        self._reply(body, fill(step, params))

    def _json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, body: dict, step: dict) -> None:
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        if "tool" in step:
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": step["tool"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(step["input"])}
            final = {**block, "input": step["input"]}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": step["text"]}
            final = {"type": "text", "text": step["text"]}
            stop = "end_turn"
        usage = {"input_tokens": 50, "output_tokens": 20, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        if not body.get("stream"):
            return self._json({"id": msg_id, "type": "message", "role": "assistant", "model": body.get("model", MODEL),
                               "content": [final], "stop_reason": stop, "stop_sequence": None, "usage": usage})
        events = [
            ("message_start", {"type": "message_start", "message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": body.get("model", MODEL),
                "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 20}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        payload = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class StubAPI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, turn_delay: float = TURN_DELAY):
        super().__init__(("127.0.0.1", port), Handler)
        self.requests: list[dict] = []
        self.turn_delay = turn_delay

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> "StubAPI":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


if __name__ == "__main__":
    api = StubAPI(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(api.url, flush=True)
    api.serve_forever()
