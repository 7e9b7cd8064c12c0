"""`genesis restore`: what the safety refs and the untracked copies keep, and putting a branch
back as a run started with it. Nothing moves without the user's --yes; the branch's tip
before the restore is itself kept under refs/genesis/restored/, so a restore can be undone.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from genesis.repo import safety, untracked
from genesis.repo.gitcmd import GitFailed, run_git

__all__ = ["Plan", "NothingKept", "listing", "plan_branch", "apply", "latest_copy"]

RESTORED = f"{safety.NAMESPACE}/restored"


class NothingKept(LookupError):
    """No such run, branch or copy among what Genesis kept."""


@dataclass(frozen=True)
class Plan:
    project: Path
    branch: str
    run_id: str
    target: str                  # the sha the branch goes back to
    current: str | None          # its tip now (None: the branch is gone)
    checked_out: bool
    keep_as: str                 # where the current tip is kept before the restore

    @property
    def commands(self) -> list[str]:
        git = f"git -C {shlex.quote(str(self.project))}"
        first = [f"{git} update-ref {self.keep_as} {self.current}"] if self.current else []
        if self.checked_out:
            return first + [f"{git} reset --keep {self.target}"]
        return first + [f"{git} branch -f {shlex.quote(self.branch)} {self.target}"]


def _git(project: Path, *args: str, ok: tuple[int, ...] = (0,)):
    done = run_git(project, list(args), timeout=safety.GIT_BOUND, limit=1 << 20,
                   config=[("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null")])
    if done.returncode not in ok:
        raise GitFailed(f"git {' '.join(args[:2])} failed in {project}: {done.stderr or done.text.strip()}")
    return done


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def listing(project: Path, copies_root: Path) -> list[str]:
    """One block per run, newest first: its safety refs and its untracked copy."""
    lines = []
    runs = sorted(set(safety.runs_kept(project)) | set(untracked.copies(copies_root)), reverse=True)
    for run in runs:
        start = safety.kept(project, safety.run_prefix(run))
        branches = ", ".join(f"{name} {_short(sha)}" for name, sha in sorted(start.branches.items())) or "none"
        lines.append(f"run {run}: HEAD {_short(start.head)}; branches: {branches} ({safety.run_prefix(run)}/...)")
        manifest = untracked.manifest_of(Path(copies_root) / run)
        if manifest is not None:
            skipped = manifest.get("skipped") or []
            lines.append(f"    untracked and ignored files copied aside: {len(manifest.get('copied') or [])} "
                         f"({int(manifest.get('size') or 0) >> 10} KiB)"
                         + ("; not copied: " + ", ".join(f"{s.get('path')} ({s.get('why')})" for s in skipped[:5])
                            + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "") if skipped else ""))
    return lines


def plan_branch(project: Path, branch: str, run_id: str | None) -> Plan:
    """How to put branch back where run_id (default: the latest run that kept it) started it."""
    runs = [run_id] if run_id else list(reversed(safety.runs_kept(project)))
    for run in runs:
        kept = safety.kept(project, safety.run_prefix(run))
        if branch in kept.branches:
            tips = safety.read_tips(project)
            return Plan(Path(project), branch, run, kept.branches[branch], tips.branches.get(branch),
                        tips.branch == branch, f"{RESTORED}/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
                        f"/heads/{branch}")
    where = f"run {run_id}" if run_id else "any run"
    raise NothingKept(f"no safety ref of branch {branch!r} from {where} in {project}")


def apply(plan: Plan) -> None:
    """Do what plan.commands say. GitFailed when git refuses (a checked-out branch with local
    changes in the way: `reset --keep` refuses rather than lose them)."""
    if plan.current:
        _git(plan.project, "update-ref", plan.keep_as, plan.current)
    if plan.checked_out:
        _git(plan.project, "reset", "-q", "--keep", plan.target)
    else:
        _git(plan.project, "update-ref", f"refs/heads/{plan.branch}", plan.target, plan.current or "")


def latest_copy(copies_root: Path, run_id: str | None) -> Path:
    """The folder of run_id's untracked copy (default: the latest run's)."""
    runs = untracked.copies(copies_root)
    if run_id is not None:
        if run_id not in runs:
            raise NothingKept(f"no copy of untracked files for run {run_id!r}")
        return Path(copies_root) / run_id
    if not runs:
        raise NothingKept("no copy of untracked files kept")
    return Path(copies_root) / runs[-1]
