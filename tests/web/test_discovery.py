"""Which projects the dashboard shows: those given (by path or by a fleet file), the loops
running on this machine (found by their processes and held locks), a fleet's child as its
main project's task (never a loop of its own), a fleet monitor found by its command line; and
every project seen stays, grey, after its loop ends."""

from __future__ import annotations

import calendar
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.dashboard import child_loop, fleet_running, loop_mid_phase, task
from helpers.git import new_repo

from genesis.config import default_layout
from genesis.web import discovery
from genesis.web.discovery import Discovery, key_of, main_project_of

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
RUN = "20251121T003000Z-4242"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
LOOK = 60.0  # seconds a look at the processes may take here: a loaded machine must not hide the one looked for


@pytest.fixture
def started():
    procs: list[subprocess.Popen] = []

    def start(argv, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kw)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def shown(d: Discovery) -> list[Path]:
    return [s.project for s in d.sources()]


def test_a_key_is_stable_and_free_of_the_paths_characters(tmp_path):
    project = new_repo(tmp_path / "my project <x>")
    key = key_of(project)
    assert re.fullmatch(r"p-[0-9a-f]{12}", key) and key == key_of(project / "." / "")
    assert key != key_of(new_repo(tmp_path / "other"))


def test_given_projects_and_a_fleet_files_projects_are_shown_in_order(tmp_path):
    a, b, c = (new_repo(tmp_path / n) for n in ("a", "b", "c"))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[project]]\npath = "{b}"\nparallel = 1\n\n[[project]]\npath = "c"\nparallel = 2\n')
    d = Discovery(projects=[a], fleets=[fleet], scan_machine=False)
    assert shown(d) == [a.resolve(), b.resolve(), c.resolve()]
    assert [s.name for s in d.sources()] == ["a", "b", "c"] and d.problems == []
    assert all(s.layout == default_layout(s.project) and s.fleet_ledger is None for s in d.sources())


def test_a_fleet_file_that_cannot_be_read_is_said_not_fatal(tmp_path):
    a = new_repo(tmp_path / "a")
    bad = tmp_path / "fleet.toml"
    bad.write_text("[[project]]\npaht = 'x'\n")
    d = Discovery(projects=[a], fleets=[bad], scan_machine=False)
    assert shown(d) == [a.resolve()]
    assert len(d.problems) == 1 and str(bad) in d.problems[0] and "path" in d.problems[0]


def test_a_running_loop_is_found_and_stays_after_it_ends(tmp_path, started):
    project = new_repo(tmp_path / "running")
    fd = loop_mid_phase(project, "r-1", T0)
    # A process of the loop carries the project's marker (as its agents do): the clue; the lock: the proof.
    started(SLEEPER, env={**os.environ, "GENESIS_PROJECT_DIR": str(project)})
    clock = [0.0]
    d = Discovery(clock=lambda: clock[0], budget=LOOK)
    try:
        assert project.resolve() in shown(d)
    finally:
        os.close(fd)
    clock[0] += 5.0
    assert project.resolve() in shown(d), "an ended loop stays on the page"


def test_a_process_that_only_looks_like_a_loop_is_not_a_project(tmp_path, started):
    project = new_repo(tmp_path / "idle")
    started(SLEEPER, env={**os.environ, "GENESIS_PROJECT_DIR": str(project)})
    assert project.resolve() not in shown(Discovery(budget=LOOK))


def test_a_fleet_child_is_its_main_projects_task_never_a_loop_of_its_own(tmp_path, started):
    project = new_repo(tmp_path / "main")
    worktree, child = child_loop(project, "t-aaaaaa", T0)
    mon = fleet_running(project, T0, [task("t-aaaaaa", "running", T0, worktree=str(worktree))])
    started(SLEEPER, env={**os.environ, "GENESIS_PROJECT_DIR": str(worktree)})
    try:
        assert main_project_of(default_layout(worktree).state_dir) == project.resolve()
        found = Discovery(budget=LOOK).sources()
    finally:
        os.close(child)
        os.close(mon)
    mine = [s for s in found if s.project in (project.resolve(), worktree.resolve())]
    assert [s.project for s in mine] == [project.resolve()]
    assert mine[0].fleet_ledger == default_layout(project).state_dir / "fleet" / "ledger.sqlite3"


