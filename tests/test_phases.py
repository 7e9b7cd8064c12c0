"""Triggers: each kind parsed and decided, and the shipped ones deciding on every form of a
TASKS.md item with the one grammar (no grep, no subprocess); an old `when:grep` still runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genesis.config import DEFAULT_TRIGGERS, resolve
from genesis.loop.completion import is_done
from genesis.phases import DoneRule, Phase, Trigger, parse_trigger, should_run

ALL = ["Builder", "Criticizer", "Planner"]


def phase(trigger: str, name: str = "Builder") -> Phase:
    return Phase(name, parse_trigger(trigger), Path("p.md"))


def tasks(project: Path, text: str) -> None:
    (project / "TASKS.md").write_text("# Tasks\n\n" + text)


@pytest.mark.parametrize("text, kind", [
    ("always", "always"), ("never", "never"), ("every:5", "every"), ("tasks:review", "tasks"),
    ("tasks:open", "tasks"), ("tasks:none-open", "tasks"), ("any:every:5,tasks:none-open", "any"),
    (" any: every:3 , tasks:review ", "any"), ("when:test -f X", "when"),
])
def test_triggers_parse_and_print_as_written(text, kind):
    trigger = parse_trigger(text)
    assert trigger.kind == kind
    assert parse_trigger(str(trigger)) == trigger


@pytest.mark.parametrize("text, message", [
    ("tasks:done", r"tasks: takes review \(a task awaits review\), open \(a task is open\), none-open "
                   r"\(no task is open\)"),
    ("any:every:5", "any: joins two or more"),
    ("any:when:true,every:2", "any: joins two or more"),
    ("any:any:always,never,never", "any: joins two or more"),
    ("any:every:0,tasks:open", "every:N needs a whole number"),
    ("sometimes", "use always, never, every:N, tasks:review, tasks:open, tasks:none-open, any:A,B or when:COMMAND"),
])
def test_bad_triggers_say_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message):
        parse_trigger(text)


def test_the_shipped_triggers_are_built_in_kinds_not_commands(project):
    cfg = resolve(project, env={})
    assert {p.name: str(p.trigger) for p in cfg.phases} == DEFAULT_TRIGGERS == {
        "Builder": "always", "Criticizer": "tasks:review", "Planner": "any:every:5,tasks:none-open"}
    assert not any(p.trigger.kind == "when" for p in cfg.phases)


# One task awaiting review, and one open, in each list form.
FORMS = {"dash": "- [?] built\n- [ ] next\n", "star": "* [?] built\n* [ ] next\n",
         "plus": "+ [?] built\n+ [ ] next\n", "numbered": "1. [?] built\n2. [ ] next\n",
         "parenthesis": "1) [?] built\n2) [ ] next\n", "nested": "- [x] epic\n  - [?] built\n    * [ ] next\n"}


@pytest.mark.fault(69)
@pytest.mark.parametrize("form", FORMS)
def test_the_shipped_triggers_decide_on_every_list_form(project, form):
    """A `* [?]` task was never reviewed and a `* [ ]` one let the Planner run every iteration;
    a numbered list ended the night at once as done."""
    phases = {p.name: p for p in resolve(project, env={}).phases}
    tasks(project, FORMS[form])
    assert should_run(phases["Criticizer"], 1, project)[0]
    assert not should_run(phases["Planner"], 1, project)[0]
    assert should_run(phases["Planner"], 5, project)[0]
    assert not is_done(DoneRule("tasks"), project, ALL, ALL, False, 1)[0]
    tasks(project, FORMS[form].replace("[?]", "[x]").replace("[ ]", "[X]"))
    assert not should_run(phases["Criticizer"], 1, project)[0]
    assert should_run(phases["Planner"], 1, project)[0]
    assert is_done(DoneRule("tasks"), project, ALL, ALL, False, 1)[0]


def test_each_decision_says_why(project):
    phases = {p.name: p for p in resolve(project, env={}).phases}
    tasks(project, FORMS["star"])
    assert should_run(phases["Criticizer"], 1, project) == (True, "1 task(s) awaiting review in TASKS.md")
    assert should_run(phases["Planner"], 1, project) == (False, "every 5 iterations; 1 task(s) open in TASKS.md")
    assert should_run(phases["Planner"], 5, project) == (True, "every 5 iterations")
    assert is_done(DoneRule("tasks"), project, ALL, ALL, False, 1) == \
        (False, "1 task(s) open and 1 awaiting review in TASKS.md")
    tasks(project, "1. [x] built\n")
    assert should_run(phases["Criticizer"], 1, project) == (False, "0 task(s) awaiting review in TASKS.md")
    assert should_run(phases["Planner"], 1, project) == (True, "0 task(s) open in TASKS.md")
    assert is_done(DoneRule("tasks"), project, ALL, ALL, False, 1) == \
        (True, "every task in TASKS.md is done (after a Planner pass that added nothing)")
    tasks(project, "no task here\n")
    assert is_done(DoneRule("tasks"), project, ALL, ALL, False, 1) == \
        (True, "TASKS.md lists no task (after a Planner pass that added nothing)")


def test_without_a_task_list_the_planner_runs_to_write_one(project):
    assert should_run(phase("tasks:none-open", "Planner"), 1, project) == (True, "no readable TASKS.md")
    assert should_run(phase("tasks:review"), 1, project) == (False, "no readable TASKS.md")
    assert should_run(phase("tasks:open"), 1, project) == (False, "no readable TASKS.md")


def test_tasks_open_counts_open_tasks_only(project):
    tasks(project, "- [?] built\n")
    assert should_run(phase("tasks:open"), 1, project) == (False, "0 task(s) open in TASKS.md")
    tasks(project, "7. [ ] next\n")
    assert should_run(phase("tasks:open"), 1, project) == (True, "1 task(s) open in TASKS.md")


def test_an_old_when_grep_trigger_from_a_users_config_still_runs(project):
    """The shipped triggers of older versions, as a user's genesis.conf may still hold them."""
    (project / "orchestrator").mkdir()
    (project / "orchestrator" / "genesis.conf").write_text(
        "PHASE_Criticizer_TRIGGER=\"when:grep -qs '^- \\[?\\]' TASKS.md\"\n"
        "PHASE_Planner_TRIGGER='when:[ $((GENESIS_ITERATION % 5)) -eq 0 ] || ! grep -qs \"^- \\[ \\]\" TASKS.md'\n")
    phases = {p.name: p for p in resolve(project, env={}).phases}
    assert phases["Criticizer"].trigger.kind == "when"
    tasks(project, "- [?] built\n- [ ] next\n")
    assert should_run(phases["Criticizer"], 1, project) == (True, "its condition exited 0")
    assert should_run(phases["Planner"], 1, project) == (False, "its condition exited 1")
    assert should_run(phases["Planner"], 10, project) == (True, "its condition exited 0")


