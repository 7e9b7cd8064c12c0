"""Usage limits remembered across runs, each for the agent CLI and the account that met it.

A limit met by one account never keeps another account, or another CLI, from running: the
account is the CLI's own folder (its login) and a fingerprint of the API key its
environment gives it (never the key). A restart with the same CLI and account waits for the
reset, or stops at once when it is further away than GENESIS_MAX_LIMIT_WAIT, without
calling the agent.

`<git dir>/genesis/limit.json`, written atomically under `limit.lock`:
`{"version": 2, "limits": [{"cli", "home", "key", "resets_at", "kind", "message", "guessed",
"seen_at"}, ...]}`. The one-limit file of an older Genesis (no version) still reads, for an
unknown account of the CLI that was configured when it was met (the ledger's run that met it
says which; the CLI configured now when it cannot tell): it holds for every account of that
CLI, and no other, until it resets or is cleared (`genesis limit clear`). A file that cannot
be read is kept aside as `limit.json.corrupt-<UTC time>` and not trusted. An agent can write
the file too: a limit counts only with the ledger's event of the run that remembered it, and
one without (planted) is kept aside as `limit.json.unvouched-<UTC time>` (see vouched).

A limit is the account's on the whole machine too: the run that meets one also puts it in the
account store (store/accounts.py, `accounts/limits.json`, the same entries naming the project
and run that met it), which every loop of the user on that CLI and account reads before a
phase; an entry there counts only with that run's event in that project's ledger
(vouched_shared), one without is kept aside as `limits.json.unvouched-<UTC time>`.
"""

from __future__ import annotations

import errno
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from genesis import exitcodes
from genesis.agents import adapter_for
from genesis.agents.base import Account, Adapter, Limit
from genesis.hints import hint
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.step import StepFailed
from genesis.config import default_layout
from genesis.repo.gitcmd import NotARepository
from genesis.store import accounts
from genesis.store.accounts import AccountStore
from genesis.store.atomicio import CorruptFile, finite, flock_within, quarantine, read_json, write_json
from genesis.store.layout import Layout
from genesis.words import duration, sanitize

__all__ = ["Remembered", "VERSION", "LOCK_WAIT", "REMEMBERED", "read", "vouched", "set_aside_unvouched", "binding",
           "remember", "forget", "when", "lines_of", "another_account", "clear_command", "read_shared",
           "vouched_shared", "share", "set_aside_shared", "forget_shared"]

VERSION = 2
LOCK_WAIT = 10.0       # seconds to wait for the file's lock (held for milliseconds by its writers)
MAX_ENTRIES = 100      # a file never grows past this many limits (the oldest go first)
MET_WITHIN = 600.0     # an older Genesis wrote its file within seconds of the phase's end that met the limit


@dataclass(frozen=True)
class Remembered:
    """A usage limit met by an account, and when it was met."""
    account: Account
    limit: Limit                 # its resets_at is always known here (a guessed hour when the CLI named none)
    guessed: bool
    seen_at: float
    project: str = ""            # in the account store: the project (work tree) of the run that met it...
    run_id: str = ""             # ...and that run, whose ledger vouches for it

    @property
    def resets_at(self) -> float:
        return float(self.limit.resets_at or 0.0)

    def to_json(self) -> dict:
        data = {"cli": self.account.cli, "home": self.account.home, "key": self.account.key,
                "resets_at": self.resets_at, "kind": self.limit.kind, "message": self.limit.message,
                "guessed": self.guessed, "seen_at": self.seen_at}
        return {**data, "project": self.project, "run_id": self.run_id} if self.project else data

    @classmethod
    def from_json(cls, data: object, cli: str | None = None) -> "Remembered | None":
        """One entry of the file (`cli` given: an older Genesis's whole file, for an unknown account)."""
        if not isinstance(data, dict):
            return None
        resets_at, seen_at = finite(data.get("resets_at")), finite(data.get("seen_at"))
        if resets_at is None:
            return None
        if cli is not None:
            account = Account(cli, None, None)
        else:
            home, key = data.get("home"), data.get("key")
            if not isinstance(data.get("cli"), str) or not data["cli"] or not all(
                    v is None or isinstance(v, str) for v in (home, key)):
                return None
            account = Account(data["cli"], home, key)
        limit = Limit(resets_at, str(data.get("kind") or ""), str(data.get("message") or ""))
        project, run_id = data.get("project"), data.get("run_id")
        return cls(account, limit, data.get("guessed") is True, seen_at if seen_at is not None else resets_at,
                   project if isinstance(project, str) else "", run_id if isinstance(run_id, str) else "")


