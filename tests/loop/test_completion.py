"""Completion: when the work is done, and only then, the loop may end itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from genesis.loop.completion import is_done
from genesis.phases import DoneRule, parse_done_rule
from genesis.repo.tasks import read_tasks

PHASES = ["Builder", "Criticizer", "Planner"]


def tasks(project: Path, *marks: str) -> None:
    (project / "TASKS.md").write_text("# Tasks\n" + "".join(f"- [{m}] task {i}\n" for i, m in enumerate(marks)))


@pytest.mark.parametrize("text, rule", [("tasks", DoneRule("tasks")), (" never ", DoneRule("never")),
                                        ("when:test -f DONE", DoneRule("when", "test -f DONE")),
                                        ("phrase:ALL TASKS COMPLETE", DoneRule("phrase", "ALL TASKS COMPLETE"))])
def test_rules_parse(text, rule):
    assert parse_done_rule(text) == rule


@pytest.mark.parametrize("text", ["", "always", "when:", "phrase:  ", "tasks:x"])
def test_bad_rules_say_what_is_allowed(text):
    with pytest.raises(ValueError, match="tasks, never, when:COMMAND or phrase:TEXT"):
        parse_done_rule(text)


def test_tasks_are_done_only_after_a_planner_pass_with_nothing_open(tmp_path):
    tasks(tmp_path, "x", "x")
    assert is_done(DoneRule("tasks"), tmp_path, PHASES, ["Builder", "Planner"], False, 6)[0]
    assert not is_done(DoneRule("tasks"), tmp_path, PHASES, ["Builder", "Criticizer"], False, 6)[0]
    tasks(tmp_path, "x", "?")
    assert is_done(DoneRule("tasks"), tmp_path, PHASES, PHASES, False, 6) == \
        (False, "0 task(s) open and 1 awaiting review in TASKS.md")
    tasks(tmp_path, "x", " ")  # what a Planner pass that added a task leaves
    assert not is_done(DoneRule("tasks"), tmp_path, PHASES, PHASES, False, 6)[0]


def test_without_a_planner_phase_the_task_list_alone_decides(tmp_path):
    tasks(tmp_path, "x")
    assert is_done(DoneRule("tasks"), tmp_path, ["Builder"], ["Builder"], False, 1)[0]


def test_failed_tasks_are_not_open_work_and_are_named(tmp_path):
    (tmp_path / "TASKS.md").write_text("- [x] one\n- [!] two (failed: crashed)\n")
    assert is_done(DoneRule("tasks"), tmp_path, ["Builder"], ["Builder"], False, 1) == \
        (True, "every task in TASKS.md is done or failed (1 failed; at the end of an iteration)")


def test_no_task_list_is_never_done_by_the_tasks_rule(tmp_path):
    assert is_done(DoneRule("tasks"), tmp_path, PHASES, PHASES, False, 1) == (False, "no TASKS.md")
    assert read_tasks(tmp_path) is None


def test_a_phrase_counts_only_as_the_agents_said_it(tmp_path):
    assert is_done(DoneRule("phrase", "DONE"), tmp_path, PHASES, PHASES, True, 1)[0]
    assert not is_done(DoneRule("phrase", "DONE"), tmp_path, PHASES, PHASES, False, 1)[0]


def test_a_condition_command_runs_in_the_project(tmp_path):
    rule = DoneRule("when", 'test -f DONE && [ "$GENESIS_ITERATION" = 4 ]')
    assert not is_done(rule, tmp_path, PHASES, PHASES, False, 4)[0]
    (tmp_path / "DONE").write_text("")
    assert is_done(rule, tmp_path, PHASES, PHASES, False, 4)[0]
    assert not is_done(rule, tmp_path, PHASES, PHASES, False, 3)[0]
    assert not is_done(DoneRule("never"), tmp_path, PHASES, PHASES, True, 4)[0]
