"""What looks like a secret by its content: Yelp's detect-secrets with its default plugins and
filters (an inline `pragma: allowlist secret` comment is honoured), in this process, on text
up to the caller's bound. The finding says which kind of secret and on which line, never its
value (secrets.py's Finding).

detect-secrets costs milliseconds a file (every plugin on every line, in Python): a tree of
100k new files would take minutes. So each file is first matched against what could make any
plugin fire (prefilter.py, built from the plugins themselves: a regex plugin's own patterns, a
keyword, a run of an entropy plugin's characters long enough to pass its limit), and only a
file that matches is scanned. The triggers are a superset of what the plugins find: a file
that matches none holds nothing detect-secrets would report; a plugin they do not know makes
every file scanned.

Importing detect-secrets costs about a quarter of a loop step's start (it imports requests,
and with it urllib3, ssl, email, http): the auto-commit imports this module only when it has
staged files to scan (commitfilter.by_content).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Iterator

from detect_secrets.core.scan import scan_file
from detect_secrets.settings import default_settings

from genesis.repo.prefilter import Triggers, needing, triggers
from genesis.repo.secrets import Finding, Scan

__all__ = ["scanner"]


class _Scanner:
    """scan(path, data), and whether a file needs detect-secrets at all (`needs`)."""

    def __init__(self, scan: Scan, triggers: "Triggers | None"):
        self._scan, self._triggers = scan, triggers

    def __call__(self, path: str, data: bytes) -> "tuple[Finding, ...]":
        return self._scan(path, data) if self.needs(path, data) else ()

    def needs(self, path: str, data: bytes) -> bool:
        """False when no plugin could fire on data (the prefilter): nothing to scan, at no cost."""
        return self._triggers is None or self._triggers.could_fire(path, data)

    def needing(self, files: list[tuple[str, bytes | None]]) -> list[bool]:
        """needs() of each file, asked of the whole batch at once (prefilter.needing)."""
        return [True] * len(files) if self._triggers is None else needing(self._triggers, files)


@contextlib.contextmanager
def scanner() -> Iterator[_Scanner]:
    """scan(path, data): what detect-secrets finds in data, a file of that name. Each is
    written to a private folder of its own first (0700, removed at the end): the scanner reads
    files by name, and the file's name chooses its parser (YAML, INI...)."""
    with default_settings(), tempfile.TemporaryDirectory(prefix="genesis-scan-") as folder:
        def scan(path: str, data: bytes) -> tuple[Finding, ...]:
            target = Path(folder) / (PurePosixPath(path).name or "file")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            try:
                return tuple(Finding(s.type, s.line_number, s.secret_hash) for s in scan_file(str(target)))
            finally:
                target.unlink()
        yield _Scanner(scan, triggers())
