"""Editing a CLI's own settings file safely: the primitives every hook installer shares.

The file is the user's: only the parts that change are rewritten (key order, indentation,
non-ASCII text and line endings stay as they were), its mode and owner are kept, a
symlinked file is edited at its target (only a regular file of the user's), every earlier
version is kept as a backup that is never overwritten, and the new text replaces the old
atomically. A file that is not valid JSON, too large, or not a regular file is refused and
left untouched, with what to do.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis.config import ConfigError
from genesis.store.atomicio import CorruptFile, read_json, write_json
from genesis.store.layout import private_dir

__all__ = ["SettingsError", "Change", "read_settings", "open_for_edit", "save", "write_owned", "read_owned",
           "same", "install_record", "remember", "forget", "UNTOUCHED", "MAX_SETTINGS_BYTES"]

MAX_SETTINGS_BYTES = 4 << 20
UNTOUCHED = "it was left untouched"


class SettingsError(ConfigError):
    """The settings file cannot be changed safely; it was left untouched."""


@dataclass(frozen=True)
class Change:
    path: Path
    added_events: tuple[str, ...]            # (uninstall: removed)
    added_env: tuple[str, ...]
    backup: Path | None
    target: Path | None = None  # the file really written, when path is a symlink to it


# --- reading ----------------------------------------------------------------------------

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _read_text(path: Path, follow: bool = True) -> tuple[str, os.stat_result] | None:
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


def _parse(path: Path, text: str) -> dict:
    if not text.strip():
        raise SettingsError(f"{path} is empty; write {{}} into it or delete it ({UNTOUCHED})")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); fix it by hand ({UNTOUCHED})") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} is not a JSON object; fix it by hand ({UNTOUCHED})")
    return data


def read_settings(path: Path) -> dict | None:
    """The parsed settings file (through a symlink), None when absent; SettingsError when unusable."""
    got = _read_text(path)
    return None if got is None else _parse(path, got[0])


def _check_shape(path: Path, data: dict, objects: tuple[str, ...]) -> None:
    """The parts we edit must have the shape we can merge into."""
    for key in objects:
        if key in data and not isinstance(data[key], dict):
            raise SettingsError(f"{path}: \"{key}\" is not an object; fix it by hand ({UNTOUCHED})")
    for event, groups in data.get("hooks", {}).items():
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise SettingsError(f"{path}: hooks.{event} is not a list of objects; fix it by hand ({UNTOUCHED})")


# --- where to write ---------------------------------------------------------------------

def _target(path: Path, hint: str = "replace the link with a file") -> Path:
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


def _backup(path: Path, data: bytes, st: os.stat_result, now: float) -> Path:
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


def _replace(target: Path, text: str, st: os.stat_result | None) -> None:
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


# --- editing the text: rewrite only what changed ----------------------------------------

WS = " \t\r\n"


@dataclass(frozen=True)
class _Node:
    """A JSON value's place in the text; members are (key text span, key, value) for objects."""
    start: int
    end: int
    kind: str                                   # "object", "array" or "scalar"
    members: tuple = ()                         # ((key_start, key_end, key, _Node), ...)
    items: tuple = ()                           # (_Node, ...)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in WS:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    i += 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _node(text: str, i: int) -> _Node:
    """Spans of an already validated JSON text, from the value starting at i."""
    ch = text[i]
    if ch in "{[":
        close, members, items = "}" if ch == "{" else "]", [], []
        j = _skip_ws(text, i + 1)
        while text[j] != close:
            if ch == "{":
                key_end = _string_end(text, j)
                colon = _skip_ws(text, key_end)
                value = _node(text, _skip_ws(text, colon + 1))
                members.append((j, key_end, json.loads(text[j:key_end]), value))
            else:
                value = _node(text, j)
                items.append(value)
            j = _skip_ws(text, value.end)
            if text[j] == ",":
                j = _skip_ws(text, j + 1)
        return _Node(i, j + 1, "object" if ch == "{" else "array", tuple(members), tuple(items))
    if ch == '"':
        return _Node(i, _string_end(text, i), "scalar")
    j = i
    while j < len(text) and text[j] not in WS + ",]}":
        j += 1
    return _Node(i, j, "scalar")


def same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, and an object's key order does not matter."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


