"""Git configuration planted during a phase is found, kept as evidence, undone and named
(real repositories; the user's own `git commit` afterwards runs nothing planted)."""

from __future__ import annotations

import subprocess

from helpers.git import git

from genesis.repo import planted


def plant_hook(project, name: str, marker) -> None:
    hook = project / ".git" / "hooks" / name
    hook.write_text(f'#!/bin/sh\ntouch "{marker}"\n')
    hook.chmod(0o755)


def test_a_planted_filter_hook_and_attributes_are_undone_kept_and_named(project, tmp_path):
    plant_hook(project, "post-commit", tmp_path / "users-hook-ran")  # the user's own, before the night
    start = planted.snapshot(project)
    (project / ".git" / "payload.sh").write_text(f'touch "{tmp_path / "clean-ran"}"; cat\n')
    git(project, "config", "filter.x.clean", "sh .git/payload.sh")
    git(project, "config", "remote.mirror.url", "/elsewhere")  # not code: stays as the agent left it
    (project / ".gitattributes").write_text("*.txt filter=x\n")
    (project / ".git" / "info" / "attributes").write_text("*.md diff=x\n")
    plant_hook(project, "pre-commit", tmp_path / "planted-hook-ran")
    evidence = tmp_path / "logs" / "planted"

    found = planted.undo(project, start, evidence)

    lines = [f.line() for f in found]
    assert lines == [
        f"the agent planted a git clean filter `x` (filter.x.clean = 'sh .git/payload.sh') in .git/config; undone, "
        f"kept at {evidence / 'git-config.found'}",
        f"the agent planted a git hook `pre-commit` in .git/hooks/pre-commit; undone, kept at "
        f"{evidence / 'hooks' / 'pre-commit'}",
        f"the agent planted git attributes (diff=x) in .git/info/attributes; undone, kept at "
        f"{evidence / 'git-info-attributes.found'}",
        "the agent planted attributes naming a driver (filter=x) in .gitattributes; committed with no driver "
        "run by Genesis's git",
    ]
    assert subprocess.run(["git", "config", "filter.x.clean"], cwd=project).returncode == 1
    assert git(project, "config", "remote.mirror.url").strip() == "/elsewhere"
    assert "clean = sh .git/payload.sh" in (evidence / "git-config.found").read_text()
    assert not (project / ".git" / "info" / "attributes").exists()
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    assert (evidence / "hooks" / "pre-commit").read_text().startswith("#!/bin/sh")
    # The user's first commit in the morning, with their own git: nothing planted runs.
    (project / "a.txt").write_text("a\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "morning")
    assert not (tmp_path / "clean-ran").exists() and not (tmp_path / "planted-hook-ran").exists()
    assert (tmp_path / "users-hook-ran").exists()  # the user's own hook is theirs


def test_a_changed_hook_is_put_back_and_a_users_filter_stays(project, tmp_path):
    plant_hook(project, "pre-push", tmp_path / "users")
    git(project, "config", "filter.mine.clean", "cat")  # the user's, from before the night
    start = planted.snapshot(project)
    plant_hook(project, "pre-push", tmp_path / "agent")
    found = planted.undo(project, start, tmp_path / "evidence")
    assert [(f.where, f.what) for f in found] == [(".git/hooks/pre-push", "a changed git hook `pre-push`")]
    assert str(tmp_path / "users") in (project / ".git" / "hooks" / "pre-push").read_text()
    assert git(project, "config", "filter.mine.clean").strip() == "cat"


def test_a_changed_value_of_a_users_key_is_put_back(project, tmp_path):
    git(project, "config", "diff.pdf.textconv", "pdftotext")
    start = planted.snapshot(project)
    git(project, "config", "diff.pdf.textconv", "sh payload")
    git(project, "config", "includeIf.gitdir:/.path", str(project / "inc"))
    found = planted.undo(project, start, tmp_path / "evidence")
    assert {f.what for f in found} == {"a diff driver `pdf` (diff.pdf.textconv = 'sh payload')",
                                       f"includeif.gitdir:/.path = {str(project / 'inc')[:80]!r}"}  # values cut at 80
    assert all(f.undone for f in found)
    assert git(project, "config", "--get-all", "diff.pdf.textconv").strip() == "pdftotext"
    assert subprocess.run(["git", "config", "--get-regexp", "^includeif"], cwd=project).returncode == 1


def test_nothing_planted_is_nothing_said_and_nothing_kept(project, tmp_path):
    start = planted.snapshot(project)
    git(project, "config", "branch.main.description", "the agent's note")
    (project / "work.txt").write_text("work\n")
    assert planted.undo(project, start, tmp_path / "evidence") == []
    assert not (tmp_path / "evidence").exists()


def test_a_fleet_childs_planting_in_the_common_config_is_found_from_its_worktree(project, tmp_path):
    child = tmp_path / "child"
    git(project, "worktree", "add", "-q", "-b", "task-1", str(child))
    start = planted.snapshot(child)
    git(child, "config", "filter.x.clean", "sh payload")  # a linked worktree writes the common .git/config
    found = planted.undo(child, start, tmp_path / "evidence")
    assert [(f.where, f.undone) for f in found] == [(".git/config", True)]
    assert subprocess.run(["git", "config", "filter.x.clean"], cwd=project).returncode == 1


def test_a_filter_planted_in_the_users_global_config_is_undone_for_every_repository(project, tmp_path, monkeypatch):
    home = tmp_path / "user-home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Night Owl\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    start = planted.snapshot(project)
    subprocess.run(["git", "config", "--global", "filter.g.clean", f'touch "{tmp_path / "ran"}"; cat'], check=True)
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "attributes").write_text("* filter=g\n")
    found = planted.undo(project, start, tmp_path / "evidence")
    assert [(f.where, f.what.split(" (")[0], f.undone) for f in found] == [
        ("~/.gitconfig", "a git clean filter `g`", True), ("~/.config/git/attributes", "git attributes", True)]
    assert (home / ".gitconfig").read_text().startswith("[user]\n\tname = Night Owl\n")
    assert not (home / ".config" / "git" / "attributes").exists()
    other = tmp_path / "other"  # another repository of the user's, with the user's own git
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (other / "a.txt").write_text("a\n")
    subprocess.run(["git", "add", "-A"], cwd=other, check=True)
    assert not (tmp_path / "ran").exists()


def test_a_users_hook_that_is_a_link_is_put_back_as_that_link(project, tmp_path):
    target = tmp_path / "users-hook.sh"
    target.write_text("#!/bin/sh\nexit 0\n")
    target.chmod(0o755)
    link = project / ".git" / "hooks" / "pre-commit"
    link.symlink_to(target)
    start = planted.snapshot(project)
    link.unlink()
    plant_hook(project, "pre-commit", tmp_path / "agent")
    found = planted.undo(project, start, tmp_path / "evidence")
    assert [f.what for f in found] == ["a changed git hook `pre-commit`"]
    assert link.is_symlink() and link.resolve() == target
