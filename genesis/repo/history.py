"""What a phase did to history, told from the safety refs (repo/safety.py): commits no longer
on their branch (a reset, a rebase, an amend of an earlier commit), a branch deleted, the
branch switched, HEAD detached. Each change names the branch, the commits and the safety
ref that keeps them.

The branch HEAD was on when the phase started is compared with its tip then (the night's
own earlier commits count too); every other branch with its tip when the run started.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.safety import GIT_BOUND, Tips

__all__ = ["Change", "changes", "pushed", "describe", "KINDS", "MAX_LISTED"]

# lost: a safety ref and its commit both gone; forced: a remote's branch the phase's push rewrote
KINDS = ("rewritten", "deleted", "switched", "detached", "lost", "forced")
MAX_LISTED = 10     # commits named per change (the count says how many in all)


@dataclass(frozen=True)
class Change:
    kind: str                    # one of KINDS
    branch: str                  # the branch concerned ("" for a HEAD that was already detached)
    lost: tuple[str, ...]        # short shas no longer on it, newest first (at most MAX_LISTED)
    lost_count: int              # how many in all
    ref: str                     # the safety ref that keeps them
    now: str = ""                # where HEAD or the branch is now: a short sha, or the branch switched to

    def to_json(self) -> dict:
        return {**asdict(self), "lost": list(self.lost)}

    @classmethod
    def from_json(cls, data: object) -> "Change | None":
        if not isinstance(data, dict) or data.get("kind") not in KINDS:
            return None
        lost = data.get("lost") if isinstance(data.get("lost"), list) else []
        count = data.get("lost_count")
        return cls(str(data["kind"]), str(data.get("branch") or ""), tuple(str(s) for s in lost[:MAX_LISTED]),
                   count if isinstance(count, int) and not isinstance(count, bool) else len(lost),
                   str(data.get("ref") or ""), str(data.get("now") or ""))


def _git(project: Path, *args: str, ok: tuple[int, ...] = (0,)):
    done = run_git(project, list(args), timeout=GIT_BOUND, limit=1 << 20, config=[("core.fsmonitor", "false")],
                   env={"GIT_OPTIONAL_LOCKS": "0"})
    if done.returncode not in ok:
        raise GitFailed(f"git {args[0]} failed in {project}: {done.stderr or 'no answer'}")
    return done


def _contains(project: Path, old: str, new: str) -> bool:
    """Whether old is still in new's history."""
    return _git(project, "merge-base", "--is-ancestor", old, new, ok=(0, 1)).returncode == 0


def _missing(project: Path, old: str, *now: str) -> tuple[tuple[str, ...], int]:
    """The commits of old's history that are in none of now (short shas, newest first), and their number."""
    spec = [old, "--not", *now] if now else [old]
    count = _git(project, "rev-list", "--count", *spec, "--").text.strip()
    listed = _git(project, "rev-list", f"--max-count={MAX_LISTED}", "--abbrev-commit", *spec, "--").text.split()
    return tuple(listed), int(count) if count.isdigit() else len(listed)


def _short(project: Path, sha: str | None) -> str:
    if not sha:
        return ""
    return _git(project, "rev-parse", "--short", sha).text.strip()


def changes(project: Path, run: Tips, phase: Tips, now: Tips, run_ref: str, phase_ref: str) -> list[Change]:
    """What happened to history since the phase started (`phase`) and the run started (`run`).

    run_ref and phase_ref are the safety refs' prefixes. GitFailed when git cannot say.
    """
    found: list[Change] = []
    current = phase.branch
    if current is not None and phase.branches.get(current):
        old, ref = phase.branches[current], f"{phase_ref}/heads/{current}"
        tip = now.branches.get(current)
        if tip is None:
            lost, count = _missing(project, old, *now.branches.values())
            found.append(Change("deleted", current, lost, count, ref))
        elif tip != old and not _contains(project, old, tip):
            lost, count = _missing(project, old, tip)
            found.append(Change("rewritten", current, lost, count, ref, _short(project, tip)))
        # The phase's work lands off its branch: kept by the ref written after its commit.
        if now.branch is None:
            found.append(Change("detached", current, (), 0, f"{phase_ref}/after", _short(project, now.head)))
        elif now.branch != current:
            found.append(Change("switched", current, (), 0, f"{phase_ref}/after", now.branch))
    elif phase.head and now.head and not _contains(project, phase.head, now.head):
        lost, count = _missing(project, phase.head, now.head)
        found.append(Change("rewritten", "", lost, count, f"{phase_ref}/HEAD", _short(project, now.head)))
    for name, old in sorted(run.branches.items()):
        if name == current:
            continue
        tip = now.branches.get(name)
        if tip == old:
            continue  # untouched: no git call per branch that did not move
        if tip is None:
            lost, count = _missing(project, old, *now.branches.values())
            found.append(Change("deleted", name, lost, count, f"{run_ref}/heads/{name}"))
        elif not _contains(project, old, tip):
            lost, count = _missing(project, old, tip)
            found.append(Change("rewritten", name, lost, count, f"{run_ref}/heads/{name}", _short(project, tip)))
    return found


