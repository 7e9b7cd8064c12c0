"""`genesis status` run where no loop runs (outside any repository, or in one where no loop
ever ran, such as the Genesis checkout) while the real loop runs on another project: it lists
that loop and the command that shows it, and that command, pasted there, does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers.gate import gate, simagent
from helpers.git import git
from helpers.loop import GENESIS, LOOP, loop_env
from helpers.waits import wait_for

from genesis import exitcodes


def status_in(cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(GENESIS + ["status"], cwd=cwd, env={**env, "COLUMNS": "80"}, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.whole
@pytest.mark.fault(66)
def test_status_where_no_loop_runs_lists_the_running_loop_with_the_command_that_shows_it(project, tmp_path,
                                                                                          procs):
    subprocess.run(GENESIS + ["--project", str(project), "hook", "install", "--scope", "local"], check=True,
                   capture_output=True)
    action, ready, go = gate(tmp_path)
    env = loop_env(GENESIS_AGENT_CMD=simagent(f"1:Builder={action},*:*=idle"), HEARTBEAT_STALE="120s",
                   TOOL_SILENT="0", GENESIS_PHASES="Builder")
    loop = procs(["bash", str(LOOP), "--project", str(project), "--max-iterations", "1"], env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(ready.exists, 60, "the Builder to be running")
    nowhere = tmp_path / "nowhere"                 # not in any git repository
    checkout = tmp_path / "checkout"               # a repository where no loop ever ran
    for folder in (nowhere, checkout):
        folder.mkdir()
    git(checkout, "init", "-q")
    where = str(project.resolve())
    try:
        for cwd, code in ((nowhere, exitcodes.OK), (checkout, exitcodes.NOT_RUNNING)):
            done = status_in(cwd, env)
            assert done.returncode == code, done.stdout + done.stderr
            text = done.stdout
            if cwd == checkout:
                assert "NOT RUNNING  no loop is running on this project" in text and "Last run  no run recorded" in text
            assert re.search(r"loops running on this machine: \d+", text), text
            # At 80 columns too, the command is one whole line, to be copied as it is.
            line = next(line for line in text.splitlines() if line.endswith(f"--project {where} status"))
            assert re.search(rf"^\s*project\s+pid {loop.pid} .*Builder", text, re.M), text
            shown = subprocess.run(["bash", "-c", line.strip()], cwd=cwd, env={**env, "COLUMNS": "300"},
                                   capture_output=True, text=True, timeout=60)
            assert shown.returncode == exitcodes.OK, shown.stdout + shown.stderr
            assert f"genesis status · {where}" in shown.stdout and "RUNNING" in shown.stdout
            assert "Builder" in shown.stdout
    finally:
        go.touch()
    assert loop.wait(timeout=120) == 0, loop.stderr.read()
