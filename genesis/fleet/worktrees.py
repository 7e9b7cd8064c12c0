"""Each fleet task's git worktree and branch: made outside the project's work tree, found
again after a restart, and removed only once everything on the branch is in the project branch.

The default place is `<git common dir>/genesis-worktrees/<task id>`: outside the work tree
(git status never lists it, `git clean -fdx` never takes it), and it goes with the repository.
Every git command here is bounded (repo/gitcmd.run_git), runs no hook of the repository
unless asked (an agent may have planted one), and never waits on a prompt.

The worktrees are found from `git worktree list`, never from a record of Genesis's own, so a
monitor started again adopts the ones already made. A worktree is pruned only when its branch
is merged into the project branch and it holds no uncommitted change or untracked file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from genesis.repo.gitcmd import GitFailed, GitRun, run_git
from genesis.repo.gitenv import hooks_dir
from genesis.store.layout import private_dir

__all__ = ["Git", "WorktreeInfo", "WorktreeError", "ROOT_NAME", "worktree_root", "create", "listed", "merged_into",
           "prune", "rev", "common_dir"]

ROOT_NAME = "genesis-worktrees"
GIT_TIMEOUT = 120.0   # one git command: a checkout of a large tree takes a while, a hung filesystem for ever


class WorktreeError(RuntimeError):
    """A worktree cannot be made or found as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Git:
    """git in one work tree as Genesis runs it for the fleet: bounded, fsmonitor off, the
    repository's hooks only when asked (GENESIS_GIT_HOOKS), no prompt, and Genesis's identity
    where the repository has none (as repo/autocommit.py commits)."""
    cwd: Path
    hooks: bool = False
    unsigned: str = ""         # why commit.gpgsign is turned off: signing would wait on a prompt (repo/signing.py)
    sign: bool = False         # signing is on and works: plumbing (commit-tree) must be told, it reads no config
    timeout: float = GIT_TIMEOUT

    def __call__(self, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None,
                 identity: bool = False) -> GitRun:
        # No hook runs unless asked (gitcmd turns them off); then those the user had at the start.
        config = [("core.hooksPath", hooks_dir(self.cwd))] if self.hooks else []
        if self.unsigned:
            config.append(("commit.gpgsign", "false"))
        if identity and not self("config", "user.email").text.strip():
            config += [("user.name", "Genesis"), ("user.email", "genesis@localhost")]
        return run_git(self.cwd, args, timeout=self.timeout, config=config, stdin=stdin,
                       env={"GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true", **(env or {})})

    def out(self, *args: str, **kw) -> str:
        """The command's output, stripped; GitFailed when it fails."""
        done = self(*args, **kw)
        if done.returncode != 0:
            raise GitFailed(f"`git {' '.join(args)}` failed in {self.cwd}: {(done.stderr or done.text)[-300:]}")
        return done.text.strip()


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    branch: str        # short name ("" when detached or bare)
    head: str          # the commit it has checked out ("" in a new repository)
    locked: bool
    prunable: bool     # its folder is gone: git keeps only its records


def rev(git: Git, ref: str) -> str:
    """The commit ref names, or "" when there is none."""
    done = git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    return done.text.strip() if done.returncode == 0 else ""


def common_dir(project: Path) -> Path:
    """The repository's common git directory (the main work tree's `.git`, shared by its worktrees)."""
    return Path(Git(Path(project)).out("rev-parse", "--path-format=absolute", "--git-common-dir"))


def worktree_root(project: Path, cfg) -> Path:
    """Where the fleet's worktrees go (made private if missing): GENESIS_FLEET_WORKTREE_DIR,
    else `<git common dir>/genesis-worktrees`."""
    return private_dir(cfg.fleet_worktree_dir or common_dir(project) / ROOT_NAME)


def listed(project: Path) -> list[WorktreeInfo]:
    """Every worktree of the repository, the main one first (`git worktree list --porcelain -z`)."""
    found: list[WorktreeInfo] = []
    fields: dict[str, str] = {}
    for entry in Git(Path(project)).out("worktree", "list", "--porcelain", "-z").split("\0") + [""]:
        if entry:
            key, _, value = entry.partition(" ")
            fields[key] = value
            continue
        if "worktree" in fields:
            found.append(WorktreeInfo(Path(fields["worktree"]), fields.get("branch", "").removeprefix("refs/heads/"),
                                      fields.get("HEAD", ""), "locked" in fields, "prunable" in fields))
        fields = {}
    return found


def create(project: Path, root: Path, task_id: str, branch: str, base: str, *, hooks: bool = False) -> Path:
    """The task's worktree, on branch; made at root/task_id when no worktree has branch yet.

    Idempotent: an existing worktree of the branch is reused wherever it is (a restarted
    monitor re-adopts it, never a second one); the branch is made at base when absent, and
    an existing branch is checked out as it is (its commits are the task's work so far).
    """
    project = Path(project)
    git = Git(project, hooks)
    trees = listed(project)
    for info in trees:
        if info.branch != branch:
            continue
        if info is trees[0]:  # the user's own checkout: a child never works there
            raise WorktreeError(f"branch {branch} is checked out in the project's work tree {info.path}; check out "
                                f"another branch there and the task gets its own worktree")
        if not info.prunable:
            return info.path
        git.out("worktree", "prune")  # its folder is gone: only its records are left
    path = Path(root) / task_id
    if os.path.lexists(path):
        raise WorktreeError(f"{path} exists and is no worktree of branch {branch}; move it away (or remove it "
                            f"if nothing in it is needed) and the task gets a new worktree there")
    private_dir(Path(root))
    if rev(git, f"refs/heads/{branch}"):
        done = git("worktree", "add", "-q", str(path), branch)
    else:
        done = git("worktree", "add", "-q", "--no-track", "-b", branch, str(path), base)
    if done.returncode != 0:
        raise WorktreeError(f"cannot make a worktree for {branch} at {path}: {(done.stderr or done.text)[-300:]}")
    return path


def merged_into(project: Path, branch: str, target: str) -> bool:
    """Whether every commit of branch is reachable from target (a branch that does not exist has
    nothing left to lose)."""
    git = Git(Path(project))
    tip = rev(git, f"refs/heads/{branch}")
    if not tip:
        return git("show-ref", "--verify", "-q", f"refs/heads/{branch}").returncode != 0
    goal = rev(git, f"refs/heads/{target}")
    return bool(goal) and git("merge-base", "--is-ancestor", tip, goal).returncode == 0


def prune(project: Path, path: Path, branch: str, target: str) -> bool:
    """Remove the task's worktree and branch, only when every commit of the branch is in target;
    True when both are gone. Never a branch with commits target lacks, never a worktree with
    uncommitted changes or untracked files, never a branch another worktree has checked out."""
    project, path = Path(project), Path(path)
    git = Git(project)
    tip = rev(git, f"refs/heads/{branch}")
    if not merged_into(project, branch, target):
        return False
    here = [w for w in listed(project) if _same(w.path, path)]
    if here and here[0].branch not in (branch, ""):
        return False  # another task's (or the user's) worktree now: not this task's to remove
    if here and here[0].prunable:
        git.out("worktree", "prune")
    elif here and git("worktree", "remove", str(path)).returncode != 0:
        return False  # uncommitted changes or untracked files in it: they stay, and so does it
    if not tip:
        return not os.path.lexists(path)
    if any(w.branch == branch for w in listed(project)):
        return False
    # Compare-and-swap: deleted only if it still points where it was proven merged.
    gone = git("update-ref", "-d", f"refs/heads/{branch}", tip).returncode == 0
    return gone and not os.path.lexists(path)


def _same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)
