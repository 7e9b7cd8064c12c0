"""The Landlock box's seccomp filter below Landlock ABI 9: no unix stream socket is opened in
the box, so none can connect to a server's socket file outside it (a tmux or screen server
runs any command it is sent; an ssh-agent signs; docker is root).

Landlock before ABI 9 cannot keep a socket file from the agent, and the socket's path alone
cannot be judged by seccomp (connect's address lies in memory it cannot read). What it can
judge is socket(2)'s arguments: AF_UNIX with SOCK_STREAM or SOCK_SEQPACKET is refused
(EACCES). socketpair(2) stays (node's child stdio, asyncio), and so does SOCK_DGRAM (syslog);
neither reaches a stream server. io_uring_setup is refused (EPERM; io_uring's own socket
operation would pass by the filter): programs fall back to plain system calls. The x32 and
32-bit (int 0x80, socketcall) entries are judged too, so no other door to socket(2) stays
open; an architecture the filter does not know may make no system call at all.

A classic BPF program, built as bytes before the fork; installed in the child right after
Landlock's restrict (which set no_new_privs), by ctypes, only plain system calls there.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
from dataclasses import dataclass

__all__ = ["Filter", "build", "install", "FilterFailed", "ARCHES"]

# <linux/filter.h>, <linux/seccomp.h>, <linux/audit.h>
_LD_W_ABS, _JEQ_K, _AND_K, _RET_K = 0x20, 0x15, 0x54, 0x06
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
OFF_NR, OFF_ARCH, OFF_ARG0, OFF_ARG1 = 0, 4, 16, 24   # struct seccomp_data; an argument's low word (little-endian)
AUDIT_X86_64, AUDIT_I386, AUDIT_AARCH64, AUDIT_ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
AF_UNIX, SOCK_TYPE_MASK, STREAMS = 1, 0xF, (1, 5)       # SOCK_STREAM, SOCK_SEQPACKET
X32 = 0x40000000
SYS_SOCKET_CALL = 1                                     # socketcall's call number for socket(2)
IO_URING_SETUP = 425                                    # one number on every architecture


@dataclass(frozen=True)
class _Calls:
    """One system-call table: socket(2)'s number, socketcall's (0: none), the calls refused with
    EPERM (io_uring_setup) and those refused with EACCES whatever their arguments."""
    socket: int
    socketcall: int = 0
    refused: tuple[int, ...] = (IO_URING_SETUP,)
    denied: tuple[int, ...] = ()    # x32's socket


# The host's machine name -> each audit architecture its processes may call the kernel as.
ARCHES: dict[str, tuple[tuple[int, _Calls], ...]] = {
    "x86_64": ((AUDIT_X86_64, _Calls(41, refused=(IO_URING_SETUP, X32 | IO_URING_SETUP), denied=(X32 | 41,))),
               (AUDIT_I386, _Calls(359, socketcall=102))),
    "aarch64": ((AUDIT_AARCH64, _Calls(198)), (AUDIT_ARM, _Calls(281, socketcall=102))),
}
ARCHES["amd64"], ARCHES["arm64"] = ARCHES["x86_64"], ARCHES["aarch64"]


class FilterFailed(OSError):
    """The kernel refused the filter: the launch fails rather than run with a false promise."""


@dataclass(frozen=True)
class Filter:
    arch: str
    program: bytes                 # struct sock_filter[], 8 bytes each

    @property
    def length(self) -> int:
        return len(self.program) // 8


def _ld(offset: int) -> tuple:
    return (_LD_W_ABS, offset, None, None)


def _jeq(k: int, yes: str | None = None, no: str | None = None) -> tuple:
    """Jump to label `yes` if the value is k, else to `no`; None falls through."""
    return (_JEQ_K, k, yes, no)


def _ret(k: int) -> tuple:
    return (_RET_K, k, None, None)


def _assemble(code: list[tuple]) -> bytes:
    """Instructions (op, k, yes, no) and labels ("label", name), jumps resolved (forward only)."""
    at: dict[str, int] = {}
    plain = []
    for item in code:
        if item[0] == "label":
            at[item[1]] = len(plain)
        else:
            plain.append(item)
    out = bytearray()
    for index, (op, k, yes, no) in enumerate(plain):
        jt, jf = (at[label] - index - 1 if label else 0 for label in (yes, no))
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError(f"a jump out of reach at instruction {index}")
        out += struct.pack("=HBBI", op, jt, jf, k)
    return bytes(out)


def _program(tables: tuple[tuple[int, _Calls], ...]) -> bytes:
    deny_acces, deny_perm = RET_ERRNO | errno.EACCES, RET_ERRNO | errno.EPERM
    code: list[tuple] = [_ld(OFF_ARCH)]
    code += [_jeq(audit, f"arch{n}") for n, (audit, _) in enumerate(tables)]
    code.append(_ret(deny_perm))   # an architecture this host should not have: nothing allowed
    for n, (_, calls) in enumerate(tables):
        code += [("label", f"arch{n}"), _ld(OFF_NR), _jeq(calls.socket, "unix")]
        code += [_jeq(nr, "eperm") for nr in calls.refused]
        code += [_jeq(nr, "eacces") for nr in calls.denied]
        if calls.socketcall:  # its arguments lie in memory: only which call it is can be judged
            code.append(_jeq(calls.socketcall, "socketcall"))
        code.append(_ret(RET_ALLOW))
    code += [("label", "socketcall"), _ld(OFF_ARG0), _jeq(SYS_SOCKET_CALL, "eacces"), _ret(RET_ALLOW),
             # socket(family, type, protocol): the kernel reads family and type as ints, their low words.
             ("label", "unix"), _ld(OFF_ARG0), _jeq(AF_UNIX, no="allow"),
             _ld(OFF_ARG1), (_AND_K, SOCK_TYPE_MASK, None, None)]
    code += [_jeq(kind, "eacces") for kind in STREAMS]
    code += [("label", "allow"), _ret(RET_ALLOW), ("label", "eacces"), _ret(deny_acces),
             ("label", "eperm"), _ret(deny_perm)]
    return _assemble(code)


def build(arch: str) -> Filter | None:
    """The filter for a host of machine `arch` (os.uname().machine); None where there is none
    (another architecture, a big-endian host, not Linux): its sockets stay reachable, said."""
    tables = ARCHES.get(arch)
    if tables is None or sys.byteorder != "little" or not sys.platform.startswith("linux"):
        return None
    return Filter(arch, _program(tables))


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(rules: Filter) -> None:
    """In the child, before exec, after no_new_privs: the filter on this process and its tree for good."""
    libc = ctypes.CDLL(None, use_errno=True)
    program = ctypes.create_string_buffer(rules.program, len(rules.program))
    fprog = _Fprog(rules.length, ctypes.addressof(program))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise FilterFailed(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")
