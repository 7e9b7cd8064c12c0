"""The tool log: one JSON line per tool event, appended by the heartbeat hook.

The hook writes `<phase>.tools.jsonl` beside the phase's heartbeat (Builder.json ->
Builder.tools.jsonl), one line per event:
`{"t": epoch, "e": event, "tool": name, "id": tool_use_id, "ok": bool, "ms": duration,
"cmd": the first 160 bytes of the command, file_path or pattern}`. Fields the payload's
first 4096 bytes did not hold are absent, and `ok` exists only for post events. The hook
cannot hash cheaply or check a size without a fork, so this reader does both: `hash` is
computed from the tool and its command, and `rotate()` bounds the file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from genesis.health.heartbeat import AFTER_TOOL, BEFORE_TOOL, TOOL_FAILED, pids, tool_event

__all__ = ["ToolCall", "read_tail", "read_head", "in_flight", "pairs", "rotate", "tool_log_path", "input_hash", "describe",
           "commands", "PRE", "POST", "FAILURE", "MAX_READ_BYTES", "ROTATE_CAP_BYTES"]

PRE, POST, FAILURE = BEFORE_TOOL, AFTER_TOOL, TOOL_FAILED
POST_EVENTS = frozenset({POST, FAILURE})
MAX_READ_BYTES = 256 * 1024
ROTATE_CAP_BYTES = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True)
class ToolCall:
    t: float                 # epoch of the event, as in the heartbeat
    event: str               # PreToolUse, PostToolUse, PostToolUseFailure (or another hook event)
    tool: str
    id: str = ""             # tool_use_id ("" when the payload's head did not hold it)
    hash: str = ""           # of tool and command ("" without a command: the input is unknown)
    ok: bool | None = None   # post events only: False for PostToolUseFailure
    ms: int | None = None    # duration_ms, when given
    cmd: str = ""            # the first 160 bytes of the command, file_path or pattern
    pp: tuple[int, ...] = ()  # who ran the hook: its parent and ancestors, nearest first (beatorigin)


def tool_log_path(heartbeat_file: Path) -> Path:
    """Where the hook appends the tool log of the phase whose heartbeat is heartbeat_file."""
    name = heartbeat_file.name
    stem = name[:-len(".json")] if name.endswith(".json") else name
    return heartbeat_file.with_name(stem + ".tools.jsonl")


def input_hash(tool: str, cmd: str) -> str:
    """A short, stable hash of a tool call's input; "" when the input is unknown."""
    if not cmd:
        return ""
    return hashlib.blake2b(f"{tool}\0{cmd}".encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def _decode_cmd(value: str) -> str:
    # The hook copies the command as the payload escaped it, so one json.loads already
    # decoded it; only strip what a terminal should not see.
    return "".join(ch if ch.isprintable() or ch in "\t\n" else "\ufffd" for ch in value)


def _parse(line: bytes) -> ToolCall | None:
    try:
        rec = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    t, event, tool = rec.get("t"), rec.get("e"), rec.get("tool")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        return None
    if not isinstance(event, str) or not isinstance(tool, str):
        return None
    event = tool_event(event)  # every CLI's names, as Claude Code's
    ident = rec.get("id") if isinstance(rec.get("id"), str) else ""
    ok = rec.get("ok") if isinstance(rec.get("ok"), bool) else None
    ms = rec.get("ms")
    ms = ms if isinstance(ms, int) and not isinstance(ms, bool) and ms >= 0 else None
    cmd = _decode_cmd(rec["cmd"]) if isinstance(rec.get("cmd"), str) else ""
    if event in POST_EVENTS and ok is None:
        ok = event == POST
    return ToolCall(float(t), event, tool, ident, input_hash(tool, cmd), ok, ms, cmd, pids(rec.get("pp")))


def _open_regular(path: Path, flags: int) -> int | None:
    """An fd for a regular file at path, never through a symlink; None when absent or refused."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.EISDIR):
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_tail(path: Path, most: int = 200, max_bytes: int = MAX_READ_BYTES) -> list[ToolCall]:
    """The last `most` events of the tool log, oldest first, reading at most max_bytes
    from its end. Unparsable lines (a torn first line of the window, garbage) are skipped;
    a symlink, a missing file or anything but a regular file gives []."""
    fd = _open_regular(Path(path), os.O_RDONLY)
    if fd is None:
        return []
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        fh.seek(start)
        data = fh.read(max_bytes)
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the window began inside a line
    calls = [c for c in (_parse(line) for line in lines if line.strip()) if c is not None]
    return calls[-most:] if most > 0 else []


def read_head(path: Path, most: int = 4, max_bytes: int = 8192) -> list[ToolCall]:
    """The first `most` events of the tool log (the phase's first hook calls), reading at most
    max_bytes from its start; [] as read_tail gives it."""
    fd = _open_regular(Path(path), os.O_RDONLY)
    if fd is None:
        return []
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes)
    lines = data.split(b"\n")[:-1]  # the last is unfinished, or empty
    return [c for c in (_parse(line) for line in lines[:most] if line.strip()) if c is not None]


def _matches(pre: ToolCall, post: ToolCall) -> bool:
    if pre.tool != post.tool:
        return False
    if pre.id and post.id:
        return pre.id == post.id
    # Without both ids (a large tool_response pushes tool_use_id past the hook's 4096
    # bytes): the same tool with the same input, or one of them without a command.
    return not pre.hash or not post.hash or pre.hash == post.hash


def _match(calls: Sequence[ToolCall]) -> list[tuple[ToolCall, ToolCall | None]]:
    """Each tool call as (its start, its post event or None while it runs), in start order.
    A post event is matched to the latest open start of the same call (by tool_use_id,
    else by tool and input); one without a start (the log was rotated or began mid-call)
    stands for a completed call of its own."""
    result: list[tuple[ToolCall, ToolCall | None]] = []
    open_at: list[int] = []  # indexes into result of starts not yet matched
    for call in calls:
        if call.event == PRE:
            open_at.append(len(result))
            result.append((call, None))
        elif call.event in POST_EVENTS:
            for k in range(len(open_at) - 1, -1, -1):
                pre = result[open_at[k]][0]
                if _matches(pre, call):
                    result[open_at.pop(k)] = (pre, call)
                    break
            else:
                result.append((call, call))
    return result


def pairs(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """The completed calls, oldest first (by their end): each is its post event, with ok
    True or False, carrying its start's command and id when the post event lacked them."""
    done = []
    for pre, post in _match(calls):
        if post is None:
            continue
        if (not post.cmd and pre.cmd) or (not post.id and pre.id):
            post = ToolCall(post.t, post.event, post.tool, post.id or pre.id, post.hash or pre.hash, post.ok,
                            post.ms, post.cmd or pre.cmd)
        done.append(post)
    done.sort(key=lambda c: c.t)
    return done


def in_flight(calls: Sequence[ToolCall]) -> ToolCall | None:
    """The PreToolUse of the call the agent is inside now, or None.

    With ids: the latest start with no later post event of the same id (or same tool and
    input when an id was cut off). A start older than a later completed call is not in
    flight any more when ids are missing: the agent moved on, so its post event was lost."""
    if not calls:
        return None
    opened = [pre for pre, post in _match(calls) if post is None]
    if not opened:
        return None
    latest = opened[-1]
    if latest.id:
        return latest
    last = calls[-1]
    return latest if last.event == PRE and last is latest else None


def rotate(path: Path, cap_bytes: int = ROTATE_CAP_BYTES) -> bool:
    """When the tool log is over cap_bytes, keep its newest half (whole lines) by an atomic
    rename; True when it rotated. A symlink or anything but a regular file is left alone.

    Lines the hook appends between our read and the rename are lost: at most the events
    of those few milliseconds, in a log that only needs its tail."""
    path = Path(path)
    fd = _open_regular(path, os.O_RDONLY)
    if fd is None:
        return False
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        if size <= cap_bytes:
            return False
        keep = max(1, cap_bytes // 2)
        fh.seek(size - keep)
        data = fh.read(keep)
    cut = data.find(b"\n")
    data = data[cut + 1:] if cut >= 0 else b""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.rotate.tmp")
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    except FileExistsError:
        os.unlink(tmp)  # our own pid's leftover
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        with os.fdopen(out, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True


def describe(call: ToolCall, width: int = 80) -> str:
    """`Bash 'pytest -x'`: the tool and the start of its command, for reasons and reports."""
    cmd = " ".join(call.cmd.split())
    if len(cmd) > width:
        cmd = cmd[:width - 3] + "..."
    return f"{call.tool} {cmd!r}" if cmd else call.tool


def commands(calls: Iterable[ToolCall]) -> list[str]:
    """A readable line per call, for forensics: `Bash 'pytest -x' failed (812 ms)`."""
    out = []
    for c in calls:
        how = {True: "ok", False: "failed", None: "started"}[c.ok]
        ms = f" ({c.ms} ms)" if c.ms is not None else ""
        out.append(f"{describe(c)} {how}{ms}")
    return out
