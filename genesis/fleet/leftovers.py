"""A task's worktree made startable again before its child is relaunched.

A child killed mid-phase (OOM, the monitor's SIGKILL past its bound, kill -9) leaves what
its agent had not committed, and perhaps a rebase, cherry-pick or merge under way or a
detached HEAD. The next child's preflight would refuse that ("uncommitted changes of
yours", exit 2). The worktree is Genesis's, made for this one task: whatever is left in it
is the agent's work by construction, so it is kept as a commit on the task's branch (never
thrown away), after the half-done git operation is abandoned and HEAD is on the branch again.

Before anything moves, the work tree as the killed attempt left it is kept at
`refs/genesis/leftovers/<task>/attempt-<n>` (where no history check looks); the commit says
"work left by attempt N, which ended: ...".

The breaker the last attempt left (OPEN after it made no progress) would refuse the next
child at once: each attempt starts with a fair breaker, the old file kept beside it as evidence.
"""

from __future__ import annotations

import os
from pathlib import Path

from genesis.fleet.worktrees import Git
from genesis.loop.breaker import CLOSED, BreakerState
from genesis.repo.autocommit import user_changes
from genesis.store.atomicio import CorruptFile, read_json

__all__ = ["make_startable", "unfair", "set_breaker_aside", "keep_aside", "SNAPSHOTS", "BREAKER_FILE"]

SNAPSHOTS = "refs/genesis/leftovers"   # a killed attempt's work tree, kept where no history check looks
BREAKER_FILE = Path("orchestrator") / ".circuit_breaker.json"   # Layout.breaker_file, in the worktree


# The git operation under way, by the file git keeps in the worktree's git dir while it is.
_UNDER_WAY = (("rebase-merge", ("rebase", "--abort")), ("rebase-apply", ("rebase", "--abort")),
              ("CHERRY_PICK_HEAD", ("cherry-pick", "--abort")), ("REVERT_HEAD", ("revert", "--abort")),
              ("MERGE_HEAD", ("merge", "--abort")))


def make_startable(worktree: Path, branch: str, attempt: int, ended: str, *, hooks: bool = False) -> list[str]:
    """Abandon a git operation under way, put HEAD back on branch (keeping the work tree as it
    is), and commit what is left uncommitted as Genesis: "work left by attempt N, which ended:
    <reason>". What was done, in words (empty when the worktree was startable as it was).
    GitFailed when git cannot do it."""
    git = Git(Path(worktree), hooks)
    done: list[str] = [said for said in (set_breaker_aside(Path(worktree), attempt),) if said]
    git_dir = Path(git.out("rev-parse", "--absolute-git-dir"))
    for marker, abort in _UNDER_WAY:
        if (git_dir / marker).exists():
            # The abort puts the files back as they were before it began: what the agent did
            # meanwhile (conflicts half resolved) is kept first, as a commit under a ref of its own.
            kept = _snapshot(git, git_dir, f"{SNAPSHOTS}/{branch.rsplit('/', 1)[-1]}/attempt-{attempt}",
                             f"Genesis: the work tree as attempt {attempt} left it, mid-{abort[0]}")
            git(*abort)  # an abort that fails leaves the marker: said by the checks below
            done.append(f"abandoned the {abort[0]} under way (the work tree as it was is kept at {kept})")
    head = git("symbolic-ref", "--quiet", "HEAD").text.strip()
    if head != f"refs/heads/{branch}":
        git.out("rev-parse", "--verify", "-q", f"refs/heads/{branch}")
        # HEAD on the branch without touching index or files: what the detached commits
        # changed stays in the work tree and is committed below with the rest.
        git.out("symbolic-ref", "HEAD", f"refs/heads/{branch}")
        git.out("reset", "-q")
        done.append(f"put HEAD back on {branch} (it was {head or 'detached'})")
    left = user_changes(Path(worktree))
    paths = sorted(set(left.changed) | set(left.untracked))
    if paths:
        git.out("add", "-A", "--", *paths)
        git.out("commit", "-q", *(() if hooks else ("--no-verify",)), "-m",
                f"Genesis: work left by attempt {attempt}, which ended: {ended}"[:500], identity=True)
        done.append(f"committed {len(paths)} file(s) left uncommitted by attempt {attempt}")
    return done


def unfair(state: BreakerState) -> bool:
    """Whether a breaker left by the last attempt holds anything against the next one."""
    return state.state != CLOSED or state.no_progress_count > 0


def set_breaker_aside(worktree: Path, attempt: int) -> str:
    """Move the breaker file attempt left in worktree aside (kept as `<name>.attempt-N`, which
    the loop's ignore pattern covers) when it would count against the next attempt; what was
    done, in words ("" when nothing). A file the loop cannot read is left to its preflight."""
    path = worktree / BREAKER_FILE
    try:
        data = read_json(path)
        state = BreakerState.from_json(data) if data is not None else None
    except (CorruptFile, ValueError, OSError):
        return ""
    if state is None or not unfair(state):
        return ""
    kept = path.with_name(f"{path.name}.attempt-{attempt}")
    os.replace(path, kept)
    return (f"set aside the circuit breaker attempt {attempt} left ({state.state}, {state.no_progress_count} "
            f"iteration(s) without progress; kept as {kept.name}): the next attempt starts with a fair breaker")


def keep_aside(worktree: Path, ref: str, message: str) -> str:
    """The work tree as it is (uncommitted changes and new files, ignored ones aside) kept as a
    commit on its HEAD at ref, before something resets it; ref, or "" when nothing was uncommitted."""
    git = Git(Path(worktree))
    left = git("status", "--porcelain", "--untracked-files=all")
    if left.returncode != 0 or not left.text.strip():
        return ""
    return _snapshot(git, Path(git.out("rev-parse", "--absolute-git-dir")), ref, message)


def _snapshot(git: Git, git_dir: Path, ref: str, message: str) -> str:
    """The whole work tree (ignored files aside) as a commit on HEAD, at ref; ref."""
    index = git_dir / "genesis-leftovers.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        index.unlink(missing_ok=True)
        git.out("add", "-A", env=env)
        tree = git.out("write-tree", env=env)
    finally:
        index.unlink(missing_ok=True)
    sha = git.out("commit-tree", tree, "-p", "HEAD", "-m", message, identity=True)
    git.out("update-ref", ref, sha)
    return ref
