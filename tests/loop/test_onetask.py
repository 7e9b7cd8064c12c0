"""A loop told its one task (GENESIS_TASK): the prompt says it first, and the done rule is that
task's box alone, found by its text."""

from __future__ import annotations

from pathlib import Path

from genesis.config import advice, resolve
from genesis.loop.completion import is_done
from genesis.loop.onetask import task_done, task_id_of, task_of, with_task
from genesis.phases import DoneRule

TASKS = "# Tasks\n\n- [x] Add a greeting\n- [ ] Serve it over HTTP\n- [?] Log each request\n"


def write(project: Path, text: str) -> Path:
    (project / "TASKS.md").write_text(text)
    return project


def test_the_prompt_starts_with_the_task_and_leaves_the_shipped_prompt_as_it_is():
    prompt = with_task("You are the Builder.\nTake the first open task.\n", "Serve it over HTTP", "serve-it-0a1b2c")
    head, rest = prompt.split("\n\n---\n\n", 1)
    assert head.startswith("This run works on ONE task of TASKS.md (id serve-it-0a1b2c):\n\n    Serve it over HTTP")
    assert "belong to other agents working at the same time" in head
    assert rest == "You are the Builder.\nTake the first open task.\n"
    assert with_task("unchanged", None) == "unchanged"


def test_the_task_is_read_from_the_environment_as_one_line():
    assert task_of({"GENESIS_TASK": "  Serve it over HTTP \n- [ ] another"}) == "Serve it over HTTP"
    assert task_of({"GENESIS_TASK": "   "}) is None and task_of({}) is None
    assert task_id_of({"GENESIS_TASK_ID": "serve-it-0a1b2c"}) == "serve-it-0a1b2c"
    assert task_id_of({"GENESIS_TASK_ID": "../x y"}) == ""


def test_only_this_tasks_box_decides_whatever_the_others_are(project):
    write(project, TASKS)
    rule = DoneRule("tasks")
    done, why = is_done(rule, project, ["Builder", "Criticizer", "Planner"], ["Builder"], False, 1,
                        task="Add a greeting")
    assert done, why
    assert "other tasks are other loops'" in why
    # The same list without a task: a single loop is not done while tasks are open.
    assert not is_done(rule, project, ["Builder"], ["Builder"], False, 1)[0]
    assert task_done(project, "Serve it over HTTP") == (False, "the task 'Serve it over HTTP' is open in TASKS.md")
    assert task_done(project, "Log each request")[1] == "the task 'Log each request' is awaiting review in TASKS.md"


def test_a_task_whose_line_was_rewritten_is_not_done(project):
    write(project, "- [x] Add a friendly greeting\n- [ ] Serve it over HTTP\n")
    done, why = task_done(project, "Add a greeting")
    assert not done
    assert "not in TASKS.md as written (its line was rewritten or removed)" in why


def test_the_same_task_twice_is_done_only_when_no_line_of_it_is_open(project):
    write(project, "- [x] Add a greeting\n- [ ]  Add  a greeting\n")
    assert task_done(project, "Add a greeting")[0] is False
    write(project, "- [x] Add a greeting\n* [X] Add a greeting\n")
    assert task_done(project, "Add a greeting")[0] is True


def test_no_task_list_is_not_done(project):
    assert task_done(project, "Add a greeting") == (False, "no TASKS.md")


def test_a_childs_environment_is_no_misspelt_setting(project):
    env = {"GENESIS_TASK": "Add a greeting", "GENESIS_TASK_ID": "add-a-greeting-0a1b2c", "PORT": "20000",
           "GENESIS_PORT_BASE": "20000", "GENESIS_PORT_COUNT": "10", "GENESIS_FLEET_DIR": "/x/.git/genesis/fleet"}
    assert advice(resolve(project, env=env), env) == []
