"""A forged heartbeat loop (fault 79): the agent's tool starts a loop that calls the hook every
second while the real work hangs. Its beats are no sign of life: the phase is caught within
the stale window, not by the runtime cap; the CLI's own beats, however it runs its hook,
still are. Without the box (GENESIS_SANDBOX=off)."""

from __future__ import annotations

import pytest
from helpers.agent import supervised
from helpers.procs import alive

RUN_ID = "run-forged-beats"

# The CLI beats for its tool call, then the tool starts a loop that calls the hook (as the CLI
# would name its events) while the real work hangs.
FORGER = ('"$HOOK" --event PreToolUse Bash </dev/null\n'
          'bash -c \'( while :; do "$HOOK" --event PostToolUse Bash </dev/null; sleep 0.2; done ) & '
          'echo $! > "$PWD/loop.pid"; exec sleep 300\'\n')


@pytest.mark.whole
@pytest.mark.fault(79)
def test_a_forged_heartbeat_loop_is_caught_within_the_stale_window(tmp_path):
    out, notes, _run = supervised(tmp_path, FORGER, run_id=RUN_ID, stale_after=3.0, check_interval=0.2,
                                  max_runtime=20.0, env={"GENESIS_SANDBOX": "off"})
    assert out.status == "stuck", (out.status, out.detail, notes)
    forger = int((tmp_path / "loop.pid").read_text())
    assert any(n.startswith(f"heartbeats not counted as signs of life: the hook was run by pid {forger}, a process "
                            f"below the CLI's tools") for n in notes), notes
    assert not alive(forger)
    assert out.duration < 20.0 - 5  # well before the runtime cap


@pytest.mark.whole
@pytest.mark.fault(79)
def test_the_clis_own_beats_from_a_shell_it_starts_per_call_keep_a_long_phase_alive(tmp_path):
    # As Claude Code runs its hooks: `sh -c "bash genesis-heartbeat.sh"`, CLAUDE_PID set, every call.
    cli = ('for i in $(seq 30); do CLAUDE_PID=$$ sh -c "\\"$HOOK\\" --event PreToolUse Bash </dev/null"; '
           'sleep 0.2; done\n')
    out, notes, _run = supervised(tmp_path, cli, run_id=RUN_ID, stale_after=1.0, check_interval=0.2,
                                  max_runtime=30.0, env={"GENESIS_SANDBOX": "off"})
    assert (out.status, out.returncode) == ("exited", 0), (out.detail, notes)
    assert not [n for n in notes if n.startswith("heartbeats not counted")]
