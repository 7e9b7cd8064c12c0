"""The one TASKS.md grammar: every list form, every box, what is not a task, and the bounds."""

from __future__ import annotations

import os

import pytest

from genesis.repo.tasks import (DONE, FAILED, MAX_TASKS_BYTES, OPEN, REVIEW, Task, done_tasks, failed_line, marked,
                                parse, read_tasks, reopened)


@pytest.mark.fault(69)
@pytest.mark.parametrize("line, state, text", [
    ("- [ ] a dash", OPEN, "a dash"),
    ("* [ ] a star", OPEN, "a star"),
    ("+ [ ] a plus", OPEN, "a plus"),
    ("1. [ ] numbered", OPEN, "numbered"),
    ("12) [ ] numbered with a parenthesis", OPEN, "numbered with a parenthesis"),
    ("- [?] built, awaiting review", REVIEW, "built, awaiting review"),
    ("* [?] a star awaiting review", REVIEW, "a star awaiting review"),
    ("3. [?] a number awaiting review", REVIEW, "a number awaiting review"),
    ("- [x] done", DONE, "done"),
    ("- [X] done, upper case", DONE, "done, upper case"),
    ("+ [x] a plus, done", DONE, "a plus, done"),
    ("  - [ ] indented two", OPEN, "indented two"),
    ("        * [?] indented eight", REVIEW, "indented eight"),
    ("\t1. [x] after a tab", DONE, "after a tab"),
    ("-   [ ]   wide   spacing  ", OPEN, "wide   spacing"),
    ("- [ ]", OPEN, ""),
])
def test_every_item_form_is_a_task(line, state, text):
    assert parse(f"# Tasks\n\n{line}\n").items == (Task(state, text, 3),)


@pytest.mark.parametrize("line", [
    "[ ] a box without a list marker",
    "-[ ] no space after the marker",
    "- [x]done with no space after the box",
    "- [-] a box Genesis does not know",
    "- [ x] a box with two characters",
    "- plain item",
    "1.[ ] no space after the number",
    "a. [ ] a letter is no number",
    "> - [ ] a quote",
    "- text then [ ] a box",
])
def test_what_is_not_a_task(line):
    assert parse(f"{line}\n").items == ()


def test_counts_texts_and_a_summary_over_a_mixed_list():
    tasks = parse("# Tasks\n- [x] one\n* [?] two\n1. [ ] three\n   + [ ] three, part a\n2) [X] four\n")
    assert (tasks.count(OPEN), tasks.count(REVIEW), tasks.count(DONE)) == (2, 1, 2)
    assert tasks.texts(DONE) == {"one", "four"}
    assert [t.line for t in tasks.items] == [2, 3, 4, 5, 6]
    assert tasks.summary() == "2 open, 1 awaiting review, 2 done"


def test_items_in_a_fenced_code_block_are_examples_not_tasks():
    text = ("# Tasks\nFormat:\n```markdown\n- [ ] an example\n```\n- [ ] real\n"
            "~~~~\n* [?] another example\n```\nstill inside the tilde fence\n~~~~\n1. [x] real too\n")
    assert [(t.state, t.text) for t in parse(text).items] == [(OPEN, "real"), (DONE, "real too")]


def test_windows_line_endings_and_a_long_item():
    tasks = parse("- [ ] crlf\r\n- [x] " + "y" * 1000 + "\r\n")
    assert [t.text for t in tasks.items] == ["crlf", "y" * 300]


def test_read_tasks_is_none_without_a_readable_file(tmp_path):
    assert read_tasks(tmp_path) is None and done_tasks(tmp_path) == frozenset()
    (tmp_path / "TASKS.md").mkdir()
    assert read_tasks(tmp_path) is None
    (tmp_path / "TASKS.md").rmdir()
    os.mkfifo(tmp_path / "TASKS.md")  # never waited on
    assert read_tasks(tmp_path) is None


def test_a_task_list_over_the_bound_is_not_read(tmp_path):
    with open(tmp_path / "TASKS.md", "wb") as fh:
        fh.truncate(MAX_TASKS_BYTES + 1)
    assert read_tasks(tmp_path) is None


def test_read_tasks_and_done_tasks(tmp_path):
    (tmp_path / "TASKS.md").write_bytes(b"* [x] shipped\n1. [ ] next \xff\n")
    assert read_tasks(tmp_path).summary() == "1 open, 0 awaiting review, 1 done"
    assert done_tasks(tmp_path) == {"shipped"}


@pytest.mark.parametrize("line, state, new", [
    ("- [ ] a\n", REVIEW, "- [?] a\n"),
    ("  12) [?] b\r\n", DONE, "  12) [x] b\r\n"),
    ("* [X] c", OPEN, "* [ ] c"),
    ("plain\n", DONE, None),
])
def test_marked_sets_a_box_and_keeps_the_rest_of_the_line(line, state, new):
    assert marked(line, state) == new


