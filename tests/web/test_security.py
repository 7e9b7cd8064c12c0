"""The dashboard is safe by default: loopback only unless a token guards it (refused without
one), the token compared in constant time and asked of every request, a foreign Host refused
(DNS rebinding), read-only, the CSP and the other headers on every answer; an agent's or a
task's words come back as data only (never markup), and no secret reaches a page or the API."""

from __future__ import annotations

import calendar
import os
import signal
import socket
import subprocess
import warnings
from pathlib import Path

import httpx
import pytest
import uvicorn
from click.testing import CliRunner
from helpers.dashboard import first_line, alert, child_loop, fleet_running, task
from helpers.loop import GENESIS

from genesis import exitcodes
from genesis.cli import cli
from genesis.web import security, server
from genesis.web.app import Settings, guarded
from genesis.web.discovery import key_of
from genesis.web.security import CSP, allowed_hosts, bearer, host_ok, is_loopback, token_ok

with warnings.catch_warnings():  # the TestClient's note about httpx's next name
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
RUN = "20251121T003000Z-4242"
PORT = 8765
LOCAL = f"http://127.0.0.1:{PORT}"
XSS = "<img src=x onerror=alert(1)>"
SECRET = "sk-ant-api03-" + "Q" * 44
STATIC = Path(__file__).resolve().parents[2] / "genesis" / "web" / "static"


def client(settings: Settings, base: str = LOCAL) -> TestClient:
    return TestClient(guarded(settings), base_url=base, follow_redirects=False)


def test_what_counts_as_loopback_and_which_hosts_a_server_answers_to():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "example.com", "localhost.evil.com"))
    allowed = allowed_hosts("127.0.0.1", 8000)
    assert all(host_ok(h, allowed) for h in ("127.0.0.1:8000", "localhost:8000", "127.0.0.1", "[::1]:8000"))
    assert not any(host_ok(h, allowed) for h in ("evil.com", "evil.com:8000", "127.0.0.1.evil.com:8000", "", None))
    assert not host_ok("localhost:8000", allowed_hosts("192.168.1.5", 8000))
    assert host_ok("anything:8000", allowed_hosts("0.0.0.0", 8000))  # every address: the token guards it
    assert token_ok("abc", "abc") and not any(token_ok(t, "abc") for t in ("abd", "", None, "abcd"))
    assert bearer("Bearer xyz") == "xyz" and bearer("bearer  xyz ") == "xyz" and bearer("Basic xyz") is None
    assert len(security.new_token()) >= 40 and security.new_token() != security.new_token()


@pytest.mark.fault(101)
def test_a_non_loopback_bind_without_a_token_is_refused_exit_2(project):
    for host in ("0.0.0.0", "192.0.2.10", "::"):
        result = CliRunner().invoke(cli, ["serve", "--host", host, "--port", "0"])
        assert result.exit_code == exitcodes.USAGE, result.output
        assert "--token" in result.output and "127.0.0.1" in result.output


@pytest.mark.fault(101)
def test_a_port_that_is_taken_is_exit_33_with_what_to_do():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["serve", "--port", str(port)])
    assert result.exit_code == exitcodes.SERVE_FAILED == 33, result.output
    assert f"127.0.0.1:{port}" in result.output and "--port" in result.output


