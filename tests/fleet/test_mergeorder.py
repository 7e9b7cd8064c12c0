"""The merge queue's order: disjoint merges first, replayed, and read from real branches."""

from __future__ import annotations

from helpers.git import commit_file, git

from genesis.config import resolve
from genesis.fleet import monitor as mon
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.mergeorder import arranged, files_of, order
from genesis.fleet.resources import fleet_settings
from genesis.fleet.taskref import branch_for, task_id
from genesis.store.layout import private_dir, state_dir_of


def test_merges_touching_files_no_other_touches_go_first_each_group_in_queue_order():
    queued = [("a", frozenset({"x.py", "shared.py"})), ("b", frozenset({"b.py"})), ("c", frozenset({"shared.py"})),
              ("d", None), ("e", frozenset({"e.py", "e2.py"})), ("f", frozenset())]
    assert order(queued) == ["b", "e", "f", "a", "c", "d"]
    assert order([]) == [] and order([("a", frozenset({"x"}))]) == ["a"]


def test_a_branch_s_files_are_what_it_changed_since_it_parted_tasks_aside(project):
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    for name, files in (("one", {"shared.txt": "1\n", "one.txt": "1\n"}), ("two", {"two.txt": "2\n"}),
                        ("three", {"shared.txt": "3\n", "TASKS.md": "- [x] three\n"})):
        git(project, "checkout", "-q", "-b", name, target)
        for path, text in files.items():
            commit_file(project, path, text)
    git(project, "checkout", "-q", target)
    commit_file(project, "later.txt", "the project branch moved on\n")
    assert files_of(project, target, "three") == frozenset({"shared.txt"})
    assert files_of(project, target, "no-such-branch") is None
    assert arranged(project, target, [("1", "one"), ("2", "two"), ("3", "three")]) == ["2", "1", "3"]


def test_the_monitor_takes_the_merge_whose_files_are_its_own_first_a_held_one_stays_behind(project, tmp_path):
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    with FleetLedger.open(tmp_path / "ledger.sqlite3") as led:
        for text, path in (("add a", "shared.txt"), ("add b", "shared.txt"), ("add c", "c.txt"), ("add d", "d.txt")):
            ident = task_id(text)
            git(project, "checkout", "-q", "-b", branch_for(ident), target)
            commit_file(project, path, f"{text}\n")
            led.upsert_task(TaskRow(ident, text, "merging", branch=branch_for(ident)))
        git(project, "checkout", "-q", target)
        cfg = resolve(project, flags={"GENESIS_FLEET_MEMORY_FLOOR_MB": "0"})
        monitor = mon.Monitor(project, cfg, fleet_settings(cfg.settings), 3, led,
                              private_dir(private_dir(state_dir_of(project)) / "fleet"), "fleet-test", target, {},
                              clock=lambda: 1000.0)
        monitor.merges = [mon.Merge(task_id("add d"), held_until=2000.0),
                          *(mon.Merge(task_id(t)) for t in ("add a", "add b", "add c"))]
        assert monitor.disjoint_first(1000.0).task_id == task_id("add c")
        assert [m.task_id for m in monitor.merges] == [task_id(t) for t in ("add c", "add a", "add b", "add d")]
