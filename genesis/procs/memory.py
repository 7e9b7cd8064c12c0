"""The agent's tree first in line for the OOM killer, and its optional memory cap.

`oom_score_adj` may be raised without privileges and is inherited by every process the agent
starts, box or no box: under memory pressure the kernel takes the agent's tree, never the
loop or the watcher (which keep theirs). A cap (`memory.max`) applies where the agent's
cgroup has the memory controller.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import psutil

__all__ = ["OOM_SCORE_ADJ", "raise_oom_score", "parse_size", "cap", "auto_cap", "AUTO_SHARE"]

OOM_SCORE_ADJ = 1000
SIZE_RE = re.compile(r"^([0-9]+)\s*([KMGT]?)i?B?$", re.IGNORECASE)
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MIN_CAP = 64 << 20  # below this no agent CLI even starts
AUTO_SHARE = 2      # GENESIS_AGENT_MEMORY_MAX=auto: 1/AUTO_SHARE of the machine's memory


def raise_oom_score(path: str = "/proc/self/oom_score_adj") -> None:
    """In the child before exec; a system without the file (macOS) keeps its default."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, str(OOM_SCORE_ADJ).encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def auto_cap(total: int | None = None) -> int:
    """Half the machine's memory: one agent's runaway build or filled /tmp is killed, the loop,
    the other children and the machine keep the rest."""
    if total is None:
        total = psutil.virtual_memory().total
    return max(total // AUTO_SHARE, MIN_CAP)


def parse_size(text: str) -> int | None:
    """'4G', '512M', '1073741824' as bytes; '' as None (no cap); ValueError otherwise."""
    text = text.strip()
    if not text:
        return None
    found = SIZE_RE.match(text)
    if not found:
        raise ValueError(f"{text!r} is not a size; expected e.g. 4G, 512M or a number of bytes")
    size = int(found.group(1)) * UNITS[found.group(2).upper()]
    if size < MIN_CAP:
        raise ValueError(f"{text!r} is below {MIN_CAP >> 20}M, too little for any agent CLI")
    return size


def cap(group: Path, size: int) -> str:
    """Write memory.max of the agent's cgroup; "" or why it could not."""
    try:
        with open(group / "memory.max", "w", encoding="ascii") as f:
            f.write(str(size))
    except OSError as exc:
        return f"cannot cap the agent's memory in {group} ({exc.strerror}; the memory controller may be off there)"
    return ""