def test_any_runs_when_one_part_would_and_says_which():
    here = Path(".")
    both = Phase("Planner", Trigger("any", parts=(Trigger("every", every=2), Trigger("always"))), Path("p.md"))
    assert should_run(both, 3, here) == (True, "always")
    assert should_run(both, 4, here) == (True, "every 2 iterations")
    none = phase("any:never,every:2")
    assert should_run(none, 3, here) == (False, "never; every 2 iterations")


def test_a_fifo_at_tasks_md_is_named_and_no_condition_waits_on_it(project, tmp_path):
    """A `when:grep ... TASKS.md` waited on the FIFO until its bound, and its grep was left behind."""
    os.mkfifo(project / "TASKS.md")
    ran = tmp_path / "ran"
    assert should_run(phase(f"when:touch {ran}; grep -q x TASKS.md"), 1, project) == \
        (False, "its condition was not run: TASKS.md is a FIFO, not a regular file")
    assert should_run(phase("tasks:open"), 1, project) == (False, "TASKS.md is a FIFO, not a regular file")
    assert is_done(DoneRule("when", f"touch {ran}"), project, ["Builder"], ["Builder"], False, 1) == \
        (False, "the completion check was not run: TASKS.md is a FIFO, not a regular file")
    assert not ran.exists()
