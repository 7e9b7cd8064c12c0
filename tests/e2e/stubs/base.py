"""What every protocol's stub API shares: the scenarios a model plays, and the server.

Stateless, as the real APIs are: the scenario is named in the prompt (`SCENARIO: name`,
with `PARAMS: k=v ...`), and the next step is chosen by counting the tool results already
in the request, so one stub serves any number of concurrent agent processes. Each
protocol module (responses.py, gemini.py, chat.py) parses its requests and writes each
step in its own wire format.

A test can make the API refuse the next requests, the way the provider does: `refuse`
answers them with the status, headers and body given (a quota error in that provider's
own words), every request or only those to one path (the model's turns, not a CLI's side
questions). Every request is recorded with when it came and the status it got. For the
silences (docs/concepts/silences.md) a test can make it `hold` every request (accepted, never
answered) or `drop` every stream (its first event sent, then nothing on a connection held open),
until the stub shuts down.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TURN_DELAY = 0.3  # seconds before each answer: keeps every heartbeat visible for a while


@dataclass(frozen=True)
class Shell:
    """The model asks for one shell command."""
    command: str


@dataclass(frozen=True)
class Text:
    """The model's final answer."""
    text: str


SCENARIOS: dict[str, list[Shell | Text]] = {
    "progress": [
        Shell("echo hello from the agent > hello.txt"),
        Shell("git add -A && git commit -qm 'agent: hello'"),
        Text("Done: wrote hello.txt and committed it."),
    ],
    "hang": [  # silent, in a shell tool; the shell writes its pid so the test can look for it
        Shell("echo $$ > tool-shell.pid; python3 -c 'import time; time.sleep(600)'"),
        Text("unreachable"),
    ],
    "idle": [
        Shell("git status --short"),
        Text("Nothing to do."),
    ],
    "quick": [
        Text("Nothing needed."),
    ],
}

SCENARIO = re.compile(r"SCENARIO: *([a-z_-]+)")
PARAMS = re.compile(r"PARAMS:([^\n\"\\]*)")


def scenario_of(text: str) -> tuple[str, dict[str, str]]:
    """The scenario a prompt names ("quick" when none) and its parameters."""
    found = SCENARIO.search(text)
    params = PARAMS.search(text)
    pairs = dict(p.split("=", 1) for p in (params.group(1).split() if params else ()) if "=" in p)
    return (found.group(1) if found else "quick"), pairs


def step_for(name: str, done: int, params: dict[str, str] | None = None) -> Shell | Text:
    """The step after `done` tool results: the scenario's last step once it has run out."""
    steps = SCENARIOS.get(name, SCENARIOS["quick"])
    step = steps[min(done, len(steps) - 1)]
    params = params or {}
    if isinstance(step, Shell):
        return Shell(step.command.format(**params) if params else step.command)
    return step


@dataclass
class Refusal:
    """The next `count` requests (every one when None) whose path holds `path` are answered
    with this error."""
    status: int
    body: dict | str
    headers: dict[str, str] = field(default_factory=dict)
    count: int | None = None
    path: str = ""

    def take(self, path: str) -> bool:
        if self.path not in path:
            return False
        if self.count is None:
            return True
        if self.count <= 0:
            return False
        self.count -= 1
        return True


class StubHandler(BaseHTTPRequestHandler):
    """Reads a request and hands it to the server's protocol; quiet; records every request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def do_GET(self):
        self.server.record(self, {}, 200)
        self.json(self.server.on_get(self.path))

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self._body()
        refusal = self.server.refusal(self.path)
        if refusal is not None:
            self.server.record(self, body, refusal.status)
            self.json(refusal.body, refusal.status, refusal.headers)
            return
        if self.server.mode == "hold":  # accepted, never answered
            self.server.record(self, body, 0)
            self.server.released.wait()
            self.close_connection = True
            return
        self.server.record(self, body, 200)
        time.sleep(self.server.turn_delay)
        self.server.answer(self, body)

    def json(self, obj, status: int = 200, headers: dict[str, str] | None = None) -> None:
        data = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def sse(self, events: list[str]) -> None:
        """A complete server-sent-events body: each item is one event's text (its `data:`
        lines, and an `event:` line if the protocol uses them)."""
        data = "".join(f"{e}\n\n" for e in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if self.server.mode == "drop":  # a dead stream: its first event, then nothing, the connection open
            self.end_headers()
            if len(events) > 1:  # one event is the whole answer (Gemini's): then nothing at all comes
                self.wfile.write(f"{events[0]}\n\n".encode())
            self.wfile.flush()
            self.server.released.wait()
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class StubServer(ThreadingHTTPServer):
    """A model API on 127.0.0.1; a protocol subclass implements answer() (and on_get())."""

    daemon_threads = True
    handler = StubHandler

    def __init__(self, port: int = 0, turn_delay: float = TURN_DELAY):
        super().__init__(("127.0.0.1", port), self.handler)
        self.turn_delay = turn_delay
        self.requests: list[dict] = []
        self._refusals: list[Refusal] = []
        self._lock = threading.Lock()
        self.mode = ""                      # "hold": no request answered; "drop": every stream dies at once
        self.released = threading.Event()   # set at shutdown: held requests give up

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> "StubServer":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def hold(self) -> None:
        """Every request from now on is accepted and never answered (no status, no header)."""
        self.mode = "hold"

    def drop(self) -> None:
        """Every streamed answer from now on sends its first event, then nothing, the connection open."""
        self.mode = "drop"

    def shutdown(self) -> None:
        self.released.set()
        super().shutdown()
        self.server_close()

    def refuse(self, status: int, body: dict | str, headers: dict[str, str] | None = None,
               count: int | None = None, path: str = "") -> Refusal:
        refusal = Refusal(status, body, dict(headers or {}), count, path)
        with self._lock:
            self._refusals.append(refusal)
        return refusal

    def refusal(self, path: str) -> Refusal | None:
        with self._lock:
            for refusal in self._refusals:
                if refusal.take(path):
                    return refusal
        return None

    def record(self, handler: StubHandler, body: dict, status: int) -> None:
        with self._lock:
            self.requests.append({"path": handler.path, "body": body, "status": status, "at": time.time()})

    def on_get(self, path: str) -> dict:
        return {}

    def answer(self, handler: StubHandler, body: dict) -> None:
        raise NotImplementedError
