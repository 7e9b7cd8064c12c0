"""Genesis's git runs nothing the agent can configure: planted filters, drivers, fsmonitor,
pack programs and includes stay silent in its own commands (real git, real payloads), while
the user's identity is kept from the run's start."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers.git import commit_file, git

from genesis.repo import gitenv
from genesis.repo.autocommit import commit
from genesis.repo.gitcmd import run_git


@pytest.fixture(autouse=True)
def fresh():
    gitenv.forget()
    yield
    gitenv.forget()


def payload(tmp_path, name: str) -> str:
    """A shell command that leaves a marker when it runs (then behaves as `cat`)."""
    return f'touch "{tmp_path / name}"; cat'


def test_a_clean_filter_planted_in_the_repository_never_runs_in_the_auto_commit(project, tmp_path):
    git(project, "config", "filter.x.clean", payload(tmp_path, "clean-ran"))
    git(project, "config", "filter.x.smudge", payload(tmp_path, "smudge-ran"))
    git(project, "config", "filter.x.required", "true")
    (project / ".gitattributes").write_text("*.txt filter=x\n")
    (project / "work.txt").write_text("the agent's work\n")
    result = commit(project, "genesis: Builder", [], push=False)
    assert result.committed and not result.error
    assert not (tmp_path / "clean-ran").exists() and not (tmp_path / "smudge-ran").exists()
    assert git(project, "show", "HEAD:work.txt") == "the agent's work\n"  # as written: no filter made it


def test_a_filter_planted_in_the_users_global_config_never_runs(project, tmp_path, monkeypatch):
    home = tmp_path / "user-home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text(f"[filter \"g\"]\n\tclean = {payload(tmp_path, 'global-ran')}\n"
                                     f"[core]\n\tfsmonitor = {payload(tmp_path, 'global-fsmonitor')}\n")
    (home / ".config" / "git" / "attributes").write_text("* filter=g\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    (project / "work.txt").write_text("work\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)  # the user's own git does run it
    assert (tmp_path / "global-ran").exists() and (tmp_path / "global-fsmonitor").exists()
    (tmp_path / "global-ran").unlink()
    (tmp_path / "global-fsmonitor").unlink()
    (project / "more.txt").write_text("more\n")
    result = commit(project, "genesis: Builder", [], push=False)
    assert result.committed and not result.error
    assert not (tmp_path / "global-ran").exists() and not (tmp_path / "global-fsmonitor").exists()


def test_an_fsmonitor_program_never_runs(project, tmp_path):
    git(project, "config", "core.fsmonitor", payload(tmp_path, "fsmonitor-ran"))
    (project / "README.md").write_text("changed\n")
    assert commit(project, "genesis: Builder", [], push=False).committed
    assert run_git(project, ["status", "--porcelain"]).returncode == 0
    assert not (tmp_path / "fsmonitor-ran").exists()


def test_a_filter_named_in_an_included_file_of_the_work_tree_never_runs(project, tmp_path):
    (project / "inc.cfg").write_text(f"[filter \"i\"]\n\tclean = {payload(tmp_path, 'include-ran')}\n")
    git(project, "config", "include.path", str(project / "inc.cfg"))
    (project / ".gitattributes").write_text("*.txt filter=i\n")
    (project / "a.txt").write_text("a\n")
    assert commit(project, "genesis: Builder", [], push=False).committed
    assert not (tmp_path / "include-ran").exists()


def test_a_textconv_and_an_external_diff_never_run_in_diffs(project, tmp_path):
    commit_file(project, "a.txt", "one\n")
    git(project, "config", "diff.t.textconv", payload(tmp_path, "textconv-ran"))
    git(project, "config", "diff.t.command", payload(tmp_path, "extdiff-ran"))
    git(project, "config", "diff.external", payload(tmp_path, "external-ran"))
    (project / ".gitattributes").write_text("*.txt diff=t\n")
    (project / "a.txt").write_text("two\n")
    shown = run_git(project, ["diff", "HEAD", "--", "a.txt"])
    assert shown.returncode == 0 and "+two" in shown.text
    assert run_git(project, ["log", "-p", "-1"]).returncode == 0
    assert not any((tmp_path / n).exists() for n in ("textconv-ran", "extdiff-ran", "external-ran"))


def test_a_merge_driver_never_runs_and_the_merge_is_git_text_merge(project, tmp_path):
    commit_file(project, "f.txt", "a\nb\nc\n")
    git(project, "checkout", "-qb", "side")
    commit_file(project, "f.txt", "a\nSIDE\nc\n")
    git(project, "checkout", "-q", "-")
    commit_file(project, "f.txt", "a\nMAIN\nc\n")
    git(project, "config", "merge.m.driver", f'touch "{tmp_path / "driver-ran"}"; true')
    (project / ".git" / "info" / "attributes").write_text("*.txt merge=m\n")
    done = run_git(project, ["merge", "-q", "side"], config=[("user.name", "T"), ("user.email", "t@x")])
    assert done.returncode != 0  # a conflict, as git's own text merge finds it
    assert not (tmp_path / "driver-ran").exists()
    merged = (project / "f.txt").read_text()
    assert "<<<<<<<" in merged and "MAIN" in merged and "SIDE" in merged


def test_a_planted_receive_pack_never_runs_on_a_push(project, tmp_path):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(project, "remote", "add", "origin", str(remote))
    git(project, "config", "remote.origin.receivepack", f'touch "{tmp_path / "pack-ran"}"; git-receive-pack')
    git(project, "config", "core.sshCommand", f'touch "{tmp_path / "ssh-ran"}"; ssh')
    done = run_git(project, ["push", "-q", "origin", "HEAD:refs/heads/main"])
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "pack-ran").exists()
    assert git(remote, "rev-parse", "main") == git(project, "rev-parse", "HEAD")


def test_the_users_identity_at_the_start_signs_genesiss_commits_whatever_the_phase_wrote(project):
    git(project, "config", "user.name", "Night Owl")
    git(project, "config", "user.email", "owl@example.invalid")
    state = project / ".git" / "genesis"
    state.mkdir()
    gitenv.save(gitenv.settings_file(state), "run-1", gitenv.record(project))
    git(project, "config", "user.name", "Agent")  # the agent writes .git/config during a phase
    git(project, "config", "user.email", "agent@example.invalid")
    (project / "work.txt").write_text("work\n")
    assert commit(project, "genesis: Builder", [], push=False).committed
    assert git(project, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == \
        "Night Owl <owl@example.invalid>|Night Owl <owl@example.invalid>"


def test_git_lfs_runs_only_as_the_real_git_lfs_on_path(project, tmp_path, monkeypatch):
    # A filter named lfs whose command is something else is planted code, not git-lfs.
    git(project, "config", "filter.lfs.clean", payload(tmp_path, "fake-lfs-ran"))
    (project / ".gitattributes").write_text("*.bin filter=lfs\n")
    (project / "a.bin").write_text("x\n")
    assert gitenv.record(project).lfs == ""
    assert commit(project, "genesis: Builder", [], push=False).committed
    assert not (tmp_path / "fake-lfs-ran").exists()
    assert gitenv.lfs_line(gitenv.record(project)) == ""


@pytest.mark.parametrize("key, value, runs", [
    ("filter.x.clean", "sh p", True), ("filter.x.required", "true", False), ("diff.x.textconv", "p", True),
    ("merge.x.driver", "p", True), ("merge.renames", "true", False), ("core.fsmonitor", "p", True),
    ("core.hooksPath", "h", True), ("includeIf.gitdir:/x/.path", "f", True), ("include.path", "f", True),
    ("credential.https://x.helper", "p", True), ("gpg.ssh.program", "p", True), ("user.name", "n", False),
    ("remote.origin.url", "u", False), ("remote.origin.receivepack", "p", True), ("alias.x", "!sh", True),
    ("alias.st", "status", False), ("protocol.ext.allow", "always", True), ("branch.main.remote", "o", False),
])
def test_which_keys_run_a_program(key, value, runs):
    assert gitenv.runs_program(key, value) is runs


def test_neutral_git_reads_no_system_or_global_config(project, tmp_path, monkeypatch):
    home = tmp_path / "user-home"
    home.mkdir()
    (home / ".gitconfig").write_text("[genesis]\n\tprobe = global\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    assert subprocess.run(["git", "config", "genesis.probe"], cwd=project, capture_output=True,
                          text=True).stdout.strip() == "global"
    assert run_git(project, ["config", "genesis.probe"]).returncode == 1


def test_a_filter_planted_in_the_common_config_never_runs_in_a_fleet_childs_commit(project, tmp_path):
    child = tmp_path / "child"
    git(project, "worktree", "add", "-q", "-b", "task-1", str(child))
    git(child, "config", "filter.x.clean", payload(tmp_path, "child-filter-ran"))
    (child / ".gitattributes").write_text("*.txt filter=x\n")
    (child / "work.txt").write_text("work\n")
    assert commit(child, "genesis: Builder", [], push=False).committed
    assert not (tmp_path / "child-filter-ran").exists()


def test_the_real_git_lfs_configured_at_the_start_is_kept_by_its_full_path(project, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git-lfs").write_text("#!/bin/sh\nexec cat\n")
    (bin_dir / "git-lfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    git(project, "config", "filter.lfs.process", "git-lfs filter-process")
    git(project, "config", "filter.lfs.required", "true")
    settings = gitenv.record(project)
    assert settings.lfs == str(bin_dir / "git-lfs")
    assert ("filter.lfs.process", f"{bin_dir / 'git-lfs'} filter-process") in settings.entries
    assert gitenv.lfs_line(settings) == (f"git-lfs: its filters run in Genesis's git as configured at the start "
                                         f"({bin_dir / 'git-lfs'})")


def test_the_bare_ref_stores_neutralisers_are_read_once_until_its_config_changes(tmp_path, monkeypatch):
    # Genesis's own store (repo/refstore.py) is a bare repository: no .git inside it. Its
    # neutralisers are cached like a work tree's, by its config file, and read again when
    # that file changes.
    store = tmp_path / "refstore.git"
    subprocess.run(["git", "init", "-q", "--bare", str(store)], check=True)
    subprocess.run(["git", "config", "filter.x.clean", "touch planted"], cwd=store, check=True)
    reads = []
    real = gitenv.read_config
    monkeypatch.setattr(gitenv, "read_config", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    first = gitenv.neutralisers(store)
    assert ("filter.x.clean", "") in first
    assert gitenv.neutralisers(store) == first and len(reads) == 1
    subprocess.run(["git", "config", "diff.y.textconv", "touch planted"], cwd=store, check=True)
    again = gitenv.neutralisers(store)
    assert ("diff.y.textconv", "cat") in again and set(first) < set(again) and len(reads) == 2
