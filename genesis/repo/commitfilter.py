"""What an auto-commit leaves out, and why: a file that looks like a secret, or one over the
size cap. What is left out stays in the work tree, uncommitted, and every later auto-commit
leaves it out again by the same rules.

Two passes around staging. Before it (`by_name_and_size`), from the work tree: a new file
named like a secret (repo/secrets.py), and any file over the cap, are kept from `git add`
(a 1 GB file is never even hashed into the repository). After it (`by_content`), from the
staged blobs themselves (what would be committed, never through a symlink): a registry file
with credentials, and what detect-secrets finds in text up to SCAN_MAX_BYTES, within
SCAN_BUDGET seconds of detect-secrets for the whole commit; a file it did not scan in time is
left out too, and named with that reason (one no plugin could fire on is never: see
secretscan.py's prefilter, which makes 100k new files cost seconds, not minutes). The scanner,
and detect-secrets with it, is imported only by a commit with staged files to scan. A
file already tracked is the user's choice by name; only new secrets in it count (ones its
committed version does not have already).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from genesis.repo.gitcmd import GitFailed, GitRun
from genesis.repo.secrets import Scan, has_credentials, secret_name

__all__ = ["LeftOut", "Rules", "by_name_and_size", "by_content", "exclusions", "MB", "SCAN_MAX_BYTES",
           "SCAN_BUDGET"]

MB = 1 << 20
SCAN_MAX_BYTES = 1 * MB   # larger files are checked by name and size only
SCAN_BUDGET = 60.0        # seconds of content scanning per commit
BATCH_BYTES = 16 * MB     # blob bytes read from git at a time
REGULAR = ("100644", "100755")
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

Git = Callable[..., GitRun]


@dataclass(frozen=True)
class LeftOut:
    path: str
    reason: str      # why, never the secret itself


@dataclass(frozen=True)
class Rules:
    max_bytes: int                  # a file larger than this is left out (0: no cap)
    scan_bytes: int = SCAN_MAX_BYTES
    budget: float = SCAN_BUDGET
    clock: Callable[[], float] = time.monotonic


def _mb(size: int) -> str:
    return f"{size / MB:.1f} MB" if size < 10 * MB else f"{size // MB} MB"


def too_big(size: int, rules: Rules) -> str | None:
    if rules.max_bytes and size > rules.max_bytes:
        return (f"{_mb(size)}, over the {_mb(rules.max_bytes)} cap of one committed file "
                f"(GENESIS_COMMIT_MAX_FILE_MB)")
    return None


def _status(git: Git, tracked_only: bool) -> list[tuple[str, bool]]:
    """(path, new: not in HEAD) of every change `git add` would stage."""
    done = git("status", "--porcelain=v1", "-z", "--no-renames", "--ignore-submodules=dirty",
               "--untracked-files=no" if tracked_only else "--untracked-files=all", env={"GIT_OPTIONAL_LOCKS": "0"})
    if done.returncode != 0:
        raise GitFailed(f"git status failed: {(done.stderr or done.text)[-300:]}")
    found = []
    for entry in done.stdout.split(b"\0"):
        if len(entry) > 3:
            found.append((os.fsdecode(entry[3:]), entry[:1] in (b"?", b"A")))
    return found


def by_name_and_size(git: Git, project: Path, rules: Rules, *, tracked_only: bool = False,
                     among: Iterable[str] | None = None, skip: Iterable[str] = ()) -> list[LeftOut]:
    """The changes to stage that are left out before staging: new files named like a secret,
    and files over the size cap (the work tree's copy, never followed through a symlink).
    `among` limits it to those paths; `skip` are left out already for another reason."""
    wanted = None if among is None else set(among)
    skipped = set(skip)
    left = []
    top = os.fspath(project)
    for path, new in _status(git, tracked_only):
        if path in skipped or (wanted is not None and path not in wanted):
            continue
        why = secret_name(path) if new else None
        if why is None:
            try:
                st = os.lstat(os.path.join(top, path))
            except OSError:
                continue  # deleted: a deletion adds nothing
            why = too_big(st.st_size, rules) if stat.S_ISREG(st.st_mode) else None
        elif why:
            why = f"looks like a secret by its name: {why}"
        if why:
            left.append(LeftOut(path, why))
    return left


def exclusions(left: Sequence[LeftOut]) -> list[str]:
    """Pathspecs that keep these paths out of a `git add`."""
    return [f":(exclude,literal){item.path}" for item in left]


@dataclass(frozen=True)
class _Staged:
    path: str
    old: str         # the blob in HEAD ("" for a new file)
    new: str


def _staged(git: Git) -> list[_Staged]:
    """Files whose staged content is new or changed (regular files: a symlink holds a path)."""
    done = git("diff", "--cached", "--raw", "-z", "--no-renames", "--no-abbrev", "--diff-filter=AMT")
    if done.returncode != 0:
        raise GitFailed(f"git diff --cached failed: {(done.stderr or done.text)[-300:]}")
    parts = done.stdout.split(b"\0")
    found = []
    for meta, name in zip(parts[0::2], parts[1::2]):
        fields = meta.decode("ascii", "replace").lstrip(":").split()
        if len(fields) >= 5 and fields[1] in REGULAR:
            old = fields[2] if fields[0] in REGULAR and set(fields[2]) != {"0"} else ""
            found.append(_Staged(os.fsdecode(name), old, fields[3]))
    return found


def _sizes(git: Git, blobs: Iterable[str]) -> dict[str, int]:
    wanted = list(dict.fromkeys(blobs))
    if not wanted:
        return {}
    done = git("cat-file", "--batch-check", stdin="".join(f"{b}\n" for b in wanted).encode())
    sizes = {}
    for line in done.text.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].isdigit():
            sizes[fields[0]] = int(fields[2])
    return sizes


def _contents(git: Git, blobs: Sequence[str]) -> dict[str, bytes]:
    """The blobs' contents (`git cat-file --batch`), keyed by their ids."""
    done = git("cat-file", "--batch", stdin="".join(f"{b}\n" for b in blobs).encode())
    out, found, at = done.stdout, {}, 0
    while at < len(out):
        end = out.find(b"\n", at)
        if end < 0:
            break
        fields = out[at:end].split()
        if len(fields) != 3 or not fields[2].isdigit():
            break
        size = int(fields[2])
        found[fields[0].decode()] = out[end + 1:end + 1 + size]
        at = end + 1 + size + 1
    return found


def _batches(items: Sequence[_Staged], sizes: dict[str, int]) -> Iterable[list[_Staged]]:
    batch: list[_Staged] = []
    total = 0
    for item in items:
        if batch and total + sizes[item.new] > BATCH_BYTES:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += sizes[item.new]
    if batch:
        yield batch


def _blob_id(data: bytes, like: str) -> str:
    """The id git gives a blob of data, in the object format of `like` (SHA-1, or SHA-256)."""
    digest = hashlib.sha256 if len(like) == 64 else hashlib.sha1
    return digest(b"blob %d\0" % len(data) + data).hexdigest()


def _from_work_tree(top: str, item: _Staged, limit: int) -> bytes | None:
    """The staged blob's content read from the work tree instead of from git (reading tens of
    thousands of loose objects back costs as much as `git add` itself): the file's bytes, when
    they hash to the very blob staged (so what is scanned is what would be committed) and are
    at most limit long; else None (git is asked). A symlink is never followed, nor a FIFO waited on."""
    try:
        fd = os.open(os.path.join(top, item.path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = b""
        while len(data) <= limit:   # a short read (large files on some systems) reads on
            more = os.read(fd, limit + 1 - len(data))
            if not more:
                break
            data += more
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit and _blob_id(data, item.new) == item.new else None


def by_content(git: Git, rules: Rules, *, among: Iterable[str] | None = None,
               skip: Iterable[str] = (), top: Path | None = None) -> list[LeftOut]:
    """The staged files left out for what they hold: over the size cap, a registry file with
    credentials, or a new secret detect-secrets finds; a file not scanned within the budget.
    `top`: the work tree, whose files are read when they hash to the staged blob (git is asked
    only for the others). At most about BATCH_BYTES of contents are held at a time."""
    wanted = None if among is None else set(among)
    skipped = set(skip)
    staged = [s for s in _staged(git) if s.path not in skipped and (wanted is None or s.path in wanted)]
    left: list[LeftOut] = []
    if not staged:
        return left
    from genesis.repo.secretscan import scanner   # detect-secrets: only with something to scan

    deadline = rules.clock() + rules.budget
    with scanner() as look:
        def scan(batch: list[_Staged], contents: dict[str, bytes]) -> None:
            needs = look.needing([(item.path, contents.get(item.new)) for item in batch])
            for item, need in zip(batch, needs):
                data = contents.get(item.new)
                if data is not None and not need:  # the prefilter cleared it: a registry file's credentials alone
                    why = has_credentials(item.path, data)
                    if why:
                        left.append(LeftOut(item.path, f"looks like a secret ({why})"))
                    continue
                # The budget bounds detect-secrets alone: a file no plugin could fire on (the
                # prefilter, at the speed of a regex) is never left out for time.
                if rules.clock() >= deadline:
                    left.append(LeftOut(item.path, f"not checked for secrets within {rules.budget:.0f} s"))
                    continue
                why = _secret_in(git, look, item, data, rules.scan_bytes)
                if why:
                    left.append(LeftOut(item.path, why))

        asked: list[_Staged] = []   # what the work tree could not show: read from git
        batch: list[_Staged] = []
        read: dict[str, bytes] = {}
        total = 0
        for item in staged:
            data = _from_work_tree(os.fspath(top), item, rules.scan_bytes) if top is not None else None
            if data is None:
                asked.append(item)
                continue
            why = too_big(len(data), rules)
            if why:
                left.append(LeftOut(item.path, why))
                continue
            batch.append(item)
            read[item.new] = data
            total += len(data)
            if total >= BATCH_BYTES:
                scan(batch, read)
                batch, read, total = [], {}, 0
        if batch:
            scan(batch, read)
        sizes = _sizes(git, [s.new for s in asked])
        small: list[_Staged] = []
        for item in asked:
            size = sizes.get(item.new)
            why = "git cannot say how large it is" if size is None else too_big(size, rules)
            if why:
                left.append(LeftOut(item.path, why))
            elif size <= rules.scan_bytes:
                small.append(item)
        for part in _batches(small, sizes):
            scan(part, _contents(git, [s.new for s in part]))
    return left


def _secret_in(git: Git, look: Scan, item: _Staged, data: bytes | None, limit: int) -> str | None:
    """Why the staged content is left out, or None; in a tracked file only secrets its committed
    version (read if within limit) does not hold already count."""
    if data is None:
        return "git could not show its content to check it for secrets"
    why = has_credentials(item.path, data)
    if why:
        return f"looks like a secret ({why})"
    found = look(item.path, data)
    if found and item.old and _sizes(git, [item.old]).get(item.old, limit + 1) <= limit:
        before = _contents(git, [item.old]).get(item.old, b"")
        known = {f.digest for f in look(item.path, before)}
        found = tuple(f for f in found if f.digest not in known)
    if not found:
        return None
    kinds = ", ".join(dict.fromkeys(f"{f.kind} (line {f.line})" for f in found[:3]))
    return f"detect-secrets found {kinds}" + (f" and {len(found) - 3} more" if len(found) > 3 else "")
