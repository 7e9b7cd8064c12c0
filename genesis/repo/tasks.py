"""The project's task list, TASKS.md: one grammar for every reader, read within a bound.

A task is a Markdown list item, bulleted (`-`, `*`, `+`) or numbered (`1.`, `1)`), at any
indentation, whose first thing is a box: `[ ]` open, `[?]` done and awaiting review,
`[x]` or `[X]` done, `[!]` failed (a fleet gave up on it: `- [!] text (failed: reason)`; it
is not open, so no loop takes it up again until someone reopens it). Anything else is not a
task, and neither is an item inside a fenced code block (an example of the format is not
work to do).

A task may carry its check: a line under it, indented further than its marker, reading
`check: COMMAND` (the command may be wrapped in backticks). Genesis runs it when an agent
ticks the task `[x]` (loop/taskcheck.py). A task sent back for more work (`genesis send-back`)
carries its note the same way, `note: TEXT`, which the next attempt's prompt gives. The task's
lines end at the next task, at a line that is not indented further, or at a fence; the first
`check:` and the first `note:` among them count.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from genesis.store.atomicio import CorruptFile, TooLarge, read_bytes

__all__ = ["TASKS_FILE", "MAX_TASKS_BYTES", "OPEN", "REVIEW", "DONE", "FAILED", "Task", "Tasks", "parse",
           "read_tasks", "done_tasks", "marked", "failed_line", "not_a_file", "same_text", "reopened",
           "NOTE_PREFIX"]

TASKS_FILE = "TASKS.md"
MAX_TASKS_BYTES = 4 << 20
MAX_ITEM_CHARS = 300
OPEN, REVIEW, DONE, FAILED = "open", "review", "done", "failed"
STATES = {" ": OPEN, "?": REVIEW, "x": DONE, "X": DONE, "!": FAILED}
BOXES = {OPEN: " ", REVIEW: "?", DONE: "x", FAILED: "!"}
MAX_REASON_CHARS = 120
# The marker, the box, then a space or the line's end (`- [x]y` is not a task in Markdown either).
ITEM_RE = re.compile(r"^[ \t]*(?:[-*+]|[0-9]{1,9}[.)])[ \t]+\[([ xX?!])\](?=[ \t]|$)[ \t]*(.*?)[ \t]*$")
FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
CHECK_RE = re.compile(r"^([ \t]+)check:[ \t]*(.*?)[ \t]*$")
MAX_CHECK_CHARS = 1000
NOTE_RE = re.compile(r"^[ \t]+note:[ \t]*(.*?)[ \t]*$")
MAX_NOTE_CHARS = 1000
NOTE_PREFIX = "Genesis:"   # the note Genesis writes under a task it reopened (one, replaced each time)
_SPACE_RE = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class Task:
    state: str      # OPEN, REVIEW, DONE or FAILED
    text: str       # what follows the box, cut to MAX_ITEM_CHARS
    line: int       # its line in the file, from 1
    check: str = ""  # its `check:` command ("": none)
    note: str = ""   # the `note:` it was sent back with ("": none)


@dataclass(frozen=True)
class Tasks:
    items: tuple[Task, ...]

    def count(self, state: str) -> int:
        return sum(1 for t in self.items if t.state == state)

    def texts(self, state: str) -> frozenset[str]:
        return frozenset(t.text for t in self.items if t.state == state and t.text)

    def summary(self) -> str:
        """`2 open, 1 awaiting review, 5 done` (`, 1 failed` when one is), for a status line."""
        failed = self.count(FAILED)
        return f"{self.count(OPEN)} open, {self.count(REVIEW)} awaiting review, {self.count(DONE)} done" + \
            (f", {failed} failed" if failed else "")


def _item(line: str) -> tuple[str, str] | None:
    found = ITEM_RE.match(line)
    return (STATES[found.group(1)], found.group(2)) if found else None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _command(text: str) -> str:
    """A check's command, unwrapped from one pair of backticks around it all."""
    if len(text) > 2 and text[0] == text[-1] == "`" and "`" not in text[1:-1]:
        text = text[1:-1].strip()
    return text[:MAX_CHECK_CHARS]


