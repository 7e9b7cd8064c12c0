"""A fleet task's id and branch: stable for the same text, distinct for different texts, valid in git."""

from __future__ import annotations

import re

from helpers.git import git

from genesis.fleet.taskref import TaskRef, branch_for, open_refs, read_open, task_id
from genesis.repo.tasks import parse


def test_the_id_is_a_slug_and_a_hash_of_the_text_stable_and_distinct():
    assert re.fullmatch(r"add-a-health-endpoint-[0-9a-f]{6}", task_id("Add a /health endpoint!"))
    assert task_id("Add a /health endpoint!") == task_id("Add a /health endpoint!")
    assert task_id("Add a /health endpoint!") != task_id("Add a /health endpoint")
    long = task_id("x" * 300)
    assert len(long) == 40 + 7 and not long.startswith("-")
    assert re.fullmatch(r"task-[0-9a-f]{6}", task_id("日本語のタスク"))
    assert branch_for(task_id("A")) == f"genesis/task/{task_id('A')}"


def test_every_id_makes_a_valid_branch_name(project):
    for text in ("Fix ../../etc/passwd", "a..b", "end with a dot.", "-leading dash", "@{u}", "x" * 300, "ü"):
        git(project, "check-ref-format", "--branch", branch_for(task_id(text)))


def test_open_refs_are_the_open_tasks_in_order_each_once():
    tasks = parse("- [x] done one\n- [ ] first\n- [?] built\n- [!] gave up (failed: x)\n"
                  "```\n- [ ] an example\n```\n1. [ ] second\n- [ ] first\n")
    refs = open_refs(tasks)
    assert [(r.text, r.line) for r in refs] == [("first", 2), ("second", 8)]
    assert refs[0] == TaskRef(task_id("first"), "first", 2) and refs[0].branch == branch_for(task_id("first"))


def test_read_open_reads_the_projects_list(project):
    assert read_open(project) is None
    (project / "TASKS.md").write_text("- [ ] one\n- [x] two\n")
    assert [r.text for r in read_open(project)] == ["one"]