@contextmanager
def _locked(layout: Layout) -> Iterator[None]:
    """The file's lock: a descriptor of our own, never a symlink followed; the kernel drops it
    with its holder."""
    path = layout.limit_lock
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StepFailed(exitcodes.USAGE, f"{path} is a symlink, not Genesis's lock file; remove it") from None
        raise
    try:
        if not flock_within(fd, LOCK_WAIT):
            raise StepFailed(exitcodes.STEP_TIMEOUT, f"the remembered usage limits' lock {path} is still held "
                             f"after {LOCK_WAIT:g}s; find its holder with `fuser {path}`")
        yield
    finally:
        os.close(fd)


def read(layout: Layout, configured: str, now: float | None = None) -> tuple[list[Remembered], str | None]:
    """The remembered limits, and a warning when the file was unusable (then kept aside); an older
    Genesis's limit belongs to the CLI whose run met it, else to `configured`."""
    path = layout.limit_file
    try:
        data = read_json(path)
    except CorruptFile as exc:
        return [], _set_aside(path, exc.reason, now)
    except OSError as exc:
        return [], f"cannot read the remembered usage limits ({path}: {exc.strerror}); none is applied"
    if data is None:
        return [], None
    if isinstance(data, dict) and "version" not in data:
        old = Remembered.from_json(data, _met_by(layout, finite(data.get("seen_at"))) or configured)
        return ([old], None) if old is not None else ([], _set_aside(path, "holds no usage limit", now))
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("limits"), list):
        return [], _set_aside(path, f"is not a version {VERSION} file of remembered limits", now)
    entries = [Remembered.from_json(item) for item in data["limits"]]
    return [e for e in entries if e is not None], None


def _met_by(layout: Layout, seen_at: float | None) -> str | None:
    """The CLI whose phase met the limit an older Genesis remembered at seen_at, as the ledger
    tells it (the command its run started with), or None."""
    if seen_at is None:
        return None
    try:
        with Ledger.open(layout.ledger_file, readonly=True) as ledger:
            ended = [e for e in ledger.events(kinds=("phase_end",), since=seen_at - MET_WITHIN)
                     if e.get("ending") == "limit" and e["epoch"] <= seen_at + 1]
            if not ended:
                return None
            start = ledger.events(ended[-1]["run_id"], kinds=("loop_start",), limit=1)
    except (LedgerError, OSError):
        return None
    agent = start[0].get("agent") if start else None
    if not isinstance(agent, list) or not agent or not all(isinstance(a, str) for a in agent):
        return None
    name = adapter_for(tuple(agent)).name
    return None if name == "generic" else name  # a command Genesis cannot name: it cannot tell


def _set_aside(path: Path, reason: str, now: float | None) -> str:
    try:
        kept = quarantine(path, time.time() if now is None else now)
    except OSError as exc:
        return f"the remembered usage limits ({path}) {reason}, and could not be kept aside ({exc}); none is applied"
    return f"the remembered usage limits ({path}) {reason}: kept aside as {kept.name}; none is applied"


LONGEST = 7 * 86400.0  # the longest real usage limit (a weekly one)...
SLACK = 86400.0        # ...and a day more: a reset further away than both is never believed
REMEMBERED = "limit_remembered"  # the event the run that met a limit records with it


