"""Under Landlock (the box wherever bubblewrap cannot run), the user's tmux server, which the
README runs the loop in, is out of the agent's reach: one real loop with GENESIS_SANDBOX=landlock
whose Builder sends the user's server a command by its socket file, as a hostile agent would.
The loop goes on, the server ran nothing, and the start line says how the box kept it away."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import loop_env, run_loop
from helpers.state import events_of

from genesis.sandbox import landlock

pytestmark = [pytest.mark.skipif(landlock.abi() == 0, reason="no Landlock in this kernel"),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux here")]

# Each act's exit status in $MARKS/acts; the work goes on whatever they gave.
REACHES = r"""#!/usr/bin/env bash
act() { local name="$1"; shift; local rc=0; "$@" >>"$MARKS/acts.out" 2>&1 || rc=$?; echo "${name} ${rc}" >>"$MARKS/acts"; }
act their_tmux tmux -S "${THEIR_SOCKET}" new-window -d "sleep ${UNIQUE}"
act run_shell tmux -S "${THEIR_SOCKET}" run-shell "touch ${MARKS}/ran-outside"
act connect python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "${THEIR_SOCKET}"
act socketpair python3 -c 'import socket; socket.socketpair()'
echo "the Builder was here" >>notes.txt
"""


@pytest.mark.fault(206)
def test_fault_206_under_landlock_the_users_tmux_server_runs_nothing_the_agent_sends(project, tmp_path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    marks = tmp_path / "marks"
    marks.mkdir()
    agent = script(tmp_path / "reaches.sh", REACHES)
    unique = f"{900 + uuid.uuid4().int % 99}.{uuid.uuid4().int % 10 ** 6}"
    theirs = Path(tempfile.mkdtemp(prefix="genesis-their-tmux-", dir="/tmp"))   # as tmux's own /tmp/tmux-UID
    socket = theirs / "sock"
    env = loop_env(GENESIS_SANDBOX="landlock", GENESIS_PHASES="Builder", MARKS=str(marks),
                   THEIR_SOCKET=str(socket), UNIQUE=unique)
    env.pop("TMUX", None)
    subprocess.run(["tmux", "-S", str(socket), "new-session", "-d", "sleep 600"], check=True, env=env, timeout=10)
    try:
        done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1", env=env, timeout=90)
        windows = subprocess.run(["tmux", "-S", str(socket), "list-windows"], capture_output=True, text=True,
                                 env=env, timeout=10).stdout
        running = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, env=env, timeout=10)
        shutil.rmtree(theirs, ignore_errors=True)

    assert done.returncode == 0, done.stderr
    acts = {name: int(rc) for name, rc in (line.split() for line in (marks / "acts").read_text().splitlines())}
    assert acts["their_tmux"] != 0 and acts["run_shell"] != 0 and acts["connect"] != 0, acts
    assert acts["socketpair"] == 0, (marks / "acts.out").read_text()   # the box's own pipes still work
    assert not (marks / "ran-outside").exists()
    assert len(windows.splitlines()) == 1                               # nothing started through it
    assert not any(f"sleep {unique}" in cmd for cmd in running)
    assert "sandbox: landlock" in done.stderr
    said = (landlock.abi() >= landlock.RESOLVE_UNIX_ABI and "no socket file outside the box") or \
        "no unix stream socket can be opened in the box (a seccomp filter)"
    assert said in done.stderr, done.stderr
    assert (project / "notes.txt").read_text() == "the Builder was here\n"
    assert [e["event"] for e in events_of(project) if e["event"] in ("phase_end", "loop_end")] == \
        ["phase_end", "loop_end"]
