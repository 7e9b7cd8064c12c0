"""Auto-commit in a work tree the agent controls: its hooks stay off, what git starts carries
the loop's markers, and every git call is bounded (real repositories, real processes)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import psutil
import pytest
from helpers.git import commit_file, git
from helpers.gitstates import conflicted_merge, stash_pop_conflict
from helpers.procs import LISTEN, alive, free_port, listening
from helpers.waits import wait_for

from genesis.procs.reaper import markers_for
from genesis.repo.autocommit import CommitResult, commit, push, user_changes
from genesis.repo.gitcmd import GitFailed, GitTimeout

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-index-change",
         "reference-transaction")


def install_hooks(project, tmp_path, port: int) -> None:
    """The hooks an agent could plant: each notes that it ran; pre-commit also starts a server."""
    (tmp_path / "server.py").write_text(LISTEN)
    hooks = project / ".git" / "hooks"
    for name in HOOKS:
        body = f'#!/bin/sh\necho {name} >> "{tmp_path / "hooks-ran"}"\n'
        if name == "pre-commit":
            body += f'"{sys.executable}" "{tmp_path / "server.py"}" {port} &\necho $! > "{tmp_path / "server.pid"}"\n'
        (hooks / name).write_text(body)
        (hooks / name).chmod(0o755)


def last_message(project) -> str:
    return git(project, "log", "-1", "--format=%s").strip()


@pytest.mark.fault(31)
def test_by_default_no_hook_of_the_repository_runs(project, tmp_path):
    port = free_port()
    install_hooks(project, tmp_path, port)
    (project / "work.py").write_text("x = 1\n")
    markers = markers_for(project, "run-autocommit")
    result = commit(project, "genesis: Builder, iteration 1 (finished)", [], push=False, markers=markers)
    assert result.committed and not result.error
    assert not (tmp_path / "hooks-ran").exists()  # checked first: the test's own git runs them
    assert not listening(port)
    assert last_message(project) == "genesis: Builder, iteration 1 (finished)"
    assert git(project, "status", "--porcelain") == ""


@pytest.mark.fault(31)
def test_with_run_hooks_the_hooks_run_and_what_they_start_carries_the_markers(project, tmp_path):
    port = free_port()
    install_hooks(project, tmp_path, port)
    (project / "work.py").write_text("x = 1\n")
    markers = markers_for(project, "run-autocommit")
    try:
        result = commit(project, "genesis: Builder, iteration 1 (finished)", [], push=False, markers=markers,
                        run_hooks=True)
        assert result.committed and not result.error
        ran = (tmp_path / "hooks-ran").read_text().split()
        assert {"pre-commit", "commit-msg", "post-commit"} <= set(ran)
        wait_for(lambda: listening(port), what="the hook's server to listen")
        server = psutil.Process(int((tmp_path / "server.pid").read_text()))
        env = server.environ()
        assert {key: env.get(key) for key in markers} == markers
    finally:
        if (tmp_path / "server.pid").exists():
            pid = int((tmp_path / "server.pid").read_text())
            if alive(pid):
                psutil.Process(pid).kill()


def fake_lfs(tmp_path, monkeypatch, clean: str) -> None:
    """A `git-lfs` on PATH whose clean filter runs clean (the only filter Genesis's git runs)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git-lfs").write_text(f"#!/bin/sh\n[ \"$1\" = clean ] || exec cat\n{clean}\n")
    (bin_dir / "git-lfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def use_lfs(project) -> None:
    git(project, "config", "filter.lfs.clean", "git-lfs clean -- %f")
    git(project, "config", "filter.lfs.smudge", "git-lfs smudge -- %f")


@pytest.mark.fault(31)
def test_git_lfs_filters_stay_on_for_add_and_carry_the_markers(project, tmp_path, monkeypatch):
    # The lfs filter, named as `git lfs install` names it, with git-lfs on PATH: it runs.
    fake_lfs(tmp_path, monkeypatch, f'env > "{tmp_path / "filter-env"}"; tr a-z A-Z')
    use_lfs(project)
    (project / ".gitattributes").write_text("*.big filter=lfs\n")
    (project / "data.big").write_text("payload\n")
    markers = markers_for(project, "run-autocommit")
    assert commit(project, "with a filter", [], push=False, markers=markers).committed
    assert git(project, "show", "HEAD:data.big") == "PAYLOAD\n"
    seen = dict(line.split("=", 1) for line in (tmp_path / "filter-env").read_text().splitlines() if "=" in line)
    assert {key: seen.get(key) for key in markers} == markers


@pytest.mark.fault(31)
def test_a_hanging_filter_in_add_is_killed_with_its_group_and_reported(project, tmp_path, monkeypatch):
    fake_lfs(tmp_path, monkeypatch, "sleep 1041; cat")
    use_lfs(project)
    (project / ".gitattributes").write_text("*.txt filter=lfs\n")
    (project / "a.txt").write_text("a\n")
    head = git(project, "rev-parse", "HEAD")
    result = commit(project, "never", [], push=False, timeout=1)
    assert not result.committed
    assert result.error.startswith("`git add -A` ran for more than 1s in ")
    assert "killed with everything it started" in result.error
    assert git(project, "rev-parse", "HEAD") == head
    wait_for(lambda: not any("sleep 1041" in " ".join(p.info["cmdline"] or []) and alive(p.pid)
                             for p in psutil.process_iter(["cmdline"])), what="the filter's sleep to be gone")


@pytest.mark.fault(31)
def test_user_changes_runs_no_fsmonitor_and_no_hook(project, tmp_path):
    git(project, "config", "core.fsmonitor", f'touch "{tmp_path / "fsmonitor-ran"}"; sleep 1042')
    install_hooks(project, tmp_path, free_port())
    (project / "README.md").write_text("changed\n")
    (project / "new.txt").write_text("new\n")
    found = user_changes(project, timeout=30)
    assert found.changed == ("README.md",) and found.untracked == ("new.txt",)
    assert not (tmp_path / "fsmonitor-ran").exists() and not (tmp_path / "hooks-ran").exists()


def test_user_changes_that_hang_raise_a_timeout_naming_git_status(project, tmp_path, monkeypatch):
    fake_lfs(tmp_path, monkeypatch, "sleep 1043; cat")
    use_lfs(project)
    (project / ".gitattributes").write_text("README.md filter=lfs\n")
    st = os.stat(project / "README.md")
    os.utime(project / "README.md", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # same size: git must look
    with pytest.raises(GitTimeout, match=r"^`git status --porcelain=v1 .*` ran for more than 1s") as caught:
        user_changes(project, timeout=1)
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, GitFailed)


def test_user_changes_keeps_names_git_cannot_decode(project):
    name = os.fsdecode(b"caf\xe9.txt")
    (project / name).write_text("x")
    found = user_changes(project)
    assert found.untracked == (name,)
    result = commit(project, "agent work", [], push=False, keep_out=list(found.untracked))
    assert not result.committed and not result.error  # the user's file alone: nothing to commit
    status = subprocess.run(["git", "status", "--porcelain", "-z"], cwd=project, capture_output=True, check=True)
    assert status.stdout == b"?? caf\xe9.txt\0"


def test_a_failing_commit_says_why(project):
    hook = project / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'refused by the pre-commit hook' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    (project / "a.py").write_text("x\n")
    result = commit(project, "work", [], push=False, run_hooks=True)
    assert not result.committed and result.error == "git commit failed: refused by the pre-commit hook"
    assert commit(project, "work", [], push=False).committed  # hooks off by default


@pytest.mark.fault(58)
@pytest.mark.parametrize("make", [conflicted_merge, stash_pop_conflict])
def test_files_with_unresolved_conflicts_are_never_committed(project, make):
    make(project)
    merging = (project / ".git" / "MERGE_HEAD").exists()
    head = git(project, "rev-parse", "HEAD")
    (project / "agent.py").write_text("x = 1\n")
    result = commit(project, "genesis: Builder, iteration 1 (finished)", [], push=False)
    assert not result.committed
    assert result.error.startswith("not committed: 1 file(s) have unresolved conflicts (f.txt), and committing "
                                   "would record the conflict markers; resolve them and `git add` them")
    assert git(project, "rev-parse", "HEAD") == head
    assert (project / ".git" / "MERGE_HEAD").exists() == merging  # a merge is not concluded either
    assert "UU f.txt" in git(project, "status", "--porcelain")
    assert not commit(project, "work", [], push=False, only=["agent.py"]).committed


def test_only_commits_those_paths_and_leaves_what_else_is_staged_staged(project):
    (project / "gone.txt").write_text("x\n")
    git(project, "add", "gone.txt")
    git(project, "commit", "-qm", "to delete")
    (project / "README.md").write_text("the agent's\n")
    (project / "new.py").write_text("y = 1\n")
    (project / "gone.txt").unlink()
    (project / "staged.txt").write_text("the user's, staged\n")
    git(project, "add", "staged.txt")
    (project / "orchestrator" / "logs").mkdir(parents=True)
    (project / "orchestrator" / "logs" / "x.log").write_text("log\n")
    result = commit(project, "leftovers", ["/orchestrator/logs/"], push=False,
                    only=["README.md", "new.py", "gone.txt", "orchestrator/logs/x.log"])
    assert result.committed and not result.error
    assert sorted(git(project, "show", "--format=", "--name-only", "HEAD").split()) == \
        ["README.md", "gone.txt", "new.py"]
    assert git(project, "status", "--porcelain", "--untracked-files=all").splitlines() == \
        ["A  staged.txt", "?? orchestrator/logs/x.log"]
    assert not commit(project, "again", [], push=False, only=["README.md"]).committed  # nothing left there


def bare_remote(project, tmp_path, name: str = "origin"):
    """A real bare remote of the project, its default branch pushed; no branch tracks it."""
    bare = tmp_path / f"{name}.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "remote", "add", name, str(bare))
    git(project, "push", "-q", name, "HEAD")
    return bare


def test_a_task_branch_without_an_upstream_gets_one_on_its_first_push(project, tmp_path):
    bare = bare_remote(project, tmp_path)
    git(project, "checkout", "-q", "--no-track", "-b", "genesis/task/t-1")
    (project / "a.txt").write_text("a\n")
    refused = commit(project, "one", [], push=True)  # not asked to: said as before, not pushed
    assert refused.committed and refused.pushed is False and "has no upstream" in refused.error
    (project / "b.txt").write_text("b\n")
    done = commit(project, "two", [], push=True, set_upstream=True)
    assert done.committed and done.pushed and not done.error
    assert git(bare, "rev-parse", "refs/heads/genesis/task/t-1") == git(project, "rev-parse", "HEAD")
    assert git(project, "rev-parse", "--abbrev-ref", "@{upstream}").strip() == "origin/genesis/task/t-1"
    (project / "c.txt").write_text("c\n")
    assert commit(project, "three", [], push=True).pushed  # from then on a plain auto-push
    assert git(bare, "rev-parse", "refs/heads/genesis/task/t-1") == git(project, "rev-parse", "HEAD")


def test_a_push_the_remote_rejects_is_said_and_never_forced(project, tmp_path):
    bare = bare_remote(project, tmp_path)
    git(project, "checkout", "-q", "--no-track", "-b", "genesis/task/t-1")
    other = tmp_path / "other"  # another machine pushes to the task's branch first
    git(tmp_path, "clone", "-q", str(bare), str(other))
    git(other, "checkout", "-q", "-b", "genesis/task/t-1")
    (other / "theirs.txt").write_text("theirs\n")
    git(other, "add", "theirs.txt")
    git(other, "commit", "-qm", "theirs")
    git(other, "push", "-q", "origin", "genesis/task/t-1")
    theirs = git(bare, "rev-parse", "refs/heads/genesis/task/t-1")
    (project / "mine.txt").write_text("mine\n")
    done = commit(project, "mine", [], push=True, set_upstream=True)
    assert done.committed and done.pushed is False
    assert done.error.startswith("git push failed: ") and "[rejected]" in done.error, done.error
    assert done.error.endswith("Genesis never forces a push, so this work stays committed here, unpushed")
    assert git(bare, "rev-parse", "refs/heads/genesis/task/t-1") == theirs  # their work is kept
    assert git(project, "log", "-1", "--format=%s").strip() == "mine"      # and so is this one, here


def test_the_agents_own_commits_are_pushed_when_there_is_nothing_to_commit(project, tmp_path):
    bare = bare_remote(project, tmp_path, "shared")
    git(project, "checkout", "-q", "--no-track", "-b", "genesis/task/t-1")
    start = git(project, "rev-parse", "HEAD").strip()
    assert push(project, set_upstream=True, unless_at=start) == CommitResult(False)  # nothing new: no push
    commit_file(project, "agent.txt")
    done = push(project, set_upstream=True, unless_at=start)
    assert not done.committed and done.pushed and not done.error
    assert git(bare, "rev-parse", "refs/heads/genesis/task/t-1") == git(project, "rev-parse", "HEAD")
