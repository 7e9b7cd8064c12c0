"""The project's task list, TASKS.md: its items read within a bound, open or ticked.

One grammar for every reader: a list item (`-` or `*`) whose box is `[ ]` (open), `[?]`
(done, awaiting review) or `[x]`/`[X]` (done).
"""

from __future__ import annotations

import re
from pathlib import Path

from genesis.store.atomicio import CorruptFile, TooLarge, read_bytes

__all__ = ["TASKS_FILE", "MAX_TASKS_BYTES", "open_tasks", "done_tasks"]

TASKS_FILE = "TASKS.md"
MAX_TASKS_BYTES = 4 << 20
MAX_ITEM_CHARS = 300
OPEN_RE = re.compile(rb"^\s*[-*] \[[ ?]\]", re.M)
DONE_RE = re.compile(r"^\s*[-*] \[[xX]\]\s*(.+?)\s*$", re.M)


def _read(project: Path) -> bytes | None:
    try:
        return read_bytes(project / TASKS_FILE, MAX_TASKS_BYTES, follow_symlinks=True)
    except (OSError, CorruptFile, TooLarge):
        return None


def open_tasks(project: Path) -> int | None:
    """How many tasks of TASKS.md are open or await review; None without a readable TASKS.md."""
    data = _read(project)
    return None if data is None else len(OPEN_RE.findall(data))


def done_tasks(project: Path) -> frozenset[str]:
    """The ticked items of TASKS.md (their text, cut); none without a readable TASKS.md."""
    data = _read(project)
    if data is None:
        return frozenset()
    return frozenset(m.group(1)[:MAX_ITEM_CHARS] for m in DONE_RE.finditer(data.decode("utf-8", "replace")))
