"""The user's untracked and ignored files, copied aside at the run's start so that an agent's
`git clean -fdx` (or `rm`) can be undone with `genesis restore --untracked`.

What is copied: every untracked file the run found as the user's (Layout.user_files) and
every ignored file, except inside folders that tools rebuild (BULKY: node_modules, .venv,
build output...) and Genesis's own files. Paths and modes are kept; a symlink is copied as a
symlink, never followed; FIFOs, sockets and devices are listed as not copied. The copy is
capped in total (GENESIS_UNTRACKED_COPY_MAX_MB) and per file (FILE_MAX, at most the total),
leaves RESERVE free on its disk, and is bounded in time: what does not fit is listed in the
manifest as not copied, with why.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from genesis.repo.gitcmd import GitFailed, run_git
from genesis.store.atomicio import CorruptFile, read_json, write_json

__all__ = ["Copied", "Restored", "copy_aside", "ignored_files", "restore", "manifest_of", "copies", "prune", "BULKY",
           "FILE_MAX", "KEEP_RUNS", "TIME_BOUND"]

BULKY = frozenset({"node_modules", ".venv", "venv", "__pycache__", "build", "dist", "target", ".tox", ".nox",
                   ".mypy_cache", ".pytest_cache", ".ruff_cache", ".gradle", ".next", ".cache", ".parcel-cache",
                   ".terraform", "vendor", "coverage", "htmlcov", ".eggs"})
FILE_MAX = 20 << 20      # bytes: a larger file is listed, not copied
KEEP_RUNS = 10           # runs whose copies are kept
TIME_BOUND = 60.0        # seconds for the whole copy
RESERVE = 256 << 20      # bytes the copy always leaves free on its disk (the night needs room too)
MAX_FILES = 20_000       # files looked at
CHUNK = 1 << 16
MANIFEST = "manifest.json"
FILES = "files"


@dataclass(frozen=True)
class Copied:
    folder: Path                               # <copies>/<run-id>
    copied: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (path, why not copied)
    size: int = 0                              # bytes copied


def ignored_files(project: Path, own: Sequence[str], timeout: float = 60.0, clock=time.monotonic) -> list[str]:
    """The ignored files of the work tree, without bulky rebuildable folders and Genesis's own
    patterns (`own`: Layout.ignored()). git names a wholly ignored folder once; it is walked
    here, for at most timeout seconds and MAX_FILES files in all."""
    deadline = clock() + timeout
    done = run_git(project, ["ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"],
                   timeout=timeout, config=[("core.fsmonitor", "false")], env={"GIT_OPTIONAL_LOCKS": "0"})
    if done.returncode != 0:
        raise GitFailed(f"git ls-files --ignored failed in {project}: {done.stderr}")
    found: list[str] = []
    for raw in done.stdout.split(b"\0"):
        rel = os.fsdecode(raw).rstrip("/")
        if not rel or _bulky(rel) or _own(rel, own):
            continue
        if raw.endswith(b"/"):
            found += _walk(Path(project), rel, own, lambda: clock() > deadline)
        else:
            found.append(rel)
        if len(found) >= MAX_FILES or clock() > deadline:
            break
    return found[:MAX_FILES]


def _bulky(rel: str) -> bool:
    return any(part in BULKY for part in rel.split("/"))


def _own(rel: str, own: Sequence[str]) -> bool:
    for pattern in own:
        core = pattern.lstrip("/").rstrip("/")
        if core.endswith("*") and rel.startswith(core[:-1]):
            return True
        if rel == core or rel.startswith(core + "/"):
            return True
    return False


def _walk(project: Path, top: str, own: Sequence[str], late) -> list[str]:
    """Files under an ignored folder, never through a symlinked folder, never into a bulky one."""
    found = []
    for root, dirs, files in os.walk(project / top, followlinks=False):
        rel_root = os.path.relpath(root, project)
        dirs[:] = [d for d in dirs if d not in BULKY and not _own(f"{rel_root}/{d}", own)]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            found.append(f"{rel_root}/{name}")
        if len(found) >= MAX_FILES or late():
            break
    return found


def copy_aside(project: Path, paths: Sequence[str], folder: Path, most: int, *,
               file_most: int = FILE_MAX, bound: float = TIME_BOUND, clock=time.monotonic) -> Copied:
    """Copy each path (relative to project) into folder/files/, keeping its mode; write the
    manifest. `most` bytes in all (0: nothing copied, everything listed); never follows a link."""
    folder = Path(folder)
    files = folder / FILES
    files.mkdir(mode=0o700, parents=True, exist_ok=True)
    deadline = clock() + bound
    file_most = min(file_most, most)
    copied: list[dict] = []
    skipped: list[tuple[str, str]] = []
    total = 0
    for rel in dict.fromkeys(paths):
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            skipped.append((rel, "not a path inside the project"))
            continue
        if clock() > deadline:
            skipped.append((rel, f"the copy ran out of its {bound:g}s"))
            continue
        source = Path(project) / rel
        try:
            st = os.lstat(source)
        except OSError as exc:
            skipped.append((rel, f"cannot read it ({exc.strerror})"))
            continue
        if stat.S_ISLNK(st.st_mode):
            _symlink(files / rel, os.readlink(source))
            copied.append({"path": rel, "kind": "symlink", "mode": 0o777, "size": 0})
            continue
        if not stat.S_ISREG(st.st_mode):
            skipped.append((rel, "not a regular file (a FIFO, socket or device)"))
            continue
        if _free(files) - st.st_size < RESERVE:
            skipped.append((rel, f"{st.st_size} bytes: the disk would keep less than {_mb(RESERVE)} free"))
            continue
        if st.st_size > file_most or total + st.st_size > most:
            which = (f"over the per-file cap of {_mb(file_most)}" if st.st_size > file_most else
                     "over what is left of the total")
            which += f" (GENESIS_UNTRACKED_COPY_MAX_MB: {_mb(most)} in all)"
            skipped.append((rel, f"{st.st_size} bytes: {which}"))
            continue
        try:
            size = _copy(source, files / rel, stat.S_IMODE(st.st_mode), file_most)
        except OSError as exc:
            skipped.append((rel, f"cannot copy it ({exc.strerror or exc})"))
            continue
        total += size
        copied.append({"path": rel, "kind": "file", "mode": stat.S_IMODE(st.st_mode), "size": size})
    write_json(folder / MANIFEST, {"project": str(project), "copied": copied,
                                   "skipped": [{"path": p, "why": w} for p, w in skipped], "size": total,
                                   "cap": most})
    return Copied(folder, tuple(c["path"] for c in copied), tuple(skipped), total)


def _free(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0


def _mb(size: int) -> str:
    return f"{size / (1 << 20):g} MB"


def _parents(dest: Path) -> None:
    dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)


def _symlink(dest: Path, target: str) -> None:
    _parents(dest)
    try:
        os.unlink(dest)
    except FileNotFoundError:
        pass
    os.symlink(target, dest)


def _copy(source: Path, dest: Path, mode: int, most: int) -> int:
    """Copy a regular file, never through a link nor waiting on a FIFO swapped in; its size."""
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file any more")
        _parents(dest)
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        size = 0
        try:
            while size <= most and (chunk := os.read(fd, CHUNK)):
                os.write(out, chunk)
                size += len(chunk)
            os.fchmod(out, mode & 0o7777)
        finally:
            os.close(out)
        return size
    finally:
        os.close(fd)


def manifest_of(folder: Path) -> dict | None:
    try:
        data = read_json(Path(folder) / MANIFEST)
    except (CorruptFile, OSError):
        return None
    return data if isinstance(data, dict) else None


def copies(root: Path) -> list[str]:
    """The runs with a copy under root, oldest first."""
    try:
        return sorted(p.name for p in Path(root).iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []


def prune(root: Path, current: str, keep: int = KEEP_RUNS) -> list[str]:
    """Remove the copies of all but the newest `keep` runs (never the current run's)."""
    runs = [r for r in copies(root) if r != current]
    gone = runs[:max(0, len(runs) - (keep - 1))]
    for run in gone:
        shutil.rmtree(Path(root) / run, ignore_errors=True)
    return gone


@dataclass(frozen=True)
class Restored:
    restored: tuple[str, ...]
    present: tuple[str, ...]       # already in the work tree: never overwritten
    failed: tuple[tuple[str, str], ...] = ()


def restore(project: Path, folder: Path) -> Restored:
    """Put back every copied file missing from the work tree, with its mode; never overwrite."""
    manifest = manifest_of(folder) or {}
    restored, present, failed = [], [], []
    for entry in manifest.get("copied", []):
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/"):
            continue
        dest, source = Path(project) / rel, Path(folder) / FILES / rel
        if os.path.lexists(dest):
            present.append(rel)
            continue
        try:
            if _through_link(Path(project), rel):
                raise OSError(0, "a folder on its way is a symlink")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if entry.get("kind") == "symlink":
                os.symlink(os.readlink(source), dest)
            else:
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
                with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
                    shutil.copyfileobj(src, out)
                    os.fchmod(out.fileno(), int(entry.get("mode", 0o644)) & 0o7777)
        except OSError as exc:
            failed.append((rel, exc.strerror or str(exc)))
            continue
        restored.append(rel)
    return Restored(tuple(restored), tuple(present), tuple(failed))


def _through_link(project: Path, rel: str) -> bool:
    """Whether a folder between the project and rel is a symlink (a restore never writes through one)."""
    here = project
    for part in rel.split("/")[:-1]:
        here = here / part
        if os.path.islink(here):
            return True
    return False
