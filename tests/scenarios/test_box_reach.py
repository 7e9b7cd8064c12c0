"""What of the user's an agent reaches from the default box (bubblewrap), through the real loop
script: a single loop whose Builder probes HOME, the environment, a service socket under /run and
the network (a service on the host's loopback, a host not allowed: refused and recorded),
then fork-bombs (bounded) into its pids cap, and the night goes on; and a fleet's child that
probes the same from its linked worktree while its task still comes home."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.fleet import fleet_env, fleet_project, start_fleet, task_agent
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.state import events_of

from genesis import exitcodes
from genesis.fleet.taskref import task_id
from genesis.sandbox.detect import probe

pytestmark = pytest.mark.skipif(probe().bwrap is None, reason="no bubblewrap here (apt-get install bubblewrap)")

# What the agent finds, written into the project: HOME's entries, secret variables, the socket.
PROBE = r"""
probe() {
  ls -A "$HOME" | tr '\n' ' '; echo
  echo "aws=${AWS_SECRET_ACCESS_KEY:-} gh=${GITHUB_TOKEN:-} sock=${SSH_AUTH_SOCK:-}"
  cat "$HOME/.ssh/id_rsa" 2>/dev/null || echo "no key"
  "$PY" -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("REACHED")
except OSError as e:
    print("refused")' "$SERVICE"
  "$PY" -c 'import socket, sys, urllib.request
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3); print("HOST REACHED")
except OSError:
    print("host refused")
try:
    urllib.request.urlopen("http://not-allowed.example/", timeout=10); print("OUT REACHED")
except Exception as e:
    print("out", getattr(e, "code", e))' "$HOSTPORT"
}
"""
BOMB = r"""
"$PY" - <<'PY'
import os, time
made = refused = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(15)
        os._exit(0)
    made += 1
print(f"made={made} refused={refused}")
PY
"""
SINGLE = "#!/usr/bin/env bash\nset -uo pipefail\n" + PROBE + r"""
if [ "${GENESIS_ITERATION}" = 1 ]; then
  probe >probe.txt
  """ + BOMB + r"""
  echo "iteration 1: probed and bombed"
else
  echo "iteration ${GENESIS_ITERATION}" >>work.txt
fi
"""


def user_home() -> Path:
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    (home / ".aws").mkdir(exist_ok=True)
    (home / "other-project").mkdir(exist_ok=True)
    return home


@pytest.fixture
def service():
    """A service's socket under /run that answers anyone (a command runner, a bus)."""
    folder = Path(tempfile.mkdtemp(prefix="genesis-svc-", dir="/run"))
    path = folder / "svc.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    stop = threading.Event()

    def answer():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    threading.Thread(target=answer, daemon=True).start()
    yield path
    stop.set()
    server.close()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def host_port():
    """A service on the host's loopback (as the dashboard or a database is): never reached."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0)
    yield server.getsockname()[1]
    with pytest.raises(BlockingIOError):
        server.accept()  # no connection ever came
    server.close()


def secrets() -> dict[str, str]:
    return {"AWS_SECRET_ACCESS_KEY": "aws-secret-value", "GITHUB_TOKEN": "ghp_abcdefgh12345678",
            "SSH_AUTH_SOCK": "/run/nothing/agent.sock"}


def found(text: str) -> None:
    """The probe saw none of the user's: no .ssh, .aws or other project, no secret, no socket, no
    service on the host's loopback, no host not allowed."""
    entries, values, key, sock, host, out = text.splitlines()[:6]
    assert not {".ssh", ".aws", "other-project"} & set(entries.split()), text
    assert values == "aws= gh= sock=" and key == "no key" and sock == "refused", text
    assert (host, out) == ("host refused", "out 403"), text


def test_a_single_loops_agent_reaches_nothing_of_the_users_and_its_fork_bomb_ends_its_phase_alone(
        project, tmp_path, service, host_port):
    user_home()
    agent = script(tmp_path / "agent.sh", SINGLE)
    env = loop_env(GENESIS_PHASES="Builder", GENESIS_AGENT_PIDS_MAX="40", PY=os.environ.get("PY", "python3"),
                   SERVICE=str(service), HOSTPORT=str(host_port), **secrets())
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "2", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HOME is private" in done.stderr and "no secret variable" in done.stderr
    found((project / "probe.txt").read_text())
    ended = [e for e in events_of(project) if e["event"] == "phase_end"]
    assert [e["iteration"] for e in ended] == [1, 2]
    assert "met its process cap (GENESIS_AGENT_PIDS_MAX=40)" in (ended[0]["capped"] or ""), ended[0]
    assert "met its process cap" in done.stderr
    assert ended[1]["capped"] is None and (project / "work.txt").read_text() == "iteration 2\n"
    report = subprocess.run([*GENESIS, "--project", str(project), "report"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert "the agent's box: bubblewrap" in report.stdout and "HOME is private" in report.stdout, report.stdout
    assert ended[0]["detail"].startswith("finished; the agent's tree met its process cap"), ended[0]
    refused = [(e["iteration"], e["refused"]) for e in events_of(project) if e["event"] == "network_refused"]
    assert refused == [(1, [["not-allowed.example", 80, 1]])]  # the host's loopback: not even a way to ask
    assert "network: 1 connection refused (not-allowed.example:80)" in report.stdout, report.stdout


FLEET_AGENT = "#!/usr/bin/env bash\nset -uo pipefail\n" + PROBE + r"""
probe >"probe-${GENESIS_TASK_ID}.txt"
printf '%s\n' "${GENESIS_TASK}" >"work-${GENESIS_TASK_ID}.txt"
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""


def test_a_fleets_child_reaches_nothing_of_the_users_and_its_task_comes_home(project, tmp_path, service,
                                                                            host_port):
    user_home()
    fleet_project(project, ["add the parser"])
    agent = task_agent(tmp_path / "agent.sh", FLEET_AGENT)
    proc = start_fleet(project, "1", agent, log=tmp_path / "fleet.log",
                       env=fleet_env(SERVICE=str(service), HOSTPORT=str(host_port), **secrets()))
    assert proc.wait(timeout=240) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    tid = task_id("add the parser")
    found(git(project, "show", f"HEAD:probe-{tid}.txt"))
    assert git(project, "show", f"HEAD:work-{tid}.txt").strip() == "add the parser"
