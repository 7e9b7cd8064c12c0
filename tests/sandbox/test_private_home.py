"""The box as a hostile agent probes it, with real bubblewrap and real processes: the user's
HOME is out of reach but what the agent was given, no secret variable enters, an ssh-agent
and a service's socket under /run are refused, and GENESIS_BOX_ALLOW gives a path back."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from genesis.agents import adapter_named
from genesis.sandbox.box import BUBBLEWRAP, Box
from genesis.sandbox.detect import probe
from genesis.sandbox.home import parse_allow
from genesis.sandbox.places import places_for

MACHINE = probe()
pytestmark = pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")
PACKAGE = Path(__file__).resolve().parents[2] / "genesis"
CLAUDE = adapter_named("claude")


def user_home(top: Path) -> Path:
    """A user's HOME with what an agent must never reach, and what its CLI needs."""
    home = top / "home"
    for folder in (".ssh", ".aws", ".config/gh", ".claude", ".npm", ".cargo", "other-project", ".local/bin"):
        (home / folder).mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE\n")
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key=x\n")
    (home / ".config" / "gh" / "hosts.yml").write_text("oauth_token: gho_x\n")
    (home / ".netrc").write_text("machine example.com password hunter2\n")
    (home / ".gitconfig").write_text("[user]\n\tname = Night Owl\n\temail = owl@example.invalid\n")
    (home / "other-project" / "notes.txt").write_text("another project\n")
    (home / ".claude.json").write_text("{}\n")
    (home / ".cargo" / "credentials.toml").write_text("[registry]\ntoken = 'cio_x'\n")
    tool = home / ".local" / "bin" / "mytool"
    tool.write_text("#!/bin/sh\necho mytool ran\n")
    tool.chmod(0o755)
    return home


def boxed(top: Path, home: Path, env: dict[str, str], allow: str = "") -> tuple[Box, dict[str, str], Path]:
    project = top / "project"
    state = project / ".git" / "genesis"
    (state / "heartbeats").mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{home}/.local/bin:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), **env}
    places = places_for(project, state, state / "heartbeats", state / "logs", project / "genesis.conf", PACKAGE,
                        ("bash",), env, agent_paths=CLAUDE.box_paths(env), allow=parse_allow(allow, str(home)))
    box = Box(BUBBLEWRAP, places, program=MACHINE.bwrap)
    kept, _ = box.environment(env, CLAUDE.key_vars)
    return box, kept, project


