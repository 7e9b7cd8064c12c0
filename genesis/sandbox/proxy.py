"""The box's way out (GENESIS_NETWORK=allowlist): an HTTP proxy outside the box that lets a
connection through only to a host the allow-list names (allowlist.py) and counts every one it
refuses. It listens on a unix socket the box gets bound in (bubblewrap, `start`), or on a free
TCP port of 127.0.0.1 (Seatbelt, `start_tcp`: its profile lets the box connect to that port
alone; any local process can reach it too, and gets no further than the allow-list).

It speaks the two forms HTTP clients use through a proxy: `CONNECT host:port` (a tunnel,
for HTTPS and anything else) and a plain-HTTP request with an absolute URL (forwarded with
`Connection: close`). A name the list allows but that resolves to the machine's loopback is
refused (no DNS answer reaches the host's services). Bounded: the connections open at once,
the bytes and seconds of a request's head, the seconds to connect, a tunnel's idle time and
the refusals kept. It runs in a thread of the process that watches the agent (asyncio, its
signals blocked so the watcher's own signal wait gets every one), and opens no path but its
own socket, in a fresh folder of its own (mode 0700, outside anything the box shows;
proxyfolder.py). Only a phase whose box has an allow-listed network imports this module (and
asyncio with it): network.serving, when it starts the proxy.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from genesis.sandbox.allowlist import Allowlist, is_loopback
from genesis.sandbox.proxyfolder import FOLDER_PREFIX, SOCKET_NAME, sweep
from genesis.sandbox.refused import Refused, Refusals

__all__ = ["Bounds", "Refusals", "Proxy", "Running", "start", "start_tcp", "Refused", "SOCKET_NAME"]

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te",
              "trailer", "upgrade"}
Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Bounds:
    connections: int = 256         # open at once; one more is answered 503
    head_bytes: int = 16 * 1024    # a request line and its headers
    head_seconds: float = 30.0
    connect_seconds: float = 30.0
    idle_seconds: float = 900.0    # a tunnel with no byte either way this long is closed
    kinds: int = 64                # distinct (host, port) refusals kept; the rest counted as one


async def _resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def _reply(status: str, why: str = "") -> bytes:
    body = (why + "\n").encode() if why else b""
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


def _target(method: str, target: str) -> tuple[str, int, str] | None:
    """(host, port, origin-form path) of a request's target; path "" for CONNECT; None: unreadable."""
    if method == "CONNECT":
        host, sep, port = target.rpartition(":")
        if not sep or not port.isdigit():
            return None
        return host.strip("[]"), int(port), ""
    try:
        parts = urlsplit(target)
        port = parts.port or 80
    except ValueError:
        return None
    if parts.scheme != "http" or not parts.hostname:
        return None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, path


