"""The control folder: the dashboard's write key and the alert links' signing key.

They live in the user's shared state folder (`$XDG_STATE_HOME/genesis/control`, else
`~/.local/state/genesis/control`; GENESIS_SHARED_STATE_DIR moves it), never in a project or
its git directory: the agent's box covers HOME with a private one and binds a project's state
read-only, so no key is readable from inside the box. Each key is made once (0600, in a 0700
folder) and read by every `genesis` that acts.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import Mapping

from genesis.store.accounts import root_of
from genesis.store.layout import UnsafeDir, private_dir

__all__ = ["CONTROL", "control_dir", "dashboard_key", "signing_key", "fingerprint", "KEY_FILE", "SIGNING_FILE"]

CONTROL = "control"
KEY_FILE = "dashboard.key"       # what a browser shows once (genesis serve's link) to act from the dashboard
SIGNING_FILE = "links.key"       # signs the alert's action links (HMAC-SHA256); never leaves this machine
MAX_KEY = 256


def control_dir(env: Mapping[str, str] | None = None) -> Path:
    """The control folder (made private if missing; UnsafeDir if it is not ours)."""
    env = os.environ if env is None else env
    return private_dir(root_of(env.get("GENESIS_SHARED_STATE_DIR", ""), env) / CONTROL)


def _secret(folder: Path, name: str) -> str:
    """The secret in folder/name, made when missing (O_EXCL: two starts agree on one)."""
    path = folder / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd) as given:
        st = os.fstat(given.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise UnsafeDir(f"{path} is not a private file of yours (mode {stat.S_IMODE(st.st_mode):o}); "
                            f"remove it: a new one is made")
        value = given.read(MAX_KEY).strip()
    if len(value) < 32:
        raise UnsafeDir(f"{path} holds no key; remove it: a new one is made")
    return value


def dashboard_key(folder: Path) -> str:
    return _secret(folder, KEY_FILE)


def signing_key(folder: Path) -> bytes:
    return _secret(folder, SIGNING_FILE).encode("ascii")


def fingerprint(secret: str) -> str:
    """A credential's name in the ledger: enough to tell keys apart, nothing to act with."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()[:10]
