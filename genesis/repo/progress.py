"""Progress: did the repository change? HEAD, the index, the work tree, untracked files."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from genesis.repo.gitcmd import GIT_TIMEOUT, GitFailed, GitRun, NotARepository, NotOwned, command_name, run_git

__all__ = ["Fingerprint", "NotARepository", "fingerprint", "check_work_tree", "measuring_config", "file_digest"]

HASH_LIMIT = 8 << 20       # untracked files larger than this are compared by size and mtime
CHUNK = 1 << 16


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


def check_work_tree(project: Path, timeout: float = GIT_TIMEOUT) -> Path:
    """The top of the git work tree at project, or NotARepository with what to do."""
    try:
        # A bare repository prints "true" and then fails on --show-toplevel.
        done = run_git(project, ["rev-parse", "--is-bare-repository", "--show-toplevel"], timeout=timeout,
                       config=[("core.fsmonitor", "false")], limit=1 << 16)
    except FileNotFoundError:
        if not Path(project).is_dir():
            raise NotARepository(f"{project} is not a directory; pass --project with a git project") from None
        raise NotARepository("git is not installed (not found on PATH); install git") from None
    except NotADirectoryError:
        raise NotARepository(f"{project} is not a directory; pass --project with a git project") from None
    lines = done.text.splitlines()
    if lines[:1] == ["true"]:
        raise NotARepository(f"{project} is a bare repository; point --project at a work tree")
    if done.returncode != 0 and "safe.directory" in done.stderr:  # the hint ends git's message
        top = done.stderr.rsplit("safe.directory", 1)[1].strip() or str(project)
        raise NotOwned(project, top)
    if done.returncode != 0 or len(lines) < 2 or not lines[1]:
        said = f" (git: {done.stderr.splitlines()[-1]})" if done.stderr else ""
        raise NotARepository(f"{project} is not a git work tree{said}; run `git init` there or pass "
                             f"--project with a git project")
    top = lines[1]
    if Path(top).resolve() != Path(project).resolve():
        raise NotARepository(f"{project} is inside the git work tree {top}; pass --project {top}")
    return Path(top)


def measuring_config(project: Path, timeout: float = GIT_TIMEOUT) -> list[tuple[str, str]]:
    """Config that makes git read the work tree without running anything the repository
    configures: every filter driver (clean, smudge, process) off, fsmonitor off, no hooks.

    Filters are found by name in the config Genesis's git reads (the repository's, with its
    includes, and git-lfs's where the user had it: gitcmd/gitenv), then each is emptied, which
    git treats as no filter; `required` is turned off so an emptied filter is not an error.
    Textconv and external diff are command-line options.
    """
    found = run_git(project, ["config", "-z", "--get-regexp", r"^filter\."], timeout=timeout,
                    config=[("core.fsmonitor", "false")])
    if found.returncode not in (0, 1):  # 1: no filter configured
        raise GitFailed(f"git config failed in {project} (status {found.returncode}): {found.stderr}")
    names: set[str] = set()
    for entry in found.stdout.split(b"\0"):
        key = os.fsdecode(entry.split(b"\n", 1)[0])
        name, dot, _ = key[len("filter."):].rpartition(".")
        if key.startswith("filter.") and dot:
            names.add(name)
    config = [("core.fsmonitor", "false"), ("core.hooksPath", os.devnull)]
    for name in sorted(names):
        config += [(f"filter.{name}.{var}", "") for var in ("clean", "smudge", "process")]
        config.append((f"filter.{name}.required", "false"))
    return config


def fingerprint(project: Path, excluded: list[str], timeout: float = GIT_TIMEOUT) -> Fingerprint:
    """A digest of everything an agent can change; Genesis's own files are left out.

    Nothing the repository configures runs (see measuring_config), and each git command
    is bounded by timeout: GitTimeout names the one that ran over.
    """
    check_work_tree(project, timeout)
    config = measuring_config(project, timeout)
    specs = ["--", "."] + [f":(top,exclude){p.lstrip('/').rstrip('/')}" for p in excluded]

    def git(args: list[str], sink=None, ok: tuple[int, ...] = (0,)) -> GitRun:
        done = run_git(project, args, timeout=timeout, config=config, sink=sink,
                       env={"GIT_OPTIONAL_LOCKS": "0"})
        if done.returncode not in ok:
            raise GitFailed(f"{command_name(args)} failed in {project} (status {done.returncode}): {done.stderr}")
        return done

    found = git(["rev-parse", "--verify", "-q", "HEAD"], ok=(0, 1))
    head = found.stdout.decode("ascii", "replace").strip() if found.returncode == 0 else None
    h = hashlib.sha256()
    for args in (["--cached"], []):
        # Submodules: their commits count; looking into their work trees would run their config.
        git(["diff", *args, "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
             "--ignore-submodules=dirty", *specs], sink=h.update)
        h.update(b"\0\0")
    listing = git(["ls-files", "--others", "--exclude-standard", "-z", *specs]).stdout
    for rel in sorted(u for u in listing.split(b"\0") if u):
        h.update(rel + b"\0")
        h.update(file_digest(Path(project) / os.fsdecode(rel)))
    return Fingerprint(head, h.hexdigest())


def file_digest(path: Path, limit: int = HASH_LIMIT) -> bytes:
    """A file's content hash, never following a link or waiting on a FIFO; one larger than
    limit is known by its size and modification time."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return b"link:" + os.fsencode(os.readlink(path))
        if not stat.S_ISREG(st.st_mode):
            return f"special:{stat.S_IFMT(st.st_mode)}".encode()
        if st.st_size > limit:
            return f"big:{st.st_size}:{st.st_mtime_ns}".encode()
        # O_NONBLOCK and the check below: a file swapped for a FIFO is never waited on.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return b"unreadable"
            h, left = hashlib.sha256(), limit  # a file growing meanwhile is read no further
            while left > 0 and (chunk := fh.read(min(CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
        return h.digest()
    except OSError:
        return b"unreadable"