def test_a_linked_worktree_without_a_fleet_is_a_loop_of_its_own(tmp_path):
    project = new_repo(tmp_path / "plain")
    where = tmp_path / "wt"
    subprocess.run(["git", "-C", str(project), "worktree", "add", "-q", "-b", "side", str(where)], check=True)
    assert main_project_of(default_layout(where).state_dir) is None
    assert main_project_of(default_layout(project).state_dir) is None


def test_a_fleet_monitor_is_found_by_its_command_line(tmp_path, started):
    one, two = new_repo(tmp_path / "one"), new_repo(tmp_path / "two")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[project]]\npath = "{two}"\nparallel = 1\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    genesis = bin_dir / "genesis"  # a stand-in: its command line is what is looked at
    genesis.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")  # one process: the kill ends it
    genesis.chmod(0o755)
    started([str(genesis), "--project", str(one), "fleet", "run", "--parallel", "2"])
    started([str(genesis), "fleet", "run", "--fleet", "fleet.toml"], cwd=tmp_path)
    found = shown(Discovery(budget=LOOK))
    assert one.resolve() in found and two.resolve() in found


def test_the_machine_is_looked_at_no_more_than_every_rescan_seconds(tmp_path, monkeypatch):
    a = new_repo(tmp_path / "a")
    looks = []
    monkeypatch.setattr("genesis.web.discovery.fleet_files_running", lambda clock, budget: looks.append(1) or iter(()))
    clock = [0.0]
    d = Discovery(projects=[a], clock=lambda: clock[0])
    d.sources()
    clock[0] += 1.0
    d.sources()
    assert len(looks) == 1
    clock[0] += 1.5
    d.sources()
    assert len(looks) == 2


def test_a_fleet_file_is_read_again_only_when_it_changed(tmp_path, monkeypatch):
    """Reading one runs git once per project: not every RESCAN seconds for a file that stays."""
    one, two = new_repo(tmp_path / "one"), new_repo(tmp_path / "two")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[project]]\npath = "{one}"\nparallel = 1\n')
    reads = []
    real = discovery.load
    monkeypatch.setattr(discovery, "load", lambda path: reads.append(path) or real(path))
    d = Discovery(fleets=[fleet], scan_machine=False, rescan=0.0)
    for _ in range(3):
        assert shown(d) == [one.resolve()]
    assert len(reads) == 1
    fleet.write_text(f'[[project]]\npath = "{one}"\nparallel = 1\n\n[[project]]\npath = "{two}"\nparallel = 1\n')
    assert shown(d) == [one.resolve(), two.resolve()] and len(reads) == 2


def test_one_look_at_a_time_when_threads_ask_at_once(tmp_path, monkeypatch):
    """The snapshot's thread and the API's ask at once: a look must not change the projects
    while another walks them."""
    inside, most = [0], [0]

    def slow_look(clock, budget):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.2)
        inside[0] -= 1
        return iter(())

    monkeypatch.setattr(discovery, "fleet_files_running", slow_look)
    monkeypatch.setattr(discovery, "Scanner", lambda budget: type("S", (), {"held": lambda self: []})())
    d = Discovery(projects=[new_repo(tmp_path / "a")], rescan=0.0)
    threads = [threading.Thread(target=d.sources) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most[0] == 1


def test_a_temporal_workers_clone_is_a_fleets_task_on_a_machine_never_a_project(tmp_path, started):
    """A worker runs each attempt in a linked worktree of its clone, `<root>/<fleet>/repo`, beside
    the attempts' `<root>/<fleet>/fleet` folder: the fleet is its home project's, shown there."""
    origin = new_repo(tmp_path / "origin")
    folder = tmp_path / "worker-root" / "fleet-wf-1"
    subprocess.run(["git", "clone", "-q", str(origin), str(folder / "repo")], check=True)
    worktree = folder / "worktrees" / "t-aaaaaa"
    subprocess.run(["git", "-C", str(folder / "repo"), "worktree", "add", "-q", "-b", "genesis/task/t-aaaaaa",
                    str(worktree)], check=True)
    fd = loop_mid_phase(worktree, RUN, T0)
    started(SLEEPER, env={**os.environ, "GENESIS_PROJECT_DIR": str(worktree)})
    try:
        alone = {s.project for s in Discovery(budget=LOOK).sources()}  # no attempts' folder: a loop of its own
        (folder / "fleet").mkdir()
        assert discovery.worker_clone_of(default_layout(worktree).state_dir) == folder
        found = {s.project for s in Discovery(budget=LOOK).sources()}
    finally:
        os.close(fd)
    assert worktree.resolve() in alone
    assert not {worktree.resolve(), (folder / "repo").resolve()} & found, found
