"""Seatbelt's allow-listed network, the part that runs on any machine: its proxy on a free TCP
port of 127.0.0.1 (sandbox-exec is macOS's; the box's profile is checked in test_box.py and
test_seatbelt.py). A real proxy, a real curl, real listeners on the loopback: the allowed one is
reached through the proxy, another is refused and recorded, and never sees a connection."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading

import pytest

from genesis.sandbox import network
from genesis.sandbox.allowlist import Allowlist, parse_entries
from genesis.sandbox.box import choose
from genesis.sandbox.detect import Machine
from genesis.sandbox.places import Places

MAC = Machine(None, "not Linux", 0, "/usr/bin/sandbox-exec")
CODE = "curl -s -o /dev/null -w %{http_code} --max-time 10 --noproxy ''"   # '' : through the proxy, loopback too


class Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def allowed_service():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def hidden_service():
    """A host service the list does not name (the dashboard, a database): it must never see a connection."""
    hidden = socket.socket()
    hidden.bind(("127.0.0.1", 0))
    hidden.listen(4)
    hidden.setblocking(False)
    yield hidden
    hidden.close()


def curl(env: dict[str, str], args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"{CODE} {args}"], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_seatbelts_proxy_on_a_loopback_port_lets_through_only_the_allowed_and_records_the_rest(
        tmp_path, allowed_service, hidden_service):
    other = hidden_service.getsockname()[1]
    places = Places(str(tmp_path), str(tmp_path), None, None, (), (), str(tmp_path / "beats"))
    box = choose("seatbelt", MAC, places, "allowlist", Allowlist.of(parse_entries(f"localhost:{allowed_service}")))
    with network.serving(box) as (served, running):
        port = running.port
        assert served.proxy_port == port > 0 and running.path == "" and running.folder == ""
        profile = served.wrap(("claude",))[2]
        assert f'(remote ip "localhost:{port}")' in profile and f'(remote ip "localhost:{allowed_service}")' in profile
        env = {"PATH": "/usr/bin:/bin", **served.proxy_env()}
        assert env["HTTPS_PROXY"] == f"http://127.0.0.1:{port}"
        plain = curl(env, f"http://127.0.0.1:{allowed_service}/")
        tunnelled = curl(env, f"--proxytunnel http://localhost:{allowed_service}/")  # CONNECT
        refused = curl(env, f"http://127.0.0.1:{other}/")
        blocked = curl(env, "https://blocked.invalid/")
        counted = {(r.host, r.port): r.count for r in running.refused()}
    assert (plain.stdout, tunnelled.stdout, refused.stdout) == ("200", "200", "403"), (plain, tunnelled, refused)
    assert blocked.returncode == 56, blocked  # the CONNECT answered 403: curl's "failure receiving"
    assert counted == {("127.0.0.1", other): 1, ("blocked.invalid", 443): 1}
    with pytest.raises(BlockingIOError):
        hidden_service.accept()  # the host's other service never saw a connection
    with socket.socket() as after:  # stopped with the run: nothing listens on its port any more
        assert after.connect_ex(("127.0.0.1", port)) != 0


def test_bubblewraps_proxy_stays_on_its_unix_socket(tmp_path):
    from genesis.sandbox import proxy

    running = proxy.start(Allowlist.of(parse_entries("example.com")), top=str(tmp_path))
    try:
        assert running.port == 0 and running.path.endswith("/proxy.sock") and running.folder.startswith(str(tmp_path))
    finally:
        running.stop()
