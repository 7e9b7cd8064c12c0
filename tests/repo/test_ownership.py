"""Whose uncommitted work is it: a run's record of what it left uncommitted, read back at the
next start against a real work tree: the agent's leftovers match it exactly, anything the
user changed since does not, and the record stays bounded and never follows a planted link."""

from __future__ import annotations

import json
import os

import pytest
from helpers.git import git

from genesis.repo import ownership
from genesis.repo.ownership import leftovers_in, recall, remember, user_files


@pytest.fixture
def record(tmp_path):
    return tmp_path / "state" / "leftovers.json"


def changed_paths(project) -> list[str]:
    """Every uncommitted path, as the start sees them."""
    lines = git(project, "status", "--porcelain=v1", "--untracked-files=all", "--no-renames").splitlines()
    return sorted(line[3:] for line in lines)


def agent_leaves_work(project) -> None:
    (project / "README.md").write_text("hello\nthe agent's edit\n")
    (project / "new.py").write_text("x = 1\n")
    (project / "lib").mkdir()
    (project / "lib" / "deep.py").write_text("y = 2\n")


@pytest.mark.fault(57)
def test_what_a_run_left_is_recognised_path_by_path_and_the_users_edit_since_is_not(project, record):
    (project / "gone.txt").write_text("to delete\n")
    git(project, "add", "gone.txt")
    git(project, "commit", "-qm", "a file the agent deletes")
    (project / "notes.txt").write_text("the user's own untracked notes\n")
    agent_leaves_work(project)
    (project / "gone.txt").unlink()
    record.parent.mkdir()
    assert remember(project, record, "run-1", "at its end: interrupted by SIGINT", ["notes.txt"], 1000.0) is None
    held = recall(record)
    assert (held.run_id, held.when, held.at) == ("run-1", "at its end: interrupted by SIGINT", 1000.0)
    assert sorted(held.paths) == ["README.md", "gone.txt", "lib/deep.py", "new.py"]  # never the user's notes
    paths = changed_paths(project)
    assert leftovers_in(held, project, paths) == ("README.md", "gone.txt", "lib/deep.py", "new.py")
    # The user edits one of them since, and restores the deleted file: those are the user's now.
    (project / "new.py").write_text("x = 1  # the user's fix\n")
    (project / "gone.txt").write_text("to delete\nand kept\n")
    assert leftovers_in(held, project, changed_paths(project)) == ("README.md", "lib/deep.py")


@pytest.mark.fault(57)
def test_a_file_of_the_same_content_but_another_path_is_not_the_agents(project, record):
    (project / "a.txt").write_text("same\n")
    record.parent.mkdir()
    remember(project, record, "run-1", "after Builder, iteration 1", [], 1.0)
    os.rename(project / "a.txt", project / "b.txt")
    assert leftovers_in(recall(record), project, changed_paths(project)) == ()


def test_no_record_or_an_unusable_one_makes_every_change_the_users(project, record):
    assert recall(record) is None
    record.parent.mkdir()
    for junk in ("", "{", "[]", json.dumps({"run_id": 3, "paths": {}}), json.dumps({"run_id": "r", "paths": []})):
        record.write_text(junk)
        assert recall(record) is None
    record.write_text(json.dumps({"run_id": "r", "paths": {"README.md": 5, "x": "y"}, "at": "soon"}))
    assert recall(record).paths == {"x": "y"} and recall(record).at == 0.0


def test_a_link_planted_at_the_record_is_refused_not_followed(project, record, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text('{"run_id": "r", "paths": {"README.md": "x"}}')
    record.parent.mkdir()
    record.symlink_to(victim)
    assert recall(record) is None
    assert remember(project, record, "run-1", "at its end", [], 1.0) is None
    assert not record.is_symlink() and victim.read_text().startswith('{"run_id": "r"')


def test_a_link_or_fifo_in_the_work_tree_is_never_followed_or_waited_on(project, record, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    os.symlink(outside, project / "link")
    os.mkfifo(project / "pipe")
    record.parent.mkdir()
    assert remember(project, record, "run-1", "at its end", [], 1.0) is None
    held = recall(record)
    assert "pipe" not in held.paths and "link" in held.paths  # a FIFO cannot be told apart: the user's
    outside.write_text("changed\n")  # the link's target is not its content
    assert leftovers_in(held, project, ["link", "pipe"]) == ("link",)


def test_the_record_is_bounded_in_paths_and_in_bytes_hashed(project, record, monkeypatch):
    monkeypatch.setattr(ownership, "MAX_PATHS", 3)
    monkeypatch.setattr(ownership, "HASH_BUDGET", 10)
    for n in range(5):
        (project / f"f{n}.txt").write_text(f"{n}" * 8)
    record.parent.mkdir()
    remember(project, record, "run-1", "at its end", [], 1.0)
    held = recall(record)
    assert sorted(held.paths) == ["f0.txt", "f1.txt", "f2.txt"]  # the rest count as the user's
    assert leftovers_in(held, project, changed_paths(project)) == ("f0.txt", "f1.txt", "f2.txt")
    # Past the budget a file is known by its size and modification time: a change still shows.
    (project / "f2.txt").write_text("x" * 8)
    os.utime(project / "f2.txt", ns=(1, 1))
    assert leftovers_in(held, project, changed_paths(project)) == ("f0.txt", "f1.txt")


def test_a_record_that_cannot_be_written_is_said_not_raised(project, tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    problem = remember(project, blocked / "leftovers.json", "run-1", "at its end", [], 1.0)
    assert problem.startswith("could not record the uncommitted work (")
    assert "the next start takes it as yours" in problem


def test_the_users_files_read_back_only_as_a_list_of_names(tmp_path):
    path = tmp_path / "user-untracked.json"
    assert user_files(path) == []
    path.write_text('["a.txt", 3, "b/c.txt"]')
    assert user_files(path) == ["a.txt", "b/c.txt"]
    path.write_text("{")
    assert user_files(path) == []
