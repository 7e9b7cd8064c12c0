"""What a merged task leaves behind, removed by default: its branch on the shared remote, its
merge worktree and branch at home, its worktree and branch in every machine's root.

At home, once the task's merge is pushed: the remote's branch deleted only while it is still
the tip the merge took (a lease: a straggler's later push keeps it), the merge worktree and the
home's branch removed as the local fleet prunes a merged task (fleet/worktrees.prune: only what
the project branch holds). The merge's detail says what went, so the status and the report say it.

On a machine, when an attempt fetches (`fetch --prune`): a task branch the remote no longer has
(the home deleted it after its merge) is removed here too, but only when this clone's branch is
exactly the tip the remote had (all of it was pushed, so all of it was merged), its worktree is
clean and no loop runs in it. Anything else stays, for someone to look at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from genesis.fleet import worktrees
from genesis.fleet.taskref import BRANCH_PREFIX

__all__ = ["remote_tips", "gone", "clean_machine", "delete_remote_branch", "clean_home"]


def remote_tips(git: worktrees.Git, remote: str) -> dict[str, str]:
    """The task branches the clone's remote-tracking refs hold: {branch: tip}."""
    prefix = f"refs/remotes/{remote}/"
    done = git("for-each-ref", "--format=%(refname) %(objectname)", f"{prefix}{BRANCH_PREFIX}")
    if done.returncode != 0:
        return {}
    tips = {}
    for line in done.text.splitlines():
        ref, _, sha = line.partition(" ")
        tips[ref[len(prefix):]] = sha
    return tips


def gone(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """The task branches the remote had before a fetch and no longer has: {branch: its last tip}."""
    return {branch: tip for branch, tip in before.items() if branch not in after}


def clean_machine(base: Path, vanished: dict[str, str], running: Callable[[Path], bool]) -> list[str]:
    """Remove the worktrees and branches of the vanished task branches from a machine's clone
    `base`, each only when its branch is the tip the remote last had, its worktree clean and no
    loop (`running`) in it; the branches removed."""
    if not vanished:
        return []
    git = worktrees.Git(base)
    removed = []
    for info in worktrees.listed(base)[1:]:
        tip = vanished.get(info.branch)
        if tip is None or worktrees.rev(git, f"refs/heads/{info.branch}") != tip:
            continue   # not a vanished task's, or commits here the remote never had
        if not info.prunable and running(info.path):
            continue
        if info.prunable:
            git.out("worktree", "prune")
        elif git("worktree", "remove", str(info.path)).returncode != 0:
            continue   # uncommitted changes or untracked files: they stay, and so does it
        if git("update-ref", "-d", f"refs/heads/{info.branch}", tip).returncode == 0:
            removed.append(info.branch)
    return removed


def delete_remote_branch(project: Path, remote: str, branch: str, tip: str) -> bool:
    """The task's branch deleted from the remote while it is still `tip` (the one merged)."""
    done = worktrees.Git(project)("push", "-q", "--no-verify", f"--force-with-lease=refs/heads/{branch}:{tip}",
                                  remote, f":refs/heads/{branch}")
    return done.returncode == 0


def clean_home(project: Path, remote: str, wt: Path, branch: str, target: str, tip: str) -> str:
    """After a merge pushed: the remote's branch, the merge worktree and the home's branch
    removed; in words, what went and what stayed."""
    said = []
    if tip:
        said.append(f"{branch} deleted from {remote}" if delete_remote_branch(project, remote, branch, tip)
                    else f"{branch} kept on {remote} (it moved since the merge)")
    said.append("its worktree and branch removed here" if worktrees.prune(project, wt, branch, target)
                else f"its worktree {wt} kept (not all of it is on {target}, or it has changes)")
    return "; ".join(said)
