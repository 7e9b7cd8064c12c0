"""Progress against real git repositories: every kind of change counts, ours never does."""

import json
import os
import subprocess

import psutil
import pytest
from helpers.git import git
from helpers.waits import wait_for

from genesis.repo.gitcmd import GitFailed, GitTimeout, NotOwned, run_git
from genesis.repo.progress import NotARepository, fingerprint, measuring_config
from genesis.repo.worktree import open_repo
from genesis.store.layout import Layout, ensure_git_excludes


def layout(project):
    return Layout(project, project / "orchestrator" / "logs", project / "hooks" / "loop_multi_agent.txt",
                  project / ".git" / "genesis")


def fp(project):
    return fingerprint(project, layout(project).ignored())


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
    lay = layout(project)
    ensure_git_excludes(lay)
    before = fp(project)
    lay.state_dir.mkdir(parents=True)
    (lay.state_dir / "loop.json").write_text("{}")
    (project / "orchestrator").mkdir()
    (project / "orchestrator" / ".circuit_breaker.json").write_text(json.dumps({"state": "OPEN"}))
    (project / "orchestrator" / ".circuit_breaker.json.lock").write_text("")
    (project / "orchestrator" / "logs").mkdir()
    (project / "orchestrator" / "logs" / "iter-0001-Builder.log").write_text("log")
    (project / "hooks").mkdir()
    (project / "hooks" / "loop_multi_agent.txt").write_text("false\n")
    assert fp(project) == before
    assert git(project, "status", "--porcelain") == ""


def test_excludes_go_to_info_exclude_once_and_never_to_gitignore(project):
    lay = layout(project)
    assert ensure_git_excludes(lay)
    assert ensure_git_excludes(lay) == []
    text = (project / ".git" / "info" / "exclude").read_text()
    assert text.count("/orchestrator/logs/") == 1
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
        fingerprint(tmp_path, [])
    with pytest.raises(NotARepository, match="not a directory"):
        fingerprint(tmp_path / "missing", [])


def test_a_subdirectory_of_a_repository_is_refused_with_the_top_level_named(project):
    (project / "sub").mkdir()
    with pytest.raises(NotARepository, match=f"inside the git work tree {project}"):
        fingerprint(project / "sub", [])


def test_a_repository_another_user_owns_is_named_so_with_the_command_that_trusts_it(project, monkeypatch):
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")  # git's own switch for its ownership check
    with pytest.raises(NotOwned) as refused:
        fingerprint(project, [])
    assert "another user owns it (git's \"dubious ownership\")" in str(refused.value)
    assert "not a git work tree" not in str(refused.value)
    assert refused.value.fix == f"git config --global --add safe.directory {project}"
    assert isinstance(refused.value, NotARepository)  # every command's usage error, as before


def test_a_bare_repository_is_refused(tmp_path):
    git(tmp_path, "init", "-q", "--bare", "bare.git")
    with pytest.raises(NotARepository, match="bare repository"):
        fingerprint(tmp_path / "bare.git", [])


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


# --- nothing the agent configures runs, and every git command is bounded -----------------

