"""Progress: did the repository change? HEAD, the index, the work tree, untracked files."""

from __future__ import annotations

import hashlib
import os
import select
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["Fingerprint", "GitFailed", "NotARepository", "fingerprint", "open_repo"]

HASH_LIMIT = 8 << 20  # untracked files larger than this are compared by size and mtime
GIT_TIMEOUT = 300     # seconds for one git command over the whole work tree
CHUNK = 1 << 16


class NotARepository(ValueError):
    pass


class GitFailed(RuntimeError):
    """A git command failed or ran over its time while measuring progress."""


@dataclass(frozen=True)
class Fingerprint:
    head: str | None     # None: no commit yet
    digest: str          # everything else that can change

    def to_json(self) -> dict[str, str | None]:
        return {"head": self.head, "digest": self.digest}

    @classmethod
    def from_json(cls, data: object) -> "Fingerprint | None":
        if isinstance(data, dict) and isinstance(data.get("digest"), str) \
                and isinstance(data.get("head"), (str, type(None))):
            return cls(data["head"], data["digest"])
        return None


def open_repo(project: Path):
    """The git work tree at project, or NotARepository with what to do."""
    import git  # GitPython; imported here to keep other commands quick to start

    try:
        # GitPython expands $VARS and ~ in a str path unless told not to: a directory named
        # `$HOME` is a name here. An absolute path leaves no leading ~ to expand either.
        repo = git.Repo(os.path.abspath(project), search_parent_directories=True, expand_vars=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise NotARepository(f"{project} is not a git work tree; run `git init` there or pass "
                             f"--project with a git project") from None
    if repo.bare:
        raise NotARepository(f"{project} is a bare repository; point --project at a work tree")
    if Path(repo.working_tree_dir).resolve() != Path(project).resolve():
        raise NotARepository(f"{project} is inside the git work tree {repo.working_tree_dir}; "
                             f"pass --project {repo.working_tree_dir}")
    # Its command wrapper expands a str working directory whatever Repo was told, so git
    # would run in another directory; a Path is taken literally.
    repo.git = repo.GitCommandWrapperType(Path(repo.working_tree_dir))
    return repo


def fingerprint(project: Path, excluded: list[str]) -> Fingerprint:
    """A digest of everything an agent can change; Genesis's own files are left out."""
    open_repo(project)
    specs = ["--", "."] + [f":(top,exclude){p.lstrip('/').rstrip('/')}" for p in excluded]
    out: list[bytes] = []
    found = _git(project, ["rev-parse", "--verify", "-q", "HEAD"], out.append, ok=(0, 1)) == 0
    head = b"".join(out).decode("ascii", "replace").strip() if found else None
    h = hashlib.sha256()
    for args in (["--cached"], []):
        _git(project, ["diff", *args, "--binary", "--no-color", "--no-ext-diff", *specs], h.update)
        h.update(b"\0\0")
    listing: list[bytes] = []
    _git(project, ["ls-files", "--others", "--exclude-standard", "-z", *specs], listing.append)
    for rel in sorted(u for u in b"".join(listing).split(b"\0") if u):
        h.update(rel + b"\0")
        h.update(_file_digest(Path(project) / os.fsdecode(rel)))
    return Fingerprint(head, h.hexdigest())


def _git(project: Path, args: list[str], sink: Callable[[bytes], object], ok: tuple[int, ...] = (0,)) -> int:
    """Run git in project and feed its output to sink as it comes, so a huge diff is never
    held whole; bounded by GIT_TIMEOUT. No shell and no GitPython: nothing is expanded."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
    deadline = time.monotonic() + GIT_TIMEOUT
    overtime = GitFailed(f"git {args[0]} ran for more than {GIT_TIMEOUT}s in {project}; check the "
                         f"repository (a huge work tree, a hung filesystem?)")
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(["git", *args], cwd=project, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err)
        try:
            with proc.stdout:
                fd = proc.stdout.fileno()
                while True:
                    if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                        raise overtime
                    chunk = os.read(fd, CHUNK)
                    if not chunk:
                        break
                    sink(chunk)
            rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise overtime from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if rc not in ok:
            err.seek(0)
            why = err.read(CHUNK).decode("utf-8", "replace").strip()[-300:]
            raise GitFailed(f"git {args[0]} failed in {project} (status {rc}): {why}")
        return rc


def _file_digest(path: Path) -> bytes:
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return b"link:" + os.fsencode(os.readlink(path))
        if not stat.S_ISREG(st.st_mode):
            return f"special:{stat.S_IFMT(st.st_mode)}".encode()
        if st.st_size > HASH_LIMIT:
            return f"big:{st.st_size}:{st.st_mtime_ns}".encode()
        # O_NONBLOCK and the check below: a file swapped for a FIFO is never waited on.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return b"unreadable"
            h, left = hashlib.sha256(), HASH_LIMIT  # a file growing meanwhile is read no further
            while left > 0 and (chunk := fh.read(min(CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
        return h.digest()
    except OSError:
        return b"unreadable"
