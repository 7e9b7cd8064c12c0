"""14. The box's network (GENESIS_NETWORK=allowlist): what it adds to a phase start (the proxy
started, the bridge run before the agent, against the same launch with the host's network and
with no network), and what it adds per request (a plain-HTTP request through the proxy, and one
through a forwarded port as a base URL on the host's loopback is reached, against the same
request made directly outside the box)."""

from __future__ import annotations

import http.server
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import PY, Row, git_project

import genesis
from genesis.agents import adapter_named
from genesis.sandbox import network
from genesis.sandbox.allowlist import Allowlist, parse_entries
from genesis.sandbox.box import choose
from genesis.sandbox.detect import probe
from genesis.sandbox.places import places_for

# Times n GET requests of one URL and prints each in ms: directly (the environment's proxy
# variables aside) or through the proxy port the box's bridge listens on.
REQUEST_TIMER = """
import sys, time, urllib.request
url, runs, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
proxies = {"http": "http://127.0.0.1:3128"} if how == "proxy" else {}
opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
times = []
for _ in range(runs):
    start = time.perf_counter()
    opener.open(url, timeout=10).read()
    times.append((time.perf_counter() - start) * 1000)
print(" ".join(f"{t:.4f}" for t in times))
"""


class Small(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args):
        pass


def _timed(argv: tuple[str, ...], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def run(runs: int = 20, requests: int = 100) -> list[Row]:
    machine = probe()
    if machine.bwrap is None:
        return [Row(f"net: not measured ({machine.bwrap_why})", "ms", (0.0,))]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Small)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            project = git_project(Path(tmp) / "project")
            state = project / ".git" / "genesis"
            (state / "heartbeats").mkdir(parents=True)
            env = dict(os.environ)
            claude = adapter_named("claude")
            places = places_for(project, state, state / "heartbeats", project / "orchestrator" / "logs",
                                project / "orchestrator" / "genesis.conf", Path(genesis.__file__).resolve().parent,
                                (PY,), env, agent_paths=claude.box_paths(env))
            allowed = Allowlist.of(parse_entries(f"127.0.0.1:{server.server_address[1]}"))
            opened = choose("bwrap", machine, places)
            closed = choose("bwrap", machine, places, "none")
            listed = choose("bwrap", machine, places, "allowlist", allowed)
            boxed_env = {**env, **listed.proxy_env()}
            host, none, proxied, alone = [], [], [], []
            for _ in range(runs):  # interleaved, so machine noise hits every case alike
                host.append(_timed(opened.wrap(("true",)), project, env))
                none.append(_timed(closed.wrap(("true",)), project, env))
                start = time.perf_counter()
                with network.serving(listed) as (served, _proxy):
                    subprocess.run(served.wrap(("true",)), cwd=project, env=boxed_env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, check=True)
                proxied.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                with network.serving(listed):
                    pass
                alone.append((time.perf_counter() - start) * 1000)
            timer = (PY, "-c", REQUEST_TIMER, url, str(requests))
            direct = subprocess.run((*timer, "direct"), env=env, capture_output=True, check=True, text=True)
            with network.serving(listed) as (served, _proxy):
                through = subprocess.run(served.wrap((*timer, "proxy")), cwd=project, env=boxed_env,
                                         capture_output=True, check=True, text=True)
                forwarded = subprocess.run(served.wrap((*timer, "direct")), cwd=project, env=boxed_env,
                                           capture_output=True, check=True, text=True)
    finally:
        server.shutdown()
        server.server_close()
    base = "net: box launch of true, the host's network"
    rows = [Row(base, "ms", tuple(host)),
            Row("net: box launch of true, no network", "ms", tuple(none), baseline=base,
                ratio=statistics.median(none) / statistics.median(host)),
            Row("net: box launch of true, allow-list (proxy + bridge)", "ms", tuple(proxied), baseline=base,
                ratio=statistics.median(proxied) / statistics.median(host), note="added to every phase start"),
            Row("net: of which the proxy started and stopped", "ms", tuple(alone))]
    times = {name: tuple(float(t) for t in done.stdout.split()) for name, done in
             (("direct", direct), ("proxy", through), ("forwarded", forwarded))}
    req = "net: a GET on the host's loopback, directly outside the box"
    rows += [Row(req, "ms", times["direct"]),
             Row("net: the same GET from the box through the proxy", "ms", times["proxy"], baseline=req,
                 ratio=statistics.median(times["proxy"]) / statistics.median(times["direct"]),
                 note=f"+{statistics.median(times['proxy']) - statistics.median(times['direct']):.2f} ms a request"),
             Row("net: the same GET from the box on a forwarded port", "ms", times["forwarded"], baseline=req,
                 ratio=statistics.median(times["forwarded"]) / statistics.median(times["direct"]),
                 note=f"+{statistics.median(times['forwarded']) - statistics.median(times['direct']):.2f} ms a "
                      f"request (a base URL on loopback)")]
    return rows


if __name__ == "__main__":
    for row in run(10, 50):
        print(f"{row.name:<60} {row.median:8.2f} {row.unit} {row.note}")
