"""What looks like a secret, by a file's name or by its content.

By name: a short list of files that hold credentials by their nature (SECRET_NAMES below).
By content: Yelp's detect-secrets with its default plugins and filters (an inline
`pragma: allowlist secret` comment is honoured), in this process, on text up to the caller's
bound. The finding says which kind of secret and on which line, never its value.

detect-secrets costs milliseconds a file (every plugin on every line, in Python): a tree of
100k new files would take minutes. So each file is first matched against what could make any
plugin fire (prefilter.py, built from the plugins themselves: a regex plugin's own patterns, a
keyword, a run of an entropy plugin's characters long enough to pass its limit), and only a
file that matches is scanned. The triggers are a superset of what the plugins find: a file
that matches none holds nothing detect-secrets would report; a plugin they do not know makes
every file scanned.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from detect_secrets.core.scan import scan_file
from detect_secrets.settings import default_settings

from genesis.repo.prefilter import Triggers, needing, triggers

__all__ = ["Finding", "secret_name", "has_credentials", "scanner", "Scan", "SECRET_NAMES", "TEMPLATES"]

# Files that hold credentials by their nature, matched on the file's own name (any folder).
SECRET_NAMES = (
    (".env", "an environment file"),
    (".env.*", "an environment file"),
    ("*.pem", "a PEM key or certificate bundle"),
    ("*.key", "a private key"),
    ("*.p12", "a PKCS#12 key store"),
    ("*.pfx", "a PKCS#12 key store"),
    ("*.jks", "a Java key store"),
    ("id_rsa", "an SSH private key"),
    ("id_dsa", "an SSH private key"),
    ("id_ecdsa", "an SSH private key"),
    ("id_ed25519", "an SSH private key"),
    (".netrc", "a login file"),
    ("_netrc", "a login file"),
    (".git-credentials", "git's stored credentials"),
    (".htpasswd", "a password file"),
    ("credentials.json", "a credentials file"),
    ("client_secret*.json", "an OAuth client secret"),
)
# Examples meant to be committed: the variables without their values.
TEMPLATES = frozenset({".env.example", ".env.sample", ".env.template", ".env.dist", ".env.defaults"})
# Files that are a secret only when they carry credentials (a registry's address alone is not).
CREDENTIAL_FILES = {".npmrc": re.compile(rb"_auth(?:Token)?\s*=|_password\s*=", re.I),
                    ".pypirc": re.compile(rb"^\s*password\s*[=:]", re.I | re.M)}


@dataclass(frozen=True)
class Finding:
    kind: str        # detect-secrets' name for it ("AWS Access Key", "Secret Keyword", ...)
    line: int
    digest: str      # its hash (detect-secrets' secret_hash): tells a secret already there from a new one


# One match for every name first: most files are none of them (a tree of 100k files is asked about each).
_ANY_SECRET_NAME = re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern, _ in SECRET_NAMES))


def secret_name(path: str) -> str | None:
    """Why a file of this name is a secret, or None."""
    name = path.rstrip("/").rpartition("/")[2]
    if name in TEMPLATES or not _ANY_SECRET_NAME.match(name):
        return None
    for pattern, what in SECRET_NAMES:
        if fnmatch.fnmatchcase(name, pattern):
            return f"{what} ({pattern})"
    return None


def has_credentials(path: str, data: bytes) -> str | None:
    """Why a registry's settings file (.npmrc, .pypirc) with these contents is a secret, or None."""
    name = path.rstrip("/").rpartition("/")[2]   # a path object a file costs more than the check
    pattern = CREDENTIAL_FILES.get(name)
    if pattern is not None and pattern.search(data):
        return f"{name} with credentials in it"
    return None


Scan = Callable[[str, bytes], "tuple[Finding, ...]"]


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
