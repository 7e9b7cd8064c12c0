"""`pip install` and `npm install` from the box reach an allowed registry through the proxy, and
one the list does not name is refused and recorded. The registries are local (a simple index
and an npm registry served on the machine's own non-loopback address): no internet needed."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import shutil
import socket
import tarfile
import threading
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from genesis.sandbox import network
from genesis.sandbox.allowlist import Allowlist, parse_entries
from tests.sandbox.test_network import run_in
from tests.sandbox.test_private_home import MACHINE, boxed, user_home

pytestmark = pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")


def own_address() -> str | None:
    """This machine's address on its network (not loopback), or None: no route anywhere."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is chosen
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


ADDRESS = own_address()


def wheel() -> bytes:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as whl:
        whl.writestr("tinypkg/__init__.py", "SAID = 'installed from the allowed index'\n")
        whl.writestr("tinypkg-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n")
        whl.writestr("tinypkg-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                    "Tag: py3-none-any\n")
        whl.writestr("tinypkg-0.1.dist-info/RECORD", "")
    return data.getvalue()


def tarball() -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tgz:
        body = json.dumps({"name": "tinypkg", "version": "1.0.0", "main": "index.js"}).encode()
        for name, content in (("package/package.json", body),
                              ("package/index.js", b"module.exports = 'installed from the allowed registry';\n")):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tgz.addfile(info, io.BytesIO(content))
    return data.getvalue()


def registry() -> http.server.ThreadingHTTPServer:
    """A PyPI simple index and an npm registry of one package each, on the machine's address."""
    whl, tgz = wheel(), tarball()

    class Registry(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            base = f"http://{ADDRESS}:{self.server.server_address[1]}"
            if self.path.rstrip("/") == "/simple/tinypkg":
                body = f'<a href="{base}/files/tinypkg-0.1-py3-none-any.whl">tinypkg-0.1-py3-none-any.whl</a>'.encode()
                kind = "text/html"
            elif self.path == "/files/tinypkg-0.1-py3-none-any.whl":
                body, kind = whl, "application/octet-stream"
            elif self.path == "/tinypkg":
                dist = {"tarball": f"{base}/tinypkg/-/tinypkg-1.0.0.tgz", "shasum": hashlib.sha1(tgz).hexdigest()}
                version = {"name": "tinypkg", "version": "1.0.0", "dist": dist}
                body = json.dumps({"name": "tinypkg", "dist-tags": {"latest": "1.0.0"},
                                   "versions": {"1.0.0": version}}).encode()
                kind = "application/json"
            elif self.path == "/tinypkg/-/tinypkg-1.0.0.tgz":
                body, kind = tgz, "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def registries():
    """Two registries: the first allowed, the second not."""
    made = [registry(), registry()]
    yield [server.server_address[1] for server in made]
    for server in made:
        server.shutdown()
        server.server_close()


@pytest.mark.whole
@pytest.mark.skipif(ADDRESS is None, reason="no network address on this machine for a local registry")
@pytest.mark.skipif(shutil.which("npm") is None, reason="no npm here")
def test_pip_and_npm_install_from_an_allowed_registry_and_not_from_another(tmp_path, registries):
    allowed, other = registries
    box, env, project = boxed(tmp_path, user_home(tmp_path), {})
    box = replace(box, network="allowlist", allowed=Allowlist.of(parse_entries(f"{ADDRESS}:{allowed}")))
    env.update(box.proxy_env())
    env["npm_config_cache"] = str(Path(project) / ".npm-cache")
    pip = ("python3 -m pip install -q --isolated --no-cache-dir --disable-pip-version-check --target {where} "
           "--trusted-host {address} "
           "--index-url http://{address}:{port}/simple/ tinypkg")
    npm = "npm install --no-audit --no-fund --prefer-online --registry http://{address}:{port}/ tinypkg"
    script = (f"{pip.format(where='py-ok', address=ADDRESS, port=allowed)} && echo pip-ok=$?\n"
              f"{pip.format(where='py-no', address=ADDRESS, port=other)} >/dev/null 2>&1; echo pip-no=$?\n"
              f"mkdir -p js-ok js-no\n"
              f"(cd js-ok && {npm.format(address=ADDRESS, port=allowed)} >/dev/null 2>&1; echo npm-ok=$?)\n"
              f"(cd js-no && {npm.format(address=ADDRESS, port=other)} --fetch-retries=0 >/dev/null 2>&1; "
              f"echo npm-no=$?)\n")
    with network.serving(box) as (served, proxy):
        done = run_in(served, env, project, script)
        refused = {(r.host, r.port) for r in proxy.refused()}
    said = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    assert said.get("pip-ok") == "0" and said.get("npm-ok") == "0", done
    assert said.get("pip-no") != "0" and said.get("npm-no") != "0", done
    assert (Path(project) / "py-ok" / "tinypkg" / "__init__.py").is_file()
    assert (Path(project) / "js-ok" / "node_modules" / "tinypkg" / "index.js").is_file()
    assert not (Path(project) / "js-no" / "node_modules" / "tinypkg").exists()
    assert refused == {(ADDRESS, other)}