@pytest.mark.whole
@pytest.mark.fault(101)
def test_serve_with_token_prints_it_once_in_its_address_and_asks_it_of_every_request(project, tmp_path):
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--token", "--project", str(project)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        first = first_line(server)
        assert first.startswith("genesis serve: http://127.0.0.1:") and "/?token=" in first, first
        url, token = first.split(": ", 1)[1].strip().split("?token=")
        assert len(token) >= 40
        with httpx.Client(base_url=url, timeout=20) as http:
            assert http.get("/api/state").status_code == 401
            assert http.get("/api/state", headers={"Authorization": f"Bearer {token}x"}).status_code == 401
            assert http.get("/api/state", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    assert server.returncode == exitcodes.OK, err
    assert token not in out + err, "shown once: on the first line only"


@pytest.mark.fault(101)
def test_with_a_token_every_request_needs_it(project):
    token = security.new_token()
    with client(Settings(host="0.0.0.0", port=PORT, token=token, projects=(project,), scan_machine=False),
                base=f"http://192.0.2.10:{PORT}") as c:
        for path in ("/", "/api/state", "/metrics", "/static/app.js", "/api/events"):
            assert c.get(path).status_code == 401, path
        assert c.get("/api/state", headers={"Authorization": "Bearer " + token[:-1] + "x"}).status_code == 401
        assert c.get("/api/state", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert c.get("/?token=wrong").status_code == 401
        # The token once in the URL: a cookie set (HttpOnly, SameSite=Strict), and the URL without it.
        r = c.get(f"/loop/{key_of(project)}?token={token}&x=1")
        assert r.status_code == 303 and r.headers["location"] == f"/loop/{key_of(project)}?x=1"
        cookie = r.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and token in cookie
        assert c.get("/api/state").status_code == 200  # the client keeps the cookie
        c.cookies.clear()
        assert c.get("/api/state").status_code == 401
        c.cookies.set(security.cookie_name(PORT), "not-it")
        assert c.get("/api/state").status_code == 401


@pytest.mark.fault(101)
def test_a_foreign_host_header_is_refused_and_the_dashboard_is_read_only(project):
    with client(Settings(port=PORT, projects=(project,), scan_machine=False)) as c:
        assert c.get("/api/state").status_code == 200
        assert c.get("/api/state", headers={"Host": f"localhost:{PORT}"}).status_code == 200
        for host in ("evil.example", f"evil.example:{PORT}", f"127.0.0.1.nip.io:{PORT}"):
            r = c.get("/api/state", headers={"Host": host})
            assert r.status_code == 421 and "projects" not in r.text, host
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert c.request(method, "/api/state").status_code == 405


@pytest.mark.fault(102)
def test_the_csp_and_the_other_headers_are_on_every_answer(project):
    with client(Settings(port=PORT, projects=(project,), scan_machine=False)) as c:
        for path in ("/", "/metrics", f"/loop/{key_of(project)}", "/api/state", "/api/metrics",
                     f"/api/loop/{key_of(project)}", "/static/app.js", "/static/app.css", "/nothing", "/loop/bad key"):
            r = c.get(path)
            assert r.headers["content-security-policy"] == CSP, path
            assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"
            if path.startswith("/api/"):
                assert r.headers["cache-control"] == "no-store" and r.headers["content-type"] == "application/json"
    assert "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP and "frame-ancestors 'none'" in CSP


@pytest.mark.fault(102)
def test_agent_words_come_back_as_data_only_and_no_secret_anywhere(project):
    """A task titled like markup, a tool command like markup, a secret in the transcript, an alert
    and the incident's reason: every page and answer is checked."""
    transcript = f"$ cat .env\nANTHROPIC_API_KEY={SECRET}\n\x1b[31mred {XSS}\x1b[0m\nthe key again: {SECRET}\n"
    worktree, child = child_loop(project, "xss-aaaaaa", T0, tool_text=f"Bash: echo '{XSS}'", transcript=transcript)
    mon = fleet_running(project, T0, [task("xss-aaaaaa", "running", T0, text=f"Fix {XSS} now", worktree=str(worktree),
                                           pid=os.getpid())])
    alert(project, "fleet", T0 - 5, f"Builder printed {SECRET}")
    tkey = f"{key_of(project)}--xss-aaaaaa"
    try:
        with client(Settings(port=PORT, projects=(project,), scan_machine=False, clock=lambda: T0)) as c:
            pages = {p: c.get(p).text for p in ("/", "/metrics", f"/loop/{tkey}")}
            answers = {p: c.get(p) for p in ("/api/state", f"/api/loop/{tkey}", "/api/metrics")}
    finally:
        os.close(child)
        os.close(mon)
    for path, html in pages.items():
        assert "<img" not in html and SECRET not in html and "onerror" not in html, path
        assert "<script>" not in html and " style=" not in html, path  # nothing inline: the CSP allows none
    state = answers["/api/state"].json()
    [tile] = [t for p in state["projects"] for t in p["tiles"] if t["key"] == tkey]
    assert tile["title"] == f"Fix {XSS} now" and tile["tool"] == f"Bash: echo '{XSS}'"  # data, for textContent
    loop = answers[f"/api/loop/{tkey}"].json()
    assert loop["title"] == f"Fix {XSS} now"
    assert loop["tail"][-2:] == [f"red {XSS}", "the key again: [redacted]"]  # escape sequences gone too
    assert "<img" not in loop["timeline"] and " style=" not in loop["timeline"]
    for path, r in answers.items():
        assert r.status_code == 200 and SECRET not in r.text and "QQQQQQQQQQQQ" not in r.text, path
        assert r.headers["content-type"] == "application/json", path
    assert any("[redacted]" in a["title"] for a in state["alerts"])


def test_the_page_script_sets_every_text_with_textcontent_never_as_html():
    js = (STATIC / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in js, sink
    assert "textContent" in js and "DOMParser" in js  # the timeline SVG: parsed as XML, never as HTML


@pytest.mark.fault(101)
def test_the_token_link_redirects_only_within_the_dashboard_and_its_cookie_is_this_ports(project):
    """`//evil.example/?token=...` is a path here, but as a Location it is another site's address."""
    token = security.new_token()
    with client(Settings(host="0.0.0.0", port=PORT, token=token, projects=(project,), scan_machine=False),
                base=f"http://192.0.2.10:{PORT}") as c:
        r = c.get(f"http://192.0.2.10:{PORT}//evil.example/?token={token}")
        assert r.status_code == 303 and r.headers["location"] == "/evil.example/", r.headers.get("location")
        assert r.headers["set-cookie"].startswith(f"genesis_token_{PORT}={token};")


@pytest.mark.fault(101)
def test_a_websocket_is_refused_even_with_the_right_host(project):
    with client(Settings(port=PORT, projects=(project,), scan_machine=False)) as c:
        with pytest.raises(WebSocketDisconnect) as refused:
            with c.websocket_connect("/api/events"):
                pass
    assert refused.value.code == 1008


@pytest.mark.fault(101)
def test_a_name_that_is_not_loopback_on_the_socket_needs_the_token(project, monkeypatch):
    """`--host localhost` on a machine whose localhost resolves elsewhere: the bound socket decides."""
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **kw: real("0.0.0.0" if host == "localhost"
                                                                                  else host, port, *a, **kw))
    monkeypatch.setattr(uvicorn.Server, "run", lambda *a, **kw: pytest.fail("served 0.0.0.0 without a token"))
    with pytest.raises(server.Refused, match="0.0.0.0"):
        server.serve(Settings(host="localhost", port=0, projects=(project,), scan_machine=False), echo=lambda _: None)