def inside(box: Box, env: dict[str, str], project: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(box.wrap(("bash", "-c", script)), env=env, cwd=project, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture(params=["tmp", "var-tmp"])
def top(request, tmp_path):
    """A HOME under /tmp (private in the box already) and one elsewhere (as a user's is)."""
    if request.param == "tmp":
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="genesis-home-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_agent_sees_its_clis_folder_and_caches_and_nothing_else_of_home(top):
    home = user_home(top)
    box, env, project = boxed(top, home, {"ANTHROPIC_API_KEY": "sk-ant-api03-mine-only", "AWS_SECRET_ACCESS_KEY": "a",
                                          "GITHUB_TOKEN": "ghp_abcdefgh12345678", "MY_TOKEN": "t"})
    done = inside(box, env, project, f"""
        cd "$HOME"
        for p in .ssh .aws .config/gh .netrc .gitconfig other-project; do [ -e "$p" ] && echo "VISIBLE $p"; done
        echo claude > .claude/written && echo cache > .npm/written && echo state > .claude.json
        cat .cargo/credentials.toml; echo "creds=[$(cat .cargo/credentials.toml)]"
        mytool; echo x > .local/bin/mytool || echo "tool read-only"
        echo "key=$ANTHROPIC_API_KEY aws=${{AWS_SECRET_ACCESS_KEY:-}} gh=${{GITHUB_TOKEN:-}} my=${{MY_TOKEN:-}}"
        echo "author=$GIT_AUTHOR_NAME <$GIT_AUTHOR_EMAIL>"
        echo work > "{project}/work.txt"
    """)
    assert "VISIBLE" not in done.stdout, done
    assert "creds=[]" in done.stdout and "mytool ran" in done.stdout and "tool read-only" in done.stdout, done
    assert "key=sk-ant-api03-mine-only aws= gh= my=" in done.stdout, done
    assert "author=Night Owl <owl@example.invalid>" in done.stdout, done
    # What it wrote where it may reached the user's HOME and the project; HOME itself was a tmpfs.
    assert (home / ".claude" / "written").read_text() == "claude\n"
    assert (home / ".npm" / "written").read_text() == "cache\n"
    assert (home / ".claude.json").read_text() == "state\n"
    assert (project / "work.txt").read_text() == "work\n"
    assert (home / ".ssh" / "id_ed25519").read_text() == "PRIVATE\n"


def test_box_allow_gives_a_path_back_read_only_or_writable(top):
    home = user_home(top)
    (home / ".kube").mkdir()
    (home / ".kube" / "config").write_text("kube\n")
    box, env, project = boxed(top, home, {}, allow="~/.kube:ro, ~/other-project:rw, /nonexistent/x")
    done = inside(box, env, project, """
        cat ~/.kube/config; echo x > ~/.kube/config || echo "kube read-only"
        echo mine > ~/other-project/notes.txt && echo "other written"
        [ -e ~/.ssh ] && echo "VISIBLE .ssh"; true
    """)
    assert done.stdout.split() == ["kube", "kube", "read-only", "other", "written"], done
    assert (home / "other-project" / "notes.txt").read_text() == "mine\n"


def serve(path: Path) -> tuple[socket.socket, threading.Event]:
    """A unix socket service that answers every connection with 'pwned' (a command runner)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(5)
    stop = threading.Event()

    def loop():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"pwned\n")
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    return server, stop


CONNECT = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('REACHED', "
           "s.recv(10))\nexcept OSError as e:\n print('refused', e.errno)\n")


def test_no_socket_under_run_or_run_user_is_reachable_unless_allowed(tmp_path):
    home = user_home(tmp_path)
    planted = Path(tempfile.mkdtemp(prefix="genesis-svc-", dir="/run"))
    runtime = Path("/run/user") / str(40000 + os.getpid() % 20000)
    services = [planted / "svc.sock", runtime / "bus", planted / "allowed.sock"]
    servers = [serve(p) for p in services]
    try:
        # From outside the box each answers.
        outside = subprocess.run(["python3", "-c", CONNECT, str(services[0])], capture_output=True, text=True)
        assert "REACHED" in outside.stdout
        box, env, project = boxed(tmp_path, home, {"XDG_RUNTIME_DIR": str(runtime),
                                                   "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/bus"},
                                  allow=str(services[2]))
        env_c = {**env, "C": CONNECT}
        done = subprocess.run(box.wrap(("bash", "-c", "; ".join(f'python3 -c "$C" {p}' for p in services)
                                        + "; ls -A /run/user; echo bus=${DBUS_SESSION_BUS_ADDRESS:-unset}")),
                              env=env_c, cwd=project, capture_output=True, text=True, timeout=60)
        lines = done.stdout.splitlines()
        assert lines[0].startswith("refused") and lines[1].startswith("refused"), done
        assert lines[2].startswith("REACHED"), done  # the one the user named
        assert lines[3:] == ["bus=unset"], done  # /run/user empty, the bus's address gone
    finally:
        for server, stop in servers:
            stop.set()
            server.close()
        shutil.rmtree(planted, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.skipif(shutil.which("ssh-agent") is None or shutil.which("ssh-keygen") is None,
                    reason="no ssh-agent here: apt-get install openssh-client")
def test_the_users_ssh_agent_cannot_be_used_from_the_box(tmp_path):
    home = user_home(tmp_path)
    where = Path(tempfile.mkdtemp(prefix="genesis-ssh-", dir="/run"))
    sock = where / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        key = tmp_path / "id_test"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        for _ in range(100):
            if sock.exists():
                break
            threading.Event().wait(0.05)
        subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True)
        listed = subprocess.run(["ssh-add", "-L"], env=env, capture_output=True, text=True)
        assert listed.returncode == 0 and "ssh-ed25519" in listed.stdout  # it works outside
        box, benv, project = boxed(tmp_path, home, {"SSH_AUTH_SOCK": str(sock)})
        done = inside(box, benv, project, f'echo "sock=${{SSH_AUTH_SOCK:-unset}}"; ssh-add -L; echo "rc=$?"; '
                                          f'SSH_AUTH_SOCK={sock} ssh-add -L; echo "rc=$?"')
        assert "sock=unset" in done.stdout and "ssh-ed25519" not in done.stdout, done
        assert done.stdout.count("rc=0") == 0, done
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)
        shutil.rmtree(where, ignore_errors=True)


def test_with_no_network_the_box_has_a_loopback_of_its_own_and_the_hosts_is_out_of_reach(tmp_path):
    home = user_home(tmp_path)
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    port = host.getsockname()[1]
    try:
        box, env, project = boxed(tmp_path, home, {})
        box = Box(BUBBLEWRAP, box.places, program=MACHINE.bwrap, network="none")
        own = ("import socket, sys\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
               "c = socket.create_connection(s.getsockname(), timeout=2); print('own loopback ok')\n"
               "try:\n socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2); print('HOST REACHED')\n"
               "except OSError:\n print('host refused')\n")
        done = subprocess.run(box.wrap(("python3", "-c", own, str(port))), env=env, cwd=project, capture_output=True,
                              text=True, timeout=60)
        assert done.stdout.split("\n")[:2] == ["own loopback ok", "host refused"], done
    finally:
        host.close()
