"""Auto-commit after a phase, so that work survives a later kill; push only if asked.

The work tree is the agent's: its hooks do not run unless asked (run_hooks), fsmonitor is
off, and everything git starts (filters such as git-lfs stay on) carries the loop's
markers, so the reaper can find it. Every git call is bounded (see progress.run_git).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

from genesis.repo.gitcmd import GitFailed, GitRun, run_git

__all__ = ["CommitResult", "UserChanges", "commit", "user_changes"]

GIT_TIMEOUT = 120
NO_MARKERS: Mapping[str, str] = MappingProxyType({})
UNMERGED = frozenset({b"DD", b"AU", b"UD", b"UA", b"DU", b"AA", b"UU"})  # git status's conflict codes


@dataclass(frozen=True)
class CommitResult:
    committed: bool
    sha: str = ""
    pushed: bool | None = None     # None: not asked to push
    error: str = ""


@dataclass(frozen=True)
class _Git:
    project: Path
    markers: Mapping[str, str]
    run_hooks: bool
    timeout: float

    def __call__(self, *args: str, identity: bool = False, stdin: bytes | None = None,
                 literal: bool = False, env: Mapping[str, str] | None = None) -> GitRun:
        config = [("core.fsmonitor", "false")]
        if not self.run_hooks:
            config.append(("core.hooksPath", os.devnull))  # no hook is found under /dev/null
        if identity:
            config += [("user.name", "Genesis"), ("user.email", "genesis@localhost")]
        extra = {**self.markers, **(env or {})}
        if literal:
            extra["GIT_LITERAL_PATHSPECS"] = "1"  # a file named '*' is that file, not every file
        return run_git(self.project, args, timeout=self.timeout, config=config, env=extra, stdin=stdin)


def _why(done: GitRun) -> str:
    return (done.stderr or done.text.strip())[-300:]


def _nul(paths: Sequence[str]) -> bytes:
    return b"\0".join(os.fsencode(p) for p in paths)


def _listing(paths: Sequence[str], most: int = 5) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _unstage(git: _Git, paths: Sequence[str]) -> None:
    """Take paths back out of the index (as they are in HEAD), read NUL-separated from stdin."""
    if paths:
        git("reset", "-q", "--pathspec-from-file=-", "--pathspec-file-nul",
            stdin=_nul(paths), literal=True)


def commit(project: Path, message: str, excluded: list[str], push: bool,
           keep_out: Sequence[str] = (), tracked_only: bool = False,
           markers: Mapping[str, str] = NO_MARKERS, run_hooks: bool = False,
           timeout: float = GIT_TIMEOUT, only: Sequence[str] | None = None) -> CommitResult:
    """Stage everything but Genesis's files and `keep_out` and commit it; nothing to commit
    is not an error.

    Genesis's files are kept out by info/exclude (see layout.ensure_git_excludes); if the
    user tracks one anyway, its changes are unstaged again before the commit. `keep_out`
    are the user's own untracked files, found at the run's start: never the agent's work.
    `tracked_only` stages changes to tracked files only. `markers` go into git's
    environment; `run_hooks` lets the repository's hooks run; `timeout` bounds each git
    command (one that runs over is killed with its process group and reported in error).
    `only` commits just those paths, whatever else is staged (which stays staged).

    Nothing is committed while files have unresolved conflicts: staging them would record
    the conflict markers (and conclude a merge); the error says so.
    """
    git = _Git(Path(project), markers, run_hooks, timeout)
    try:
        conflicted = _unmerged(git)
        if conflicted:
            return CommitResult(False, error=f"not committed: {len(conflicted)} file(s) have unresolved conflicts "
                                             f"({_listing(conflicted)}), and committing would record the conflict "
                                             f"markers; resolve them and `git add` them, or abort what is in "
                                             f"progress (`git status` names it)")
        if only is not None:
            left_out = set(keep_out)
            return _commit_only(git, message, [p for p in only if p not in left_out and not _genesis_file(p, excluded)],
                                push)
        added = git("add", "-u" if tracked_only else "-A", "--", ".")
        if added.returncode != 0:
            return CommitResult(False, error=f"git add failed: {_why(added)}")
        _unstage(git, [p.lstrip("/").rstrip("/*") for p in excluded] + list(keep_out))
        if git("diff", "--cached", "--quiet").returncode == 0:
            return CommitResult(False)
        return _conclude(git, push, ["-m", message])
    except GitFailed as exc:  # GitTimeout too: it says which command and what was done
        return CommitResult(False, error=str(exc))
    except OSError as exc:
        return CommitResult(False, error=f"cannot run git in {project}: {exc}")


def _commit_only(git: _Git, message: str, paths: Sequence[str], push: bool) -> CommitResult:
    """Commit the work tree's content of paths alone: what else is staged stays staged, uncommitted."""
    if not paths:
        return CommitResult(False)
    added = git("add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", stdin=_nul(paths), literal=True)
    if added.returncode != 0:
        return CommitResult(False, error=f"git add failed: {_why(added)}")
    staged = git("diff", "--cached", "--name-only", "--no-renames", "-z")
    wanted = set(paths)
    if not any(os.fsdecode(p) in wanted for p in staged.stdout.split(b"\0") if p):
        return CommitResult(False)
    return _conclude(git, push, ["--only", "-m", message, "--pathspec-from-file=-", "--pathspec-file-nul"],
                     stdin=_nul(paths))


