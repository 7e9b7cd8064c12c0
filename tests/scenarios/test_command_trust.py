"""The agent writes commands into genesis.conf during one night (a notify command, a changed
`when:` trigger); the next start shows them and refuses (exit 28) until the user approves them
with `genesis config trust`. The user's own genesis.conf at the very first start is trusted as
it is, and said. The same rules by replay, with `--trust` and values from the environment
(which need no approval): tests/loop/test_preflight_trust.py."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.waits import wait_for

UNTRUSTED = 28  # exitcodes.UNTRUSTED_COMMAND, spelt out so that the test fails on today's code for its own reason


@pytest.mark.fault(83)
def test_commands_the_agent_wrote_into_genesis_conf_are_refused_until_the_user_approves_them(project, tmp_path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    mine, pwned, fired = tmp_path / "mine", tmp_path / "pwned-notify", tmp_path / "pwned-trigger"
    conf = project / "orchestrator/genesis.conf"
    conf.parent.mkdir()
    conf.write_text(f"PHASE_Builder_TRIGGER='when:touch {mine}'\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "settings")
    # The agent, once, appends a notify command and a trigger of its own (the last line of a key wins).
    planted = f"GENESIS_NOTIFY_CMD=touch {pwned}\nPHASE_Builder_TRIGGER='when:touch {fired}'\n"
    agent = script(tmp_path / "agent.sh", f"""#!/usr/bin/env bash
echo "$GENESIS_AGENT was here" >>notes.txt
if [[ ! -e {tmp_path}/planted ]]; then
  printf '%s' {shlex.quote(planted)} >>orchestrator/genesis.conf
  touch {tmp_path}/planted
fi
""")
    args = ("--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder", "--max-iterations", "1")
    env = loop_env(GENESIS_SANDBOX="off")  # in the box, genesis.conf is out of the agent's reach (test_box_faults.py)

    first = run_loop(project, *args, env=env)
    assert first.returncode == 0, first.stderr
    assert "first start here: the commands orchestrator/genesis.conf names are trusted as they are now (trust on " \
           f"first use): PHASE_Builder_TRIGGER='when:touch {mine}'" in first.stderr
    assert mine.exists()
    assert "GENESIS_NOTIFY_CMD" in conf.read_text()

    refused = run_loop(project, *args, env=env)
    assert refused.returncode == UNTRUSTED, refused.stderr
    assert f"GENESIS_NOTIFY_CMD='touch {pwned}' (new since the last approved start)" in refused.stderr
    assert f"PHASE_Builder_TRIGGER='when:touch {fired}' (changed since the last approved start)" in refused.stderr
    assert "genesis --project" in refused.stderr and "config trust" in refused.stderr
    assert "run the same command with --trust" in refused.stderr
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