def test_a_failed_task_is_its_own_state_and_not_open():
    tasks = parse("- [!] gave up (failed: the agent crashed 3 times)\n1. [!]\n- [ ] open\n- [x] done\n")
    assert tasks.items[:2] == (Task(FAILED, "gave up (failed: the agent crashed 3 times)", 1), Task(FAILED, "", 2))
    assert (tasks.count(OPEN), tasks.count(FAILED)) == (1, 2)
    assert tasks.summary() == "1 open, 0 awaiting review, 1 done, 2 failed"
    assert parse("- [!]no space\n").items == ()


@pytest.mark.parametrize("line, reason, new", [
    ("- [ ] Add alpha\n", "crashed 3 times", "- [!] Add alpha (failed: crashed 3 times)\n"),
    ("  2) [?] b  \r\n", "a\nmulti-line\treason", "  2) [!] b (failed: a multi-line reason)\r\n"),
    ("* [ ] c", "", "* [!] c (failed: no reason given)"),
    ("- [ ] d\n", "x" * 500, f"- [!] d (failed: {'x' * 120})\n"),
    ("plain\n", "why", None),
])
def test_failed_line_marks_the_box_and_says_why_on_the_same_line(line, reason, new):
    assert failed_line(line, reason) == new
    if new is not None:
        assert parse(new).items[0].state == FAILED


def test_a_task_carries_the_check_on_an_indented_line_under_it():
    tasks = parse("# Tasks\n\n"
                  "- [ ] serve /health\n"
                  "  check: pytest tests/test_health.py -q\n"
                  "- [x] wrapped in backticks\n"
                  "    a note first, then the check\n"
                  "\n"
                  "    check:   `make test`  \n"
                  "    check: not this one: the first counts\n"
                  "1. [ ] numbered\n"
                  "   check: ./run.sh 'a b'\n")
    assert [(t.text, t.check) for t in tasks.items] == [
        ("serve /health", "pytest tests/test_health.py -q"), ("wrapped in backticks", "make test"),
        ("numbered", "./run.sh 'a b'")]


def test_a_task_sent_back_carries_its_note_the_newest_first():
    tasks = parse("- [ ] parse the input\n"
                  "  note:   use the stdlib tokenizer  \n"
                  "  note: the older note\n"
                  "  check: make test\n"
                  "- [ ] print it\n"
                  "note: not under the task\n"
                  "- [ ] in words\n  a note: not one\n")
    assert [(t.text, t.note, t.check) for t in tasks.items] == [
        ("parse the input", "use the stdlib tokenizer", "make test"), ("print it", "", ""), ("in words", "", "")]


@pytest.mark.parametrize("text", [
    "- [ ] no indent\ncheck: make test\n",                       # not under the task: a line of its own
    "- [ ] ended by a line\nsome paragraph\n  check: make test\n",  # the paragraph ended the task's lines
    "- [ ] ended by a fence\n```\n  check: make test\n```\n",
    "  - [ ] indented task\n  check: make test\n",               # no deeper than the task's marker
    "- [ ] empty\n  check:\n",
    "- [ ] in words\n  the check: make test\n",
])
def test_a_check_line_not_under_its_task_is_no_check(text):
    assert [t.check for t in parse(text).items] == [""]


def test_a_nested_task_has_its_own_check_and_a_task_s_lines_end_at_the_next_task():
    tasks = parse("- [ ] parent\n  check: parent-check\n  - [ ] child\n    check: child-check\n")
    assert [(t.text, t.check) for t in tasks.items] == [("parent", "parent-check"), ("child", "child-check")]
    # After its child, a line at the parent's depth is the parent's no more (one simple rule: the next task ends it).
    late = parse("- [ ] parent\n  - [ ] child\n  check: too late\n")
    assert [(t.text, t.check) for t in late.items] == [("parent", ""), ("child", "")]


def test_a_reopened_task_is_open_again_with_genesiss_note_under_it_replacing_the_last():
    text = "# Tasks\n\n- [x] serve  /health\n  check: make test\n3. [x] another\n"
    once = reopened(text, "serve /health", OPEN, "reopened: `make test` exited 2")
    assert once == ("# Tasks\n\n- [ ] serve  /health\n  Genesis: reopened: `make test` exited 2\n  check: make test\n"
                    "3. [x] another\n")
    ticked = once.replace("- [ ] serve", "- [x] serve")
    twice = reopened(ticked, "serve /health", REVIEW, "sent back for review")
    assert twice == ("# Tasks\n\n- [?] serve  /health\n  Genesis: sent back for review\n  check: make test\n"
                     "3. [x] another\n")
    assert parse(twice).items[0].check == "make test"
    assert reopened("3. [x] another\r\n", "another", OPEN, "a\nb") == "3. [ ] another\r\n   Genesis: a b\r\n"
    assert reopened(text, "not a task here", OPEN, "x") is None
    assert reopened("- [ ] serve /health\n", "serve /health", OPEN, "x") is None  # only a done task is reopened
