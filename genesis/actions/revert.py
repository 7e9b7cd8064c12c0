"""Revert what one phase committed: a new commit on the branch that undoes the phase's commits
(found from its safety refs: HEAD when it started, and after it, the next phase's start or the
`after` ref), never a reset; the tip before is kept under a safety ref of its own first.

Refused while a loop works in that tree (stop it first), on a detached HEAD, with uncommitted
changes, or when the phase committed nothing.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from genesis.actions.errors import Failed, NotApplicable
from genesis.fleet.worktrees import Git, rev
from genesis.repo import safety
from genesis.repo.autocommit import user_changes
from genesis.repo.gitcmd import GitFailed
from genesis.store.layout import state_dir_of
from genesis.store.looplock import current_holder

__all__ = ["revert_phase", "phases_of", "REVERTS"]

REVERTS = f"{safety.NAMESPACE}/reverts"
_STEP = re.compile(r"^(?P<run>[^/]+)/(?P<n>[0-9]{4})-(?P<phase>[^/]+)/HEAD$")


def phases_of(tree: Path) -> list[tuple[str, int, str, str]]:
    """Every phase start kept in tree's repository: (run, iteration, phase, its start sha), in order."""
    listing = safety._refs(tree, f"{safety.NAMESPACE}/phases")
    found = []
    for name, sha in listing.items():
        m = _STEP.match(name)
        if m:
            found.append((m["run"], int(m["n"]), m["phase"], sha))
    return sorted(found)


def revert_phase(tree: Path, run_id: str, iteration: int, phase: str, now: float | None = None,
                 hooks: bool = False) -> str:
    """Revert the phase's commits on tree's branch (run and iteration: the newest when not given); what was done."""
    now = time.time() if now is None else now
    state = state_dir_of(tree)
    holder = current_holder(state / "loop.lock", state / "loop.json")
    if holder is not None:
        raise NotApplicable(f"a loop works in {tree} (pid {holder.pid}): stop it first, then revert")
    if not phase:
        raise NotApplicable("name the phase whose commits to revert (Builder, Criticizer...)")
    kept = phases_of(tree)
    mine = [k for k in kept if k[2] == phase and (not run_id or k[0] == run_id) and (not iteration or
                                                                                       k[1] == iteration)]
    if not mine:
        raise NotApplicable(f"no {phase} phase" + (f" of run {run_id}" if run_id else "")
                            + (f" in iteration {iteration}" if iteration else "") + f" is kept in {tree}")
    run, n, _name, start = mine[-1]
    git = Git(tree, hooks)
    after = rev(git, f"{safety.phase_prefix(run, n, phase)}/after")
    later = [k for k in kept if k[0] == run and (k[1], k[2]) != (n, phase) and k > mine[-1]]
    branch = git("symbolic-ref", "-q", "--short", "HEAD").text.strip()
    if not branch:
        raise NotApplicable(f"{tree} is on a detached HEAD: check out the task's branch, then revert")
    end = after or (later[0][3] if later else rev(git, "HEAD"))
    commits = git.out("rev-list", f"{start}..{end}").split()
    if not commits:
        raise NotApplicable(f"{phase} of iteration {n} (run {run}) committed nothing: nothing to revert")
    if git("merge-base", "--is-ancestor", end, "HEAD").returncode != 0:
        raise NotApplicable(f"the commits of {phase} (iteration {n}) are not on {branch} any more")
    changes = user_changes(tree)
    if changes.changed or changes.unmerged:
        raise NotApplicable(f"{tree} has uncommitted changes: commit or discard them first")
    tip = rev(git, "HEAD")
    ref = f"{REVERTS}/{int(now)}-{run}-{n:04d}-{phase}/before"
    git.out("update-ref", ref, tip)
    done = git("revert", "--no-commit", "--no-edit", f"{start}..{end}")
    if done.returncode != 0:
        git("revert", "--abort")
        git("reset", "-q", "--hard", tip)  # back where it was, exactly (the safety ref keeps it too)
        raise Failed(f"the commits of {phase} (iteration {n}) do not revert cleanly on {branch}: "
                     f"{(done.stderr or done.text).strip()[-300:]}; nothing changed")
    message = (f"Genesis: revert {phase} of iteration {n} (run {run})\n\n"
               + "\n".join(f"Reverts {c}" for c in commits))
    try:
        git.out("commit", "-q", "--no-verify", "-m", message, identity=True)
    except GitFailed:
        git("reset", "-q", "--hard", tip)
        raise
    return (f"reverted the {len(commits)} commit(s) of {phase} (iteration {n}, run {run}) on {branch} in a new "
            f"commit {rev(git, 'HEAD')[:10]}; the tip before is kept as {ref}")