def _genesis_file(path: str, excluded: Sequence[str]) -> bool:
    """Whether path matches one of Genesis's own patterns (`/file`, `/folder/`, `/prefix*`)."""
    for pattern in excluded:
        core = pattern.lstrip("/")
        if core.endswith("*") and path.startswith(core[:-1]):
            return True
        if path == core.rstrip("/") or path.startswith(core.rstrip("/") + "/"):
            return True
    return False


def _conclude(git: _Git, push: bool, args: Sequence[str], stdin: bytes | None = None) -> CommitResult:
    """git commit ARGS (as Genesis when the user has no identity), then push if asked."""
    has_identity = git("config", "user.email").text.strip() != ""
    done = git("commit", "-q", *args, identity=not has_identity, stdin=stdin, literal=True)
    if done.returncode != 0:
        return CommitResult(False, error=f"git commit failed: {_why(done)}")
    sha = git("rev-parse", "--short", "HEAD").text.strip()
    if not push:
        return CommitResult(True, sha)
    pushed = git("push", "-q")
    if pushed.returncode != 0:
        return CommitResult(True, sha, False, f"git push failed: {_why(pushed)}")
    return CommitResult(True, sha, True)


def _unmerged(git: _Git) -> tuple[str, ...]:
    """The paths with unresolved conflicts in the index (git ls-files --unmerged)."""
    done = git("ls-files", "--unmerged", "-z")
    if done.returncode != 0:
        raise GitFailed(f"git ls-files --unmerged failed: {_why(done)}")
    names = dict.fromkeys(os.fsdecode(entry.split(b"\t", 1)[1]) for entry in done.stdout.split(b"\0")
                          if b"\t" in entry)
    return tuple(names)


@dataclass(frozen=True)
class UserChanges:
    changed: tuple[str, ...]      # tracked files changed or staged (conflicted ones too)
    untracked: tuple[str, ...]    # files git does not track and does not ignore
    unmerged: tuple[str, ...] = ()  # files with unresolved conflicts


def user_changes(project: Path, markers: Mapping[str, str] = NO_MARKERS,
                 timeout: float = GIT_TIMEOUT) -> UserChanges:
    """What in the work tree is not committed (Genesis's own files are excluded by git).

    GitFailed (a RuntimeError; GitTimeout when it ran over timeout) when git cannot say.
    Names git cannot decode are kept as bytes escaped in the str (os.fsdecode).
    """
    git = _Git(Path(project), markers, False, timeout)
    # Renames as a deletion and an addition: each path is one change, with one owner.
    done = git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=dirty",
               "--no-renames", env={"GIT_OPTIONAL_LOCKS": "0"})  # no opportunistic index write
    if done.returncode != 0:
        raise GitFailed(f"git status failed in {project}: {_why(done)}")
    changed: list[str] = []
    untracked: list[str] = []
    unmerged: list[str] = []
    skip = False
    for entry in done.stdout.split(b"\0"):
        if skip:  # the source path of a copy
            skip = False
            continue
        if len(entry) > 3:
            path = os.fsdecode(entry[3:])
            (untracked if entry.startswith(b"??") else changed).append(path)
            if entry[:2] in UNMERGED:
                unmerged.append(path)
            skip = entry[:1] in (b"R", b"C")
    return UserChanges(tuple(changed), tuple(untracked), tuple(unmerged))
