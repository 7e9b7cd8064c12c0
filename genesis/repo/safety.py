"""Safety refs: every branch tip and HEAD a run starts with, and HEAD and its branch at each
phase's start, kept under Genesis's own ref namespace so that no reset, rebase, branch
deletion, `reflog expire` or `gc --prune=now` can lose them.

    refs/genesis/runs/<run>/HEAD               HEAD when the run started
    refs/genesis/runs/<run>/heads/<branch>     every local branch then
    refs/genesis/phases/<run>/<NNNN>-<phase>/HEAD and .../heads/<branch>
                                               HEAD and its branch when the phase started
    refs/genesis/phases/<run>/<NNNN>-<phase>/after
                                               HEAD after the phase's auto-commit (orphaned work)

Refs are reachable for git, so gc keeps what they point to; they are local: Genesis's own
push names the branch alone (autocommit.push_refspec), and a plain `git push` never sends
them. Every git call is bounded; the refs of all but the newest KEEP_RUNS runs are pruned.

The refs live where the agent writes, so each is also copied, with its commits, into
Genesis's own store (repo/refstore.py): a ref the agent deleted whose commits it then let gc
prune is fetched back from there (`repair`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from genesis.repo import refstore
from genesis.repo.gitcmd import GitFailed, run_git

__all__ = ["NAMESPACE", "Tips", "read_tips", "keep_run", "keep_phase", "keep_after", "kept", "run_prefix",
           "phase_prefix", "runs_kept", "prune", "repair", "copy", "KEEP_RUNS", "GIT_BOUND"]

NAMESPACE = "refs/genesis"
KEEP_RUNS = 10          # runs whose safety refs are kept (older ones are pruned at a start)
GIT_BOUND = 60.0        # seconds for each git call
LISTING = 8 << 20       # bytes of for-each-ref output read
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_SHA = re.compile(r"^[0-9a-f]{40,64}$")


@dataclass(frozen=True)
class Tips:
    head: str | None                    # HEAD's full sha (None: no commit yet)
    branch: str | None                  # the branch HEAD is on (None: detached, or not known)
    branches: Mapping[str, str] = field(default_factory=dict)   # local branch -> its tip's full sha
    remotes: Mapping[str, str] = field(default_factory=dict)    # remote-tracking branch (origin/main) -> its sha

    def to_json(self) -> dict:
        return {"head": self.head, "branch": self.branch, "branches": dict(self.branches)}

    @classmethod
    def from_json(cls, data: object) -> "Tips | None":
        if not isinstance(data, dict) or not isinstance(data.get("branches"), dict):
            return None
        branches = {str(k): v for k, v in data["branches"].items() if isinstance(v, str) and _SHA.match(v)}
        head = data.get("head") if isinstance(data.get("head"), str) and _SHA.match(data["head"]) else None
        branch = data.get("branch") if isinstance(data.get("branch"), str) else None
        return cls(head, branch, branches)


def run_prefix(run_id: str) -> str:
    return f"{NAMESPACE}/runs/{run_id}"


def phase_prefix(run_id: str, iteration: int, phase: str) -> str:
    return f"{NAMESPACE}/phases/{run_id}/{iteration:04d}-{_SAFE.sub('_', phase)}"


def _git(project: Path, args: list[str], ok: tuple[int, ...] = (0,), stdin: bytes | None = None,
         timeout: float = GIT_BOUND):
    done = run_git(project, args, timeout=timeout, stdin=stdin, limit=LISTING,
                   config=[("core.fsmonitor", "false")], env={"GIT_OPTIONAL_LOCKS": "0"})
    if done.returncode not in ok:
        raise GitFailed(f"git {' '.join(args[:2])} failed in {project}: {done.stderr or 'no answer'}")
    return done


def _refs(project: Path, prefix: str, timeout: float = GIT_BOUND) -> dict[str, str]:
    """Every ref under prefix/ (name without the prefix -> full sha)."""
    listing = _git(project, ["for-each-ref", "--format=%(objectname) %(refname)", prefix],
                   timeout=timeout).text
    found = {}
    for line in listing.splitlines():
        sha, _, name = line.partition(" ")
        if name.startswith(prefix + "/"):
            found[name[len(prefix) + 1:]] = sha
    return found


def read_tips(project: Path, timeout: float = GIT_BOUND) -> Tips:
    """HEAD, the branch it is on, and every local branch's tip now."""
    head = _git(project, ["rev-parse", "--verify", "-q", "HEAD"], ok=(0, 1), timeout=timeout)
    on = _git(project, ["symbolic-ref", "-q", "HEAD"], ok=(0, 1), timeout=timeout)
    branch = on.text.strip() if on.returncode == 0 else ""
    remotes = {name: sha for name, sha in _refs(project, "refs/remotes", timeout).items() if not name.endswith("/HEAD")}
    return Tips(head.text.strip() or None if head.returncode == 0 else None,
                branch[len("refs/heads/"):] if branch.startswith("refs/heads/") else None,
                _refs(project, "refs/heads", timeout), remotes)


def _wanted(tips: Tips, everything: bool) -> dict[str, str]:
    wanted = {}
    if tips.head:
        wanted["HEAD"] = tips.head
    for name, sha in tips.branches.items():
        if everything or name == tips.branch:
            wanted[f"heads/{name}"] = sha
    return wanted


