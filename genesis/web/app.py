"""The dashboard's Starlette app: the pages, the JSON API they use, and the event stream.

One poller rebuilds the snapshot every POLL seconds while a page listens (in a worker thread:
it reads files and ledgers) and wakes every listener when the document changed; a page that
only asks `/api/state` gets the newest document, built afresh if it is older than POLL. Every
request passes the guard first: its Host must name this server (DNS rebinding), the token when
one is set, GET only but for the actions; every answer carries the security headers.

The actions (genesis/actions/) are the two writes: `POST /api/act` from a page of this server,
with the write key's cookie (SameSite=Strict, HttpOnly), this origin and the page's CSRF token;
and `/act/<link>`, an alert's signed single-use link, which is its own credential.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from contextlib import asynccontextmanager
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence
from urllib.parse import parse_qsl, urlencode

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response, \
    StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from genesis.actions.errors import Failed, NotApplicable, Origin
from genesis.actions.control import fingerprint
from genesis.actions.links import LinkRefused, Link, read as read_link, redeem, used as link_used
from genesis.actions.perform import perform
from genesis.config import ConfigError, default_layout
from genesis.redact import redact
from genesis.web import pages
from genesis.web.discovery import Discovery
from genesis.web.loopview import loop_document
from genesis.web.metrics import metrics
from genesis.store.looplock import current_holder
from genesis.web.discovery import key_of
from genesis.web.security import API_HEADERS, CSRF_HEADER, PAGE_HEADERS, allowed_hosts, bearer, cookie_name, csrf_of, \
    host_ok, key_cookie, same_origin, token_ok
from genesis.web.prometheus import CONTENT_TYPE, exposition
from genesis.web.snapshot import Reader, snapshot

__all__ = ["Settings", "Hub", "create_app", "Guard", "POLL", "KEEPALIVE", "STATIC"]

ACT = "/api/act"      # the dashboard's one write
MAX_ACT = 8192        # bytes of an action's request body
POLL = 0.5            # seconds between two snapshots while a page listens
KEEPALIVE = 15.0      # seconds of silence after which a comment keeps the stream open
METRICS_EVERY = 10.0  # seconds a metrics document is reused
STATIC = Path(__file__).resolve().parent / "static"
KEY = re.compile(r"p-[0-9a-f]{12}(?:--[A-Za-z0-9._-]{1,120})?")
# Keys of the snapshot that change with the clock alone: the page computes them from the epochs,
# so a document that differs only in them is no news.
TICKING = frozenset({"generated_at", "generated_at_epoch", "heartbeat_age_seconds", "running_seconds", "seconds_left",
                     "duration_seconds", "seconds"})


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    projects: Sequence[Path] = ()
    fleets: Sequence[Path] = ()
    scan_machine: bool = True
    clock: Callable[[], float] = time.time
    act_key: str | None = None        # the write key (genesis/actions/control.py): None, the dashboard only reads
    link_key: bytes | None = None     # signs the alerts' action links: None, a link does nothing
    control: Path | None = None       # the control folder: the links used


def _news(value: Any) -> Any:
    """The document without what changes with the clock alone."""
    if isinstance(value, dict):
        return {k: _news(v) for k, v in value.items() if k not in TICKING}
    if isinstance(value, list):
        return [_news(v) for v in value]
    return value


@dataclass
class Hub:
    """The newest snapshot and who waits for the next one."""
    settings: Settings
    discovery: Discovery = field(init=False)
    reader: Reader = field(default_factory=Reader)
    document: dict[str, Any] | None = None
    built: float = 0.0                     # monotonic time of the document
    listeners: int = 0
    version: int = 0
    _news_json: str = ""
    _changed: anyio.Event | None = None
    _lock: anyio.Lock | None = None
    _metrics: tuple[float, dict[str, Any]] | None = None
    closing: threading.Event = field(default_factory=threading.Event)  # set at shutdown: every stream ends

    def __post_init__(self) -> None:
        s = self.settings
        self.discovery = Discovery(projects=s.projects, fleets=s.fleets, scan_machine=s.scan_machine)

    def build(self) -> dict[str, Any]:
        """A new snapshot (blocking: run it in a worker thread). What fails here is said on the
        page, with the last good document, and the next tick tries again: the server goes on."""
        try:
            sources = self.discovery.sources()
            return snapshot(sources, self.settings.clock(), self.reader, problems=self.discovery.problems)
        except Exception as exc:  # noqa: BLE001 - a page that stops updating says why, never dies
            problem = f"the dashboard could not read this machine's loops: {type(exc).__name__}: {exc}"
            last = self.document if self.document is not None else snapshot([], self.settings.clock())
            return {**last, "problems": [redact(problem)]}

    async def refresh(self) -> dict[str, Any]:
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self.document is None or time.monotonic() - self.built >= POLL:
                doc = await anyio.to_thread.run_sync(self.build)
                self.document, self.built = doc, time.monotonic()
                news = json.dumps(_news(doc), sort_keys=True)
                if news != self._news_json:
                    self._news_json = news
                    self.version += 1
                    if self._changed is not None:
                        self._changed.set()
                    self._changed = anyio.Event()
            return self.document

    async def next_change(self, seen: int, timeout: float) -> bool:
        """Wait for a version after `seen`; False when timeout passed first or the server closes.
        (closing is set from a signal handler, where an event loop's Event cannot be set: it is
        looked at every POLL.)"""
        deadline = time.monotonic() + timeout
        while self.version == seen and not self.closing.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if self._changed is None:
                self._changed = anyio.Event()
            with anyio.move_on_after(min(left, POLL)):
                await self._changed.wait()
        return self.version != seen

    async def poll(self) -> None:
        """Keep the snapshot fresh while someone listens; what fails is said once and the next tick
        tries again (a poller that died would freeze every page)."""
        said = False
        while True:
            if self.listeners:
                try:
                    await self.refresh()
                    said = False
                except Exception as exc:  # noqa: BLE001 - the stream goes on with the last document
                    if not said:
                        print(f"genesis serve: the snapshot failed: {redact(f'{type(exc).__name__}: {exc}')}",
                              file=sys.stderr, flush=True)
                        said = True
            await anyio.sleep(POLL)

    def metrics_document(self) -> dict[str, Any]:
        now = time.monotonic()
        if self._metrics is None or now - self._metrics[0] >= METRICS_EVERY:
            self._metrics = (now, metrics(self.discovery.sources(), self.settings.clock()))
        return self._metrics[1]


class Guard:
    """The gate every request passes: Host, token, method; then the security headers on the answer."""

    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.allowed = allowed_hosts(settings.host, settings.port)
        self.token = settings.token
        self.cookie = cookie_name(settings.port)
        self.key = settings.act_key
        self.key_cookie = key_cookie(settings.port)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # a websocket (none is served) is refused before Host or token is looked at
            if scope["type"] == "websocket":
                await receive()
                await send({"type": "websocket.close", "code": 1008})
            return
        refusal = self._refusal(scope)
        answer = refusal if refusal is not None else self.app
        api = scope.get("path", "").startswith("/api/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in (API_HEADERS if api else PAGE_HEADERS).items():
                    headers[name] = value
            await send(message)

        await answer(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> ASGIApp | None:
        headers = Headers(scope=scope)
        if not host_ok(headers.get("host"), self.allowed):
            return PlainTextResponse("this server answers only to its own address (Host refused)\n", status_code=421)
        path, method = scope.get("path", ""), scope.get("method")
        if path.startswith("/act/"):  # an alert's action link: signed, single-use, its own credential
            return None if method in ("GET", "HEAD", "POST") else \
                PlainTextResponse("an action link is opened (GET) or used (POST)\n", status_code=405,
                                  headers={"Allow": "GET, HEAD, POST"})
        if method not in ("GET", "HEAD") and not (method == "POST" and path == ACT):
            return PlainTextResponse(f"the dashboard is read-only but for its actions (POST {ACT})\n", status_code=405,
                                     headers={"Allow": "GET, HEAD"})
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        key = next((v for k, v in query if k == "key"), None)
        if key is not None and self.key is not None:  # the actions link `genesis serve` printed: the key's cookie
            if not token_ok(key, self.key):
                return PlainTextResponse("wrong key\n", status_code=401)
            answer = _without(scope, query, "key")
            answer.set_cookie(self.key_cookie, self.key, httponly=True, samesite="strict", path="/")
            return answer
        if self.token is None:
            return None
        given = next((v for k, v in query if k == "token"), None)
        if given is not None:
            if not token_ok(given, self.token):
                return PlainTextResponse("wrong token\n", status_code=401)
            answer = _without(scope, query, "token")
            answer.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            return answer
        cookie = _cookie(headers.get("cookie"), self.cookie)
        if token_ok(bearer(headers.get("authorization")), self.token) or token_ok(cookie, self.token):
            return None
        return PlainTextResponse("a token is needed: open the URL `genesis serve` printed at start\n",
                                 status_code=401, headers={"WWW-Authenticate": "Bearer"})


def _without(scope: Scope, query: list[tuple[str, str]], name: str) -> RedirectResponse:
    """A redirect to the same page without the query's credential (it stays out of the history)."""
    rest = urlencode([(k, v) for k, v in query if k != name])
    # One leading slash: `//evil.example/` would be another site's address (an open redirect).
    target = "/" + scope.get("path", "/").lstrip("/") + (f"?{rest}" if rest else "")
    return RedirectResponse(target, status_code=303)


