"""Auto-commit after a phase, so that work survives a later kill; push only if asked.

The work tree is the agent's: no program its git config names runs (gitcmd, gitenv: git-lfs
only when the user had it at the start), hooks only when asked (run_hooks), and everything
git starts carries the loop's markers, so the reaper can find it. Every git call is bounded
(see progress.run_git).

The per-phase push (AUTO_PUSH) pushes the branch alone (never Genesis's safety refs), never
forced; a push the remote refuses is said as such (a non-fast-forward as `rejected`). A fleet
child's task branch gets its upstream on its first push (push_target). A phase whose agent made
its own commits, leaving nothing to commit, still has them pushed (push).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from genesis.repo.commitfilter import MB, LeftOut, Rules, by_content, by_name_and_size, exclusions
from genesis.repo.gitcmd import GitFailed, GitRun, run_git
from genesis.repo.gitenv import hooks_dir
from genesis.repo.indexlock import clear_stale

__all__ = ["CommitResult", "UserChanges", "commit", "push", "push_rejected", "user_changes", "LeftOut", "Rules",
           "DEFAULT_RULES"]

GIT_TIMEOUT = 120
NO_MARKERS: Mapping[str, str] = MappingProxyType({})
UNMERGED = frozenset({b"DD", b"AU", b"UD", b"UA", b"DU", b"AA", b"UU"})  # git status's conflict codes
DEFAULT_RULES = Rules(10 * MB)  # what every commit leaves out unless told otherwise (commitfilter.py)


@dataclass(frozen=True)
class CommitResult:
    committed: bool
    sha: str = ""
    pushed: bool | None = None     # None: not asked to push
    error: str = ""
    left_out: tuple[LeftOut, ...] = ()  # secrets and huge files kept out of it (commitfilter.py)
    rejected: bool = False         # the push was refused as non-fast-forward: the remote's branch moved


@dataclass(frozen=True)
class _Git:
    project: Path
    markers: Mapping[str, str]
    run_hooks: bool
    timeout: float
    unsigned: str = ""     # why Genesis's commits are not signed (signing would prompt); "": as configured
    trailers: tuple[tuple[str, str], ...] = ()  # (key, value) lines of the message's last paragraph
    set_upstream: bool = False  # a branch without an upstream gets one on its first push (push_target)

    def __call__(self, *args: str, identity: bool = False, stdin: bytes | None = None,
                 literal: bool = False, env: Mapping[str, str] | None = None,
                 config: Sequence[tuple[str, str]] = ()) -> GitRun:
        config = [*config]
        if self.run_hooks:  # gitcmd turns hooks off; asked for, they are those the user had at the start
            config.insert(0, ("core.hooksPath", hooks_dir(self.project)))
        if self.unsigned:
            config.append(("commit.gpgsign", "false"))  # signing would wait on a prompt (repo/signing.py)
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
           timeout: float = GIT_TIMEOUT, only: Sequence[str] | None = None,
           rules: Rules = DEFAULT_RULES, unsigned: str = "",
           said: Callable[[str], None] | None = None,
           trailers: Sequence[tuple[str, str]] = (), set_upstream: bool = False) -> CommitResult:
    """Stage everything but Genesis's files and `keep_out` and commit it; nothing to commit
    is not an error.

    Genesis's files are kept out by info/exclude (see layout.ensure_git_excludes); if the
    user tracks one anyway, its changes are unstaged again before the commit. `keep_out`
    are the user's own untracked files, found at the run's start: never the agent's work.
    `tracked_only` stages changes to tracked files only. `markers` go into git's
    environment; `run_hooks` lets the repository's hooks run; `timeout` bounds each git
    command (one that runs over is killed with its process group and reported in error).
    `only` commits just those paths, whatever else is staged (which stays staged).
    A file that looks like a secret, or is over the size cap, is never committed (`rules`,
    see commitfilter.py): it stays in the work tree and the result names it in left_out.

    Nothing is committed while files have unresolved conflicts: staging them would record
    the conflict markers (and conclude a merge); the error says so.

    `unsigned`: the commit is made unsigned, with a `Genesis-Unsigned:` trailer saying why.
    `trailers`: more (key, value) trailers after it, in the same last paragraph (git reads
    only that one as trailers); a value is one line.
    `set_upstream`: a branch without an upstream is pushed under its own name to the remote a
    plain push would choose (see push_target) and tracks it from then on: a fleet child's task
    branch, which Genesis made. Never forced: a push the remote rejects is an error, said as such.
    A stale index.lock is removed first and `said` (repo/indexlock.py); a held one is waited
    for within a bound, then named in the error.
    """
    bad = [k for k, v in trailers if not k or any(c in k + v for c in "\r\n") or ":" in k]
    if bad:
        return CommitResult(False, error=f"not committed: a trailer that is not one line: {bad[0]!r}")
    git = _Git(Path(project), markers, run_hooks, timeout, unsigned, tuple(trailers), set_upstream)
    try:
        held = _free_index(git, said)
        if held:
            return CommitResult(False, error=held)
        conflicted = _unmerged(git)
        if conflicted:
            return CommitResult(False, error=f"not committed: {len(conflicted)} file(s) have unresolved conflicts "
                                             f"({_listing(conflicted)}), and committing would record the conflict "
                                             f"markers; resolve them and `git add` them, or abort what is in "
                                             f"progress (`git status` names it)")
        if only is not None:
            left_out = set(keep_out)
            return _commit_only(git, message, [p for p in only if p not in left_out and not _genesis_file(p, excluded)],
                                push, rules)
        left = by_name_and_size(git, git.project, rules, tracked_only=tracked_only, skip=keep_out)
        added = git("add", "-u" if tracked_only else "-A", "--", ".", *exclusions(left))
        if added.returncode != 0:
            return CommitResult(False, error=f"git add failed: {_why(added)}", left_out=tuple(left))
        _unstage(git, [p.lstrip("/").rstrip("/*") for p in excluded] + list(keep_out) + [item.path for item in left])
        content = by_content(git, rules, top=git.project)
        _unstage(git, [item.path for item in content])
        left += content
        if git("diff", "--cached", "--quiet").returncode == 0:
            return CommitResult(False, left_out=tuple(left))
        return replace(_conclude(git, push, ["-m", message]), left_out=tuple(left))
    except GitFailed as exc:  # GitTimeout too: it says which command and what was done
        return CommitResult(False, error=str(exc))
    except OSError as exc:
        return CommitResult(False, error=f"cannot run git in {project}: {exc}")


def _commit_only(git: _Git, message: str, paths: Sequence[str], push: bool, rules: Rules) -> CommitResult:
    """Commit the work tree's content of paths alone: what else is staged stays staged,
    uncommitted; what the rules leave out is unstaged again."""
    if not paths:
        return CommitResult(False)
    left = by_name_and_size(git, git.project, rules, among=paths)
    _unstage(git, [item.path for item in left])
    dropped = {item.path for item in left}
    paths = [p for p in paths if p not in dropped]
    if not paths:
        return CommitResult(False, left_out=tuple(left))
    added = git("add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", stdin=_nul(paths), literal=True)
    if added.returncode != 0:
        return CommitResult(False, error=f"git add failed: {_why(added)}", left_out=tuple(left))
    content = by_content(git, rules, among=paths, top=git.project)
    _unstage(git, [item.path for item in content])
    left += content
    dropped |= {item.path for item in content}
    paths = [p for p in paths if p not in dropped]
    staged = git("diff", "--cached", "--name-only", "--no-renames", "-z")
    wanted = set(paths)
    if not any(os.fsdecode(p) in wanted for p in staged.stdout.split(b"\0") if p):
        return CommitResult(False, left_out=tuple(left))
    done = _conclude(git, push, ["--only", "-m", message, "--pathspec-from-file=-", "--pathspec-file-nul"],
                     stdin=_nul(paths))
    return replace(done, left_out=tuple(left))


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
    tail = ([("Genesis-Unsigned", git.unsigned)] if git.unsigned else []) + list(git.trailers)
    if tail:
        args = [*args, "-m", "\n".join(f"{key}: {value}" for key, value in tail)]
    done = git("commit", "-q", *args, identity=not has_identity, stdin=stdin, literal=True)
    if done.returncode != 0:
        return CommitResult(False, error=f"git commit failed: {_why(done)}")
    sha = git("rev-parse", "--short", "HEAD").text.strip()
    if not push:
        return CommitResult(True, sha)
    return _push(git, sha, True)


def push(project: Path, markers: Mapping[str, str] = NO_MARKERS, timeout: float = GIT_TIMEOUT,
         set_upstream: bool = False, unless_at: str | None = None) -> CommitResult:
    """Push HEAD's branch as an auto-commit would (see commit), with nothing to commit: a phase
    whose agent made its own commits. committed is False; pushed and error say what happened;
    pushed is None when HEAD is still at `unless_at` (nothing new to push)."""
    git = _Git(Path(project), markers, False, timeout, set_upstream=set_upstream)
    try:
        head = git("rev-parse", "--verify", "-q", "HEAD").text.strip()
        if not head or head == unless_at:
            return CommitResult(False)
        return _push(git, head[:12], False)
    except GitFailed as exc:
        return CommitResult(False, pushed=False, error=str(exc))
    except OSError as exc:
        return CommitResult(False, pushed=False, error=f"cannot run git in {project}: {exc}")


def _push(git: _Git, sha: str, committed: bool) -> CommitResult:
    """Push HEAD's branch (see push_target), at sha; committed: sha is the commit just made."""
    target = push_target(git, git.set_upstream)
    if isinstance(target, str):
        return CommitResult(committed, sha, False, target)
    remote, refspec, track = target
    # The branch alone, by an explicit refspec: never Genesis's safety refs (refs/genesis/...), never
    # tags, whatever the repository's config says (remote.*.mirror, remote.*.push). Never forced.
    pushed = git("push", "-q", "--no-follow-tags", *(["--set-upstream"] if track else []), remote, refspec,
                 config=[(f"remote.{remote}.mirror", "false"), ("advice.pushUpdateRejected", "false")])
    if pushed.returncode != 0:  # git's own words, without the hints that would crowd them out
        return CommitResult(committed, sha, False, f"git push failed: {_why(pushed)}{_rejected(pushed)}",
                            rejected=push_rejected(pushed.stderr or pushed.text))
    return CommitResult(committed, sha, True)