def parse(text: str) -> Tasks:
    """Every task of a TASKS.md text, in order, each with its check and note."""
    items: list[Task] = []
    fence, owner = "", None   # owner: the index of the task whose lines these are, with its indent
    for n, line in enumerate(text.splitlines(), 1):
        opened = FENCE_RE.match(line)
        if opened:
            mark = opened.group(1)
            if not fence:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = ""
            owner = None
            continue
        if fence:
            continue
        item = _item(line)
        if item is not None:
            items.append(Task(item[0], item[1][:MAX_ITEM_CHARS], n))
            owner = (len(items) - 1, _indent(line))
            continue
        if not line.strip() or owner is None:
            continue
        if _indent(line) <= owner[1]:
            owner = None
            continue
        found = CHECK_RE.match(line)
        if found and not items[owner[0]].check and _command(found.group(2)):
            items[owner[0]] = replace(items[owner[0]], check=_command(found.group(2)))
        note = NOTE_RE.match(line)
        if note and not items[owner[0]].note and note.group(1):
            items[owner[0]] = replace(items[owner[0]], note=note.group(1)[:MAX_NOTE_CHARS])
    return Tasks(tuple(items))


def same_text(a: str, b: str) -> bool:
    """Two tasks' texts are the same task: runs of spaces and tabs count as one space."""
    return _SPACE_RE.sub(" ", a.strip()) == _SPACE_RE.sub(" ", b.strip())


def read_tasks(project: Path) -> Tasks | None:
    """The project's tasks; None without a readable TASKS.md (missing, too large, not a file)."""
    try:
        data = read_bytes(project / TASKS_FILE, MAX_TASKS_BYTES, follow_symlinks=True)
    except (OSError, CorruptFile, TooLarge):
        return None
    return parse(data.decode("utf-8", "replace"))


def not_a_file(project: Path) -> str | None:
    """Why TASKS.md, present, is no regular file (a FIFO, a device, a socket, a folder), or None.
    A command that reads such a file (a `when:grep ... TASKS.md` trigger) may wait on it for ever."""
    try:
        mode = os.stat(project / TASKS_FILE).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else \
        "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"
    return f"{TASKS_FILE} is {kind}, not a regular file"


def done_tasks(project: Path) -> frozenset[str]:
    """The text of each done task (`[x]`); none without a readable TASKS.md."""
    tasks = read_tasks(project)
    return frozenset() if tasks is None else tasks.texts(DONE)


def marked(line: str, state: str) -> str | None:
    """The line with its task's box set to state; None if the line is not a task."""
    found = ITEM_RE.match(line.rstrip("\r\n"))
    if not found:
        return None
    return line[:found.start(1)] + BOXES[state] + line[found.end(1):]


def failed_line(line: str, reason: str) -> str | None:
    """The task's line marked failed, with why: `- [!] text (failed: reason)`; None if not a task.
    The reason is one line, cut short: it is read in the list, the details are elsewhere."""
    boxed = marked(line, FAILED)
    if boxed is None:
        return None
    why = " ".join(reason.split())[:MAX_REASON_CHARS] or "no reason given"
    end = len(boxed.rstrip("\r\n"))
    return f"{boxed[:end].rstrip()} (failed: {why}){boxed[end:]}"


def reopened(text: str, task: str, state: str, note: str) -> str | None:
    """The TASKS.md text with every done line of `task` set to `state` and Genesis's note under
    each (`Genesis: ...`, replacing the note an earlier reopening left there); None when no
    done line of that task is found."""
    lines = text.splitlines(keepends=True)
    done = {t.line for t in parse(text).items if t.state == DONE and same_text(t.text, task)}
    if not done:
        return None
    out: list[str] = []
    skipping = False
    for n, line in enumerate(lines, 1):
        if skipping and line.strip().startswith(NOTE_PREFIX) and _indent(line) > 0:
            continue  # the earlier note, replaced by the new one
        skipping = False
        if n not in done:
            out.append(line)
            continue
        boxed = marked(line, state) or line
        found = ITEM_RE.match(line.rstrip("\r\n"))
        pad = re.sub(r"\S", " ", line[:found.start(1) - 1]) if found else "  "
        ending = "\r\n" if line.endswith("\r\n") else "\n"
        out.append(boxed if boxed.endswith("\n") else boxed + ending)
        out.append(f"{pad}{NOTE_PREFIX} {' '.join(note.split())}{ending}")
        skipping = True
    return "".join(out)
