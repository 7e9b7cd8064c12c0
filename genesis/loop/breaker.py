"""The git-progress circuit breaker: CLOSED -> HALF_OPEN (warn) -> OPEN (stop).

With a cooldown (opt-in), an OPEN breaker is not the end: after the cooldown one trial
iteration runs HALF_OPEN; progress closes the breaker, none opens it again with a cooldown
twice as long, until the trials are spent and the loop stops.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterator

import psutil

from genesis.clock import iso, parse_iso
from genesis.store.atomicio import CorruptFile, flock_within, quarantine, read_bytes, read_json, write_json

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "Transition", "BreakerState", "record", "close",
           "cooldown_seconds", "plan_trial", "start_trial", "retry_time",
           "BreakerStore", "BreakerLocked", "lock_holders"]

CLOSED, HALF_OPEN, OPEN = "CLOSED", "HALF_OPEN", "OPEN"
STATES = (CLOSED, HALF_OPEN, OPEN)
HISTORY_LIMIT = 50
VERSION = 1
LOCK_TIMEOUT = 30.0
HOLDER_SEARCH = 2.0        # seconds spent at most looking for who holds a lock


@dataclass(frozen=True)
class Transition:
    at: str
    iteration: int
    from_state: str
    to_state: str
    reason: str


@dataclass(frozen=True)
class BreakerState:
    state: str = CLOSED
    no_progress_count: int = 0
    last_progress_iteration: int = 0       # 0: none yet
    last_iteration: int = 0
    updated_at: str = ""
    opened_at: str | None = None
    opened_fingerprint: dict | None = None  # the repository when it opened (see close())
    trials: int = 0                         # trial iterations let through since it last closed
    retry_at: str | None = None             # when the cooldown of an OPEN breaker ends
    history: tuple[Transition, ...] = field(default_factory=tuple)
    version: int = VERSION

    def to_json(self) -> dict:
        data = asdict(self)
        data["history"] = [asdict(t) for t in self.history]
        return data

    @classmethod
    def from_json(cls, data: object) -> "BreakerState":
        """Validate every field; ValueError names the first that is wrong."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("state") not in STATES:
            raise ValueError(f"unknown state {data.get('state')!r}")
        for key in ("no_progress_count", "last_progress_iteration", "last_iteration", "trials"):
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} is not a whole number")
        history = data.get("history", [])
        if not isinstance(history, list):
            raise ValueError("history is not a list")
        try:
            transitions = tuple(Transition(**t) for t in history)
        except TypeError:
            raise ValueError("history has a malformed entry") from None
        opened_fp = data.get("opened_fingerprint")
        retry_at = data.get("retry_at")
        if retry_at is not None:
            try:
                parse_iso(retry_at)  # the loop waits until then: it must read back as a time
            except (TypeError, ValueError):
                raise ValueError("retry_at is not a UTC time") from None
        return cls(state=data["state"], no_progress_count=data.get("no_progress_count", 0),
                   last_progress_iteration=data.get("last_progress_iteration", 0),
                   last_iteration=data.get("last_iteration", 0),
                   updated_at=str(data.get("updated_at", "")),
                   opened_at=data.get("opened_at") if isinstance(data.get("opened_at"), str) else None,
                   opened_fingerprint=opened_fp if isinstance(opened_fp, dict) else None,
                   trials=data.get("trials", 0), retry_at=retry_at, history=transitions)


def _move(state: BreakerState, to: str, iteration: int, now: float, reason: str, **changes) -> BreakerState:
    history = state.history
    if to != state.state:
        history = (history + (Transition(iso(now), iteration, state.state, to, reason),))[-HISTORY_LIMIT:]
    return replace(state, state=to, updated_at=iso(now), history=history, **changes)


