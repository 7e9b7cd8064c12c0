"""Replacing a file of the user's (a CLI's settings, our plugin) so that nothing of theirs is lost: read
within bounds, only at a regular file of theirs, every old version backed up, mode and owner kept, atomically."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

__all__ = ["SettingsError", "UNTOUCHED", "MAX_SETTINGS_BYTES", "read_text", "target_of", "keep_backup",
           "replace_file", "read_owned", "write_owned"]

MAX_SETTINGS_BYTES = 4 << 20
UNTOUCHED = "it was left untouched"


class SettingsError(ValueError):
    """The settings file cannot be changed safely; it was left untouched."""


def read_text(path: Path, follow: bool = True) -> tuple[str, os.stat_result] | None:
    """The file's text and status (following a symlink, as Claude Code does), None when absent."""
    nofollow = 0 if follow else getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingsError(f"{path} cannot be read ({exc.strerror}); {UNTOUCHED}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SettingsError(f"{path} is not a regular file; fix it by hand ({UNTOUCHED})")
        data = fh.read(MAX_SETTINGS_BYTES + 1)
    if len(data) > MAX_SETTINGS_BYTES:
        raise SettingsError(f"{path} is larger than {MAX_SETTINGS_BYTES} bytes; fix it by hand ({UNTOUCHED})")
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            f"fix it by hand ({UNTOUCHED})") from None


def target_of(path: Path, hint: str = "replace the link with a file") -> Path:
    """The file to replace: path itself, or the regular file of ours that a symlink at path names."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISLNK(st.st_mode):
        if not stat.S_ISREG(st.st_mode):
            raise SettingsError(f"{path} is not a regular file; fix it by hand ({UNTOUCHED})")
        return path
    real = Path(os.path.realpath(path))
    try:
        rst = os.lstat(real)
        why = ("is not a regular file" if not stat.S_ISREG(rst.st_mode)
               else f"belongs to uid {rst.st_uid}, not to you" if rst.st_uid != os.geteuid() else "")
    except OSError as exc:
        why = "does not exist" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else f"cannot be read ({exc.strerror})"
    if why:
        raise SettingsError(f"{path} is a symlink to {real}, which {why}; Genesis edits a linked settings file only "
                            f"at a regular file of yours ({UNTOUCHED}); {hint}")
    return real


def keep_backup(path: Path, data: bytes, st: os.stat_result, now: float) -> Path:
    """A copy beside path under a name no earlier backup has, with the original's mode and owner."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    for n in range(1, 10_000):
        backup = path.with_name(f"{path.name}.bak-{stamp}" + (f"-{n}" if n > 1 else ""))
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            continue
        try:
            _keep_owner_and_mode(fd, st, path)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            _unlink(backup)
            raise
        return backup
    raise SettingsError(f"too many backups of {path} this second; remove some ({UNTOUCHED})")


def _keep_owner_and_mode(fd: int, st: os.stat_result, path: Path) -> None:
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except PermissionError:
            raise SettingsError(f"{path} belongs to {st.st_uid}:{st.st_gid}, an owner you cannot give a rewritten "
                                f"copy; edit it as that user ({UNTOUCHED})") from None
    os.fchmod(fd, stat.S_IMODE(st.st_mode))


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def replace_file(target: Path, text: str, st: os.stat_result | None) -> None:
    """Temp file in the target's directory, same mode and owner, fsync, rename over the target."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644 if st is None
                 else 0o600)
    try:
        if st is not None:
            _keep_owner_and_mode(fd, st, target)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        _unlink(tmp)
        raise
    try:  # make the rename itself durable
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def read_owned(path: Path) -> str | None:
    """The text of a file Genesis writes whole (a plugin), None when absent; refused like settings."""
    got = read_text(target_of(path), follow=False)
    return None if got is None else got[0]


def write_owned(path: Path, text: str, now: float | None = None) -> tuple[bool, Path | None]:
    """Put `text` in a file wholly ours: (changed, backup). Unchanged text is left alone; other
    text there (the user edited it) is backed up first."""
    now = time.time() if now is None else now
    target = target_of(path)
    got = read_text(target, follow=False)
    if got is not None and got[0] == text:
        return False, None
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None if got is None else keep_backup(path, got[0].encode("utf-8"), got[1], now)
    replace_file(target, text, None if got is None else got[1])
    return True, backup
