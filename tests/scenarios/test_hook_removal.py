"""The user's `genesis hook uninstall` while the real loop runs is respected, never undone; what
an agent removes through a `genesis hook uninstall` of its own is put back as ever (its plain
`rm`: tests/bats/tamper.bats). The loop's decisions (stop, go on without the hook when its
agent can, put it back) are replayed in tests/loop/test_guard_hook.py.

The agent is the simulated Claude Code, held in its Builder phase (helpers/gate.py) while the
test, as the user in another terminal, uninstalls the hook the loop uses.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from helpers.gate import gate, simagent
from helpers.loop import GENESIS, LOOP, loop_env, run_loop
from helpers.state import events_of, state_of
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.agents.claude.settings import installed_events

QUOTED = re.compile(r"`([^`]*--project [^`]*)`")


def local_settings(project: Path) -> Path:
    return project / ".claude" / "settings.local.json"


def install(project: Path) -> None:
    subprocess.run(GENESIS + ["--project", str(project), "hook", "install", "--scope", "local"], check=True,
                   capture_output=True)


def uninstall_meanwhile(project: Path, tmp_path: Path, env: dict, procs, iterations: int = 2):
    """Start the loop, wait for its Builder, run the user's uninstall from another folder, let the
    Builder go on; (the loop's stderr, its exit code, what the uninstall printed)."""
    install(project)
    action, ready, go = gate(tmp_path)
    env = {**env, "GENESIS_AGENT_CMD": env["GENESIS_AGENT_CMD"].replace("GATE", action)}
    loop = procs(["bash", str(LOOP), "--project", str(project), "--max-iterations", str(iterations)], env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(ready.exists, 60, "the Builder to be running")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    told = subprocess.run(GENESIS + ["--project", str(project), "hook", "uninstall", "--scope", "local"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=60)
    go.touch()
    assert told.returncode == 0, told.stderr
    assert installed_events(local_settings(project)) == []
    _out, err = loop.communicate(timeout=120)
    return err, loop.returncode, told.stdout


def held_env(*options: str, **extra: str) -> dict:
    """The loop's environment with the simulated agent held in iteration 1's Builder (GATE: see
    uninstall_meanwhile), as `options` ask, and patient with the held call."""
    return loop_env(GENESIS_AGENT_CMD=simagent("1:Builder=GATE,*:*=idle", *options), HEARTBEAT_STALE="120s",
                    TOOL_SILENT="0", **extra)


@pytest.mark.fault(67)
def test_fault_67_the_user_s_uninstall_is_respected_and_the_loop_stops_cleanly(project, tmp_path, procs):
    env = held_env("--output-format", "text", GENESIS_AGENT_CLI="claude")  # as Claude Code: the hook is required
    err, code, told = uninstall_meanwhile(project, tmp_path, env, procs)
    where = project.resolve()
    path = local_settings(where)
    assert "removed the heartbeat hook from" in told
    assert f"the loop running on {where} (pid " in told
    assert "it will not put it back, and stops cleanly before its next phase (exit 2)" in told
    (again,) = QUOTED.findall(told)
    assert shlex.split(again)[-6:] == ["--project", str(where), "hook", "install", "--scope", "local"]

    assert code == exitcodes.USAGE, err
    assert f"the heartbeat hook was removed from {path} at " in err and "by your `hook uninstall`" in err
    assert "the loop does not undo your removal" in err and "so it stops before Planner (exit 2)" in err
    (loop_says,) = re.findall(r"put the hook back with `([^`]*)` and restart it", err)
    assert loop_says.split(" --project ")[1] == again.split(" --project ")[1]  # each names the genesis it runs
    assert "repaired: the heartbeat hook" not in err and "Planner: agent started" not in err
    assert installed_events(path) == []  # not put back
    events = events_of(project)
    end = [e for e in events if e["event"] == "loop_end"][-1]
    assert end["exit_code"] == exitcodes.USAGE
    assert end["reason"].startswith("the heartbeat hook was removed by the user's `hook uninstall`"), end
    assert not (state_of(project) / "loop.json").exists()  # ended cleanly: the lock's record released

    # The printed command, pasted elsewhere, puts the hook back (and a restart then runs with it:
    # tests/loop/test_guard_hook.py).
    back = subprocess.run(["bash", "-c", again], cwd=tmp_path / "elsewhere", capture_output=True, text=True,
                          timeout=60)
    assert back.returncode == 0 and installed_events(path), back.stderr
    assert not (state_of(project) / "hook-removed.json").exists()


def action(command: str) -> str:
    return "bash:" + urllib.parse.quote(command, safe="")


@pytest.mark.fault(68)
def test_fault_68_what_an_agent_removes_is_put_back_even_through_genesis_hook_uninstall(project, tmp_path):
    install(project)
    said = tmp_path / "agent-uninstall.txt"
    own = shlex.join([sys.executable, "-m", "genesis", "--project", ".", "hook", "uninstall", "--scope", "local"])
    script = f"1:Builder={action(f'{own} >{shlex.quote(str(said))} 2>&1')},*:*=idle"
    env = loop_env(GENESIS_AGENT_CLI="claude", GENESIS_AGENT_CMD=simagent(script, "--output-format", "text"))
    done = run_loop(project, "--max-iterations", "1", env=env)
    assert done.returncode == 0, done.stderr
    # The agent's own uninstall ran inside the loop: not the user's word.
    text = said.read_text()
    assert "removed the heartbeat hook from" in text
    assert "started this command (an agent's): it puts the hook back before its next phase" in text
    path = local_settings(project.resolve())
    repaired = re.findall(r"repaired: the heartbeat hook stopped working .*; reinstalled it in (\S+)", done.stderr)
    assert repaired == [str(path)], done.stderr  # before the Planner
    assert installed_events(path)
    assert not (state_of(project) / "hook-removed.json").exists()
    assert not [e for e in events_of(project) if e["event"] in ("hook_removed", "stop_reason")]
