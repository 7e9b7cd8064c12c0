"""The allow-list (which host and port pass), what it holds by default (the CLI's hosts and
base URL, the registries, the git remotes of a real repository), and the proxy's bounds,
driven over a real unix socket with a real listener behind it."""

from __future__ import annotations

import socket
import subprocess
import threading

import pytest

from genesis.agents import adapter_named
from genesis.sandbox import proxy, refused as refused_mod
from genesis.sandbox.allowlist import Allowlist, AllowlistError, entry_of_url, is_loopback, parse_entries
from genesis.sandbox.nethosts import default_allowlist, remote_hosts


def listed(value: str) -> Allowlist:
    return Allowlist.of(parse_entries(value))


def test_a_host_passes_on_its_ports_and_a_domain_covers_the_names_below_it():
    allow = listed("pypi.org, *.corp.example, 127.0.0.1:5432, api.example.com:8443")
    assert allow.allows("PyPI.org.", 443) and allow.allows("pypi.org", 80)
    assert not allow.allows("pypi.org", 22) and not allow.allows("evilpypi.org", 443)
    assert allow.allows("git.corp.example", 443) and not allow.allows("corp.example", 443)
    assert not allow.allows("corp.example.evil", 443)
    assert allow.allows("127.0.0.1", 5432) and not allow.allows("127.0.0.1", 5433)
    assert allow.allows("api.example.com", 8443) and not allow.allows("api.example.com", 443)
    assert allow.loopback_ports() == (5432,)
    assert listed("localhost:4010").allows("127.0.0.1", 4010) and listed("127.0.0.1:4010").allows("localhost", 4010)


@pytest.mark.parametrize("value", ["localhost", "127.0.0.1", "[::1]", "0.0.0.0"])
def test_the_hosts_loopback_is_never_allowed_without_its_port(value):
    with pytest.raises(AllowlistError, match="name the one port"):
        parse_entries(value)


def test_loopback_names_and_addresses_are_known_as_such():
    assert all(map(is_loopback, ["localhost", "a.localhost", "127.0.0.2", "::1", "::ffff:127.0.0.1", "0.0.0.0"]))
    assert not any(map(is_loopback, ["example.com", "10.0.0.1", "192.168.1.1"]))


def test_a_base_url_names_its_host_and_port():
    assert entry_of_url("http://127.0.0.1:8080/v1", "x").ports == (8080,)
    assert entry_of_url("https://gw.example.com/anthropic", "x").ports == (443,)
    assert entry_of_url("http://localhost/", "x").ports == (80,)
    assert entry_of_url("not a url", "x") is None


def test_the_default_list_holds_the_clis_hosts_its_base_url_the_registries_and_the_remotes(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    for name, url in (("origin", "https://github.com/o/r.git"), ("mirror", "git@gitlab.example.org:o/r.git"),
                      ("local", "/srv/git/r.git"), ("ssh", "ssh://git@code.example.net:2222/r.git")):
        subprocess.run(["git", "-C", str(project), "remote", "add", name, url], check=True)
    assert remote_hosts(project) == ("github.com", "gitlab.example.org", "code.example.net")
    claude = adapter_named("claude")
    allow = default_allowlist("claude", claude.network_hosts({"ANTHROPIC_BASE_URL": "http://127.0.0.1:4010"}),
                              project, parse_entries("db.example.com:5432"))
    for host, port in (("api.anthropic.com", 443), ("127.0.0.1", 4010), ("registry.npmjs.org", 443),
                       ("pypi.org", 443), ("files.pythonhosted.org", 443), ("github.com", 443),
                       ("gitlab.example.org", 443), ("db.example.com", 5432)):
        assert allow.allows(host, port), (host, port)
    assert not allow.allows("example.com", 443) and not allow.allows("127.0.0.1", 8233)
    assert allow.loopback_ports() == (4010,)


def test_codex_passes_its_custom_providers_env_key_and_allows_its_base_url(tmp_path):
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text('model_provider = "gw"\n[model_providers.gw]\nname = "Gateway"\n'
                                      'base_url = "https://gw.example.com/v1"\nenv_key = "GW_API_KEY"\n')
    codex = adapter_named("codex")
    env = {"CODEX_HOME": str(home)}
    assert codex.box_keys(env) == ("CODEX_API_KEY", "OPENAI_API_KEY", "GW_API_KEY")
    assert "https://gw.example.com/v1" in codex.network_hosts(env)
    (home / "config.toml").write_text('model_provider = "gw"\n[model_providers.gw\n')  # unreadable: nothing more
    assert codex.box_keys(env) == ("CODEX_API_KEY", "OPENAI_API_KEY")


def test_refusals_are_counted_per_host_and_port_and_bounded():
    refusals = refused_mod.Refusals(kinds=2)
    for host, port in (("a.example", 443), ("a.example", 443), ("b.example", 80), ("c.example", 443),
                       ("d.example", 443)):
        refusals.add(host, port)
    assert [(r.host, r.port, r.count) for r in refusals.items()] == [
        ("(others)", 0, 2), ("a.example", 443, 2), ("b.example", 80, 1)]


def ask(path: str, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(path)
        try:
            client.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it was all sent (a head too large): its answer is still there to read
        got = b""
        while chunk := client.recv(65536):
            got += chunk
        return got


@pytest.fixture
def upstream():
    """A plain HTTP server on the host's loopback that says which path and headers reached it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    seen: list[bytes] = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                seen.append(head)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], seen
    server.close()


def test_a_plain_request_is_forwarded_in_origin_form_without_the_proxys_headers(upstream):
    port, seen = upstream
    running = proxy.start(listed(f"127.0.0.1:{port}"))
    try:
        got = ask(running.path, f"GET http://127.0.0.1:{port}/a?b=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                f"Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n\r\n".encode())
    finally:
        running.stop()
    assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"ok\n")
    head = seen[0].decode()
    assert head.startswith("GET /a?b=1 HTTP/1.1\r\n") and "Proxy-" not in head and "Connection: close" in head


def test_the_proxy_bounds_a_requests_head_and_the_connections_open_at_once(upstream):
    port, _ = upstream
    running = proxy.start(listed(f"127.0.0.1:{port}"), proxy.Bounds(connections=1, head_bytes=1024))
    try:
        assert ask(running.path, b"GET http://127.0.0.1/ HTTP/1.1\r\nX: " + b"a" * 4096 + b"\r\n\r\n").startswith(
            b"HTTP/1.1 431")
        assert ask(running.path, b"GET / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        with socket.socket(socket.AF_UNIX) as held:  # one tunnel open (its 200 read: it counts)
            held.settimeout(10)
            held.connect(running.path)
            held.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
            assert held.recv(1024).startswith(b"HTTP/1.1 200")
            assert ask(running.path, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()).startswith(
                b"HTTP/1.1 503")
    finally:
        running.stop()
    assert running.refused() == ()