class _Editor:
    """Renders a new document into the old one's text, copying every unchanged value verbatim."""

    def __init__(self, text: str):
        self.text = text
        self.nl = "\r\n" if "\r\n" in text else "\n"
        self.unit = self._indent_unit()
        self.start = _skip_ws(text, 0)
        self.root = _node(text, self.start)
        first = [text[m[1]:m[3].start] for m in self.root.members[:1]]
        self.colon = first[0] if first and "\n" not in first[0] else ": "  # as the file writes "key": value
        self.space = " "  # after a comma on one line: "a, b" or "a,b"
        if len(self.root.members) > 1:
            between = text[self.root.members[0][3].end:self.root.members[1][0]]
            after = between[between.index(",") + 1:]
            self.space = after if "\n" not in after else " "

    def _indent_unit(self) -> str | None:
        """The file's indentation step ("  ", "    ", a tab), None for a one-line file."""
        widths = []
        for line in self.text.split("\n")[1:]:  # not splitlines(): a string may hold a raw U+2028
            line = line.rstrip("\r")
            stripped = line.lstrip(" \t")
            if stripped and len(stripped) < len(line):
                widths.append(line[:len(line) - len(stripped)])
        if not widths:
            return None if self.text.strip().count("\n") == 0 else ""
        return min(widths, key=len)

    def _line_indent(self, pos: int) -> str:
        start = self.text.rfind("\n", 0, pos) + 1
        line = self.text[start:pos]
        return line[:len(line) - len(line.lstrip(" \t"))]

    def dump(self, value: Any, prefix: str, multiline: bool) -> str:
        if not multiline or self.unit is None:
            return json.dumps(value, ensure_ascii=False, separators=("," + self.space, self.colon))
        out = json.dumps(value, ensure_ascii=False, indent=self.unit, separators=(",", self.colon))
        return out.replace("\n", self.nl + prefix)

    def render(self, node: _Node, old: Any, new: Any) -> str:
        if same(old, new):
            return self.text[node.start:node.end]
        if isinstance(old, dict) and isinstance(new, dict) and node.kind == "object":
            return self._container(node, new, "{}")
        if isinstance(old, list) and isinstance(new, list) and node.kind == "array":
            return self._container(node, new, "[]")
        return self.dump(new, self._line_indent(node.start), True)

    def _layout(self, node: _Node, parts: tuple) -> tuple[str, str, str]:
        """Whitespace after the opening bracket, around each comma, before the closing one."""
        text = self.text
        if not parts:
            if self.unit is None:
                return "", "," + self.space, ""
            inner = self.nl + self._line_indent(node.start)
            return inner + self.unit, "," + inner + self.unit, inner
        ends = [p[3].end if node.kind == "object" else p.end for p in parts]
        starts = [p[0] if node.kind == "object" else p.start for p in parts]
        lead, trail = text[node.start + 1:starts[0]], text[ends[-1]:node.end - 1]
        if len(parts) > 1:
            comma = text[ends[0]:starts[1]]
        else:
            comma = "," + (lead if "\n" in lead else self.space)
        return lead, comma, trail

    def _container(self, node: _Node, new: Any, brackets: str) -> str:
        parts = node.members if node.kind == "object" else node.items
        lead, comma, trail = self._layout(node, parts)
        multiline = "\n" in comma
        prefix = comma[comma.rfind("\n") + 1:] if multiline else ""
        if node.kind == "object":
            old = {m[2]: m for m in node.members}  # the last of duplicate keys, as json.loads reads it
            rendered = []
            for key, value in new.items():
                if key in old:
                    key_start, _, _, child = old[key]
                    rendered.append(self.text[key_start:child.start]
                                    + self.render(child, json.loads(self.text[child.start:child.end]), value))
                else:
                    rendered.append(json.dumps(key, ensure_ascii=False) + self.colon
                                    + self.dump(value, prefix, multiline))
        else:
            rendered = self._items(node.items, new, prefix, multiline)
        if not rendered:
            return brackets
        return brackets[0] + lead + comma.join(rendered) + trail + brackets[1]

    def _items(self, olds: tuple, new: list, prefix: str, multiline: bool) -> list[str]:
        """Reuse each old item that survives (in order); an edited item is rendered against the old one in
        its place, so a changed hook group keeps its layout."""
        values = [json.loads(self.text[n.start:n.end]) for n in olds]
        out, p = [], 0
        for item in new:
            j = next((k for k in range(p, len(olds)) if same(values[k], item)), None)
            if j is not None:
                out.append(self.text[olds[j].start:olds[j].end])
                p = j + 1
            elif p < len(olds) and type(values[p]) is type(item) and isinstance(item, (dict, list)) \
                    and not any(same(values[p], later) for later in new):
                out.append(self.render(olds[p], values[p], item))
                p += 1
            else:
                out.append(self.dump(item, prefix, multiline))
        return out

    def edit(self, old: dict, new: dict) -> str:
        if not self.root.members and not self.unit:
            self.unit = "  "  # "{}" has no style to keep: write it the readable way
        return self.text[:self.start] + self.render(self.root, old, new) + self.text[self.root.end:]


