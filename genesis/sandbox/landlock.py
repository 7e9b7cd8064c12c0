"""Landlock (Linux 5.13+): a process restricts itself, and every process it starts, to write
only beneath the folders it names; since ABI 6 it may also signal, and reach abstract unix
sockets of, only processes inside its own domain; since ABI 9 (Linux 7.1) connect to a socket
file made outside its domain only beneath the paths it names (below, unixsockets.py's filter).

An allow-list of whole trees: it cannot make `<git dir>/genesis` read-only inside a project
the agent must write (a bind mount can; see bwrap.py). The calls are made by ctypes in the
child between fork and exec, so only plain syscalls run there.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from dataclasses import dataclass

__all__ = ["abi", "Ruleset", "prepare", "restrict", "LandlockFailed", "SIGNAL_SCOPING_ABI", "RESOLVE_UNIX_ABI"]

# <linux/landlock.h>; the three syscalls have one number on every architecture.
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
SIGNAL_SCOPING_ABI = 6
# connect(2) and sendmsg(2) to a socket file: allowed only to one made inside the domain, or
# beneath a path granted this right (a socket file itself may be granted it).
RESOLVE_UNIX, RESOLVE_UNIX_ABI = 1 << 16, 9

# Every right that changes the file system, by the ABI that brought it. Reading and executing
# are not handled, so they stay allowed everywhere.
_WRITE_RIGHTS = {1: (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10)
                 | (1 << 11) | (1 << 12),  # write file, remove dir/file, make char/dir/reg/sock/fifo/block/sym
                 2: 1 << 13,               # refer: link or rename across folders
                 3: 1 << 14}               # truncate


class LandlockFailed(OSError):
    """The kernel refused a Landlock call."""


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, too old, disabled)."""
    libc = _libc()
    if libc is None:
        return 0
    got = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(got), 0)


@dataclass(frozen=True)
class Ruleset:
    """Everything the child needs, packed before the fork."""
    abi: int
    attr: bytes                    # struct landlock_ruleset_attr for this ABI
    rights: int                    # the write rights handled, all granted beneath `writable`
    writable: tuple[str, ...]
    reachable: tuple[str, ...] = ()  # from ABI 9: where a socket file made outside may be reached

    @property
    def scoped(self) -> bool:
        return self.abi >= SIGNAL_SCOPING_ABI

    @property
    def sockets_scoped(self) -> bool:
        """No socket file made outside the box is reached but beneath `reachable`."""
        return self.abi >= RESOLVE_UNIX_ABI


def prepare(writable: tuple[str, ...], version: int, reachable: tuple[str, ...] = ()) -> Ruleset:
    """The ruleset for `version`: writes only beneath `writable` (folders that exist); from ABI 6
    signals and abstract sockets scoped to the box; from ABI 9 socket files made outside it
    reached only beneath `reachable` (those that exist: folders, or sockets themselves)."""
    rights = 0
    for since, bits in _WRITE_RIGHTS.items():
        if version >= since:
            rights |= bits
    handled = rights | (RESOLVE_UNIX if version >= RESOLVE_UNIX_ABI else 0)
    # handled_access_fs, handled_access_net (ABI 4), scoped (ABI 6): the kernel takes the size given.
    if version >= SIGNAL_SCOPING_ABI:
        attr = struct.pack("=QQQ", handled, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    else:
        attr = struct.pack("=Q", handled)
    folders = tuple(dict.fromkeys(p for p in writable if p and os.path.isdir(p)))
    doors = tuple(dict.fromkeys(p for p in reachable if p and os.path.exists(p)))
    return Ruleset(version, attr, rights, folders, doors if version >= RESOLVE_UNIX_ABI else ())


def restrict(rules: Ruleset) -> None:
    """In the child, before exec: no new privileges, then the ruleset on this process for good.
    LandlockFailed if the kernel refuses (the launch then fails rather than run unboxed)."""
    libc = _libc()
    if libc is None:
        raise LandlockFailed(0, "Landlock needs Linux")

    def check(result: int, what: str) -> int:
        if result < 0:
            err = ctypes.get_errno()
            raise LandlockFailed(err, f"{what}: {os.strerror(err)}")
        return result

    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    attr = ctypes.create_string_buffer(rules.attr, len(rules.attr))
    ruleset = check(libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), attr, ctypes.c_size_t(len(rules.attr)),
                                 ctypes.c_uint32(0)), "landlock_create_ruleset")

    def grant(path: str, rights: int) -> None:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            beneath = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
            check(libc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset),
                               ctypes.c_int(RULE_PATH_BENEATH), beneath, ctypes.c_uint32(0)),
                  f"landlock_add_rule({path})")
        finally:
            os.close(fd)

    try:
        for folder in rules.writable:
            grant(folder, rules.rights)
        for door in rules.reachable:  # not the write rules': a server's socket under /tmp or HOME stays out
            try:
                grant(door, RESOLVE_UNIX)
            except FileNotFoundError:  # gone since: one socket fewer reachable, never more
                continue
        check(libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
              "landlock_restrict_self")
    finally:
        os.close(ruleset)
