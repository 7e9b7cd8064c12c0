"""What looks like a secret by a file's name, or by a registry file's contents; and what a
finding of the content scan (secretscan.py, detect-secrets) says.

By name: a short list of files that hold credentials by their nature (SECRET_NAMES below).
A registry's settings file (.npmrc, .pypirc) is one only with credentials in it. Neither needs
detect-secrets: every loop step that commits asks these, and only a commit with files to scan
imports the scanner (and detect-secrets, and the requests library it imports).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Callable

__all__ = ["Finding", "secret_name", "has_credentials", "Scan", "SECRET_NAMES", "TEMPLATES"]

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

