"""The heartbeat folder's hygiene: nothing but a file at the heartbeat path, and room to write it."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
from pathlib import Path

__all__ = ["clear_planted", "disk_full", "DISK_ROOM", "KINDS"]

DISK_ROOM = 64 << 10       # less free space than this: the hook cannot write a heartbeat

KINDS = {stat.S_IFLNK: "a symlink", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
         stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def clear_planted(path: Path) -> str | None:
    """Remove anything but a regular file at the heartbeat path; say what it was.

    The watcher owns the heartbeat directory. What is planted there is never followed: the
    directory is opened without following a symlink, and only its entry is removed (a planted
    directory with everything in it, links not followed), nothing outside it.
    """
    try:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None  # no directory (yet), or not a real one: not the watcher's to clean
    try:
        try:
            st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode):
            return None
        kind = KINDS.get(stat.S_IFMT(st.st_mode), "something other than a file")
        try:
            if stat.S_ISDIR(st.st_mode):
                if sys.version_info >= (3, 11):
                    shutil.rmtree(path.name, dir_fd=dfd)
                else:
                    shutil.rmtree(path)
            else:
                os.unlink(path.name, dir_fd=dfd)
        except OSError as exc:
            return f"{kind} was planted at the heartbeat path and could not be removed ({exc.strerror})"
        return f"{kind} was planted at the heartbeat path and removed"
    finally:
        os.close(dfd)


def disk_full(directory: Path) -> bool:
    """Whether the hook has no room to write a heartbeat in `directory` (space or inodes)."""
    try:
        st = os.statvfs(directory)
    except OSError as exc:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    root = os.geteuid() == 0  # root may use the blocks reserved for it
    free = (st.f_bfree if root else st.f_bavail) * st.f_frsize
    inodes = st.f_ffree if root else st.f_favail
    return free < DISK_ROOM or (st.f_files > 0 and inodes == 0)
