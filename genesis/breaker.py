"""The git-progress circuit breaker: CLOSED -> HALF_OPEN (warn) -> OPEN (stop)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from filelock import FileLock

from .atomicio import CorruptFile, quarantine, read_json, write_json

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "Transition", "BreakerState", "record", "close",
           "BreakerStore"]

CLOSED, HALF_OPEN, OPEN = "CLOSED", "HALF_OPEN", "OPEN"
STATES = (CLOSED, HALF_OPEN, OPEN)
HISTORY_LIMIT = 50
VERSION = 1


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


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
        for key in ("no_progress_count", "last_progress_iteration", "last_iteration"):
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
        return cls(state=data["state"], no_progress_count=data.get("no_progress_count", 0),
                   last_progress_iteration=data.get("last_progress_iteration", 0),
                   last_iteration=data.get("last_iteration", 0),
                   updated_at=str(data.get("updated_at", "")),
                   opened_at=data.get("opened_at") if isinstance(data.get("opened_at"), str) else None,
                   opened_fingerprint=opened_fp if isinstance(opened_fp, dict) else None,
                   history=transitions)


def _move(state: BreakerState, to: str, iteration: int, now: float, reason: str, **changes) -> BreakerState:
    history = state.history
    if to != state.state:
        history = (history + (Transition(iso(now), iteration, state.state, to, reason),))[-HISTORY_LIMIT:]
    return replace(state, state=to, updated_at=iso(now), history=history, **changes)


def record(state: BreakerState, iteration: int, progressed: bool, now: float, warn_at: int,
           stop_at: int, fingerprint: dict | None = None) -> BreakerState:
    """The state after one iteration: progress closes it, the thresholds open it."""
    if progressed:
        return _move(state, CLOSED, iteration, now, "progress", no_progress_count=0,
                     last_progress_iteration=iteration, last_iteration=iteration,
                     opened_at=None, opened_fingerprint=None)
    count = state.no_progress_count + 1
    if count >= stop_at:
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
                 opened_at=None, opened_fingerprint=None)


class BreakerStore:
    """The breaker's JSON file: locked, atomic, and a bad file is kept aside, not trusted.

    Fallback for a missing or unusable file: a fresh CLOSED breaker (deleting the file is
    the documented reset), with the bad file renamed to `<name>.corrupt-<UTC time>`.
    """

    def __init__(self, path: Path, clock=time.time):
        self.path = Path(path)
        self.lock = FileLock(str(self.path) + ".lock")
        self._clock = clock

    def load(self) -> tuple[BreakerState, str | None]:
        """The state and, if the file was unusable, a warning saying where it went."""
        if not self.path.parent.is_dir():
            return BreakerState(updated_at=iso(self._clock())), None  # nothing to lock or read
        with self.lock:
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
        """Load, apply change(state) -> state, save: all under the lock."""
        with self.lock:
            state, warning = self._load()
            new = change(state)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, new.to_json())
            return new, warning

    def reset(self) -> bool:
        with self.lock:
            try:
                self.path.unlink()
                return True
            except FileNotFoundError:
                return False