def push_rejected(words: str) -> bool:
    """Whether git's words of a failed push say the remote refused it as non-fast-forward (its
    branch has commits this one has not), as opposed to any other failure (network, access)."""
    return any(said in words for said in ("[rejected]", "non-fast-forward", "fetch first", "Updates were rejected"))


def _rejected(pushed: GitRun) -> str:
    """What a rejected push means for the loop (nothing when it failed otherwise)."""
    if push_rejected(pushed.stderr or pushed.text):
        return (". The remote's branch has commits this one has not (pushed from elsewhere): Genesis never forces "
                "a push, so this work stays committed here, unpushed")
    return ""


def _remote_for(setting: Callable[[str], str], git: _Git) -> str:
    """The remote a new branch is pushed to: remote.pushDefault, else the repository's one
    remote, else `origin` when there is one ("": none to choose)."""
    chosen = setting("remote.pushDefault")
    if chosen:
        return chosen
    remotes = git("remote").text.split()
    return remotes[0] if len(remotes) == 1 else "origin" if "origin" in remotes else ""


def push_target(git: "_Git", set_upstream: bool = False) -> tuple[str, str, bool] | str:
    """(remote, refspec, sets the upstream) that pushes HEAD's branch to its upstream, as a plain
    `git push` would; or why it is not pushed (no branch, no upstream). With set_upstream, a
    branch without one is pushed under its own name (see _remote_for) and tracks it."""
    branch = git("symbolic-ref", "-q", "--short", "HEAD").text.strip()
    if not branch:
        return "not pushed: HEAD is on no branch"

    def setting(key: str) -> str:
        return git("config", "--get", key).text.strip()

    upstream_remote, merge = setting(f"branch.{branch}.remote"), setting(f"branch.{branch}.merge")
    remote = setting(f"branch.{branch}.pushRemote") or setting("remote.pushDefault") or upstream_remote
    if set_upstream and not upstream_remote:
        remote = _remote_for(setting, git)
        if remote and remote != ".":
            return remote, f"refs/heads/{branch}:refs/heads/{branch}", True
        return f"not pushed: branch {branch} has no upstream and the repository no remote to push it to"
    if not remote or (remote == upstream_remote and not merge.startswith("refs/heads/")):
        return (f"not pushed: branch {branch} has no upstream; set one once with `git push -u origin {branch}` "
                f"(AUTO_PUSH pushes to it)")
    dest = merge if remote == upstream_remote else f"refs/heads/{branch}"
    return remote, f"refs/heads/{branch}:{dest}", False


def _free_index(git: _Git, said: Callable[[str], None] | None) -> str:
    """Clear a stale index.lock (said); the error when a live one stays held."""
    found = git("rev-parse", "--git-path", "index.lock")
    if found.returncode != 0:
        return ""  # the next git command says what is wrong
    lock = git.project / found.text.strip()
    roots = (os.path.realpath(git.project), os.path.realpath(lock.parent))
    state = clear_stale(lock, roots)
    if state.removed and said is not None:
        said(state.removed)
    return f"not committed: {state.held}; let it finish, or end it" if state.held else ""


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
