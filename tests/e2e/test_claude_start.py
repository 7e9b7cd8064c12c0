"""The real Claude Code when it cannot start: as root without IS_SANDBOX=1 (refused by the
loop's preflight before any phase), and with a misspelled flag (three quick failures with the
same words end the night as a configuration error, the breaker untouched).

Neither needs its API: the CLI refuses before any request.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, as_agent, genesis
from helpers.loop import LOOP
from helpers.state import events_of

START_FAILURES = 3  # genesis/loop/startfail.py: the same failure to start this many times in a row stops the loop

pytestmark = pytest.mark.claude

ROOT_WORDS = "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"


def loop_env(claude: Path, **extra: str) -> dict[str, str]:
    """The user's shell with the real `claude` first on PATH, without IS_SANDBOX unless given."""
    env = {k: v for k, v in os.environ.items() if k != "IS_SANDBOX"}
    return {**env, **LOOP_ENV, "PATH": f"{claude.parent}{os.pathsep}{env.get('PATH', '')}",
            "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **extra}


def run(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LOOP), "--project", str(project), *args], env=env, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)


@pytest.fixture
def hooked(project: Path) -> Path:
    as_agent(project)
    genesis("--project", str(project), "hook", "install", "--scope", "local")
    return project


@pytest.mark.fault(64)
@pytest.mark.parametrize("sandbox", [None, "yes"])
def test_claude_code_as_root_without_is_sandbox_is_refused_before_any_phase(claude, hooked, sandbox):
    if os.geteuid() != 0:
        pytest.skip("Claude Code refuses to skip its permission checks only as root")
    env = loop_env(claude, **({"IS_SANDBOX": sandbox} if sandbox else {}))
    # The premise, from the real CLI: it refuses at once, in its own words.
    direct = subprocess.run(["claude", "-p", "--dangerously-skip-permissions", "say hi"], env=env, cwd=hooked,
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (direct.returncode, direct.stderr.strip()) == (1, ROOT_WORDS)

    done = run(hooked, env)  # the default agent command: claude -p --dangerously-skip-permissions
    assert done.returncode == 2, done.stderr
    assert "Claude Code refuses --dangerously-skip-permissions as root unless IS_SANDBOX=1 is set" in done.stderr
    assert ("Run the loop as another user, or, only in a sandbox or container, run `export IS_SANDBOX=1` and start "
            "the loop again") in done.stderr
    if sandbox:
        assert "(it is 'yes'; only 1 counts)" in done.stderr
    assert not [e for e in events_of(hooked) if e["event"] == "phase_start"]  # no agent was started


@pytest.mark.fault(63)
def test_claude_code_with_a_misspelled_flag_ends_the_night_as_a_configuration_error(claude, hooked):
    env = loop_env(claude, GENESIS_AGENT_CMD="claude -p --dangerously-skip-permisions", GENESIS_PHASES="Builder",
                   CB_WARNING_THRESHOLD="1", CB_STOP_THRESHOLD="2", IS_SANDBOX="1")
    done = run(hooked, env)
    assert done.returncode == 2, done.stderr
    assert (f"the agent failed to start {START_FAILURES} times in a row, each within 10s, saying: error: unknown "
            f"option '--dangerously-skip-permisions' / (Did you mean --dangerously-skip-permissions?). That is a "
            f"configuration error") in done.stderr
    assert "breaker OPEN" not in done.stderr
    breaker = json.loads((hooked / "orchestrator" / ".circuit_breaker.json").read_text())
    assert (breaker["state"], breaker["no_progress_count"]) == ("CLOSED", 0)
    assert len([e for e in events_of(hooked) if e["event"] == "phase_start"]) == START_FAILURES
