"""The demo's throwaway project: a git repo, a task list, a tiny server, compressed knobs."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from pathlib import Path

from genesis.repo.gitcmd import run_git

__all__ = ["init_project", "DEMO_SCRIPT"]

DEMO_GIT_TIMEOUT = 60.0  # seconds for each git command making the demo project

# The shipped phases and triggers on a two-task TASKS.md. Iteration 1: the Builder builds
# the first task and leaves a server behind (reaped); the Criticizer, due because a task
# awaits review, hangs on a silent subprocess (killed as stuck, an incident recorded, retried
# once, stuck again: failed for the iteration); the Planner is skipped, a task is still open. Iteration 2: the second task is built and both are verified; nothing
# is open, so the Planner runs and adds nothing: the work is done and the loop ends with 0.
DEMO_SCRIPT = "1:Builder=build+server,1:Criticizer=hang,2:Builder=build,2:Criticizer=review,*:*=idle"

SERVER = '''"""A tiny test server, as an agent might start one and forget it."""
import http.server
import sys

port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler).serve_forever()
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_project(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    agent = f"{shlex.quote(sys.executable)} -m genesis.demo.simagent --port {port} --script '{DEMO_SCRIPT}'"
    files = {
        "README.md": "# Demo project\n\nA throwaway project for the Genesis demo.\n",
        "TASKS.md": "# Tasks\n\n- [ ] Add a greeting\n- [ ] Serve it over HTTP\n",
        "server/__init__.py": "",
        "server/main.py": SERVER,
        ".gitignore": "__pycache__/\n.claude/settings.local.json\n",
        "orchestrator/genesis.conf": (
            "# Demo settings: thresholds compressed to seconds.\n"
            f"GENESIS_AGENT_CMD={shlex.quote(agent)}\n"
            "GENESIS_MAX_ITERATIONS=10\n"
            "ITERATION_PAUSE_SECONDS=1\n"
            "HEARTBEAT_CHECK_INTERVAL=1\n"
            "HEARTBEAT_STALE=4s\n"
            "AGENT_MAX_RUNTIME=60s\n"
            "KILL_GRACE_SECONDS=2\n"
            "PHASE_RETRY_DELAY_SECONDS=2\n"
            f"REAP_PORTS={port}\n"),
    }
    for rel, text in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)
    # Genesis's own git (repo/gitcmd.py): nothing a global config names runs here either.
    for args in (["init", "-q"], ["config", "user.name", "Genesis demo"], ["config", "user.email", "demo@localhost"],
                 ["add", "-A"], ["commit", "-qm", "demo project"]):
        done = run_git(directory, args, timeout=DEMO_GIT_TIMEOUT)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, ["git", *args], stderr=done.stderr)
    print(directory)
    return directory