def _new_text(old_text: str | None, old: dict, new: dict) -> str:
    if old_text is None:
        return json.dumps(new, ensure_ascii=False, indent=2) + "\n"
    return _Editor(old_text).edit(old, new)


# --- the edit as a whole ---------------------------------------------------------------

def open_for_edit(path: Path, objects: tuple[str, ...] = ("hooks", "env"),
                  hint: str = "replace the link with a file") -> tuple[Path, str | None, os.stat_result | None, dict]:
    """(the file to write, its text, its status, its data); text and status None when absent.
    `objects` are the top-level keys that must be JSON objects when present; `hint` says what
    to do about a symlink Genesis will not edit through."""
    target = _target(path, hint)
    got = _read_text(target, follow=False)
    if got is None:
        return target, None, None, {}
    data = _parse(path, got[0])
    _check_shape(path, data, objects)
    return target, got[0], got[1], data


def save(path: Path, target: Path, old_text: str | None, st: os.stat_result | None, data: dict, new: dict,
         now: float) -> Path | None:
    """Write `new` over `data` (as read by open_for_edit); the backup of the old text, if any."""
    text = _new_text(old_text, data, new)
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None if old_text is None or st is None else _backup(path, old_text.encode("utf-8"), st, now)
    _replace(target, text, st)
    return backup


def read_owned(path: Path) -> str | None:
    """The text of a file Genesis writes whole (a plugin), None when absent; refused like settings."""
    got = _read_text(_target(path), follow=False)
    return None if got is None else got[0]


def write_owned(path: Path, text: str, now: float | None = None) -> tuple[bool, Path | None]:
    """Put `text` in a file wholly ours: (changed, backup). Unchanged text is left alone; other
    text there (the user edited it) is backed up first."""
    now = time.time() if now is None else now
    target = _target(path)
    got = _read_text(target, follow=False)
    if got is not None and got[0] == text:
        return False, None
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None if got is None else _backup(path, got[0].encode("utf-8"), got[1], now)
    _replace(target, text, None if got is None else got[1])
    return True, backup


# --- what install added, so that uninstall takes away only that --------------------------

def _ledger(state_dir: Path) -> Path:
    return state_dir / "hook-installs.json"


def _read_ledger(state_dir: Path) -> dict:
    try:
        data = read_json(_ledger(state_dir))
    except CorruptFile:
        return {}
    return data if isinstance(data, dict) else {}


def install_record(state_dir: Path, path: Path) -> dict:
    """What install added to this file: {"env": [keys], "created": [top-level keys]} (a bad record is none)."""
    record = _read_ledger(state_dir).get(str(path.resolve()))
    if not isinstance(record, dict):
        return {}
    return {key: [x for x in value if isinstance(x, str)] for key, value in record.items()
            if key in ("env", "created") and isinstance(value, list)}


def remember(state_dir: Path, path: Path, env: list[str], created: list[str]) -> None:
    """Add to the record of what install added to this file."""
    ledger = _read_ledger(state_dir)
    entry = install_record(state_dir, path)
    entry["env"] = sorted(set(entry.get("env", [])) | set(env))
    entry["created"] = sorted(set(entry.get("created", [])) | set(created))
    ledger[str(path.resolve())] = entry
    write_json(_ledger(private_dir(state_dir)), ledger)


def forget(state_dir: Path, path: Path) -> None:
    ledger = _read_ledger(state_dir)
    if str(path.resolve()) in ledger:
        del ledger[str(path.resolve())]
        write_json(_ledger(private_dir(state_dir)), ledger)
