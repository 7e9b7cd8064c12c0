"""The project branch's known tip, kept where the agent cannot write, and a branch moved behind
the merge queue's back put back.

A fleet's children share the repository's refs: any of them can `git update-ref
refs/heads/main <forged>`. Nothing in the work tree changes, so the user's checkout of main
then looks as if it held uncommitted changes, and the user's next commit would build on the
forged one. The tip Genesis last gave the branch (at the fleet's start, after each of its
merges) is kept in Genesis's state (`<common git dir>/genesis/branch-tips.json`, read-only in
the box) and its commit in Genesis's store (repo/refstore.py).

A tip found elsewhere is judged by the work tree that has the branch checked out:
- its index still holds the known tip's tree: the ref moved under it, which a commit made there
  never does (a commit moves the index with it): put back, the tip it was moved to kept as
  `refs/genesis/moved/<time>/heads/<branch>` and named;
- its index holds the new tip's tree, or neither: the user's own commit there, taken as the new
  known tip (an empty commit of the user's counts as one too);
- checked out nowhere: no commit of the user's can have moved it; put back as above.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from genesis.repo import gitenv, refstore
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.store.atomicio import CorruptFile, read_json, write_json

__all__ = ["Moved", "remember", "known", "guard", "TIPS_FILE", "KNOWN_PREFIX", "MOVED_PREFIX"]

TIPS_FILE = "branch-tips.json"
KNOWN_PREFIX = "refs/genesis/known/heads"      # the known tip's commit, in the project and the store
MOVED_PREFIX = "refs/genesis/moved"            # what a moved branch pointed at when it was put back
BOUND = 60.0


@dataclass(frozen=True)
class Moved:
    branch: str
    known: str          # the tip Genesis gave it
    found: str          # the tip it was moved to
    kept: str           # the ref that keeps found
    put_back: bool      # False: it moved again meanwhile, or git could not; left as found

    def words(self) -> str:
        """What happened, for the console, the ledger and the alert."""
        back = (f"put back at {self.known[:10]}" if self.put_back else
                f"NOT put back (it moved again, or git refused): `git update-ref refs/heads/{self.branch} "
                f"{self.known}` does it")
        return (f"a child moved {self.branch} from {self.known[:10]} to {self.found[:10]} behind the merge queue "
                f"(its work tree was left at {self.known[:10]}: no commit made there); {back}, what it was moved "
                f"to kept as {self.kept}")


def _tips_file(project: Path) -> Path:
    git_dir = gitenv.git_dir_of(Path(project))
    if git_dir is None:
        raise GitFailed(f"{project} has no git directory Genesis can find")
    return gitenv.common_dir_of(git_dir).resolve() / "genesis" / TIPS_FILE


def _git(cwd: Path, *args: str, ok: tuple[int, ...] = (0,)):
    done = run_git(cwd, list(args), timeout=BOUND, config=[("core.fsmonitor", "false")],
                   env={"GIT_OPTIONAL_LOCKS": "0"})
    if done.returncode not in ok:
        raise GitFailed(f"git {args[0]} failed in {cwd}: {done.stderr or 'no answer'}")
    return done


def _tip(project: Path, branch: str) -> str:
    done = _git(project, "rev-parse", "--verify", "-q", f"refs/heads/{branch}^{{commit}}", ok=(0, 1, 128))
    return done.text.strip() if done.returncode == 0 else ""


def known(project: Path, branch: str) -> str:
    """The tip Genesis last gave branch ("" when it keeps none)."""
    try:
        data = read_json(_tips_file(project))
    except (CorruptFile, OSError, GitFailed):
        return ""
    value = data.get(branch) if isinstance(data, dict) else None
    return value if isinstance(value, str) and len(value) in (40, 64) else ""


def remember(project: Path, branch: str, sha: str = "") -> str:
    """sha (else the branch's tip now) as branch's known tip, its commit kept in the project and
    the store; the tip remembered ("" when the branch does not exist)."""
    project = Path(project)
    sha = sha or _tip(project, branch)
    if not sha:
        return ""
    path = _tips_file(project)
    try:
        data = read_json(path)
    except (CorruptFile, OSError):
        data = None
    tips = dict(data) if isinstance(data, dict) else {}
    tips[branch] = sha
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_json(path, tips)
    ref = f"{KNOWN_PREFIX}/{branch}"
    _git(project, "update-ref", "--no-deref", ref, sha)
    try:
        refstore.keep(project, {ref: sha})
    except (GitFailed, OSError):
        pass  # the ref in the project keeps it unless the agent deletes it too
    return sha


def _holders(project: Path, branch: str) -> list[Path]:
    listing = _git(project, "worktree", "list", "--porcelain", "-z").text
    found, path = [], ""
    for entry in listing.split("\0"):
        if entry.startswith("worktree "):
            path = entry[len("worktree "):]
        elif entry == f"branch refs/heads/{branch}" and path:
            found.append(Path(path))
    return found


def _under(holder: Path, sha: str) -> bool:
    """Whether holder's index still holds sha's tree: its branch moved without it."""
    return _git(holder, "diff-index", "--cached", "--quiet", sha, "--", ok=(0, 1)).returncode == 0


def guard(project: Path, branch: str, clock=time.time) -> Moved | None:
    """branch against its known tip: None when it is there, or the user's own commit moved it
    (then that is the known tip); else put back and said (see the module's docstring)."""
    project = Path(project)
    was = known(project, branch)
    tip = _tip(project, branch)
    if not was or not tip or tip == was:
        return None
    if _git(project, "cat-file", "-e", f"{was}^{{commit}}", ok=(0, 1, 128)).returncode != 0 and \
            not refstore.fetch_back(project, f"{KNOWN_PREFIX}/{branch}", was):
        remember(project, branch, tip)  # the known tip is gone from everywhere: nothing to put back
        return None
    holders = [h for h in _holders(project, branch) if h.is_dir()]
    if holders and any(_under(h, tip) or not _under(h, was) for h in holders):
        remember(project, branch, tip)  # a commit made there (its index moved with it): the user's
        return None
    # Dashes in the time: a ref of one unbroken run of letters, digits and slashes is redacted
    # from every line that names it as if it were a key (redact.BASE64_RUN).
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime(clock()))
    kept = f"{MOVED_PREFIX}/{stamp}/heads/{branch}"
    _git(project, "update-ref", "--no-deref", kept, tip)
    try:
        refstore.keep(project, {kept: tip})
    except (GitFailed, OSError):
        pass
    back = _git(project, "update-ref", "-m", "genesis: put back where the merge queue left it",
                f"refs/heads/{branch}", was, tip, ok=(0, 1, 128)).returncode == 0
    return Moved(branch, was, tip, kept, back)
