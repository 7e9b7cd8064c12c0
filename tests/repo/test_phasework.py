"""What a phase did, read from a real git repository: its commits, the files they changed
and the TASKS.md items it ticked; whatever git cannot tell in time is left out."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import genesis.repo.phasework
from genesis.repo.phasework import after, before

AGENT_TIME = 1_800_000_000   # the agent's commit
AUTO_TIME = 1_800_000_060    # the loop's auto-commit, a minute later


def commit(root: Path, subject: str, when: int | None = None) -> str:
    """Commit everything in the work tree (at `when`, epoch seconds); its short sha."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{when} +0000"
    subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-qm", subject], cwd=root, env=env, check=True, capture_output=True)
    return subprocess.run(["git", "log", "-1", "--format=%h"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def slow_git(tmp_path: Path, monkeypatch, commands: str) -> None:
    """A `git` first on PATH that, for those subcommands (a case pattern), answers truly
    only after 30 s; each git call of phasework bounded to 0.5 s."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    real = shutil.which("git")
    (stubs / "git").write_text(f'#!/bin/sh\ncase "$1" in {commands}) sleep 30;; esac\nexec "{real}" "$@"\n')
    (stubs / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stubs}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(genesis.repo.phasework, "GIT_BOUND", 0.5)


def test_a_phase_lists_its_commits_oldest_first_the_distinct_files_and_the_newly_ticked_tasks(project):
    (project / "TASKS.md").write_text("- [x] old\n- [ ] a\n* [ ] b\n- [ ] c\n")
    commit(project, "tasks")
    start = before(project)
    assert start.done == frozenset({"old"})

    (project / "a.py").write_text("a\n")
    (project / "b.py").write_text("b\n")
    agent = commit(project, "agent: add a and b", AGENT_TIME)
    (project / "b.py").write_text("b2\n")   # touched again: still one file
    (project / "c.py").write_text("c\n")
    (project / "TASKS.md").write_text("- [x] old\n- [x] a\n* [X] b\n- [ ] c\n")
    auto = commit(project, "genesis: auto-commit after Builder", AUTO_TIME)

    work = after(project, start)
    assert work["commits"] == [
        {"sha": agent, "at": float(AGENT_TIME), "subject": "agent: add a and b"},
        {"sha": auto, "at": float(AUTO_TIME), "subject": "genesis: auto-commit after Builder"},
    ]
    assert work["files_changed"] == 4     # a.py, b.py, c.py, TASKS.md
    assert work["tasks_done"] == ["a", "b"]  # "old" was ticked before the phase


@pytest.mark.fault(69)
def test_tasks_ticked_in_a_numbered_or_nested_list_are_the_phases_as_any_other(project):
    """The report counts a phase's ticked tasks from here, and `genesis status` TASKS.md's by the
    same grammar (tests/repo/test_tasks.py): a numbered list's were never counted."""
    (project / "TASKS.md").write_text("# Tasks\n\n- [X] Set up\n* [?] Add a greeting\n1. [ ] Serve it over HTTP\n"
                                      "2) [ ] Log each request\n   + [ ] with a test\n")
    commit(project, "tasks")
    start = before(project)
    assert start.done == frozenset({"Set up"})
    (project / "TASKS.md").write_text("# Tasks\n\n- [X] Set up\n* [x] Add a greeting\n1. [x] Serve it over HTTP\n"
                                      "2) [ ] Log each request\n   + [X] with a test\n")
    commit(project, "ticked")
    assert after(project, start)["tasks_done"] == ["Add a greeting", "Serve it over HTTP", "with a test"]


def test_a_phase_without_a_commit_changed_no_file_even_with_an_edit_left_uncommitted(project):
    start = before(project)
    (project / "README.md").write_text("edited, not committed\n")
    assert after(project, start) == {"commits": [], "files_changed": 0, "tasks_done": []}


def test_a_task_ticked_without_a_commit_is_still_listed(project):
    (project / "TASKS.md").write_text("- [ ] a\n")
    start = before(project)
    (project / "TASKS.md").write_text("- [x] a\n")
    assert after(project, start) == {"commits": [], "files_changed": 0, "tasks_done": ["a"]}


def test_the_first_commit_of_an_empty_repository_is_listed_with_no_base_to_count_files_against(tmp_path):
    root = tmp_path / "fresh"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    start = before(root)
    assert start.head is None
    (root / "main.py").write_text("print()\n")
    sha = commit(root, "first", AGENT_TIME)
    work = after(root, start)
    assert work["commits"] == [{"sha": sha, "at": float(AGENT_TIME), "subject": "first"}]
    assert work["files_changed"] is None


def test_a_head_moved_back_lists_no_commit_but_counts_the_files_it_undid(project):
    (project / "x.py").write_text("x\n")
    commit(project, "x")
    start = before(project)
    subprocess.run(["git", "reset", "-q", "--hard", "HEAD~1"], cwd=project, check=True)
    assert after(project, start) == {"commits": [], "files_changed": 1, "tasks_done": []}


def test_a_missing_or_binary_task_list_ticks_nothing(project):
    start = before(project)
    assert start.done == frozenset()
    assert after(project, start)["tasks_done"] == []
    (project / "TASKS.md").write_bytes(b"\x00\xff\xfe- [ ]\x00\x89PNG\r\n\x1a\n" * 50)
    assert after(project, start)["tasks_done"] == []


def test_a_task_list_that_is_a_directory_or_a_symlink_to_a_fifo_or_nowhere_ticks_nothing(project, tmp_path):
    start = before(project)
    (project / "TASKS.md").mkdir()
    assert after(project, start)["tasks_done"] == []
    (project / "TASKS.md").rmdir()
    os.mkfifo(tmp_path / "fifo")  # would block a plain open(): refused as not a regular file
    (project / "TASKS.md").symlink_to(tmp_path / "fifo")
    assert after(project, start)["tasks_done"] == []
    (project / "TASKS.md").unlink()
    (project / "TASKS.md").symlink_to(tmp_path / "nowhere")
    assert after(project, start)["tasks_done"] == []


def test_a_task_list_symlinked_to_a_file_outside_the_project_is_read_through_the_link(project, tmp_path):
    # The same reading as completion.is_done (follow_symlinks=True): the ticked lines of the
    # file it points at, wherever that is, reach the ledger.
    outside = tmp_path / "elsewhere.md"
    outside.write_text("- [ ] shared\n")
    (project / "TASKS.md").symlink_to(outside)
    start = before(project)
    outside.write_text("- [x] shared\n")
    assert after(project, start)["tasks_done"] == ["shared"]


def test_a_git_that_hangs_is_bounded_and_its_answer_left_out(project, tmp_path, monkeypatch):
    (project / "TASKS.md").write_text("- [ ] a\n")
    commit(project, "tasks")
    start = before(project)
    (project / "a.py").write_text("a\n")
    (project / "TASKS.md").write_text("- [x] a\n")
    commit(project, "agent: a")
    # HEAD still reads; the log and the diff hang (a hung filesystem, a hook) and would
    # answer truly only long past the bound.
    slow_git(tmp_path, monkeypatch, "log|diff")
    assert after(project, start) == {"commits": [], "files_changed": None, "tasks_done": ["a"]}


def test_a_git_that_hangs_even_for_head_leaves_everything_git_tells_out(project, tmp_path, monkeypatch):
    start = before(project)
    (project / "a.py").write_text("a\n")
    commit(project, "agent: a")
    slow_git(tmp_path, monkeypatch, "*")
    assert after(project, start) == {"commits": [], "files_changed": None, "tasks_done": []}
    assert before(project).head is None
