"""The box's allow-listed network with real bubblewrap, a real proxy and real processes: an
allowed host is reached (through the proxy, and through a forwarded port on the box's own
loopback), every other host and the host's loopback are refused and counted, a dev server
inside works, and the agent keeps its pid, its signals and its exit code."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace

import psutil
import pytest

from genesis.sandbox import network
from genesis.sandbox.allowlist import Allowlist, parse_entries
from genesis.sandbox.box import Box
from tests.sandbox.test_private_home import MACHINE, boxed, user_home

pytestmark = pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")


class Quiet(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        body = b"host service\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def host_service():
    """A service on the host's loopback (as the dashboard or a database is)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def allowlisted(tmp_path, allow: str) -> tuple[Box, dict[str, str], object]:
    box, env, project = boxed(tmp_path, user_home(tmp_path), {})
    box = replace(box, network="allowlist", allowed=Allowlist.of(parse_entries(allow)))
    env.update(box.proxy_env())
    return box, env, project


def run_in(box: Box, env, project, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(box.wrap(("bash", "-c", script)), env=env, cwd=project, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


CODE = "curl -s -o /dev/null -w '%{http_code}' --max-time 10"


def test_an_allowed_host_is_reached_and_every_other_one_is_refused_and_counted(tmp_path, host_service):
    allowed = host_service
    hidden = socket.socket()
    hidden.bind(("127.0.0.1", 0))
    hidden.listen(4)
    hidden.settimeout(0)
    other = hidden.getsockname()[1]
    box, env, project = allowlisted(tmp_path, f"127.0.0.1:{allowed}")
    script = (f"echo direct=$({CODE} http://127.0.0.1:{allowed}/)\n"            # a forwarded port, as a base URL is
              f"echo proxied=$({CODE} --noproxy '' http://127.0.0.1:{allowed}/)\n"
              f"echo tunnelled=$({CODE} --noproxy '' --proxytunnel http://127.0.0.1:{allowed}/)\n"  # CONNECT
              f"echo named=$({CODE} http://example.invalid/)\n"
              f"{CODE} https://blocked.invalid/ >/dev/null; echo tunnel=$?\n"
              f"echo host_direct=$({CODE} http://127.0.0.1:{other}/)\n"
              f"echo host_proxied=$({CODE} --noproxy '' http://127.0.0.1:{other}/)\n"
              "python3 -c \"import urllib.request as u\ntry: u.urlopen('http://pypi.invalid/simple/', timeout=10)\n"
              "except Exception as e: print('urllib', e)\"\n")
    try:
        with network.serving(box) as (served, proxy):
            done = run_in(served, env, project, script)
            refused = {(r.host, r.port): r.count for r in proxy.refused()}
        lines = done.stdout.splitlines()
        assert lines[:7] == ["direct=200", "proxied=200", "tunnelled=200", "named=403", "tunnel=56",
                             "host_direct=000", "host_proxied=403"], done
        assert lines[7] == "urllib HTTP Error 403: Forbidden", done
        assert refused == {("example.invalid", 80): 1, ("blocked.invalid", 443): 1, ("127.0.0.1", other): 1,
                           ("pypi.invalid", 80): 1}
        with pytest.raises(BlockingIOError):
            hidden.accept()  # the host's service never saw a connection
        assert not os.path.exists(proxy.folder)  # the proxy's folder is gone with it
    finally:
        hidden.close()


def test_a_name_the_list_allows_is_refused_when_it_resolves_to_the_hosts_loopback(tmp_path, host_service):
    # DNS pointing an allowed name at 127.0.0.1 reaches no host service: only an entry naming the address does.
    box, env, project = allowlisted(tmp_path, "localhost.example")
    rebound = replace(box, allowed=Allowlist.of(parse_entries(f"localhost.example:{host_service}")))
    from genesis.sandbox import proxy as proxy_mod

    async def to_loopback(host, port):
        return ["127.0.0.1"]
    running = proxy_mod.start(rebound.allowed, resolve=to_loopback)
    try:
        served = replace(rebound, proxy_dir=running.folder)
        done = run_in(served, env, project, f"{CODE} http://localhost.example:{host_service}/")
        assert done.stdout == "403", done
        assert [(r.host, r.port, r.count) for r in running.refused()] == [("localhost.example", host_service, 1)]
    finally:
        running.stop()


def test_a_dev_server_in_the_box_works_on_its_own_loopback(tmp_path):
    box, env, project = allowlisted(tmp_path, "registry.npmjs.org")
    script = ("python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & server=$!\n"
              f"for i in $(seq 50); do {CODE} http://127.0.0.1:8765/ >/dev/null && break; sleep 0.1; done\n"
              f"echo dev=$({CODE} http://localhost:8765/)\nkill $server\n")
    with network.serving(box) as (served, proxy):
        done = run_in(served, env, project, script)
        assert proxy.refused() == ()
    assert done.stdout.strip() == "dev=200", done


def test_the_agent_keeps_its_pid_its_exit_code_and_its_signals_with_the_bridge_before_it(tmp_path):
    box, env, project = allowlisted(tmp_path, "pypi.org")
    bare = run_in(replace(box, network="none"), env, project, "echo $$; exit 7")
    with network.serving(box) as (served, _proxy):
        bridged = run_in(served, env, project, "echo $$; exit 7")
        # A stop signal to every process of the box but bubblewrap's own (the agent and the bridge):
        # the agent's trap runs and its code is the box's; the bridge ignores it and is gone with the box.
        agent = subprocess.Popen(served.wrap(("bash", "-c", "trap 'echo TERM; exit 9' TERM; echo ready; "
                                              "while :; do sleep 0.1; done")), env=env, cwd=project,
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert agent.stdout.readline() == "ready\n"
        tree = [agent.pid] + [c.pid for c in psutil.Process(agent.pid).children(recursive=True)]
        inside = [p for p in tree if psutil.Process(p).name() != "bwrap"]
        assert any("bridge.py" in " ".join(psutil.Process(p).cmdline()) for p in inside)
        for pid in inside:
            os.kill(pid, signal.SIGTERM)
        out, _ = agent.communicate(timeout=30)
    assert (bare.returncode, bare.stdout) == (7, "2\n")
    assert (bridged.returncode, bridged.stdout) == (7, "2\n"), bridged
    assert (agent.returncode, out) == (9, "TERM\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and living(tree):
        time.sleep(0.05)
    assert not living(tree)  # the bridge too


def living(pids: list[int]) -> list[int]:
    """Those still running (a zombie left to this process, the trial box's subreaper, is not)."""
    found = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except psutil.NoSuchProcess:
            continue
    return found


def test_with_no_proxy_running_the_allowlisted_box_has_no_way_out(tmp_path, host_service):
    # A check or a probe that runs the box without its proxy: its own loopback, nothing else.
    box, env, project = allowlisted(tmp_path, f"127.0.0.1:{host_service}")
    done = run_in(box, env, project, f"echo $({CODE} http://127.0.0.1:{host_service}/)")
    assert done.stdout.strip() == "000", done


def test_the_bridge_run_outside_a_box_goes_when_its_agent_is_gone():
    # In the box it dies with the box; should it ever outlive the agent, it does not stay.
    with socket.socket() as probe_port:
        probe_port.bind(("127.0.0.1", 0))
        port = probe_port.getsockname()[1]
    done = subprocess.run([sys.executable, "-I", "-S", network.BRIDGE, "/nonexistent/proxy.sock", str(port), "-",
                           "--", "sh", "-c", "exit 3"], timeout=30)
    assert done.returncode == 3

    def listening() -> bool:
        with socket.socket() as client:
            return client.connect_ex(("127.0.0.1", port)) == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and listening():
        time.sleep(0.1)
    assert not listening()
