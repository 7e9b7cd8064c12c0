"""The commands people type: exit codes and exact messages."""

import json
import os
import subprocess
import sys
import time

from click.testing import CliRunner
from helpers import paths
from helpers.git import new_repo
from helpers.procs import LOCK_HOLDER, alive
from helpers.state import state_of
from helpers.waits import wait_for

from genesis.cli import cli
from genesis.config import default_layout
from genesis.ledger.store import Ledger
from genesis.procs.reaper import markers_for
from genesis.store.looplock import hold

SPAWN = str(paths.SPAWN)


def invoke(project, *args):
    return CliRunner().invoke(cli, ["--project", str(project), *args], catch_exceptions=False)


def test_breaker_show_and_reset(project):
    path = project / "orchestrator" / ".circuit_breaker.json"
    shown = invoke(project, "breaker", "show")
    assert shown.exit_code == 0 and json.loads(shown.output)["state"] == "CLOSED"
    path.parent.mkdir()
    path.write_text(json.dumps({"state": "OPEN", "no_progress_count": 5, "last_progress_iteration": 2}))
    assert json.loads(invoke(project, "breaker", "show").output)["state"] == "OPEN"
    reset = invoke(project, "breaker", "reset")
    assert reset.exit_code == 0 and "the breaker is CLOSED" in reset.output
    assert not path.exists()
    assert "already CLOSED" in invoke(project, "breaker", "reset").output


def test_heartbeat_show_without_a_heartbeat_exits_1_and_says_why(project, hermetic):
    result = invoke(project, "heartbeat", "show")
    assert result.exit_code == 1
    assert f"heartbeat file: {hermetic}/.local/state/genesis/heartbeat.json" in result.output
    assert "no heartbeat yet" in result.output


def test_heartbeat_show_reports_age_and_fields(project, tmp_path):
    hb = tmp_path / "hb.json"
    hb.write_text(json.dumps({"agent": "Builder", "timestamp": "t", "epoch": time.time() - 42, "tool": "Bash",
                              "event": "PostToolUse", "session_id": "s", "pid": 7}))
    result = invoke(project, "heartbeat", "show", "--file", str(hb))
    assert result.exit_code == 0
    assert "age: 42." in result.output and "tool: Bash" in result.output


