"""The key on each phase's commit: written as a git trailer by the auto-commit, read back from a
branch (bounded), and checked so that a bad key is refused (real repositories)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.git import commit_file, git

from genesis.repo.autocommit import commit
from genesis.repo.phasekeys import MAX_KEY, TRAILER, PhaseKey, check_key, keys_on, parse, trailer_value

KEY = "genesis-fleet-0a1b2c/add-a-greeting-5d41e2#2"


def auto_commit(project: Path, name: str, iteration: int, phase: str, key: str = KEY, unsigned: str = ""):
    (project / name).write_text(f"{name}\n")
    return commit(project, f"genesis: {phase}, iteration {iteration} (finished) [run r]", [], push=False,
                  unsigned=unsigned, trailers=[(TRAILER, trailer_value(key, iteration, phase))])


def test_each_phase_commit_carries_its_key_and_the_branch_lists_them_newest_first(project):
    first = auto_commit(project, "a.txt", 1, "Builder")
    commit_file(project, "b.txt")  # the agent's own commit: no key
    second = auto_commit(project, "c.txt", 1, "Criticizer", unsigned="commit.gpgsign is on, but no agent")
    assert first.committed and second.committed
    body = git(project, "log", "-1", "--format=%B").strip().splitlines()
    # One last paragraph of trailers, so git reads both as trailers.
    assert body[-3:] == ["", "Genesis-Unsigned: commit.gpgsign is on, but no agent",
                         f"Genesis-Phase: {KEY}/1-Criticizer"]
    assert git(project, "log", "-1", "--format=%(trailers:key=Genesis-Phase,valueonly)").strip() == \
        f"{KEY}/1-Criticizer"
    found = keys_on(project, "HEAD")
    assert [(k.key, k.iteration, k.phase) for k in found] == [(KEY, 1, "Criticizer"), (KEY, 1, "Builder")]
    assert found[0].sha == git(project, "rev-parse", "HEAD").strip()
    assert found[1].value == f"{KEY}/1-Builder"


def test_keys_are_read_from_a_bounded_number_of_commits_and_by_prefix(project):
    for n in range(1, 5):
        assert auto_commit(project, f"f{n}.txt", n, "Builder", key=f"task-a#{1 + n // 3}").committed
    assert auto_commit(project, "g.txt", 1, "Builder", key="task-b#1").committed
    assert [k.iteration for k in keys_on(project, "HEAD", limit=2)] == [1, 4]
    assert [k.key for k in keys_on(project, "HEAD", prefix="task-a#")] == ["task-a#2"] * 2 + ["task-a#1"] * 2
    assert keys_on(project, "HEAD", limit=0) == ()
    assert keys_on(project, "refs/heads/no-such-branch") == ()


def test_without_a_key_the_commit_is_as_it_always_was(project):
    (project / "a.txt").write_text("a\n")
    assert commit(project, "genesis: Builder, iteration 1 (finished) [run r]", [], push=False).committed
    assert git(project, "log", "-1", "--format=%B").strip() == "genesis: Builder, iteration 1 (finished) [run r]"
    assert keys_on(project, "HEAD") == ()


def test_a_trailer_of_more_than_one_line_is_never_written(project):
    (project / "a.txt").write_text("a\n")
    done = commit(project, "m", [], push=False, trailers=[(TRAILER, "k/1-Builder\nSigned-off-by: someone")])
    assert not done.committed and "a trailer that is not one line" in done.error
    assert git(project, "status", "--porcelain").strip() == "?? a.txt"


@pytest.mark.parametrize("key, why", [
    ("", ""),
    (KEY, ""),
    ("x" * MAX_KEY, ""),
    ("x" * (MAX_KEY + 1), "is 201 characters long; at most 200"),
    ("fleet/task #2", "holds a space"),
    ("fleet/täsk#2", "not printable ASCII"),
    ("fleet/task\x1b[31m#2", "not printable ASCII"),
])
def test_a_key_is_printable_ascii_without_spaces_and_bounded(key, why):
    said = check_key(key)
    assert (said == "") if not why else (why in said), said


def test_only_values_genesis_wrote_read_back_as_keys():
    assert parse(f"{KEY}/12-Builder", "abc") == PhaseKey(KEY, 12, "Builder", "abc")
    assert parse("a/b#1/3-Fixer_2").key == "a/b#1"  # the key may hold slashes: the last one splits
    for foreign in ("", "someone else", f"{KEY}/x-Builder", f"{KEY}/1-", "k/1-Builder extra"):
        assert parse(foreign) is None, foreign