def _cookie(header: str | None, name: str) -> str | None:
    for part in (header or "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return None


def _json(doc: Any, status: int = 200) -> Response:
    return JSONResponse(doc, status_code=status)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0.0


async def _acted(run: Callable[[], Any], text: bool = False) -> Response:
    """The action done in a worker thread (git, ledgers): what came of it, or why it did not apply."""
    try:
        done = await anyio.to_thread.run_sync(run)
    except (NotApplicable, Failed) as exc:
        doc, status = {"error": str(exc), "code": exc.code}, 409
    except (ConfigError, OSError, RuntimeError) as exc:
        doc, status = {"error": redact(f"{type(exc).__name__}: {exc}")}, 500
    else:
        doc, status = {"said": done.said, "action": done.action, "task": done.task}, 200
    if text:
        return PlainTextResponse(("done: " + doc["said"] if status == 200 else "refused: " + doc["error"]) + "\n",
                                 status_code=status)
    return _json(doc, status)


def _refused_link(request: Request, why: str) -> Response:
    status = 403 if "not one Genesis signed" in why or "cannot be read" in why else 410
    if request.method == "POST":
        return PlainTextResponse(f"refused: {why}\n", status_code=status)
    return HTMLResponse(pages.act_refused(why), status_code=status)


def _link_action(link: Link, origin: Origin, clock: Callable[[], float]) -> Any:
    """A link's action, only on the loop it was made for: another run there now is not that loop."""
    if not link.task and link.action in ("stop", "stop-now") and link.run_id:
        layout = default_layout(Path(link.project))
        holder = current_holder(layout.loop_lock, layout.loop_record)
        if holder is not None and holder.run_id != link.run_id:
            raise NotApplicable(f"the run this alert was about ({link.run_id}) has ended; another runs now "
                                f"({holder.run_id}): act on it from the dashboard or the terminal")
    return perform(Path(link.project), link.action, origin, task=link.task, clock=clock)


def create_app(settings: Settings, hub: Hub | None = None) -> Starlette:
    """The dashboard app for these settings (wrapped in its Guard: see `guarded`)."""
    hub = hub if hub is not None else Hub(settings)

    async def overview(_request: Request) -> Response:
        return HTMLResponse(pages.overview())

    async def loop_page(request: Request) -> Response:
        key = request.path_params["key"]
        if not KEY.fullmatch(key):
            return PlainTextResponse("no such loop\n", status_code=404)
        return HTMLResponse(pages.loop(key))

    async def metrics_page(request: Request) -> Response:
        # One address for both readers: a browser (it asks for HTML) gets the page, a scraper
        # (Prometheus asks for its text format or anything) gets the exposition.
        if "text/html" in request.headers.get("accept", ""):
            return HTMLResponse(pages.metrics())
        doc = await hub.refresh()

        def expose() -> bytes:
            return exposition(doc, hub.metrics_document(), hub.discovery.sources())

        return Response(await anyio.to_thread.run_sync(expose), media_type=CONTENT_TYPE,
                        headers={"Cache-Control": "no-store"})

    async def api_state(_request: Request) -> Response:
        return _json(await hub.refresh())

    async def api_loop(request: Request) -> Response:
        key = request.path_params["key"]
        if not KEY.fullmatch(key):
            return _json({"error": "no such loop"}, 404)
        doc = await hub.refresh()

        def read() -> dict[str, Any] | None:
            return loop_document(hub.discovery.sources(), key, settings.clock(), hub.reader, doc)

        found = await anyio.to_thread.run_sync(read)
        return _json(found if found is not None else {"error": "no such loop"}, 200 if found is not None else 404)

    async def api_metrics(_request: Request) -> Response:
        return _json(await anyio.to_thread.run_sync(hub.metrics_document))

    async def api_events(_request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            hub.listeners += 1
            try:
                doc = await hub.refresh()
                seen = hub.version
                yield f"retry: 2000\nevent: state\ndata: {json.dumps(doc)}\n\n"
                while not hub.closing.is_set():
                    if await hub.next_change(seen, KEEPALIVE):
                        seen = hub.version
                        yield f"event: state\ndata: {json.dumps(hub.document)}\n\n"
                    elif not hub.closing.is_set():
                        yield ": keepalive\n\n"
            finally:
                hub.listeners -= 1

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    def holds_key(request: Request) -> bool:
        return settings.act_key is not None and token_ok(_cookie(request.headers.get("cookie"),
                                                                 key_cookie(settings.port)), settings.act_key)

    async def api_csrf(request: Request) -> Response:
        """The page's CSRF token, for a browser that holds the write key ("" otherwise: no buttons)."""
        ok = holds_key(request)
        return _json({"csrf": csrf_of(settings.act_key) if ok and settings.act_key else "", "actions": ok})

    def target(key: str) -> tuple[Path, str] | None:
        pkey, _, task = key.partition("--")
        for source in hub.discovery.sources():
            if key_of(source.project) == pkey:
                return source.project, task
        return None

    async def api_act(request: Request) -> Response:
        h = request.headers
        if settings.act_key is None:
            return _json({"error": "actions are off on this dashboard"}, 403)
        if not holds_key(request):
            return _json({"error": "this browser holds no write key: open the actions link `genesis serve` printed, "
                                   "once"}, 403)
        if not same_origin(h.get("origin"), h.get("sec-fetch-site"), h.get("host")):
            return _json({"error": "an action from another site is refused"}, 403)
        if not token_ok(h.get(CSRF_HEADER), csrf_of(settings.act_key)):
            return _json({"error": "the page's CSRF token is missing or wrong: reload the page"}, 403)
        if h.get("content-type", "").split(";")[0].strip() != "application/json":
            return _json({"error": "an action is a JSON body"}, 415)
        raw = await request.body()
        try:
            data = json.loads(raw[:MAX_ACT]) if len(raw) <= MAX_ACT else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("key", "action")):
            return _json({"error": "give key (a loop's or task's) and action"}, 400)
        found = target(data["key"]) if KEY.fullmatch(data["key"]) else None
        if found is None:
            return _json({"error": "no such loop"}, 404)
        project, task = found
        origin = Origin("dashboard", f"dashboard key {fingerprint(settings.act_key)}")

        def run() -> Any:
            return perform(project, data["action"], origin, task=task, note=str(data.get("note") or ""),
                           seconds=_number(data.get("seconds")), phase=str(data.get("phase") or ""),
                           clock=settings.clock)

        return await _acted(run)

    async def act_link(request: Request) -> Response:
        token = request.path_params["token"]
        if settings.link_key is None or settings.control is None:
            return HTMLResponse(pages.act_refused("action links are off on this dashboard"), status_code=404)
        now = settings.clock()
        try:
            link = read_link(settings.link_key, token, now)
            if link_used(settings.control, link):
                raise LinkRefused("this link was used already: it does nothing more")
        except LinkRefused as exc:
            return _refused_link(request, str(exc))
        if request.method != "POST":
            return HTMLResponse(pages.act(link))
        try:
            link = redeem(settings.control, settings.link_key, token, now)
        except LinkRefused as exc:
            return _refused_link(request, str(exc))
        origin = Origin("alert", f"alert link {link.nonce[:8]}")
        return await _acted(lambda: _link_action(link, origin, settings.clock), text=True)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(hub.poll)
            yield
            tg.cancel_scope.cancel()

    app = Starlette(routes=[
        Route("/", overview), Route("/loop/{key}", loop_page), Route("/metrics", metrics_page),
        Route("/api/state", api_state), Route("/api/loop/{key}", api_loop), Route("/api/metrics", api_metrics),
        Route("/api/events", api_events), Route("/api/csrf", api_csrf), Route(ACT, api_act, methods=["POST"]),
        Route("/act/{token}", act_link, methods=["GET", "HEAD", "POST"]),
        Mount("/static", app=StaticFiles(directory=STATIC, follow_symlink=False), name="static"),
    ], lifespan=lifespan)
    app.state.hub = hub
    return app


def guarded(settings: Settings, hub: Hub | None = None) -> Guard:
    """The app behind its guard: what the server runs."""
    return Guard(create_app(settings, hub), settings)