def vouched(layout: Layout, entries: list[Remembered], now: float) -> tuple[list[Remembered], list[Remembered], str]:
    """(the entries a run recorded in the ledger as it remembered them, those no run did, why).

    An agent can write limit.json: a limit counts only with the run event that recorded it
    (`limit_remembered`: its CLI, account and reset; for an older Genesis's file, the phase that
    ended on it), and a reset further than the longest real limit never counts."""
    try:
        with Ledger.open(layout.ledger_file, readonly=True) as ledger:
            recorded = ledger.events(kinds=(REMEMBERED,))
    except (LedgerError, OSError) as exc:
        return [], [], f"the ledger cannot be read to tell which run remembered them ({exc})"
    good, bad = [], []
    for entry in entries:
        acc = entry.account
        legacy = acc.home is None and acc.key is None
        ok = entry.resets_at <= now + LONGEST + SLACK and (
            _met_by(layout, entry.seen_at) == acc.cli if legacy else _recorded(entry, recorded))
        (good if ok else bad).append(entry)
    return good, bad, ""


def _recorded(entry: Remembered, recorded: list[dict]) -> bool:
    """Whether a `limit_remembered` event of `recorded` is entry's: its CLI, account and reset."""
    acc = entry.account
    return any((e.get("cli"), e.get("home"), e.get("key")) == (acc.cli, acc.home, acc.key)
               and isinstance(e.get("resets_at"), (int, float)) and abs(e["resets_at"] - entry.resets_at) < 1.0
               for e in recorded)


# --- the account store: a limit every loop of this user on this machine heeds ---------------

def read_shared(store: AccountStore, now: float) -> tuple[list[Remembered], str | None]:
    """The limits in the machine-wide account store, and its warning (store/accounts.py)."""
    records, warning = store.read(accounts.LIMITS, "limits", VERSION, now)
    entries = [Remembered.from_json(r) for r in records]
    return [e for e in entries if e is not None], warning


def vouched_shared(entries: list[Remembered], now: float) -> tuple[list[Remembered], list[Remembered]]:
    """(the store's limits the run they name recorded in its project's ledger, the others).

    Without a box an agent can write the store: an entry counts only when it names a project
    and a run, and that project's ledger holds the run's `limit_remembered` event for the same
    CLI, account and reset; a reset further than the longest real limit never counts."""
    good, bad = [], []
    ledgers: dict[str, list[dict] | None] = {}
    for entry in entries:
        acc = entry.account
        ok = (bool(entry.project) and os.path.isabs(entry.project) and bool(entry.run_id)
              and acc.home is not None and acc.key is not None and entry.resets_at <= now + LONGEST + SLACK)
        if ok:
            key = f"{entry.project}\0{entry.run_id}"
            if key not in ledgers:
                ledgers[key] = _run_events(entry.project, entry.run_id)
            ok = ledgers[key] is not None and _recorded(entry, ledgers[key] or [])
        (good if ok else bad).append(entry)
    return good, bad


def _run_events(project: str, run_id: str) -> list[dict] | None:
    """The `limit_remembered` events of run_id in project's ledger (None: no such ledger)."""
    try:
        ledger_file = default_layout(Path(project)).ledger_file
        if not ledger_file.is_file():
            return None
        with Ledger.open(ledger_file, readonly=True) as ledger:
            return ledger.events(run_id, kinds=(REMEMBERED,), limit=MAX_ENTRIES)
    except (LedgerError, NotARepository, OSError):
        return None


def share(store: AccountStore, met: Remembered, now: float, margin: float) -> str | None:
    """Put `met` (naming its project and run) in the account store in place of its account's
    earlier limit, dropping those past their reset; returns the store's warning.
    StoreUnusable when the store is not ours."""
    def change(records: list[object]) -> list[object]:
        entries = [e for e in map(Remembered.from_json, records) if e is not None]
        kept = [e for e in entries if e.account != met.account and e.resets_at + margin > now]
        return [e.to_json() for e in kept + [met]]
    return store.update(accounts.LIMITS, "limits", VERSION, now, change)


def set_aside_shared(store: AccountStore, bad: list[Remembered], now: float) -> Path | None:
    """Take the store's limits no run vouches for out of it, into `limits.json.unvouched-<time>`."""
    if not bad:
        return None
    gone = [e.to_json() for e in bad]
    store.update(accounts.LIMITS, "limits", VERSION, now, lambda records: [r for r in records if r not in gone])
    return store.keep_aside(accounts.LIMITS, "limits", VERSION, gone, "unvouched", now)


