"""`genesis serve`: bind, say where, serve until Ctrl-C or SIGTERM.

It binds 127.0.0.1 unless told otherwise, and another address only with a token: the pages
show agents' words and the machine's paths. The socket is bound here, before uvicorn runs, so
that `--port 0` can say which port it got on the first line and a port that is taken is a
clear error (exit 33) rather than a log line.
"""

from __future__ import annotations

import signal
import socket
import sys
from dataclasses import replace
from types import FrameType
from typing import Callable

import uvicorn

from genesis import exitcodes
from genesis.actions.control import KEY_FILE, control_dir, dashboard_key, signing_key
from genesis.web.app import Hub, Settings, guarded
from genesis.web.security import is_loopback, new_token

__all__ = ["serve", "Refused", "NotServed", "bind", "url_of", "FIRST_LINE", "GRACE"]

FIRST_LINE = "genesis serve: "
GRACE = 2.0     # seconds open event streams get to end at shutdown


class Refused(ValueError):
    """The settings ask for what is not safe (another address without a token)."""


class NotServed(OSError):
    """The address cannot be listened on (taken, not this machine's, no permission)."""

    code = exitcodes.SERVE_FAILED


def check(settings: Settings, token: bool) -> None:
    if not is_loopback(settings.host) and not token:
        raise Refused(f"--host {settings.host} would show every loop's state to other machines: add --token "
                      f"(a token is generated and printed once; every request needs it), or leave --host out "
                      f"to bind 127.0.0.1")


def bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _name, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise NotServed(f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                        + ("; another program uses that port: pick another with --port (0: any free one)"
                           if getattr(exc, "errno", None) == 98 or "in use" in str(exc) else "")) from None
    sock.set_inheritable(True)
    return sock


def url_of(host: str, port: int, token: str | None = None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


class _Server(uvicorn.Server):
    """uvicorn's server that also tells the open event streams to end: uvicorn waits for open
    connections before it stops, and a stream never ends by itself."""

    def __init__(self, config: uvicorn.Config, hub: Hub):
        super().__init__(config)
        self.hub = hub

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.hub.closing.set()
        super().handle_exit(sig, frame)


def serve(settings: Settings, token: bool = False, echo: Callable[[str], None] | None = None) -> int:
    """Serve the dashboard until a signal ends it; 0 then. Refused, NotServed otherwise."""
    echo = echo if echo is not None else (lambda line: print(line, flush=True))
    check(settings, token)
    sock = bind(settings.host, settings.port)
    bound, port = sock.getsockname()[:2]
    if not token and not is_loopback(bound):  # a name like localhost said loopback: the socket says where
        sock.close()
        raise Refused(f"--host {settings.host} is {bound}, not this machine only: add --token, or leave --host "
                      f"out to bind 127.0.0.1")
    settings = replace(settings, port=port, token=new_token() if token else None)
    if settings.act_key is None:  # the write key and the links' key: made once, outside every box (actions/control.py)
        folder = control_dir()
        settings = replace(settings, act_key=dashboard_key(folder), link_key=signing_key(folder), control=folder)
    hub = Hub(settings)
    config = uvicorn.Config(guarded(settings, hub), log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=GRACE)
    server = _Server(config, hub)

    def stop(_sig: int, _frame: object) -> None:
        hub.closing.set()
        server.should_exit = True  # before uvicorn runs, or after it ran and raised the signal again

    # uvicorn shuts down on SIGINT/SIGTERM, then raises the signal again for the handler it found:
    # this one, so a stop asked for is an exit 0, not a death by signal.
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    echo(f"{FIRST_LINE}{url_of(settings.host, port, settings.token)}")
    if settings.token:
        echo("  the token is shown only this once and is not stored; every request needs it (the link sets it)")
    if not is_loopback(settings.host):
        echo(f"  listening on {settings.host}: other machines can reach this page (with the token)")
    act_url = url_of(settings.host, port) + f"?key={settings.act_key}"
    if settings.control is not None:
        after = " after the address above" if settings.token else ""
        echo(f"  to act (stop, retry, approve...) from a browser, open once{after}: {act_url} (the key: "
             f"{settings.control / KEY_FILE}); without it the page only reads")
    echo("  Ctrl-C stops it")
    try:
        server.run(sockets=[sock])
    except SystemExit:
        pass  # uvicorn's word for a failed startup (it said why on stderr): exit 33 below
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    sys.stdout.flush()
    if not server.started:  # uvicorn said why on stderr (the app's startup failed)
        return exitcodes.SERVE_FAILED
    return exitcodes.OK