def record(state: BreakerState, iteration: int, progressed: bool, now: float, warn_at: int,
           stop_at: int, fingerprint: dict | None = None) -> BreakerState:
    """The state after one iteration: progress closes it, the thresholds open it.

    A trial (HALF_OPEN after a cooldown) without progress opens it again whatever the
    thresholds say now: the trial was its one chance.
    """
    if progressed:
        return _move(state, CLOSED, iteration, now, "progress", no_progress_count=0,
                     last_progress_iteration=iteration, last_iteration=iteration,
                     opened_at=None, opened_fingerprint=None, trials=0, retry_at=None)
    count = state.no_progress_count + 1
    if state.state == HALF_OPEN and state.trials > 0:
        to, reason = OPEN, f"trial {state.trials} made no progress ({count} iterations without progress)"
    elif count >= stop_at:
        to, reason = OPEN, f"{count} iterations without progress"
    elif count >= warn_at:
        to, reason = HALF_OPEN, f"{count} iterations without progress"
    else:
        to, reason = state.state, ""
    opened = to == OPEN and state.state != OPEN
    return _move(state, to, iteration, now, reason, no_progress_count=count, last_iteration=iteration,
                 opened_at=iso(now) if opened else state.opened_at,
                 opened_fingerprint=fingerprint if opened else state.opened_fingerprint)


def close(state: BreakerState, now: float, reason: str) -> BreakerState:
    return _move(state, CLOSED, state.last_iteration, now, reason, no_progress_count=0,
                 opened_at=None, opened_fingerprint=None, trials=0, retry_at=None)


def cooldown_seconds(state: BreakerState, base_seconds: float, max_trials: int) -> float | None:
    """How long an OPEN breaker waits before its next trial: base_seconds, doubled for each
    trial that failed. None when it is not OPEN or the trials are spent: the loop stops."""
    if state.state != OPEN or state.trials >= max_trials:
        return None
    return base_seconds * 2 ** state.trials


def plan_trial(state: BreakerState, now: float, seconds: float) -> BreakerState:
    """Record when the cooldown of an OPEN breaker ends (a restarted loop can read it back)."""
    if state.state != OPEN:
        return state
    return replace(state, retry_at=iso(now + seconds), updated_at=iso(now))


def start_trial(state: BreakerState, now: float, max_trials: int | None = None) -> BreakerState:
    """The cooldown is over: let one iteration through, HALF_OPEN. A breaker that is no
    longer OPEN (reset or closed meanwhile) is returned as it is."""
    if state.state != OPEN:
        return state
    trial = state.trials + 1
    reason = f"cooldown over: trial {trial}" + (f" of {max_trials}" if max_trials is not None else "")
    return _move(state, HALF_OPEN, state.last_iteration, now, reason, trials=trial, retry_at=None)


def retry_time(state: BreakerState) -> float | None:
    """retry_at as epoch seconds, or None when no trial is planned."""
    return parse_iso(state.retry_at) if state.retry_at is not None else None


class BreakerLocked(TimeoutError):
    """The breaker's lock was not free within its timeout; says who holds it, if known."""

    def __init__(self, lock_path: Path, timeout: float, holders: list[tuple[int, str]]):
        if holders:
            who = "; ".join(f"pid {pid} ({cmd})" for pid, cmd in holders)
            todo = (f"if that is not a running Genesis loop or command, end it (kill "
                    f"{' '.join(str(pid) for pid, _ in holders)}); the lock is freed when its holder exits")
        else:
            who = "another process"
            todo = f"find it with `lsof {lock_path}` or `fuser {lock_path}` and end it if it is not a running loop"
        super().__init__(f"the circuit breaker's lock {lock_path} is still held after {timeout:g}s, by {who}; "
                         f"{todo}")
        self.lock_path = Path(lock_path)
        self.holders = holders