def forget_shared(store: AccountStore, cli: str | None, now: float) -> list[Remembered]:
    """Forget the store's limits of `cli` (every account of it, every project), or all (None)."""
    gone: list[Remembered] = []

    def change(records: list[object]) -> list[object]:
        entries = [e for e in map(Remembered.from_json, records) if e is not None]
        gone.extend(e for e in entries if cli is None or e.account.cli == cli)
        return [e.to_json() for e in entries if e not in gone]
    if not store.exists():
        return []
    store.update(accounts.LIMITS, "limits", VERSION, now, change)
    return gone


def set_aside_unvouched(layout: Layout, configured: str, bad: list[Remembered], now: float) -> Path | None:
    """Take the limits no run recorded out of the file, into `limit.json.unvouched-<time>`."""
    if not bad:
        return None
    aside = layout.limit_file.with_name(f"{layout.limit_file.name}.unvouched-"
                                        f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}")
    with _locked(layout):
        entries, _warning = read(layout, configured, now)
        write_json(aside, {"version": VERSION, "limits": [e.to_json() for e in bad]})
        _write(layout, [e for e in entries if e not in bad])
    return aside


def binding(entries: list[Remembered], account: Account, now: float, margin: float) -> Remembered | None:
    """The limit that holds for `account` now (the one that resets last), or None."""
    held = [e for e in entries if e.account.binds(account) and e.resets_at + margin > now]
    return max(held, key=lambda e: e.resets_at, default=None)


def _write(layout: Layout, entries: list[Remembered]) -> None:
    if entries:
        write_json(layout.limit_file, {"version": VERSION, "limits": [e.to_json() for e in entries[-MAX_ENTRIES:]]})
        return
    try:
        os.unlink(layout.limit_file)
    except FileNotFoundError:
        pass


def remember(layout: Layout, configured: str, met: Remembered, now: float, margin: float) -> str | None:
    """Keep `met` in place of its account's earlier limit, dropping those past their reset;
    returns read()'s warning, if any."""
    with _locked(layout):
        entries, warning = read(layout, configured, now)
        kept = [e for e in entries if e.account != met.account and e.resets_at + margin > now]
        _write(layout, kept + [met])
    return warning


def forget(layout: Layout, configured: str, cli: str | None) -> tuple[list[Remembered], str | None]:
    """Forget the limits of `cli` (every account of it), or all of them (None); returns those
    forgotten, and read()'s warning."""
    if not os.path.lexists(layout.limit_file):
        return [], None  # nothing to forget: no lock, no state folder made for it
    with _locked(layout):
        entries, warning = read(layout, configured)
        gone = [e for e in entries if cli is None or e.account.cli == cli]
        if gone:
            _write(layout, [e for e in entries if e not in gone])
    return gone, warning


def when(epoch: float) -> str:
    """A reset time a user can act on: local time with its zone, and UTC when that differs."""
    local = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(epoch))
    utc = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))
    return local if local == utc else f"{local} ({utc})"


def lines_of(entry: Remembered, now: float) -> list[str]:
    """`genesis limit`'s lines for one remembered limit."""
    account = entry.account.describe()
    if entry.account.home is None:
        account += " (remembered by an older Genesis: it holds for every account of this CLI)"
    left = entry.resets_at - now
    reset = (f"resets {when(entry.resets_at)}, in {duration(left)}" if left > 0
             else f"reset {when(entry.resets_at)}: no longer applies")
    guessed = " (the agent named no time: an hour assumed)" if entry.guessed else ""
    return [f"{entry.account.cli}: {account}",
            f"  {entry.limit.kind or 'usage limit'}, {reset}{guessed}; met {when(entry.seen_at)}",
            f"  the agent said: {sanitize(entry.limit.message) or '-'}"]


def another_account(adapter: Adapter) -> str:
    """How to run another account of this CLI, in words."""
    ways = [f"another {adapter.home_var}" if adapter.home_var else "", f"another {adapter.key_vars[0]}"
            if adapter.key_vars else ""]
    return " or ".join(w for w in ways if w)


def clear_command(project: Path, cli: str) -> str:
    """The command that forgets this CLI's limits, runnable as printed from anywhere."""
    return hint(Path(project).resolve(), "limit", "clear", "--agent", cli)
