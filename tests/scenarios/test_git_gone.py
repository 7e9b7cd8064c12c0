"""The repository's whole git directory deleted by the agent mid-night (no box: nothing keeps
it from it): the loop stops by itself, and its end is not told as a kill by someone. Real loop,
real agent, real git, the real alert command."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.loop import loop_env, run_loop
from helpers.waits import wait_for

DELETES_GIT = r"""#!/usr/bin/env bash
rm -rf "$(git rev-parse --absolute-git-dir)"
echo work >work.txt
"""


@pytest.mark.fault(205)
def test_a_deleted_git_directory_is_not_told_as_a_kill(project: Path, tmp_path: Path):
    alerts = tmp_path / "alerts.txt"
    notify = script(tmp_path / "notify.sh", f"#!/bin/sh\ncat >>{alerts}\necho >>{alerts}\n")
    agent = script(tmp_path / "agent.sh", DELETES_GIT)
    env = loop_env(GENESIS_SANDBOX="off", GENESIS_PHASES="Builder", HEARTBEAT_COUNT_OUTPUT="false",
                   GENESIS_NOTIFY_CMD=str(notify))
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "2", env=env, timeout=180)
    assert done.returncode == 2 and "not a git work tree" in done.stderr, done.stderr
    # The companion settles an end the loop could not record: within its bound, never as a kill.
    wait_for(lambda: alerts.exists() and "git directory" in alerts.read_text(), timeout=90, what="the end's alert")
    time.sleep(1)
    told = alerts.read_text() + done.stderr
    assert "killed (SIGKILL?) by someone" not in told and "exit 137" not in told, told[-3000:]
    assert "stopped on that, by itself" in alerts.read_text()