class BreakerStore:
    """The breaker's JSON file: locked, atomic, and a bad file is kept aside, not trusted.

    Fallback for a missing or unusable file: a fresh CLOSED breaker (deleting the file is
    the documented reset), with the bad file renamed to `<name>.corrupt-<UTC time>`.
    The lock file is `<path>.lock` unless lock_path puts it elsewhere; waiting for it
    takes at most timeout seconds, then BreakerLocked.
    """

    def __init__(self, path: Path, clock=time.time, lock_path: Path | None = None,
                 timeout: float = LOCK_TIMEOUT):
        self.path = Path(path)
        self.lock_path = Path(lock_path) if lock_path is not None else Path(str(self.path) + ".lock")
        self.timeout = timeout
        self._clock = clock

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # flock on a descriptor of our own: the kernel drops it when the holder dies, and
        # closing the descriptor releases it (no library: this runs in every step).
        self.lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # opened with O_NOFOLLOW: a planted symlink is never followed
                raise OSError(errno.ELOOP, f"the circuit breaker's lock {self.lock_path} is a symlink, not "
                                           f"our lock file; remove it") from None
            raise
        try:
            if not flock_within(fd, self.timeout):
                raise BreakerLocked(self.lock_path, self.timeout, lock_holders(self.lock_path))
            yield
        finally:
            os.close(fd)

    def load(self) -> tuple[BreakerState, str | None]:
        """The state and, if the file was unusable, a warning saying where it went."""
        if not self.path.parent.is_dir():
            return BreakerState(updated_at=iso(self._clock())), None  # nothing to lock or read
        with self._locked():
            return self._load()

    def _load(self) -> tuple[BreakerState, str | None]:
        try:
            data = read_json(self.path)
            if data is None:
                return BreakerState(updated_at=iso(self._clock())), None
            return BreakerState.from_json(data), None
        except (CorruptFile, ValueError) as exc:
            reason = exc.reason if isinstance(exc, CorruptFile) else str(exc)
            try:
                kept = quarantine(self.path, self._clock())
                where = f"kept as {kept}"
            except OSError as err:
                where = f"could not be moved aside ({err.strerror})"
            return BreakerState(updated_at=iso(self._clock())), (
                f"circuit breaker file {self.path} was unusable ({reason}); {where}; "
                f"starting from a fresh CLOSED breaker")

    def update(self, change) -> tuple[BreakerState, str | None]:
        """Load, apply change(state) -> state, save: all under the lock.

        atomicio.DiskFull when there is no room to save it; the file is left as it was.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            state, warning = self._load()
            new = change(state)
            write_json(self.path, new.to_json())
            return new, warning

    def reset(self) -> bool:
        with self._locked():
            try:
                self.path.unlink()
                return True
            except FileNotFoundError:
                return False


def lock_holders(lock_path: Path) -> list[tuple[int, str]]:
    """(pid, command line) of the processes holding lock_path, as far as can be found.

    Linux: /proc/locks names the pid that took each flock, by inode. Elsewhere, or when
    that pid is gone (a child inherited the lock), the processes that have the file open.
    """
    try:
        st = os.stat(lock_path)
    except OSError:
        return []
    pids = [pid for pid in _flock_pids(st.st_ino) if pid != os.getpid()]
    found = [(pid, cmd) for pid in pids if (cmd := _cmdline(pid)) is not None]
    return found or _openers(lock_path, st)


def _flock_pids(inode: int) -> list[int]:
    if not sys.platform.startswith("linux"):
        return []
    try:
        text = read_bytes(Path("/proc/locks"), 4 << 20, follow_symlinks=True).decode("ascii", "replace")
    except (OSError, CorruptFile):
        return []
    pids = []
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 00:2e:1234 0 EOF"; waiters have "->" after the id
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4].isdigit() \
                and fields[5].rsplit(":", 1)[-1] == str(inode):
            pids.append(int(fields[4]))
    return pids


def _cmdline(pid: int) -> str | None:
    try:
        cmd = " ".join(" ".join(psutil.Process(pid).cmdline()).split()) or "?"  # one line
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        return "?"
    return cmd if len(cmd) <= 200 else cmd[:197] + "..."


def _openers(lock_path: Path, st: os.stat_result) -> list[tuple[int, str]]:
    target = os.path.realpath(lock_path)
    deadline = time.monotonic() + HOLDER_SEARCH
    found = []
    for proc in psutil.process_iter(["pid"]):
        if time.monotonic() > deadline:
            break
        if proc.pid == os.getpid():
            continue
        try:
            if any(f.path == target for f in proc.open_files()):
                found.append((proc.pid, _cmdline(proc.pid) or "?"))
        except psutil.Error:
            continue
    return found
