"""An attempt's evidence: the last lines of its own transcript, taken as it ends, safe for a
terminal and free of secrets, and small enough to be kept with its end (the phase_end event,
its incident), so that what it showed outlives its log being deleted or rotated.

Each attempt has its own log, so no attempt's evidence is another's: a phase's first start
writes `iter-0001-Builder.log`, a later one (a retry, a run after a wait)
`iter-0001-Builder.attempt-2.log` (store/layout.agent_log; loop/phase.py counts the starts).
The report reads the kept tail back from `phase_end` (reporting/load.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from genesis.redact import redact
from genesis.watch.agentlog import read_end
from genesis.words import sanitize

__all__ = ["transcript_tail", "tail_of", "TAIL_LINES", "TAIL_BYTES", "WIDTH"]

TAIL_LINES = 20        # lines kept at most
TAIL_BYTES = 4096      # bytes kept at most (UTF-8, a newline counted per line)
WIDTH = 300            # characters kept of one line
READ_BYTES = 32 << 10  # how much of the log's end is read for them


def transcript_tail(path: Path, lines: int = TAIL_LINES, most: int = TAIL_BYTES) -> list[str]:
    """The newest non-blank lines of the transcript at path, oldest first: escape and control
    sequences gone, secrets redacted, each cut to WIDTH, at most `lines` of them and `most`
    bytes together. Nothing for a log that is not there, not a plain file, or unreadable."""
    data, cut = read_end(Path(path), READ_BYTES)
    text = data.decode("utf-8", errors="replace")
    if cut:
        text = text.split("\n", 1)[1] if "\n" in text else ""  # begins mid-line, maybe mid-character
    return tail_of(text, lines, most)


def tail_of(text: str, lines: int = TAIL_LINES, most: int = TAIL_BYTES,
            env: Mapping[str, str] | None = None) -> list[str]:
    """The newest non-blank lines of untrusted output, made safe and redacted as transcript_tail
    says (`env`: whose secret-named variables' values are hidden too; None: this process's)."""
    # Made safe line by line first (a secret split by an escape sequence would pass), then
    # redacted whole (a key block spans lines), then cut.
    clean = redact("\n".join(sanitize(raw, None) for raw in text.split("\n")), env)
    kept: list[str] = []
    size = 0
    for line in reversed(clean.split("\n")):
        line = sanitize(line, WIDTH)
        if not line.strip():
            continue
        cost = len(line.encode("utf-8")) + 1
        if len(kept) >= lines or size + cost > most:
            break
        kept.append(line)
        size += cost
    return kept[::-1]