class Proxy:
    """One box's proxy: `handle` serves a connection the box opened on the unix socket."""

    def __init__(self, allow: Allowlist, bounds: Bounds = Bounds(), resolve: Resolver = _resolve):
        self.allow, self.bounds, self.resolve = allow, bounds, resolve
        self.refusals = Refusals(bounds.kinds)
        self.open = 0
        self.served = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.bounds.connections:
            await self._close(writer, _reply("503 Service Unavailable", "too many connections through the box's "
                                                                        "proxy at once"))
            writer.close()
            return
        self.open += 1
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.bounds.head_seconds)
        except (asyncio.LimitOverrunError, ValueError):
            await self._close(writer, _reply("431 Request Header Fields Too Large"))
            return
        lines = head.decode("latin-1").split("\r\n")
        words = lines[0].split(" ")
        aimed = _target(words[0], words[1]) if len(words) == 3 else None
        if aimed is None:
            await self._close(writer, _reply("400 Bad Request", "expected CONNECT host:port or an http:// URL"))
            return
        host, port, path = aimed
        address = await self._address(host, port)
        if isinstance(address, bytes):
            await self._close(writer, address)
            return
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(address, port), self.bounds.connect_seconds)
        except (OSError, asyncio.TimeoutError) as exc:
            await self._close(writer, _reply("502 Bad Gateway", f"cannot connect to {host}:{port}: {exc}"))
            return
        self.served += 1
        try:
            if words[0] == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                kept = [h for h in lines[1:] if h and h.split(":", 1)[0].strip().lower() not in HOP_BY_HOP]
                up_w.write("\r\n".join([f"{words[0]} {path} {words[2]}", *kept, "Connection: close", "", ""])
                           .encode("latin-1"))
            await self._splice(reader, writer, up_r, up_w)
        finally:
            up_w.close()

    async def _address(self, host: str, port: int) -> str | bytes:
        """The address to connect to, or the refusal to send."""
        entry = self.allow.allows(host, port)
        if entry is None:
            return self._refuse(host, port, "not in the box's allow-list")
        try:
            found = await asyncio.wait_for(self.resolve(host, port), self.bounds.connect_seconds)
        except (OSError, asyncio.TimeoutError, UnicodeError) as exc:
            return _reply("502 Bad Gateway", f"cannot resolve {host}: {exc}")
        if not found:
            return _reply("502 Bad Gateway", f"cannot resolve {host}")
        if not is_loopback(entry.host) and any(is_loopback(a) for a in found):
            return self._refuse(host, port, "it resolves to the machine's loopback")
        return found[0]

    def _refuse(self, host: str, port: int, why: str) -> bytes:
        self.refusals.add(host.lower(), port)
        return _reply("403 Forbidden", f"Genesis refused {host}:{port}: {why} (GENESIS_NETWORK_ALLOW adds a host)")

    async def _close(self, writer: asyncio.StreamWriter, said: bytes) -> None:
        writer.write(said)
        try:
            await asyncio.wait_for(writer.drain(), 5)
        except (OSError, asyncio.TimeoutError):
            pass

    async def _splice(self, a_r: asyncio.StreamReader, a_w: asyncio.StreamWriter, b_r: asyncio.StreamReader,
                      b_w: asyncio.StreamWriter) -> None:
        """Bytes both ways until both ends are done, or neither way moved for idle_seconds."""
        last = [time.monotonic()]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while True:
                try:
                    data = await asyncio.wait_for(src.read(65536), min(self.bounds.idle_seconds, 60.0))
                except asyncio.TimeoutError:
                    if time.monotonic() - last[0] >= self.bounds.idle_seconds:
                        raise
                    continue
                if not data:
                    break
                last[0] = time.monotonic()
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()

        pumps = [asyncio.ensure_future(pump(a_r, b_w)), asyncio.ensure_future(pump(b_r, a_w))]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in pumps:
                task.cancel()


class Running:
    """A proxy serving on its socket in a thread of its own; `stop` ends it and removes its folder.
    `path`: its unix socket (bubblewrap); `port`: its TCP port on 127.0.0.1 (Seatbelt), else 0."""

    def __init__(self, proxy: Proxy, folder: str, listener: socket.socket):
        self.proxy, self.folder, self._listener = proxy, folder, listener
        self.path = os.path.join(folder, SOCKET_NAME) if folder else ""
        self.port = listener.getsockname()[1] if listener.family == socket.AF_INET else 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="genesis-box-proxy", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(lambda loop, context: None)  # a box's broken connection is no news
        serve = asyncio.start_server if self.port else asyncio.start_unix_server
        server = self._loop.run_until_complete(serve(self.proxy.handle, sock=self._listener,
                                                     limit=self.proxy.bounds.head_bytes))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    def begin(self) -> "Running":
        # Blocked here, inherited by the thread: a signal for the watcher is never taken by the proxy.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self._thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        self._ready.wait(10)
        return self

    def refused(self) -> tuple[Refused, ...]:
        return self.proxy.refusals.items()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._listener.close()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def start(allow: Allowlist, bounds: Bounds = Bounds(), resolve: Resolver = _resolve, top: str = "/tmp") -> Running:
    """A proxy for one box, listening in a fresh 0700 folder under `top` (/tmp: the box has its
    own /tmp, so nothing in it can reach or replace the folder but through the bind it gets).
    The folders killed watchers left there are swept first."""
    top = top if os.path.isdir(top) else tempfile.gettempdir()
    sweep(top)
    folder = tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=top)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(os.path.join(folder, SOCKET_NAME))
        listener.listen(128)
    except OSError:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Running(Proxy(allow, bounds, resolve), folder, listener).begin()


def start_tcp(allow: Allowlist, bounds: Bounds = Bounds(), resolve: Resolver = _resolve) -> Running:
    """A proxy for one Seatbelt box, on a free port of 127.0.0.1 (the box shares the host's
    network: its profile allows that port out, and the loopback ports the list names, alone)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    return Running(Proxy(allow, bounds, resolve), "", listener).begin()