def pushed(project: Path, before: Mapping[str, str], now: Mapping[str, str], phase_ref: str) -> list[Change]:
    """The remote branches a push of the phase rewrote (`git push --force`), as its remote-tracking
    branches say: moved to a commit that does not hold their tip at the phase's start, or deleted,
    their last update a push (a forced fetch is someone else's rewrite, not the phase's). The lost
    tip is kept by `<phase_ref>/remotes/<remote>/<branch>`. GitFailed when git cannot say."""
    found = []
    for name, old in sorted(before.items()):
        tip = now.get(name)
        if tip == old or _git(project, "cat-file", "-e", f"{old}^{{commit}}", ok=(0, 1, 128)).returncode != 0:
            continue
        if tip is not None and _contains(project, old, tip):
            continue
        why = _git(project, "reflog", "-1", "--format=%gs", f"refs/remotes/{name}", "--", ok=(0, 1, 128)).text.strip()
        if tip is not None and why and not why.startswith("update by push"):
            continue
        ref = f"{phase_ref}/remotes/{name}"
        _git(project, "update-ref", "--no-deref", ref, old)
        lost, count = _missing(project, old, tip) if tip else _missing(project, old, *now.values())
        found.append(Change("forced", name, lost, count, ref, _short(project, tip) if tip else "deleted"))
    return found


def describe(change: Change) -> str:
    """One line: what happened, which commits, and the safety ref that keeps them."""
    if change.kind == "lost":
        return _what(change)
    if change.kind in ("switched", "detached"):
        return (f"{_what(change)}; the phase's work is kept by {change.ref} (`git switch -c NAME {change.ref}` "
                f"puts it on a branch)")
    return f"{_what(change)}; kept by {change.ref}"


def _what(change: Change) -> str:
    listed = ", ".join(change.lost) + (f" and {change.lost_count - len(change.lost)} more"
                                       if change.lost_count > len(change.lost) else "")
    commits = f"{change.lost_count} commit(s) no longer on any branch ({listed})" if change.lost_count else ""
    if change.kind == "deleted":
        return f"branch {change.branch} was deleted" + (f": {commits}" if commits else "")
    if change.kind == "forced":
        what = ("deleted (by a push of the phase, or a fetch that pruned it)" if change.now == "deleted" else
                f"rewritten by a push of the phase (`git push --force`; now at {change.now})")
        return (f"the remote branch {change.branch} was {what}"
                + (f": {change.lost_count} commit(s) no longer on it ({listed})" if change.lost_count else ""))
    if change.kind == "lost":
        whose = f"branch {change.branch}'s" if change.branch else "HEAD's"
        return (f"the safety ref {change.ref} was deleted and git pruned its commit {listed} ({whose} tip it kept), "
                f"nor does Genesis's own store hold it: that commit is lost")
    if change.kind == "rewritten":
        name = f"branch {change.branch}" if change.branch else "the detached HEAD"
        now = f" (now at {change.now})" if change.now else ""
        return f"{name} was rewritten{now}: " + (
            commits.replace("on any branch", "on it") if commits else "its earlier history replaced")
    if change.kind == "switched":
        return (f"HEAD was switched from branch {change.branch} to {change.now}: the phase's work is on "
                f"{change.now}, not on {change.branch}")
    return (f"HEAD was detached from branch {change.branch} (now at {change.now}): commits made there are on no "
            f"branch, orphaned")
