"""A local HTTP receiver for the notification tests: a threading HTTPServer on 127.0.0.1:0
that records every request (method, path, headers, body, JSON) and answers as told:

  Receiver()                         200 to everything
  Receiver(fail_first=2)             500 to the first two requests, then 200
  Receiver(status=404)               404 to everything
  Receiver(delay=2.0)                sleeps before answering (past a client's timeout)
  Receiver(hold=True)                blocks each answer until release() (or hold_max seconds)
  Receiver(redirect="http://...")    307 to that URL

Use as a context manager; `log` is a shared list the test may append to as well, to
assert the order of what happened on both sides.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int = 0

    @property
    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass
class Receiver:
    fail_first: int = 0
    fail_status: int = 500
    status: int = 200
    delay: float = 0.0
    hold: bool = False
    hold_max: float = 20.0
    redirect: str | None = None
    requests: list[Request] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._gate = threading.Event()
        self.released_in_time: list[bool] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # quiet
                pass

            def _any(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                request = Request(self.command, self.path, {k: v for k, v in self.headers.items()}, body)
                with receiver._arrived:
                    receiver.requests.append(request)
                    receiver.log.append("arrived")
                    number = len(receiver.requests)
                    receiver._arrived.notify_all()
                if receiver.hold:
                    receiver.released_in_time.append(receiver._gate.wait(receiver.hold_max))
                if receiver.delay:
                    time.sleep(receiver.delay)
                if receiver.redirect is not None:
                    status, extra = 307, {"Location": receiver.redirect}
                elif number <= receiver.fail_first:
                    status, extra = receiver.fail_status, {}
                else:
                    status, extra = receiver.status, {}
                request.answered = status
                payload = b'{"ok": true}' if status < 300 else b'{"ok": false}'
                try:
                    self.send_response(status)
                    for key, value in extra.items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (its timeout): nothing to answer
                    pass
                with receiver._lock:
                    receiver.log.append("answered")

            do_POST = do_GET = do_PUT = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def release(self) -> None:
        self._gate.set()

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Request]:
        """The first `count` requests, once they have arrived."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"{len(self.requests)} request(s) arrived, not {count}")
            return list(self.requests[:count])

    def note(self, what: str) -> None:
        with self._lock:
            self.log.append(what)

    def shutdown(self) -> None:
        self._gate.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()
