"""Progress against real git repositories: every kind of change counts, ours never does."""

import json
import os

import pytest

from genesis.layout import Layout, ensure_git_excludes
from genesis.progress import NotARepository, fingerprint, open_repo

from conftest import git


def fp(project):
    lay = Layout(project, project / "orchestrator" / "logs", project / "hooks" / "loop_multi_agent.txt")
    return fingerprint(project, lay.ignored())


def test_nothing_changed_gives_the_same_fingerprint(project):
    assert fp(project) == fp(project)


def test_committed_work_counts_even_with_a_clean_tree(project):
    before = fp(project)
    (project / "a.py").write_text("x = 1\n")
    git(project, "add", "a.py")
    git(project, "commit", "-qm", "work")
    after = fp(project)
    assert after != before and after.head != before.head


def test_unstaged_staged_and_untracked_changes_count(project):
    base = fp(project)
    (project / "README.md").write_text("changed\n")
    unstaged = fp(project)
    assert unstaged != base
    git(project, "add", "README.md")
    staged = fp(project)
    assert staged != unstaged and staged != base
    (project / "new.txt").write_text("1")
    untracked = fp(project)
    assert untracked != staged
    (project / "new.txt").write_text("2")
    assert fp(project) != untracked


def test_rewriting_an_untracked_file_with_the_same_content_is_not_progress(project):
    (project / "same.txt").write_text("x")
    before = fp(project)
    (project / "same.txt").write_text("x")
    assert fp(project) == before


def test_genesis_own_files_never_count(project):
    lay = Layout(project, project / "orchestrator" / "logs", project / "hooks" / "loop_multi_agent.txt")
    ensure_git_excludes(lay)
    before = fp(project)
    (project / "orchestrator" / ".genesis").mkdir(parents=True)
    (project / "orchestrator" / ".genesis" / "loop.json").write_text("{}")
    (project / "orchestrator" / ".circuit_breaker.json").write_text(json.dumps({"state": "OPEN"}))
    (project / "orchestrator" / ".circuit_breaker.json.lock").write_text("")
    (project / "orchestrator" / "logs").mkdir()
    (project / "orchestrator" / "logs" / "iter-0001-Builder.log").write_text("log")
    (project / "hooks").mkdir()
    (project / "hooks" / "loop_multi_agent.txt").write_text("false\n")
    assert fp(project) == before
    assert git(project, "status", "--porcelain") == ""


def test_excludes_go_to_info_exclude_once_and_never_to_gitignore(project):
    lay = Layout(project, project / "orchestrator" / "logs", project / "hooks" / "loop_multi_agent.txt")
    assert ensure_git_excludes(lay)
    assert ensure_git_excludes(lay) == []
    text = (project / ".git" / "info" / "exclude").read_text()
    assert text.count("/orchestrator/.genesis/") == 1
    assert not (project / ".gitignore").exists()


def test_a_repository_without_commits_works(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    git(root, "init", "-q")
    before = fp(root)
    assert before.head is None
    (root / "f").write_text("1")
    assert fp(root) != before


def test_not_a_git_work_tree_is_a_clear_error(tmp_path):
    with pytest.raises(NotARepository, match="not a git work tree"):
        fp(tmp_path)


def test_a_subdirectory_of_a_repository_is_refused_with_the_top_level_named(project):
    (project / "sub").mkdir()
    with pytest.raises(NotARepository, match="inside the git work tree"):
        fp(project / "sub")


@pytest.mark.parametrize("name", ["$GENESIS_TEST_DIR", "a$GENESIS_TEST_DIR", "${GENESIS_TEST_DIR}", "~$HOME"])
def test_a_project_whose_path_holds_a_dollar_is_taken_literally(tmp_path, monkeypatch, name):
    # The variable names a real repository next to the project: expanding it would make git
    # measure that one instead, so every answer below must come from the project itself.
    monkeypatch.setenv("GENESIS_TEST_DIR", "other")
    other = tmp_path / "base" / "other"
    other.mkdir(parents=True)
    git(other, "init", "-q")
    git(other, "commit", "-q", "--allow-empty", "-m", "other")
    root = tmp_path / "base" / name / "proj"
    root.mkdir(parents=True)
    git(root, "init", "-q")
    (root / "f.txt").write_text("1\n")
    git(root, "add", "f.txt")
    git(root, "commit", "-qm", "init")
    assert open_repo(root).git.rev_parse("--show-toplevel") == str(root)
    before = fp(root)
    assert before.head == git(root, "rev-parse", "HEAD").strip() != git(other, "rev-parse", "HEAD").strip()
    (root / "f.txt").write_text("2\n")
    assert fp(root) != before
    (root / "new.txt").write_text("untracked")
    changed = fp(root)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "work")
    assert fp(root).head != changed.head
    assert git(other, "status", "--porcelain") == ""
