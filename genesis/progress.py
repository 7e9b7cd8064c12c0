"""Progress: did the repository change? HEAD, the index, the work tree, untracked files."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Fingerprint", "NotARepository", "fingerprint", "open_repo"]

HASH_LIMIT = 8 << 20  # untracked files larger than this are compared by size and mtime


class NotARepository(ValueError):
    pass


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
        repo = git.Repo(project, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise NotARepository(f"{project} is not a git work tree; run `git init` there or pass "
                             f"--project with a git project") from None
    if repo.bare:
        raise NotARepository(f"{project} is a bare repository; point --project at a work tree")
    if Path(repo.working_tree_dir).resolve() != Path(project).resolve():
        raise NotARepository(f"{project} is inside the git work tree {repo.working_tree_dir}; "
                             f"pass --project {repo.working_tree_dir}")
    return repo


def fingerprint(project: Path, excluded: list[str]) -> Fingerprint:
    """A digest of everything an agent can change; Genesis's own files are left out."""
    import git

    repo = open_repo(project)
    specs = ["--", "."] + [f":(top,exclude){p.lstrip('/').rstrip('/')}" for p in excluded]
    try:
        head = repo.git.rev_parse("--verify", "-q", "HEAD")
    except git.GitCommandError:
        head = None
    h = hashlib.sha256()
    for args in (["--cached"], []):
        h.update(repo.git.diff(*args, "--binary", "--no-color", "--no-ext-diff", *specs,
                               stdout_as_string=False))
        h.update(b"\0\0")
    untracked = repo.git.ls_files("--others", "--exclude-standard", "-z", *specs).split("\0")
    for rel in sorted(u for u in untracked if u):
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        h.update(_file_digest(Path(project) / rel))
    return Fingerprint(head, h.hexdigest())


def _file_digest(path: Path) -> bytes:
    try:
        st = os.lstat(path)
        if os.path.islink(path):
            return b"link:" + os.readlink(path).encode("utf-8", "surrogateescape")
        if st.st_size > HASH_LIMIT:
            return f"big:{st.st_size}:{st.st_mtime_ns}".encode()
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).digest()
    except OSError:
        return b"unreadable"