def test_a_project_folder_that_does_not_exist_is_genesiss_own_error_saying_what_to_give(tmp_path):
    missing = tmp_path / "no-such-project"
    done = subprocess.run([sys.executable, "-m", "genesis", "--project", str(missing), "status"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"genesis: error: --project {missing}: does not exist; give the folder of the git "
                           f"project (its work tree)\n")
    (tmp_path / "file").write_text("")
    done = subprocess.run([sys.executable, "-m", "genesis", "--project", str(tmp_path / "file"), "status"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--project " in done.stderr and ": not a directory; " in done.stderr
    assert "Usage:" not in done.stderr


def test_stop_without_a_running_loop_says_so_exits_5_and_writes_nothing(project):
    result = invoke(project, "stop")
    assert result.exit_code == 5
    assert f"no Genesis loop is running on {project}; nothing to stop" in result.output
    assert not (project / "hooks").exists()


def test_stop_without_a_loop_here_names_a_few_loops_elsewhere_in_a_short_line(project, tmp_path):
    """Five loops on other projects (stand-ins holding their locks, found by their marker): the
    refusal names three and counts the rest, in a line that stays short."""
    holders = []
    try:
        for n in range(5):
            other = new_repo(tmp_path / f"other-{n}")
            lay = default_layout(other)
            lay.state_dir.mkdir(parents=True, exist_ok=True)
            holders.append(subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(lay.loop_lock),
                                             str(lay.loop_record), f"run-{n}"], stdout=subprocess.PIPE, text=True,
                                            env={**os.environ, "GENESIS_PROJECT_DIR": str(other)}))
        assert all(h.stdout.readline() == "locked\n" for h in holders)
        result = invoke(project, "stop")
    finally:
        for h in holders:
            h.kill()
            h.wait()
            h.stdout.close()
    assert result.exit_code == 5
    (line,) = result.output.splitlines()
    assert line.startswith(f"genesis: error: no Genesis loop is running on {project}; nothing to stop. Loops run on ")
    found = int(line.split("Loops run on ")[1].split()[0])  # this machine may run loops of its own too
    assert found >= 5 and f" and {found - 3} more (`" in line and " status --all` lists them)" in line
    assert sum(f"other-{n}" in line for n in range(5)) <= 3 and "stop` stops it" not in line
    assert len(line) < 400 + 3 * len(str(tmp_path)), line


def test_stop_writes_false_to_the_flag_file_of_a_running_loop(project):
    fd = hold(state_of(project) / "loop.lock", state_of(project) / "loop.json", "run-x")
    result = invoke(project, "stop")
    os.close(fd)
    assert result.exit_code == 0, result.output
    assert f"(pid {os.getpid()}, run run-x)" in result.output
    assert (project / "hooks" / "loop_multi_agent.txt").read_text() == "false\n"


def test_reap_dry_run_lists_and_kills_nothing_then_reap_kills(project, procs):
    leftover = procs([sys.executable, SPAWN, "sleep", "pytest"], env=markers_for(project))
    dry = invoke(project, "reap", "--dry-run")
    assert dry.exit_code == 0
    assert f"would kill pid {leftover.pid}:" in dry.output and "(matches REAP_PATTERNS)" in dry.output
    assert alive(leftover.pid)
    done = invoke(project, "reap")
    assert done.exit_code == 0 and f"pid {leftover.pid}" in done.output
    wait_for(lambda: not alive(leftover.pid), what="the leftover to die")
    assert "nothing to reap" in invoke(project, "reap").output


def test_reap_by_hand_refuses_while_a_loop_runs(project):
    fd = hold(state_of(project) / "loop.lock", state_of(project) / "loop.json", "run-x")
    result = invoke(project, "reap")
    os.close(fd)
    assert result.exit_code == 4 and f"a loop (pid {os.getpid()}) is running" in result.output


def test_report_without_runs_says_so_and_exits_1(project):
    result = invoke(project, "report")
    assert result.exit_code == 1 and "no loop has run in this project yet" in result.output


def test_report_of_an_unknown_run_exits_1_and_points_to_the_list(project):
    with Ledger.open(state_of(project) / "ledger.sqlite3") as led:
        led.record("run-a", "loop_start")
    result = invoke(project, "report", "--run-id", "run-b")
    assert result.exit_code == 1
    assert "no run 'run-b'" in result.output and f"--project {project.resolve()} report --list`" in result.output
    listed = invoke(project, "report", "--list")
    assert listed.exit_code == 0 and listed.output.startswith("run-a  started "), listed.output
    assert "no end recorded" in listed.output


def test_a_project_that_is_not_a_repository_exits_2(tmp_path):
    (tmp_path / "plain").mkdir()
    result = CliRunner().invoke(cli, ["--project", str(tmp_path / "plain"), "loop-settings", "--run-id", "r"],
                                catch_exceptions=False)
    assert result.exit_code == 2 and "is not a git work tree" in result.output


def test_reading_commands_outside_a_project_point_at_one_not_at_git_init(tmp_path, monkeypatch):
    (tmp_path / "plain").mkdir()
    monkeypatch.chdir(tmp_path / "plain")
    for args in (["report"], ["incidents"]):
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 2, (args, result.output)
        assert "git init" not in result.output and "pass --project" in result.output, (args, result.output)
        assert "genesis status --all" in result.output


def test_a_fleet_on_a_repository_another_user_owns_is_told_so_with_the_fix(project, monkeypatch):
    """git's "dubious ownership" is no "not a git work tree": the fleet's commands say what it is."""
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")  # git's own switch for its ownership check
    for args in (["fleet", "status"], ["report"], ["fleet", "run", "--parallel", "2"]):
        result = CliRunner().invoke(cli, ["--project", str(project), *args], catch_exceptions=False)
        assert result.exit_code == 2, (args, result.output)
        assert "dubious ownership" in result.output and "not a git work tree" not in result.output, result.output
        assert f"git config --global --add safe.directory {project}" in result.output
