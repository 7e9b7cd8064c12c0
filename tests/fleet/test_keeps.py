"""Nothing dropped: the hunk check, replayed on patches and on small real git repositories."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.git import commit_file, git

from genesis.fleet.keeps import Lost, added, dropped, hunks, lost, said
from genesis.fleet.worktrees import Git

PATCH = """diff --git a/a.txt b/a.txt
index 1..2 100644
--- a/a.txt
+++ b/a.txt
@@ -2,0 +3,2 @@ one
+added one
+--- not a header
@@ -5 +7 @@ two
-old
+new
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-x
-y
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,3 @@
+first
+
+third
diff --git a/TASKS.md b/TASKS.md
--- a/TASKS.md
+++ b/TASKS.md
@@ -1 +1 @@
--- [ ] t
+- [x] t
diff --git a/pic.png b/pic.png
Binary files a/pic.png and b/pic.png differ
"""


def test_a_patch_s_added_lines_are_read_with_their_place_blank_lines_and_tasks_left_out():
    assert added(PATCH) == [("a.txt", 3, "added one"), ("a.txt", 4, "--- not a header"), ("a.txt", 7, "new"),
                            ("new.txt", 1, "first"), ("new.txt", 3, "third")]


def test_a_line_the_result_removes_is_lost_unless_it_is_added_again_elsewhere():
    mine = [("a.txt", 3, "kept"), ("a.txt", 4, "dropped"), ("a.txt", 5, "moved"), ("b.txt", 1, "gone too")]
    to_result = """diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -4,2 +4 @@
-dropped
-moved
+theirs instead
diff --git a/b.txt b/b.txt
--- a/b.txt
+++ b/b.txt
@@ -1 +0,0 @@
-gone too
diff --git a/c.txt b/c.txt
--- a/c.txt
+++ b/c.txt
@@ -0,0 +1 @@
+moved
"""
    assert lost(mine, to_result) == [("a.txt", 4, "dropped"), ("b.txt", 1, "gone too")]
    assert lost(mine, "") == []


def test_lost_lines_that_follow_each_other_are_one_hunk_named_with_who_added_it():
    found = hunks([("a.txt", 5, "e"), ("a.txt", 3, "c"), ("a.txt", 4, "d"), ("b.txt", 4, "x")], "the task 't'")
    assert found == [Lost("a.txt", 3, 5, "the task 't'", "c"), Lost("b.txt", 4, 4, "the task 't'", "x")]
    assert said(found) == "a.txt lines 3-5 (added by the task 't': 'c'); b.txt line 4 (added by the task 't': 'x')"
    assert said(found * 4, most=2).endswith("; and 6 more")


@pytest.fixture
def parted(project):
    """Two branches from one base: `ours` and `theirs`, each adding to shared.txt; their tips."""
    commit_file(project, "shared.txt", "one\ntwo\nthree\n")
    base = git(project, "rev-parse", "HEAD").strip()
    git(project, "checkout", "-q", "-b", "theirs")
    commit_file(project, "shared.txt", "one\ntwo\nTHEIRS\nthree\n", "theirs adds a line")
    commit_file(project, "other.txt", "theirs' file\nsecond\n", "theirs adds a file")
    theirs = git(project, "rev-parse", "HEAD").strip()
    git(project, "checkout", "-q", "-b", "ours", base)
    commit_file(project, "shared.txt", "one\nOURS\ntwo\nthree\n", "ours adds a line")
    ours = git(project, "rev-parse", "HEAD").strip()
    return base, ours, theirs


def _result(project: Path, files: dict[str, str | None]) -> str:
    """A commit on ours with files as given (None: removed)."""
    for name, text in files.items():
        if text is None:
            git(project, "rm", "-q", name)
        else:
            (project / name).write_text(text)
            git(project, "add", name)
    git(project, "commit", "-qm", "result")
    return git(project, "rev-parse", "HEAD").strip()


def test_a_merge_keeping_both_sides_drops_nothing(project, parted):
    base, ours, theirs = parted
    git(project, "merge", "-q", "--no-edit", "theirs")
    result = git(project, "rev-parse", "HEAD").strip()
    assert dropped(Git(project), base, (("ours", ours), ("theirs", theirs)), result) == []


def test_a_resolution_keeping_one_side_names_the_other_side_s_lost_hunk(project, parted):
    base, ours, theirs = parted
    result = _result(project, {"other.txt": "theirs' file\nsecond\n"})  # theirs' shared.txt line is not there
    assert dropped(Git(project), base, (("ours", ours), ("the task 'b'", theirs)), result) == [
        Lost("shared.txt", 3, 3, "the task 'b'", "THEIRS")]


def test_a_file_a_side_added_and_the_result_lacks_is_named_whole(project, parted):
    base, ours, theirs = parted
    result = _result(project, {"shared.txt": "one\nOURS\ntwo\nTHEIRS\nthree\n"})
    assert dropped(Git(project), base, (("ours", ours), ("theirs", theirs)), result) == [
        Lost("other.txt", 1, 2, "theirs", "theirs' file")]


def test_a_line_a_later_commit_of_the_same_side_changed_is_not_asked_for(project, parted):
    base, ours, theirs = parted
    git(project, "checkout", "-q", "theirs")
    commit_file(project, "shared.txt", "one\ntwo\nTHEIRS, revised\nthree\n", "theirs revises its line")
    theirs = git(project, "rev-parse", "HEAD").strip()
    git(project, "checkout", "-q", "ours")
    result = _result(project, {"shared.txt": "one\nOURS\ntwo\nTHEIRS, revised\nthree\n",
                               "other.txt": "theirs' file\nsecond\n"})
    assert dropped(Git(project), base, (("ours", ours), ("theirs", theirs)), result) == []


def test_the_blame_names_who_added_a_lost_line_and_a_moved_line_is_kept(project, parted):
    base, ours, theirs = parted
    git(project, "mv", "shared.txt", "renamed.txt")  # ours' line moves with its file: kept
    result = _result(project, {"renamed.txt": "one\nOURS\ntwo\nthree\n", "other.txt": "theirs' file\n"})
    found = dropped(Git(project), base, (("ours", ours), ("theirs", theirs)), result,
                    blame=lambda at, path, line: f"{path}:{line} at {at[:7]}")
    assert found == [Lost("other.txt", 2, 2, f"other.txt:2 at {theirs[:7]}", "second"),
                     Lost("shared.txt", 3, 3, f"shared.txt:3 at {theirs[:7]}", "THEIRS")]
