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
marks every `- [?]` task `- [x]` and commits; the Planner changes nothing, so with the
default GENESIS_DONE_WHEN a night whose tasks are all done ends at that Planner pass.

A test can also make the API refuse, as the real one does, for a window of time (the only
state the stub keeps besides its record of requests): a subscriber's usage limit (`limit`,
`limit_after`: HTTP 429 with the anthropic-ratelimit-unified-* headers), an outage
(`outage`: 529 overloaded_error, or 500 api_error), or every request (`fail`: 401, 400 ...);
and its safety classifier can refuse one task's phase turns to every model but one
(`refuse_task`).
Every request is recorded with when it came (`at`) and the status it was answered with.

Run alone: python stub_api.py [PORT]   (prints the port it listens on)
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "claude-sonnet-4-5"
TURN_DELAY = 0.4  # seconds before each answer: keeps every heartbeat visible for a while


def bash(command: str, timeout_ms: int | None = None, description: str = "", background: bool = False) -> dict:
    tool_input = {"command": command, "description": description or command[:40]}
    if timeout_ms:
        tool_input["timeout"] = timeout_ms
    if background:
        tool_input["run_in_background"] = True
    return {"tool": "Bash", "input": tool_input}


# A command that works for {seconds}, then leaves a file: a build, a test run. Busy as the
# watcher sees it (0.03 s of CPU in each 0.1 s: 0.15 s between checks 0.5 s apart, over seven
# times the 0.02 s a check calls busy) without taking a whole core for every second it works.
WORK = ("python3 -c 'import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n"
        "    spin = time.process_time() + 0.03\n    while time.process_time() < spin: pass\n"
        "    time.sleep(0.07)'")


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
    "build": [  # a long build step: silent, and busy all along
        bash(WORK + " && echo built > build.txt", timeout_ms=600000),
        {"text": "Built."},
    ],
    "server": [
        bash("nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > server.pid"),
        bash("sleep 1; python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/')\""),
        {"text": "Started the dev server on {port} and checked it answers."},
    ],
    "network": [  # what an agent reaches from the box: a host not allowed, the host's loopback, its own loopback
        bash("{ curl -s -o /dev/null -w 'named=%{http_code}\\n' --max-time 10 http://not-allowed.example/; "
             "curl -s -o /dev/null -w 'host=%{http_code}\\n' --max-time 10 http://127.0.0.1:{hostport}/; "
             "curl -s -o /dev/null -w 'via_proxy=%{http_code}\\n' --max-time 10 --noproxy '' "
             "http://127.0.0.1:{hostport}/; "
             "(python3 -m http.server {devport} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > dev.pid); "
             "for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:{devport}/ && break; sleep 0.1; done; "
             "curl -s -o /dev/null -w 'dev=%{http_code}\\n' http://127.0.0.1:{devport}/; kill $(cat dev.pid); "
             "} > network.txt"),
        {"text": "Looked outside."},
    ],
    "idle": [
        bash("git status --short"),
        {"text": "Nothing to do."},
    ],
    "quick": [
        {"text": "Nothing needed."},
    ],
    # Silences on purpose and the new hang classes (docs/concepts/silences.md).
    "background": [  # a background Bash that works for a while; the model says it is done meanwhile
        bash(WORK + " && echo built > bg.txt", background=True, description="Build in the background"),
        {"text": "Started the build in the background."},
    ],
    "background_hang": [  # a background Bash that hangs, idle: nothing will ever end it
        bash("echo $$ > bg-shell.pid; python3 -c 'import time; time.sleep(600)'", background=True,
             description="Serve in the background"),
        {"text": "Started it in the background."},
    ],
    "async_agent": [  # an async sub-agent (the Agent tool, in the background) that works for a while
        {"tool": "Agent", "input": {"description": "Build in a sub-agent", "subagent_type": "general-purpose",
                                    "prompt": "SCENARIO: subwork\nPARAMS: seconds={seconds}",
                                    "run_in_background": True}},
        {"text": "The sub-agent builds; I wait for it."},
    ],
    "subwork": [  # the sub-agent's own turns
        bash(WORK + " && echo sub > sub.txt", timeout_ms=600000, description="Build"),
        {"text": "Sub-agent: built."},
    ],
    "wakeup": [  # the model schedules its own wake-up and ends its turn; woken, it says so
        {"tool": "ScheduleWakeup", "input": {"delaySeconds": 60, "reason": "Wait for the build",
                                              "prompt": "The build should be done: check it."}},
        {"text": "I will be woken to check the build."},
        {"text": "Woken: the build is done."},  # the turn the wake-up starts (the same conversation)
    ],
    "refusal": [  # the API's safety classifier ends the turn: stop_reason "refusal" (not for PARAMS allow=MODEL)
        {"refuse": "I can't help with that."},
    ],
    "drop": [  # the first answer's stream stops after message_start; the connection stays open
        {"drop": True},
        {"text": "Answered after the dropped stream."},
    ],
    "probe": [  # what a curious agent finds of the user's: HOME, secret variables, the ssh-agent
        bash("{ ls -A \"$HOME\"; echo \"aws=${AWS_SECRET_ACCESS_KEY:-} gh=${GH_TOKEN:-}\"; "
             "ssh-add -L >/dev/null 2>&1; echo \"ssh-add=$?\"; cat \"$HOME/.ssh/id_rsa\" 2>&1; } > probe.txt"),
        {"text": "Looked around."},
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


# A fleet's child is told its one task first in its prompt (loop/onetask.py): it works on that one.
ONE_RE = re.compile(r"This run works on ONE task of TASKS\.md[^:\n]*:\n\n {4}(.+)\n")
MARK_ONE_BUILT = ("python3 -c 'import sys; p = \"TASKS.md\"; t = sys.argv[1]; lines = open(p).read().splitlines(True); "
                  "i = next(i for i, l in enumerate(lines) if l.startswith(\"- [ ] \") and l[6:].strip() == t); "
                  "lines[i] = \"- [?] \" + lines[i][6:]; open(p, \"w\").write(\"\".join(lines))' {title}")


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
    tasks = TASK_RE.findall(listing)
    one = ONE_RE.search(context)
    if one:  # the other tasks are other agents'
        tasks = [(mark, title) for mark, title in tasks if " ".join(title.split()) == " ".join(one.group(1).split())]
    steps = PLAYS[phase](tasks, cwd.group(1))
    if one and phase == "Builder" and len(steps) > 1:
        steps[1] = bash(MARK_ONE_BUILT.format(title=shlex.quote(tasks[0][1])), description="Mark the task built: - [?]")
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


ERRORS = {  # the real API's error type and message per status, for outages
    529: ("overloaded_error", "Overloaded"),
    500: ("api_error", "Internal server error"),
}
CLAIMS = {"five_hour": "5h", "seven_day": "7d"}


@dataclass
class Window:
    """A time the API refuses POST /v1/messages. A handle the test keeps: a window set to
    start at a later request gets its `start` and `end` when that request comes."""
    status: int
    error_type: str
    message: str
    claim: str = ""                # a usage limit's representative claim; "" for an outage
    start: float | None = None     # epoch seconds; None until its first request
    end: float | None = None       # the first moment it answers normally again
    after: int = 0                 # for a window not started yet: the request that starts it
    seconds: float = 0.0           # its length from that request
    until: float | None = None     # or its end, fixed in advance

    @property
    def resets_at(self) -> int | None:
        """A limit's reset as the header says it: whole epoch seconds."""
        return None if self.end is None else math.ceil(self.end)

    def covers(self, at: float) -> bool:
        return self.start is not None and self.end is not None and self.start <= at < self.end

    def headers(self) -> dict[str, str]:
        if not self.claim:
            return {}
        short, reset = CLAIMS[self.claim], str(self.resets_at)
        return {"anthropic-ratelimit-unified-status": "rejected",
                "anthropic-ratelimit-unified-reset": reset,
                "anthropic-ratelimit-unified-representative-claim": self.claim,
                f"anthropic-ratelimit-unified-{short}-status": "rejected",
                f"anthropic-ratelimit-unified-{short}-reset": reset}


def is_messages(path: str) -> bool:
    return path.split("?", 1)[0] == "/v1/messages"


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
        record = {"path": self.path, "body": body, "at": time.time(), "status": 200}
        refusal = self.server.admit(record)
        hang = self.server.hangs.get(record.get("number", -1))
        if hang:
            record["hung"] = hang
            if self.server.released.wait(hang):
                return
        if refusal:
            return self._json({"type": "error", "error": {"type": refusal.error_type, "message": refusal.message}},
                              refusal.status, refusal.headers())
        if "count_tokens" in self.path:
            return self._json({"input_tokens": 100})
        messages = body.get("messages", [])
        first_user = next((text_of(m) for m in messages if m.get("role") == "user"), "")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        found = re.search(r"SCENARIO: (\w+)", first_user)
        phase = PHASE_RE.search(first_user)
        if not found and phase:
            time.sleep(self.server.turn_delay)
            if self.server.refuses(first_user, body.get("model", "")):
                return self._reply(body, {"refuse": "I can't help with that."})
            return self._reply(body, play(phase.group(1), body, turn))
        if not found:
            return self._reply(body, {"text": "OK"})
        params = dict(re.findall(r"(\w+)=(\S+)", first_user.split("PARAMS:", 1)[-1])) if "PARAMS:" in first_user else {}
        params.setdefault("cwd", re.search(r"CWD=(\S+)", first_user).group(1) if "CWD=" in first_user else ".")
        script = SCENARIOS[found.group(1)]
        step = script[min(turn, len(script) - 1)]
        if "refuse" in step and body.get("model") == params.get("allow"):  # another model answers it
            step = {"text": "Done by another model."}
        time.sleep(self.server.turn_delay)
        self._reply(body, fill(step, params))

    def _json(self, obj, status=200, headers: dict[str, str] | None = None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status != 200:
            self.send_header("request-id", "req_stub" + uuid.uuid4().hex[:16])
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, body: dict, step: dict) -> None:
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        stop_details = None
        if "tool" in step:
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": step["tool"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(step["input"])}
            final = {**block, "input": step["input"]}
            stop = "tool_use"
        elif "refuse" in step:  # the safety classifier stops the stream: the turn is refused
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": step["refuse"]}
            final = {"type": "text", "text": step["refuse"]}
            stop, stop_details = "refusal", {"type": "refusal", "category": "cyber",
                                             "explanation": "This request was refused by the usage policy."}
        else:
            block = {"type": "text", "text": step.get("text", "")}
            delta = {"type": "text_delta", "text": step.get("text", "")}
            final = {"type": "text", "text": step.get("text", "")}
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
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None,
                                         **({"stop_details": stop_details} if stop_details else {})},
                               "usage": {"output_tokens": 20}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        payload = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if step.get("drop"):
            # A dead stream: the answer starts, then nothing more comes on a connection that stays
            # open (no length, no end) until the stub shuts down.
            self.end_headers()
            self.wfile.write(payload[:payload.index(b"event: content_block_delta")])
            self.wfile.flush()
            self.server.released.wait()
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class StubAPI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, turn_delay: float = TURN_DELAY):
        super().__init__(("127.0.0.1", port), Handler)
        self.requests: list[dict] = []
        self.turn_delay = turn_delay
        self.windows: list[Window] = []
        self.failure: Window | None = None
        self.counted = 0               # POST /v1/messages requests so far
        self.lock = threading.Lock()
        self.hangs: dict[int, float] = {}  # request number -> seconds it hangs before any answer
        self.released = threading.Event()  # set at shutdown: hung requests give up
        self.refusing: tuple[str, str] | None = None  # (words of a task, the one model that answers it)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    # --- refusals, set by the test while claude runs ---

    def limit(self, start: float | None, resets_at: float, claim: str = "five_hour") -> Window:
        """A subscriber's usage limit from `start` (None: from the next request) until resets_at."""
        if start is None:
            return self._add(Window(429, "rate_limit_error", "Rate limited", claim, after=1, until=resets_at))
        return self._add(Window(429, "rate_limit_error", "Rate limited", claim, start, math.ceil(resets_at)))

    def limit_after(self, requests: int, seconds: float, claim: str = "five_hour") -> Window:
        """A usage limit that starts at the requests-th messages request from now and resets
        `seconds` after it (rounded up to a whole second, as the header carries it)."""
        return self._add(Window(429, "rate_limit_error", "Rate limited", claim, after=requests, seconds=seconds))

    def outage(self, seconds: float, start: float | None = None, after: int | None = None,
               status: int = 529) -> Window:
        """The API is down for `seconds`: from `start`, or from the after-th messages request
        from now (neither: the next one)."""
        error_type, message = ERRORS[status]
        if start is not None:
            return self._add(Window(status, error_type, message, start=start, end=start + seconds))
        return self._add(Window(status, error_type, message, after=after or 1, seconds=seconds))

    def fail(self, status: int, error_type: str, message: str) -> Window:
        """Every request from now on fails so."""
        with self.lock:
            self.failure = Window(status, error_type, message, start=time.time(), end=math.inf)
            return self.failure

    def hang_after(self, requests: int, seconds: float) -> None:
        """The requests-th messages request from now hangs `seconds` before it is answered (the
        API accepted the connection and went silent: the agent waits, beating no heartbeat)."""
        with self.lock:
            self.hangs[self.counted + requests] = seconds

    def refuse_task(self, words: str, allow_model: str) -> None:
        """The safety classifier refuses every phase turn whose prompt holds `words` (a task's
        text), asked of any model but `allow_model`, which answers it as usual."""
        self.refusing = (words, allow_model)

    def refuses(self, prompt: str, model: str) -> bool:
        return self.refusing is not None and self.refusing[0] in prompt and model != self.refusing[1]

    def shutdown(self) -> None:
        self.released.set()
        super().shutdown()

    def messages(self) -> list[dict]:
        """The recorded POST /v1/messages requests (not token counts), oldest first."""
        return [r for r in list(self.requests) if is_messages(r["path"])]

    def _add(self, window: Window) -> Window:
        with self.lock:
            if window.after:
                window.after += self.counted
            self.windows.append(window)
        return window

    def admit(self, record: dict) -> Window | None:
        """Records a request; returns the window that refuses it, if any (starting the
        windows this request triggers)."""
        with self.lock:
            self.requests.append(record)
            refused = self.failure
            if is_messages(record["path"]):
                self.counted += 1
                record["number"] = self.counted
                for w in self.windows:
                    if w.start is None and self.counted >= w.after:
                        w.start = record["at"]
                        end = w.until if w.until is not None else w.start + w.seconds
                        w.end = math.ceil(end) if w.claim else end
                refused = refused or next((w for w in self.windows if w.covers(record["at"])), None)
            if refused:
                record["status"] = refused.status
            return refused

    def start(self) -> "StubAPI":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


if __name__ == "__main__":
    api = StubAPI(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(api.url, flush=True)
    api.serve_forever()