def sleepers(tag: str) -> list[psutil.Process]:
    """Live processes whose command line carries tag (zombies count as gone)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if tag in " ".join(proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def arm_traps(project, marks, seconds: int) -> dict[str, str]:
    """Configure every way git can run a command while reading the work tree, the way an
    agent could; each one leaves a mark, then hangs unless TRAP_NOHANG is set."""
    (project / ".gitattributes").write_text("*.txt filter=x diff=t\n*.dat filter=p\n")
    (project / "a.txt").write_text("a\n")
    (project / "b.dat").write_text("b\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "files")

    def trap(name: str, then: str) -> str:
        return f'touch {marks / name}; [ -n "$TRAP_NOHANG" ] || sleep {seconds}; {then}'

    traps = {"filter.x.clean": trap("clean", "cat"), "filter.x.smudge": trap("smudge", "cat"),
             "filter.p.process": trap("process", "cat"), "filter.p.required": "true",
             "diff.t.textconv": trap("textconv", "cat"), "diff.external": trap("external", "true"),
             "core.fsmonitor": trap("fsmonitor", "true")}
    for key, value in traps.items():
        git(project, "config", key, value)
    return traps


@pytest.mark.fault(28)
def test_filters_textconv_external_diff_and_fsmonitor_never_run_while_measuring(project, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    arm_traps(project, marks, 1013)
    before = fingerprint(project, [], timeout=60)
    (project / "a.txt").write_text("a changed\n")
    (project / "b.dat").write_text("b changed\n")
    after = fingerprint(project, [], timeout=60)
    assert after != before and after.head == before.head
    (project / "a.txt").write_text("a changed again\n")
    assert fingerprint(project, [], timeout=60) != after
    assert sorted(os.listdir(marks)) == []
    assert sleepers("sleep 1013") == []
    # The traps are real: git left to itself runs every one of them.
    env = {**os.environ, "TRAP_NOHANG": "1"}
    for extra in ([], ["--no-ext-diff"]):
        subprocess.run(["git", "-c", "filter.p.required=false", "diff", *extra], cwd=project, env=env,
                       capture_output=True, timeout=60)
    assert sorted(os.listdir(marks)) == ["clean", "external", "fsmonitor", "process", "smudge", "textconv"]


@pytest.mark.fault(28)
def test_a_filter_named_with_dots_and_equals_signs_is_neutralised_too(project, tmp_path):
    (project / ".gitattributes").write_text("*.txt filter=a.b=c\n")
    (project / "a.txt").write_text("a\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "files")
    git(project, "config", "filter.a.b=c.clean", f"touch {tmp_path / 'ran'}; sleep 1014; cat")
    git(project, "config", "filter.a.b=c.required", "true")
    assert ("filter.a.b=c.clean", "") in measuring_config(project)
    before = fingerprint(project, [], timeout=60)
    (project / "a.txt").write_text("b\n")
    assert fingerprint(project, [], timeout=60) != before
    assert not (tmp_path / "ran").exists() and sleepers("sleep 1014") == []


@pytest.mark.whole
@pytest.mark.fault(28)
def test_a_git_that_hangs_is_killed_and_named(project):
    (project / ".git" / "config").rename(project / ".git" / "config.real")
    os.mkfifo(project / ".git" / "config")  # git waits forever for someone to write it
    with pytest.raises(GitTimeout) as caught:
        fingerprint(project, [], timeout=1)
    assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, GitFailed)
    assert str(caught.value).startswith(f"`git rev-parse --is-bare-repository --show-toplevel` ran for more "
                                        f"than 1s in {project} and was killed")


@pytest.mark.fault(28)
def test_at_the_timeout_git_is_killed_with_its_whole_process_group(project):
    with pytest.raises(GitTimeout, match=r"^`git -c alias\.hang=.* hang` ran for more than 1s"):
        run_git(project, ["-c", "alias.hang=!sh -c 'sleep 1015; :' && :", "hang"], timeout=1)
    wait_for(lambda: sleepers("sleep 1015") == [], what="the alias's sleep to be gone")


def test_a_child_git_leaves_behind_holding_its_output_does_not_hold_us(project):
    try:
        done = run_git(project, ["-c", "alias.bg=!sleep 1016 & echo started", "bg"], timeout=60)
        assert (done.returncode, done.stdout) == (0, b"started\n")
        assert len(sleepers("sleep 1016")) == 1  # finishing normally kills nothing
    finally:
        for proc in sleepers("sleep 1016"):
            proc.kill()


def test_collected_output_is_capped_with_a_clear_error(project):
    (project / "many").mkdir()
    for i in range(50):
        (project / "many" / f"file-{i:02d}").write_text("x")
    assert run_git(project, ["ls-files", "--others"], limit=1000).stdout.count(b"\n") == 50
    with pytest.raises(GitFailed, match=r"`git ls-files --others` printed more than 100 bytes"):
        run_git(project, ["ls-files", "--others"], limit=100)


def test_config_reaches_git_as_one_key_whatever_it_holds(project):
    done = run_git(project, ["config", "--get", "x.a=b c.key"], config=[("x.a=b c.key", "v=1 2")])
    assert done.text == "v=1 2\n"