def copy(project: Path, prefix: str, tips: Tips, everything: bool = True, timeout: float = refstore.COPY_BOUND) -> int:
    """The refs keep_run (everything) or keep_phase wrote under prefix, copied with their commits
    into Genesis's store; how many. GitFailed when git cannot (the caller says so)."""
    return refstore.keep(project, {f"{prefix}/{name}": sha for name, sha in _wanted(tips, everything).items()},
                         timeout=timeout)


def _write(project: Path, prefix: str, tips: Tips, everything: bool) -> list[str]:
    """HEAD and the branches (all, or HEAD's own) as refs under prefix, in one transaction."""
    wanted = _wanted(tips, everything)
    if not wanted:
        return []
    lines = "".join(f"update {prefix}/{name} {sha}\n" for name, sha in wanted.items())
    _git(project, ["update-ref", "--no-deref", "--stdin"], stdin=("start\n" + lines + "commit\n").encode())
    return [f"{prefix}/{name}" for name in wanted]


def keep_run(project: Path, run_id: str, tips: Tips | None = None) -> list[str]:
    """Every branch tip and HEAD as the run starts; the refs written. GitFailed if git cannot."""
    return _write(project, run_prefix(run_id), tips or read_tips(project), everything=True)


def keep_phase(project: Path, run_id: str, iteration: int, phase: str, tips: Tips | None = None) -> list[str]:
    """HEAD and its branch as the phase starts (a retry of the phase writes them again)."""
    return _write(project, phase_prefix(run_id, iteration, phase), tips or read_tips(project), everything=False)


def keep_after(project: Path, run_id: str, iteration: int, phase: str, sha: str) -> str:
    """HEAD after the phase's auto-commit: a commit made on no branch (or another one) stays reachable."""
    ref = f"{phase_prefix(run_id, iteration, phase)}/after"
    _git(project, ["update-ref", "--no-deref", ref, sha])
    return ref


def kept(project: Path, prefix: str) -> Tips:
    """The tips kept under prefix: HEAD, and the branches (for a phase: the one HEAD was on)."""
    refs = _refs(project, prefix)
    branches = {name[len("heads/"):]: sha for name, sha in refs.items() if name.startswith("heads/")}
    return Tips(refs.get("HEAD"), next(iter(branches)) if len(branches) == 1 else None, branches)


def repair(project: Path, prefix: str, tips: Tips) -> tuple[list[str], list[str]]:
    """Put back the safety refs under prefix that an agent deleted or moved, from the tips
    Genesis holds itself (`tips`): (the refs put back, those whose commit is gone). A commit
    git already pruned is fetched back from Genesis's store first; gone only if it is not there."""
    now = _refs(project, prefix)
    wanted = {f"heads/{name}": sha for name, sha in tips.branches.items()}
    if tips.head:
        wanted["HEAD"] = tips.head
    fixed, gone = [], []
    for name, sha in sorted(wanted.items()):
        if now.get(name) == sha:
            continue
        ref = f"{prefix}/{name}"
        if not _has(project, sha) and not _fetched(project, ref, sha):
            gone.append(ref)
            continue
        _git(project, ["update-ref", "--no-deref", ref, sha])
        fixed.append(ref)
    return fixed, gone


def _has(project: Path, sha: str) -> bool:
    return _git(project, ["cat-file", "-e", f"{sha}^{{commit}}"], ok=(0, 1, 128)).returncode == 0


def _fetched(project: Path, ref: str, sha: str) -> bool:
    try:
        return refstore.fetch_back(project, ref, sha)
    except (GitFailed, OSError):
        return False


def runs_kept(project: Path) -> list[str]:
    """The runs with safety refs, oldest first (run ids begin with their UTC start time)."""
    runs = {name.split("/", 1)[0] for name in _refs(project, f"{NAMESPACE}/runs")}
    runs |= {name.split("/", 1)[0] for name in _refs(project, f"{NAMESPACE}/phases")}
    return sorted(runs)


def prune(project: Path, current: str, keep: int = KEEP_RUNS, live: frozenset[str] = frozenset()) -> list[str]:
    """Delete the safety refs of all but the newest `keep` runs (never the current run's, nor a
    run still going in another worktree of the repository: `live`); the runs pruned."""
    runs = [r for r in runs_kept(project) if r != current and r not in live]
    gone = runs[:max(0, len(runs) - (keep - 1))]
    if not gone:
        return []
    doomed = [f"{run_prefix(r)}/{name}" for r in gone for name in _refs(project, run_prefix(r))]
    doomed += [f"{NAMESPACE}/phases/{r}/{name}" for r in gone for name in _refs(project, f"{NAMESPACE}/phases/{r}")]
    lines = "".join(f"delete {ref}\n" for ref in doomed)
    _git(project, ["update-ref", "--no-deref", "--stdin"], stdin=("start\n" + lines + "commit\n").encode())
    try:  # the store's copies of those runs go too (its own refs are listed: the agent may have deleted ours)
        stored = [f"{NAMESPACE}/{kind}/{name}" for kind in ("runs", "phases")
                  for name in refstore.holds(project, f"{NAMESPACE}/{kind}") if name.split("/", 1)[0] in gone]
        refstore.drop(project, stored)
    except (GitFailed, OSError):
        pass  # kept a while longer: the next start prunes them
    return gone
