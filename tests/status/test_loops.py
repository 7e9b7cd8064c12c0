"""The loops running on this machine: found from real processes, confirmed by their lock."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from helpers.git import git
from helpers.waits import wait_for

import genesis
from genesis import exitcodes
from genesis.status.loops import Scanner
from genesis.status.screen import run_status
from genesis.store.looplock import hold

PY = sys.executable
RUN = "20251121T003000Z-777"

# A stand-in for start-multi-agent-loop.sh that takes the project's loop lock the way the
# real one does: the script keeps descriptor 9 open on the lock file, and a child step
# flock()s it (genesis.store.looplock.acquire), then the script sleeps. LOCK_PROJECT names the
# project to lock; without it the script only looks like a loop.
FAKE_LOOP = r"""#!/usr/bin/env bash
set -euo pipefail
if [[ -n ${LOCK_PROJECT:-} ]]; then
  state="${LOCK_PROJECT}/.git/genesis"
  mkdir -p "${state}"
  exec 9>>"${state}/loop.lock"
  "${PY}" -c 'import sys; from pathlib import Path; from genesis.store.looplock import acquire
acquire(Path(sys.argv[1]), Path(sys.argv[2]), 9, int(sys.argv[3]), sys.argv[4])' \
    "${state}/loop.lock" "${state}/loop.json" "$$" "${RUN_ID}"
fi
echo ready >"${READY}"
sleep 600 &
wait
"""


def make_project(root: Path) -> Path:
    root.mkdir(parents=True)
    git(root, "init", "-q")
    return root


@pytest.fixture
def fake_loop(tmp_path, procs):
    """Starts the stand-in loop: fake_loop(cwd, *args, lock=project or None) -> its Popen, once ready."""
    script = tmp_path / "bin" / "start-multi-agent-loop.sh"
    script.parent.mkdir()
    script.write_text(FAKE_LOOP)
    script.chmod(0o755)
    count = iter(range(100))

    def start(cwd: Path, *args: str, lock: Path | None = None):
        ready = tmp_path / f"ready-{next(count)}"
        env = {"PY": PY, "RUN_ID": RUN, "READY": str(ready), "LOCK_PROJECT": str(lock) if lock else "",
               "PYTHONPATH": str(Path(genesis.__file__).parent.parent)}
        proc = procs([str(script), *args], env=env, cwd=cwd)
        wait_for(ready.exists, 10, "the fake loop to be ready")
        return proc

    return start


def mine(loops, project: Path):
    return [lp for lp in loops if lp.project == project.resolve()]


def test_a_loop_holding_its_lock_is_listed_and_a_look_alike_is_not(tmp_path, fake_loop, monkeypatch):
    real = make_project(tmp_path / "real")
    other = make_project(tmp_path / "other")
    loop = fake_loop(tmp_path, "--project", "real", lock=real)           # relative to its working directory
    fake_loop(other, lock=None)                                           # its cwd is its default --project
    fake_loop(tmp_path, "--project", str(real), lock=None)               # names a project whose loop runs
    loops = Scanner(budget=5.0).scan()
    found = mine(loops, real)
    assert len(found) == 1
    assert (found[0].pid, found[0].run_id) == (loop.pid, RUN)
    assert found[0].phase is None and found[0].started is not None
    assert mine(loops, other) == []
    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "300")
    assert run_status(None, all_loops=True, out=out) == exitcodes.OK
    line = next(text for text in out.getvalue().splitlines() if str(real.resolve()) in text)
    assert line.split()[:3] == ["real", "pid", str(loop.pid)]
    assert "between phases" in line


def test_a_loop_whose_command_line_names_no_project_is_found_by_the_lock_it_holds_open(tmp_path, fake_loop):
    project = make_project(tmp_path / "demo" / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    loop = fake_loop(elsewhere, "--demo", lock=project)
    found = mine(Scanner(budget=5.0).scan(), project)
    assert [lp.pid for lp in found] == [loop.pid]


def test_an_agent_s_marker_leads_to_its_loop_and_a_marker_without_a_loop_does_not(tmp_path, procs):
    project = make_project(tmp_path / "marked")
    idle = make_project(tmp_path / "idle")
    (project / ".git" / "genesis").mkdir()
    fd = hold(project / ".git" / "genesis" / "loop.lock", project / ".git" / "genesis" / "loop.json", RUN)
    try:
        for where in (project, idle):
            procs(["sleep", "600"], env={"GENESIS_PROJECT_DIR": str(where.resolve()), "GENESIS_RUN_ID": RUN})
        loops = Scanner(budget=5.0).scan()
    finally:
        os.close(fd)
    assert [lp.pid for lp in mine(loops, project)] == [os.getpid()]
    assert mine(loops, idle) == []


def test_no_loop_running_exits_not_running(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not a git project: the loops on this machine are shown
    out = io.StringIO()
    code = run_status(None, out=out)
    assert "loops running on this machine" in out.getvalue()
    # Other loops may run on this machine (other projects); none is this test's.
    assert code == (exitcodes.OK if "pid " in out.getvalue() else exitcodes.NOT_RUNNING)
