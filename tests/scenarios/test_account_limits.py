"""The real loop after a weekly usage limit: it belongs to the agent CLI and the account that
met it, so another account or another CLI runs at once, the same one is stopped without a
call, and `genesis limit clear` forgets it.

The agent is the stand-in `claude` of test_night_waits.py, which replays what the real Claude
Code printed (tests/fixtures/claude/); another CLI is the simulated agent run as a generic
command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.loop import GENESIS, LOOP
from helpers.state import events_of, state_of
from helpers.fakeclaude import replay

SIM = f"{sys.executable} -m genesis.demo.simagent --script *:*=work"


@pytest.fixture
def night(project: Path, tmp_path: Path):
    """A project with the hook installed, the stand-in `claude` first on PATH, and its calls."""
    replaying = replay(project, tmp_path)
    return project, replaying.env, replaying.called


def run(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LOOP), "--project", str(project), *args], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def genesis(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(GENESIS + ["--project", str(project), *args], capture_output=True, text=True, timeout=60)


def ends(project: Path) -> list[str]:
    return [e["ending"] for e in events_of(project) if e["event"] == "phase_end"]


@pytest.mark.fault(61)
def test_a_weekly_limit_holds_for_its_cli_and_account_only(night, hermetic, tmp_path):
    project, env, calls = night
    weekly = env("limit_seven_day.jsonl", FAKE_RESET_IN="200000")
    first = run(project, weekly)
    assert first.returncode == 20, first.stderr
    assert calls() == ["Builder"]
    home = hermetic / ".claude"
    assert f"usage limit (seven_day) of claude (config {home}; no API key set)" in first.stderr
    assert "another account (another CLAUDE_CONFIG_DIR or another ANTHROPIC_API_KEY)" in first.stderr
    assert f"genesis --project {project} limit clear --agent claude" in first.stderr  # runnable as printed

    # The same CLI and account: stopped again, the agent not called.
    again = run(project, weekly)
    assert again.returncode == 20, again.stderr
    assert calls() == ["Builder"]
    assert "met " in again.stderr and "remembered, so the agent is not called" in again.stderr

    # Another account of the same CLI runs: another config folder, or another API key.
    other = run(project, env("success.jsonl", CLAUDE_CONFIG_DIR=str(tmp_path / "work-account")), "--max-iterations",
                "1")
    assert other.returncode == 0, other.stderr
    assert calls()[1:] == ["Builder", "Planner"]
    keyed = run(project, env("success.jsonl", ANTHROPIC_API_KEY="sk-ant-team-key"), "--max-iterations", "1")
    assert keyed.returncode == 0, keyed.stderr
    assert calls()[3:] == ["Builder", "Planner"]

    # Another CLI runs: the simulated agent, as a generic command, does its work.
    sim = run(project, env("success.jsonl", GENESIS_AGENT_CMD=SIM), "--max-iterations", "1")
    assert sim.returncode == 0, sim.stderr
    assert ends(project)[-2:] == ["finished", "finished"]
    assert "did iteration 1" in (project / "work").joinpath(sorted(os.listdir(project / "work"))[0]).read_text()

    # `genesis limit` shows it; `genesis limit clear` forgets it, and the agent is called again.
    shown = genesis(project, "limit")
    assert shown.returncode == 0
    assert shown.stdout.startswith(f"claude: config {home}; no API key set\n  seven_day, resets ")
    cleared = genesis(project, "limit", "clear", "--agent", "claude")
    assert cleared.returncode == 0 and f"forgot the usage limit of claude (config {home}" in cleared.stdout
    back = run(project, env("success.jsonl"), "--max-iterations", "1")
    assert back.returncode == 0, back.stderr
    assert calls()[5:] == ["Builder", "Planner"]


@pytest.mark.fault(62)
def test_an_older_genesiss_limit_reads_for_its_cli_only_and_a_bad_file_is_kept_aside(night, hermetic):
    project, env, calls = night
    assert run(project, env("limit_seven_day.jsonl", FAKE_RESET_IN="200000")).returncode == 20
    assert calls() == ["Builder"]
    # The file as Genesis wrote it before limits had an account: one limit for the whole project,
    # written as the phase that met it ended.
    ended = [e for e in events_of(project) if e["event"] == "phase_end"][-1]
    limit_file = state_of(project) / "limit.json"
    limit_file.write_text(json.dumps({"resets_at": ended["limit"]["resets_at"], "kind": ended["limit"]["kind"],
                                      "message": ended["limit"]["message"], "guessed": False,
                                      "seen_at": ended["epoch"] + 0.1}))

    # Another CLI runs, even when it is the one configured as the file is first read...
    sim = run(project, env("success.jsonl", GENESIS_AGENT_CMD=SIM), "--max-iterations", "1")
    assert sim.returncode == 0, sim.stderr
    assert ends(project)[-2:] == ["finished", "finished"]
    # ...while the limit holds for the CLI that met it (its run in the ledger says claude),
    # whatever its account: which account met it, the old file does not say.
    stopped = run(project, env("success.jsonl", CLAUDE_CONFIG_DIR=str(project.parent / "other-account")))
    assert stopped.returncode == 20, stopped.stderr
    assert calls() == ["Builder"]
    assert "of claude (account unknown: remembered by an older Genesis)" in stopped.stderr

    # A file that is not a limit file at all: kept aside, said, and the agent runs (once the
    # machine-wide account store, which every loop on the account heeds, no longer holds it).
    (hermetic / ".local" / "state" / "genesis" / "accounts" / "limits.json").unlink()
    limit_file.write_text('{"version": 2, "limits": "all of them"}')
    ran = run(project, env("success.jsonl"), "--max-iterations", "1")
    assert ran.returncode == 0, ran.stderr
    assert calls() == ["Builder", "Builder", "Planner"]
    assert "kept aside as limit.json.corrupt-" in ran.stderr
    assert list(limit_file.parent.glob("limit.json.corrupt-*"))
