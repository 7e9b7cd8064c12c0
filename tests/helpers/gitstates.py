"""Real git repositories left in the states a user can leave them in: an operation half
done (merge, rebase, cherry-pick, revert, bisect, am), conflicts with no operation, and a
detached HEAD. Each maker takes a project with one commit on its branch (the `project`
fixture); STATES maps a name to its maker and the operation Genesis must name.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

from helpers.git import git

__all__ = ["STATES", "diverged", "conflicted_merge", "clean_merge_in_progress", "conflicted_rebase",
           "paused_rebase", "apply_rebase", "conflicted_cherry_pick", "sequenced_cherry_pick",
           "conflicted_revert", "bisecting", "conflicted_am", "stash_pop_conflict", "detached", "branch_of"]


def _try(cwd: Path, *args: str, env: dict | None = None) -> int:
    """A git command expected to stop half way (a conflict): its status, never a failed test."""
    return subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                          capture_output=True, env={**os.environ, **(env or {})}).returncode


def _commit(project: Path, name: str, text: str, message: str) -> None:
    (project / name).write_text(text)
    git(project, "add", name)
    git(project, "commit", "-qm", message)


def branch_of(project: Path) -> str:
    return git(project, "symbolic-ref", "--short", "HEAD").strip()


def diverged(project: Path) -> str:
    """f.txt changed one way on the current branch, another way on branch `other`; the
    current branch's name."""
    main = branch_of(project)
    _commit(project, "f.txt", "base\n", "base f")
    git(project, "checkout", "-qb", "other")
    _commit(project, "f.txt", "theirs\n", "theirs")
    git(project, "checkout", "-q", main)
    _commit(project, "f.txt", "ours\n", "ours")
    return main


def conflicted_merge(project: Path) -> None:
    diverged(project)
    assert _try(project, "merge", "other") != 0


def clean_merge_in_progress(project: Path) -> None:
    """`git merge --no-commit`: no conflict, but the merge is not concluded."""
    main = branch_of(project)
    git(project, "checkout", "-qb", "other")
    _commit(project, "g.txt", "theirs\n", "theirs")
    git(project, "checkout", "-q", main)
    _commit(project, "h.txt", "ours\n", "ours")
    assert _try(project, "merge", "--no-commit", "--no-ff", "other") == 0


def conflicted_rebase(project: Path) -> None:
    diverged(project)
    assert _try(project, "rebase", "other") != 0


def paused_rebase(project: Path) -> None:
    """An interactive rebase stopped at an `edit` line: no conflict, nothing uncommitted."""
    _commit(project, "a.txt", "a\n", "a")
    _commit(project, "b.txt", "b\n", "b")
    assert _try(project, "rebase", "-i", "HEAD~2", env={"GIT_SEQUENCE_EDITOR": "sed -i.bak 's/^pick/edit/'"}) == 0


def apply_rebase(project: Path) -> None:
    """The apply backend (rebase-apply/), stopped on a conflict."""
    diverged(project)
    assert _try(project, "rebase", "--apply", "other") != 0


def conflicted_cherry_pick(project: Path) -> None:
    diverged(project)
    assert _try(project, "cherry-pick", "other") != 0


def sequenced_cherry_pick(project: Path) -> None:
    """A multi-commit cherry-pick whose first conflict was resolved and committed: no
    CHERRY_PICK_HEAD any more, only git's sequencer with commits left to pick."""
    diverged(project)
    git(project, "checkout", "-q", "other")
    _commit(project, "i.txt", "more\n", "more")
    git(project, "checkout", "-q", "-")
    assert _try(project, "cherry-pick", "other~1", "other") != 0
    (project / "f.txt").write_text("resolved\n")
    git(project, "add", "f.txt")
    assert _try(project, "commit", "-qm", "resolved", "--no-edit") == 0


def conflicted_revert(project: Path) -> None:
    _commit(project, "f.txt", "one\n", "one")
    _commit(project, "f.txt", "two\n", "two")
    assert _try(project, "revert", "--no-edit", "HEAD~1") != 0


def bisecting(project: Path) -> None:
    _commit(project, "f.txt", "one\n", "one")
    _commit(project, "f.txt", "two\n", "two")
    git(project, "bisect", "start", "HEAD", "HEAD~2")


def conflicted_am(project: Path) -> None:
    _commit(project, "f.txt", "base\n", "base f")
    _commit(project, "f.txt", "patched\n", "patched")
    patch = git(project, "format-patch", "-1", "--stdout")
    git(project, "reset", "-q", "--hard", "HEAD~1")
    _commit(project, "f.txt", "other\n", "other")
    (project.parent / "f.patch").write_text(patch)
    assert _try(project, "am", str(project.parent / "f.patch")) != 0


def stash_pop_conflict(project: Path) -> None:
    """Unresolved conflicts with no operation in progress (`git stash pop` over a change)."""
    _commit(project, "f.txt", "base\n", "base f")
    (project / "f.txt").write_text("stashed\n")
    git(project, "stash", "-q")
    _commit(project, "f.txt", "committed\n", "committed")
    assert _try(project, "stash", "pop") != 0


def detached(project: Path) -> str:
    """HEAD detached at the current commit; its short sha."""
    git(project, "checkout", "-q", "--detach")
    return git(project, "rev-parse", "--short", "HEAD").strip()


# name: (how to leave the project in it, the operation Genesis names)
STATES: dict[str, tuple[Callable[[Path], object], str]] = {
    "conflicted merge": (conflicted_merge, "merge"),
    "merge --no-commit": (clean_merge_in_progress, "merge"),
    "conflicted rebase": (conflicted_rebase, "rebase"),
    "paused rebase": (paused_rebase, "rebase"),
    "rebase --apply": (apply_rebase, "rebase"),
    "conflicted cherry-pick": (conflicted_cherry_pick, "cherry-pick"),
    "multi-commit cherry-pick": (sequenced_cherry_pick, "cherry-pick"),
    "conflicted revert": (conflicted_revert, "revert"),
    "bisect": (bisecting, "bisect"),
    "git am": (conflicted_am, "am"),
}
