"""Genesis's own copy of the safety refs: a bare repository in Genesis's state folder,
`<common git dir>/genesis/refstore.git`, holding every safety ref (repo/safety.py) under the
same name, with its commits copied in (never shared by hard links or alternates).

The refs in the project live where the agent writes: it can delete them, reset its branch
and `gc --prune=now` in one phase, and the commits would be gone for good. The store lives
in the state folder, which bubblewrap and Seatbelt keep read-only to the agent (and which
Landlock keeps out of a fleet child's reach), so what it holds is fetched back and the ref
put back. Without such a box the agent can delete the store too; the start says so.

One store per repository (a fleet's children share it, each under its own run's names).
The first copy takes the repository's history once; later ones only the new commits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from genesis.repo import gitenv
from genesis.repo.gitcmd import GitFailed, run_git

__all__ = ["STORE", "store_of", "keep", "fetch_back", "holds", "drop", "COPY_BOUND"]

STORE = "refstore.git"
COPY_BOUND = 300.0      # seconds for one copy into the store (the first one copies the whole history)
BOUND = 60.0            # seconds for the store's other git calls
_FETCH_CONFIG = [("fetch.prune", "false"), ("fetch.writeCommitGraph", "false"), ("core.fsmonitor", "false")]


def store_of(project: Path) -> Path:
    """Where the repository's store is: beside the state of the loop of its main work tree."""
    git_dir = gitenv.git_dir_of(Path(project))
    if git_dir is None:
        raise GitFailed(f"{project} has no git directory Genesis can find; its safety refs are not copied")
    return gitenv.common_dir_of(git_dir).resolve() / "genesis" / STORE


def _ensure(store: Path) -> None:
    if (store / "HEAD").is_file() and (store / "objects").is_dir():
        return
    store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    done = run_git(store.parent, ["init", "-q", "--bare", str(store)], timeout=BOUND)
    if done.returncode != 0:
        raise GitFailed(f"cannot make Genesis's copy of the safety refs at {store}: {done.stderr or 'no answer'}")
    # Its own config: nothing ever pruned by an automatic gc, nothing refused as a non-fast-forward.
    for key, value in (("gc.auto", "0"), ("gc.pruneExpire", "never"), ("receive.denyNonFastForwards", "false"),
                       ("receive.denyDeletes", "false"), ("core.logAllRefUpdates", "false")):
        run_git(store, ["config", key, value], timeout=BOUND)


def keep(project: Path, refs: Mapping[str, str], store: Path | None = None, timeout: float = COPY_BOUND) -> int:
    """Copy refs (full name -> sha; each already written in the project) with their commits into
    the store; how many. GitFailed if git cannot (the refs in the project still keep them).

    The store fetches them: git runs in the store with Genesis's own configuration, and only
    git's upload-pack in the project, which runs nothing the project's configuration names. (A
    push would run the store's receive-pack with the store's own hooks, and the store is not out
    of the agent's reach in every box.)"""
    if not refs:
        return 0
    store = store or store_of(project)
    _ensure(store)
    specs = [f"+{name}:{name}" for name in sorted(refs)]
    done = run_git(store, ["fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules",
                           "--no-auto-gc", str(Path(project).resolve()), *specs],
                   timeout=timeout, config=_FETCH_CONFIG, env={"GIT_TERMINAL_PROMPT": "0"})
    if done.returncode != 0:
        raise GitFailed(f"cannot copy the safety refs to {store}: {done.stderr or 'no answer'}")
    for name, sha in refs.items():  # the ref as Genesis wrote it, even if it was moved in between
        now = run_git(store, ["rev-parse", "--verify", "-q", name], timeout=BOUND).text.strip()
        if now != sha:
            fixed = run_git(store, ["update-ref", "--no-deref", name, sha], timeout=BOUND)
            if fixed.returncode != 0:
                raise GitFailed(f"cannot keep {name} at {sha[:10]} in {store}: {fixed.stderr or 'no answer'}")
    return len(specs)


def holds(project: Path, prefix: str, store: Path | None = None) -> dict[str, str]:
    """The refs the store holds under prefix/ (name without the prefix -> sha); {} when it has none."""
    store = store or store_of(project)
    if not (store / "HEAD").is_file():
        return {}
    done = run_git(store, ["for-each-ref", "--format=%(objectname) %(refname)", prefix], timeout=BOUND)
    if done.returncode != 0:
        raise GitFailed(f"cannot read Genesis's copy of the safety refs at {store}: {done.stderr or 'no answer'}")
    found = {}
    for line in done.text.splitlines():
        sha, _, name = line.partition(" ")
        if name.startswith(prefix + "/"):
            found[name[len(prefix) + 1:]] = sha
    return found


def fetch_back(project: Path, ref: str, sha: str, store: Path | None = None) -> bool:
    """Bring ref's commit (sha, as the store holds it) back into the project's objects: True
    when the project has it afterwards."""
    store = store or store_of(project)
    if not (store / "HEAD").is_file():
        return False
    listed = run_git(store, ["rev-parse", "--verify", "-q", ref], timeout=BOUND)
    if listed.returncode != 0 or listed.text.strip() != sha:
        return False
    run_git(project, ["fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules", "--no-auto-gc",
                      str(store), ref], timeout=COPY_BOUND, config=_FETCH_CONFIG, env={"GIT_TERMINAL_PROMPT": "0"})
    return run_git(project, ["cat-file", "-e", f"{sha}^{{commit}}"], timeout=BOUND).returncode == 0


def drop(project: Path, names: list[str], store: Path | None = None) -> None:
    """Delete refs from the store (older runs pruned as in the project)."""
    store = store or store_of(project)
    if not names or not (store / "HEAD").is_file():
        return
    lines = "".join(f"delete {name}\n" for name in names)
    done = run_git(store, ["update-ref", "--no-deref", "--stdin"], timeout=BOUND,
                   stdin=("start\n" + lines + "commit\n").encode())
    if done.returncode != 0:
        raise GitFailed(f"cannot prune Genesis's copy of the safety refs at {store}: {done.stderr or 'no answer'}")
