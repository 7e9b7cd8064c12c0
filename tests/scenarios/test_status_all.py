"""`genesis status --all` in the morning, from anywhere: every loop and every fleet that ended
in the last 24 hours, however its project was named when it started (a symlink, a relative
path), each once. A real fleet and a real loop, then the command as a user types it."""

from __future__ import annotations

import subprocess

from helpers.fleet import fleet_project, start_fleet, task_agent
from helpers.git import git
from helpers.loop import GENESIS, LOOP, loop_env

from genesis import exitcodes


def test_status_all_lists_the_fleets_and_loops_that_ended_wherever_it_is_run(project, tmp_path):
    fleet_project(project, ["add the parser"])
    proc = start_fleet(project, "1", task_agent(tmp_path / "agent.sh"), log=tmp_path / "fleet.log")
    assert proc.wait(timeout=180) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    # A single loop on another project, started through a symlink and a relative path.
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    git(other, "config", "user.name", "Agent")
    git(other, "config", "user.email", "agent@example.invalid")
    git(other, "commit", "-q", "--allow-empty", "-m", "start")
    (tmp_path / "link").symlink_to(other)
    agent = task_agent(tmp_path / "idle.sh", "#!/usr/bin/env bash\necho looked\n")
    done = subprocess.run(["bash", str(LOOP), "--project", "link", "--agent-cmd", f"bash {agent}",
                           "--max-iterations", "1", "--set", "GENESIS_PHASES=Builder"], cwd=tmp_path,
                          env=loop_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shown = subprocess.run([*GENESIS, "status", "--all"], cwd=elsewhere, capture_output=True, text=True,
                           timeout=60, env=loop_env(COLUMNS="250"))
    assert shown.returncode in (exitcodes.OK, exitcodes.NOT_RUNNING), shown.stderr  # OK: another loop runs here
    lines = shown.stdout.splitlines()
    (said,) = [line for line in lines if "loops and fleets ended in the last 24 hours: " in line]
    assert int(said.split(": ")[1].split()[0]) >= 2, shown.stdout  # the machine's running loops may add theirs
    fleet = [line for line in lines if " fleet  run fleet-" in line and str(project) in line]
    loop = [line for line in lines if line.lstrip().startswith("other ") and " run " in line and str(other) in line]
    assert len(fleet) == 1 and project.name in fleet[0] and "every task is finished (exit 0)" in fleet[0], lines
    assert len(loop) == 1 and "(exit 0)" in loop[0], lines
    # Asked from inside the fleet's project, each is still listed once.
    inside = subprocess.run([*GENESIS, "status", "--all"], cwd=project, capture_output=True, text=True,
                            timeout=60, env=loop_env(COLUMNS="250"))
    assert sum(1 for line in inside.stdout.splitlines() if " fleet  run fleet-" in line and str(project) in line) \
        == 1, inside.stdout
    assert sum(1 for line in inside.stdout.splitlines() if str(other) in line) == 1, inside.stdout
