"""The agent writes commands into genesis.conf during one night (a notify command, a `when:`
trigger); the next start shows them and refuses (exit 28) until the user approves them with
`genesis config trust` or `--trust`. Values from the environment or --set need no approval."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.waits import wait_for

UNTRUSTED = 28  # exitcodes.UNTRUSTED_COMMAND, spelt out so that the test fails on today's code for its own reason


@pytest.fixture
def night(project: Path, tmp_path: Path):
    """A project whose agent, once, appends two commands of its own to genesis.conf."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    pwned, fired = tmp_path / "pwned-notify", tmp_path / "pwned-trigger"
    conf_lines = f"GENESIS_NOTIFY_CMD=touch {pwned}\nPHASE_Builder_TRIGGER='when:touch {fired}'\n"
    agent = script(tmp_path / "agent.sh", f"""#!/usr/bin/env bash
echo "$GENESIS_AGENT was here" >>notes.txt
if [[ ! -e {tmp_path}/planted ]]; then
  mkdir -p orchestrator
  printf '%s' {shlex.quote(conf_lines)} >>orchestrator/genesis.conf
  touch {tmp_path}/planted
fi
""")
    args = ("--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder", "--max-iterations", "1")
    return project, args, pwned, fired


@pytest.mark.fault(83)
def test_a_command_the_agent_wrote_into_genesis_conf_is_refused_until_the_user_approves_it(night):
    project, args, pwned, fired = night
    env = loop_env(GENESIS_SANDBOX="off")
    first = run_loop(project, *args, env=env)
    assert first.returncode == 0, first.stderr
    assert "GENESIS_NOTIFY_CMD" in (project / "orchestrator/genesis.conf").read_text()

    refused = run_loop(project, *args, env=env)
    assert refused.returncode == UNTRUSTED, refused.stderr
    assert f"GENESIS_NOTIFY_CMD='touch {pwned}' (new since the last approved start)" in refused.stderr
    assert f"PHASE_Builder_TRIGGER='when:touch {fired}' (new" in refused.stderr
    assert "genesis --project" in refused.stderr and "config trust" in refused.stderr and "--trust" in refused.stderr
    # Asked again, refused again: nothing was approved by being refused.
    assert run_loop(project, *args, env=env).returncode == UNTRUSTED
    assert not pwned.exists() and not fired.exists()

    shown = subprocess.run(GENESIS + ["--project", str(project), "config", "trust"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"GENESIS_NOTIFY_CMD='touch {pwned}'  [new]" in shown.stdout
    assert "approved 2 command(s)" in shown.stdout

    approved = run_loop(project, *args, env=env)
    assert approved.returncode == 0, approved.stderr
    assert fired.exists()
    wait_for(pwned.exists, 30, "the approved notify command to run at the loop's end")


@pytest.mark.fault(83)
def test_first_use_then_a_changed_command_needs_approval_again_and_the_trust_flag_gives_it(night, tmp_path):
    project, args, _pwned, fired = night
    env = loop_env(GENESIS_SANDBOX="off")
    # The user's own genesis.conf at the very first start: trusted on first use, and said.
    (tmp_path / "planted").touch()
    conf = project / "orchestrator/genesis.conf"
    conf.parent.mkdir()
    conf.write_text(f"PHASE_Builder_TRIGGER='when:touch {fired}'\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "settings")
    first = run_loop(project, *args, env=env)
    assert first.returncode == 0, first.stderr
    assert "first start here: the commands orchestrator/genesis.conf names are trusted as they are now (trust on " \
           f"first use): PHASE_Builder_TRIGGER='when:touch {fired}'" in first.stderr
    assert fired.exists()
    fired.unlink()
    other = tmp_path / "other"
    conf.write_text(conf.read_text().replace(f"when:touch {fired}", f"when:touch {other}"))
    git(project, "commit", "-qam", "the agent's edit, committed")
    refused = run_loop(project, *args, env=env)
    assert refused.returncode == UNTRUSTED
    assert f"PHASE_Builder_TRIGGER='when:touch {other}' (changed since the last approved start)" in refused.stderr
    assert "run the same command with --trust" in refused.stderr
    assert not other.exists() and not fired.exists()
    # The same key from the environment is the user's own word: no approval needed.
    mine = tmp_path / "mine"
    own = run_loop(project, *args, env={**env, "PHASE_Builder_TRIGGER": f"when:touch {mine}"})
    assert own.returncode == 0, own.stderr
    assert mine.exists() and not other.exists()
    trusted = run_loop(project, *args, "--trust", env=env)
    assert trusted.returncode == 0, trusted.stderr
    assert "--trust: approved PHASE_Builder_TRIGGER" in trusted.stderr
    assert other.exists()

