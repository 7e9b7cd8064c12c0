"""The machine-wide account store: what one loop learns about an account that every loop of
this user on this machine must heed (a usage limit met, an API outage under way).

A usage limit belongs to the account, not to the loop or the project: N loops on one account
would otherwise each walk into it, and all wake at the same instant. The store lives outside
every project, in `GENESIS_SHARED_STATE_DIR` (default `$XDG_STATE_HOME/genesis`, else
`~/.local/state/genesis`), folder `accounts/`: private (0700, ours, never a symlink followed:
one in its place is refused and the store not used), each file written atomically under
`accounts/lock`, read with a size cap, a file that cannot be read kept aside as
`<name>.corrupt-<UTC time>`. The agent's box keeps it read-only; without a box an agent can
write here, so its readers vouch each record against the ledger of the run it names
(loop/limits.py).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping

from genesis.store.atomicio import CorruptFile, flock_within, quarantine, read_json, write_json
from genesis.store.layout import UnsafeDir, private_dir

__all__ = ["AccountStore", "root_of", "StoreUnusable", "LIMITS", "OUTAGES", "MAX_BYTES", "MAX_RECORDS"]

LIMITS = "limits.json"     # {"version": 2, "limits": [...]}: loop/limits.py's entries, each naming its run
OUTAGES = "outages.json"   # {"version": 1, "outages": [...]}: one backoff per CLI (loop/waiting.py)
MAX_BYTES = 256 * 1024     # a record file is a few hundred bytes per account: a bigger one is not ours
MAX_RECORDS = 100          # a file never grows past this many records (the oldest go first)
LOCK_WAIT = 10.0           # its writers hold the lock for milliseconds


class StoreUnusable(Exception):
    """The store's folder is not a private folder of ours (a symlink, another owner, loose mode)."""


def root_of(setting: str, env: Mapping[str, str]) -> Path:
    """The shared state folder: the knob when set, else $XDG_STATE_HOME/genesis (an absolute
    one, as the XDG spec says), else ~/.local/state/genesis."""
    if setting:
        return Path(os.path.expanduser(setting))
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "genesis"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "state" / "genesis"


def _checked(path: Path) -> bool:
    """Whether path is a private folder of ours (False: it does not exist); StoreUnusable otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise StoreUnusable(f"{path} is not a plain folder (a symlink?): the shared account store is not used; "
                            f"remove it")
    if st.st_uid != os.geteuid():
        raise StoreUnusable(f"{path} belongs to uid {st.st_uid}, not to you: the shared account store is not used")
    if st.st_mode & 0o022:
        raise StoreUnusable(f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): the shared "
                            f"account store is not used; run: chmod go-w {path}")
    return True


class AccountStore:
    """`<root>/accounts/`: record files of this user's accounts, shared by every loop."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.folder = self.root / "accounts"

    def exists(self) -> bool:
        """Whether the store's folder is there (StoreUnusable when it is there but not ours)."""
        return _checked(self.root) and _checked(self.folder)

    def ensure(self) -> Path:
        """Make the folder (0700) if missing; StoreUnusable when it, or its parent, is not ours."""
        try:
            for path in (self.root, self.folder):
                if not _checked(path):
                    private_dir(path)
        except UnsafeDir as exc:
            raise StoreUnusable(str(exc)) from None
        except OSError as exc:
            raise StoreUnusable(f"cannot make the shared account store {self.folder}: {exc.strerror or exc}") from None
        return self.folder

    def path(self, name: str) -> Path:
        return self.folder / name

    def read(self, name: str, key: str, version: int, now: float) -> tuple[list[object], str | None]:
        """The records under `key` of file `name`, and a warning when the file was unusable (then
        kept aside) or the store cannot be used; nothing at all when the store was never made."""
        try:
            if not self.exists():
                return [], None
        except StoreUnusable as exc:
            return [], str(exc)
        path = self.path(name)
        try:
            data = read_json(path, MAX_BYTES)
        except CorruptFile as exc:
            return [], self._set_aside(path, exc.reason, now)
        except OSError as exc:
            return [], f"cannot read the shared account store ({path}: {exc.strerror or exc}); it is not used"
        if data is None:
            return [], None
        if not isinstance(data, dict) or data.get("version") != version or not isinstance(data.get(key), list):
            return [], self._set_aside(path, f"is not a version {version} file of {key}", now)
        return list(data[key]), None

    def update(self, name: str, key: str, version: int, now: float,
               change: Callable[[list[object]], list[object]]) -> str | None:
        """Rewrite file `name` with change(its records), under the store's lock; returns read()'s
        warning. StoreUnusable when the store is not ours."""
        self.ensure()
        with self._locked():
            records, warning = self.read(name, key, version, now)
            kept = change(records)[-MAX_RECORDS:]
            if kept:
                write_json(self.path(name), {"version": version, key: kept})
            else:
                try:
                    os.unlink(self.path(name))
                except FileNotFoundError:
                    pass
        return warning

    def keep_aside(self, name: str, key: str, version: int, records: list[object], why: str, now: float) -> Path:
        """Write records to `<name>.<why>-<UTC time>` beside the file, for a person to look at."""
        self.ensure()
        stamp = f"{name}.{why}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"
        aside, n = self.path(stamp), 1
        while os.path.lexists(aside):  # never over another one kept aside
            n += 1
            aside = self.path(f"{stamp}-{n}")
        write_json(aside, {"version": version, key: records})
        return aside

    @contextmanager
    def _locked(self) -> Iterator[None]:
        path = self.path("lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StoreUnusable(f"{path} is a symlink, not Genesis's lock file; remove it") from None
            raise StoreUnusable(f"cannot open the shared account store's lock {path}: {exc.strerror}") from None
        try:
            if not flock_within(fd, LOCK_WAIT):
                raise StoreUnusable(f"the shared account store's lock {path} is still held after {LOCK_WAIT:g}s; "
                                    f"find its holder with `fuser {path}`")
            yield
        finally:
            os.close(fd)

    @staticmethod
    def _set_aside(path: Path, reason: str, now: float) -> str:
        try:
            kept = quarantine(path, now)
        except OSError as exc:
            return f"the shared account store's {path} {reason}, and could not be kept aside ({exc}); it is not used"
        return f"the shared account store's {path} {reason}: kept aside as {kept.name}; it is not used"
