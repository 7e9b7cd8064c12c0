"""One child of a fleet: its command line and environment, its liveness by its lock, a signal
sent only to the loop it still is (re-confirmed at that moment), and `genesis stop` reaching it
when no monitor runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner
from helpers.git import git
from helpers.procs import alive, lock_held

from genesis.cli import cli
from genesis.config import default_layout
from genesis.fleet import children as kids
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.ledger.store import Ledger
from genesis.store.layout import private_dir, state_dir_of


def spec(tmp_path: Path, **kw) -> kids.ChildSpec:
    base = dict(task_id="add-a-thing-abc123", text="add a thing", worktree=tmp_path / "wt", attempt=2,
                phases=("Builder", "Criticizer"), iterations=6, stop_flag=tmp_path / "project" / "hooks" / "stop.txt",
                fleet_dir=tmp_path / "fleet", ports=(20010, 10), settings={}, log=tmp_path / "fleet" / "c.log")
    return kids.ChildSpec(**{**base, **kw})


def sets(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--set")


def test_a_childs_command_line_its_fixed_settings_win_over_the_fleets(tmp_path):
    argv = kids.child_argv(spec(tmp_path, settings={"GENESIS_PHASES": "Planner", "AUTO_PUSH": "true",
                                                    "GENESIS_AGENT_CMD": "codex exec"}))
    assert argv[:5] == ["bash", str(kids.LOOP_SCRIPT), "--project", str(tmp_path / "wt"), "--trust"]
    assert kids.LOOP_SCRIPT.is_file()
    given = sets(argv)
    assert given == {"GENESIS_PHASES": "Builder Criticizer", "AUTO_PUSH": "true", "GENESIS_AGENT_CMD": "codex exec",
                     "GENESIS_STOP_FLAG": str(tmp_path / "project" / "hooks" / "stop.txt"),
                     "GENESIS_MAX_ITERATIONS": "6"}
    assert argv.count("--set") == 5  # the fleet's GENESIS_PHASES is not passed at all: no ambiguity


def test_a_childs_environment_carries_its_task_fleet_and_ports(tmp_path):
    env = kids.child_env(spec(tmp_path), {"PATH": "/bin", "GENESIS_TASK": "someone else's", "HOME": "/h"})
    assert env["GENESIS_TASK"] == "add a thing" and env["GENESIS_TASK_ID"] == "add-a-thing-abc123"
    assert (env["PORT"], env["GENESIS_PORT_BASE"], env["GENESIS_PORT_COUNT"]) == ("20010", "20010", "10")
    assert env["GENESIS_FLEET_DIR"] == str(tmp_path / "fleet") and env["HOME"] == "/h"
    planner = kids.child_env(spec(tmp_path, text=""), {"GENESIS_TASK": "stale", "GENESIS_TASK_ID": "x"})
    assert "GENESIS_TASK" not in planner and "GENESIS_TASK_ID" not in planner


def worktree(project: Path, tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    git(project, "worktree", "add", "-q", "-b", "genesis/task/t", str(wt))
    return wt


def test_an_adopted_child_lives_while_its_lock_is_held_and_its_end_is_its_ledgers(project, tmp_path):
    wt = worktree(project, tmp_path)
    layout = default_layout(wt)
    with lock_held(layout, "run-7") as holder:
        child = kids.Child("t", wt, 0, 0.0, time.time(), 1)
        found = kids.holder_of(child)
        assert found is not None and found.pid == holder.pid
        adopted = kids.adopt("t", wt, found, 1, time.time())
        assert kids.ended(adopted, time.time()) is None
        with Ledger.open(layout.ledger_file) as led:
            led.record("run-7", "loop_end", reason="done: the work is finished", exit_code=0)
    ending = kids.ended(adopted, time.time())
    assert ending is not None and (ending.exit_code, ending.reason) == (0, "done: the work is finished")


def test_a_child_that_vanished_without_an_end_is_said_so(project, tmp_path):
    wt = worktree(project, tmp_path)
    with lock_held(default_layout(wt), "run-8") as holder:
        adopted = kids.adopt("t", wt, kids.holder_of(kids.Child("t", wt, 0, 0.0, 0.0, 1)), 1, time.time())
        assert adopted.pid == holder.pid
    ending = kids.ended(adopted, time.time())
    assert ending is not None and ending.exit_code is None and "vanished" in ending.reason


def test_a_signal_goes_only_to_the_loop_the_child_still_is(project, tmp_path):
    wt = worktree(project, tmp_path)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # The pid recorded, but another process now (its start time differs): never signalled.
        recycled = kids.Child("t", wt, sleeper.pid, 12345.0, time.time(), 1)
        assert not kids.signal_child(recycled, signal.SIGTERM)
        # The same process, but the worktree's lock is another loop's: never signalled.
        with lock_held(default_layout(wt), "run-9"):
            other = kids.Child("t", wt, sleeper.pid, 0.0, time.time(), 1, popen=sleeper)
            assert not kids.signal_child(other, signal.SIGTERM)
        assert alive(sleeper.pid)
        # Its own loop, confirmed: signalled.
        mine = kids.Child("t", wt, sleeper.pid, 0.0, time.time(), 1, popen=sleeper)
        assert kids.signal_child(mine, signal.SIGTERM) and mine.signalled == signal.SIGTERM
        assert sleeper.wait(timeout=10) == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_loop_whose_record_is_let_go_but_lock_still_held_is_still_ending_not_vanished(project, tmp_path):
    wt = worktree(project, tmp_path)
    layout = default_layout(wt)
    with lock_held(layout, "run-10"):
        adopted = kids.adopt("t", wt, kids.holder_of(kids.Child("t", wt, 0, 0.0, 0.0, 1)), 1, time.time())
        layout.loop_record.unlink()  # finish lets the record go first, then records loop_end
        assert kids.ended(adopted, time.time()) is None


def test_agents_killed_inside_a_running_child_are_read_from_its_ledger_once_each(project, tmp_path):
    wt = worktree(project, tmp_path)
    layout = default_layout(wt)
    child = kids.Child("t", wt, 0, 0.0, time.time(), 1, run_id="run-5")
    child.layout = layout
    assert kids.agent_deaths(child, 0) == ([], 0, None)   # no ledger yet
    with Ledger.open(layout.ledger_file) as led:
        led.record("run-5", "phase_start", at=99.0)
        led.record("run-5", "phase_end", at=100.0, returncode=-9, killed=0, status="exited")   # the OOM killer
        led.record("run-5", "phase_start", at=100.5)
        led.record("run-5", "phase_end", at=101.0, returncode=137, killed=0, status="exited")  # 128 + SIGKILL
        led.record("run-5", "phase_end", at=102.0, returncode=-9, killed=3, status="stuck")   # Genesis killed it
        led.record("run-5", "phase_end", at=103.0, returncode=1, killed=0, status="exited")   # it failed, alive
        led.record("run-4", "phase_end", at=104.0, returncode=-9, killed=0, status="exited")  # another run's
        led.record("run-4", "phase_start", at=105.0)
    died, seen, started = kids.agent_deaths(child, 0)
    assert died == [100.0, 101.0] and seen > 0 and started == 100.5   # its newest agent started: this run's
    assert kids.agent_deaths(child, seen) == ([], seen, None)


def test_genesis_stop_reaches_the_children_of_a_monitor_that_died_through_the_projects_stop_flag(project, tmp_path):
    """No monitor holds the project's lock; its child loop still holds its own (a stand-in here):
    `genesis stop` finds it through the fleet ledger's worktrees and writes the project's stop
    flag, the one each child is given (GENESIS_STOP_FLAG, above) and reads before its next phase."""
    wt = worktree(project, tmp_path)
    with FleetLedger.open(private_dir(private_dir(state_dir_of(project)) / "fleet") / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow("t", "a task", "running", attempts=1, worktree=str(wt)))
    with lock_held(default_layout(wt), "child-run") as child:
        stopped = CliRunner().invoke(cli, ["--project", str(project), "stop"], catch_exceptions=False)
    assert stopped.exit_code == 0, stopped.output
    flag = project / "hooks" / "loop_multi_agent.txt"
    assert stopped.output.startswith(f"wrote false to {flag}; the fleet's monitor is not running, and its 1 child "
                                     f"loop (pids {child.pid}) each stop before their next phase")
    assert flag.read_text() == "false\n"
