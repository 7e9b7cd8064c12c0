"""The box's end of its way out (GENESIS_NETWORK=allowlist), run inside the box before the agent.

The box has a network of its own with nothing but its loopback; the proxy (proxy.py) listens
outside, on a unix socket bound into the box. This program listens on the box's 127.0.0.1 at
the proxy port (HTTPS_PROXY and HTTP_PROXY name it) and at each forwarded port (a CLI's base
URL on the host's loopback: the same port in the box reaches it through the proxy, so the URL
works unchanged), then forks a server and execs the agent's command in its own place.

Why it execs: the agent keeps the process the box started (the same pid, the same place in
the tree the watcher judges), gets every signal sent to it directly, and its exit code is the
box's. The server is a grandchild, adopted by the box's init: it ignores the session's stop
signals and dies with the box when the agent ends (and, should it outlive it, goes within a
second of the agent). Standalone on purpose (the standard library alone, run with
`python -I -S`, asyncio imported only by the server): nothing of Genesis is imported into the
box, and the agent is exec'd after little more than the interpreter's start.

Usage: bridge.py SOCKET PROXY_PORT FORWARDED_PORTS(comma separated, or -) -- COMMAND...
"""

from __future__ import annotations

import os
import signal
import socket
import sys

HEAD_MOST = 16 * 1024


def _listen(port: int) -> list[socket.socket]:
    """Listeners on the box's loopback at `port` (IPv4, and IPv6 where the box has it)."""
    found = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((host, port))
            sock.listen(128)
        except OSError:
            sock.close()
            if family == socket.AF_INET:
                raise
            continue
        found.append(sock)
    return found


async def _pump(src, dst) -> None:
    try:
        while True:
            data = await src.read(65536)
            if not data:
                break
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except OSError:
        dst.close()


async def _tunnel(path: str, port: int | None, reader, writer) -> None:
    """One connection to the proxy: as it is (the proxy port), or through a CONNECT to the
    host's loopback at the same port (a forwarded port)."""
    import asyncio
    try:
        up_r, up_w = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    try:
        if port is not None:
            up_w.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            head = await up_r.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
                return
        await asyncio.gather(_pump(reader, up_w), _pump(up_r, writer))
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    finally:
        up_w.close()
        writer.close()


async def _serve(path: str, listeners: list[tuple[socket.socket, int | None]], agent: int) -> None:
    import asyncio
    for sock, port in listeners:
        await asyncio.start_server(lambda r, w, p=port: _tunnel(path, p, r, w), sock=sock, limit=HEAD_MOST)
    while True:  # the box ends with the agent; should it not, the bridge goes when the agent is gone
        await asyncio.sleep(1.0)
        try:
            os.kill(agent, 0)
        except ProcessLookupError:
            return
        except OSError:
            continue


def _server(path: str, listeners: list[tuple[socket.socket, int | None]], agent: int) -> None:
    """The grandchild: no stdio of the agent's held open (its watcher reads the agent's output
    to its end), deaf to the session's signals; asyncio imported here, not before the agent."""
    import asyncio
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = sorted({null, *(s.fileno() for s, _ in listeners)})
    low = 3
    for fd in keep:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 4096)
    asyncio.run(_serve(path, listeners, agent))


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: bridge.py SOCKET PROXY_PORT FORWARDED_PORTS|- -- COMMAND...\n")
        return 2
    path, proxy_port, forwards, command = argv[0], int(argv[1]), argv[2], argv[4:]
    ports = [int(p) for p in forwards.split(",") if p and p != "-"]
    try:
        listeners = [(s, None) for s in _listen(proxy_port)]
        listeners += [(s, p) for p in ports if p != proxy_port for s in _listen(p)]
    except OSError as exc:
        sys.stderr.write(f"genesis: the box's network bridge cannot listen ({exc})\n")
        return 126
    agent = os.getpid()  # the agent's, once this process execs it
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                _server(path, listeners, agent)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    for sock, _ in listeners:
        sock.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"genesis: cannot run {command[0]!r} in the box: {exc.strerror}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
