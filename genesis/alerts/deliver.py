"""The deliverer: a detached process (started by handoff.dispatch) that triages a ticket,
tells the configured channels, and records the outcome in the ledger as an `alert` event.

It is bounded by an overall deadline. One deliverer at a time decides and tells (a lock next
to the ledger), so two tickets raised together are never both told for the same cause.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

from genesis.alerts import notify
from genesis.alerts.message import safe_ticket
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket
from genesis.alerts.triage import INTERVENE, REPEAT_WINDOW, triage
from genesis.ledger.store import Ledger
from genesis.store.atomicio import flock_within

__all__ = ["run", "deadline_seconds", "Book", "LedgerBook", "main"]

MAX_DOCUMENT = 1 << 20
MAX_DEADLINE = 900.0       # seconds: the deliverer's work (once its turn came) never takes longer
MARGIN = 5.0               # seconds for the ledger and the threads' ends


def deadline_seconds(settings: AlertSettings) -> float:
    """How long the deliverer's work may take: the triage command, then every try of a
    channel (channels run side by side) with the pauses between them."""
    pauses = sum(settings.backoff[min(i, len(settings.backoff) - 1)] for i in range(settings.retries))
    triage_time = settings.triage_timeout if settings.triage_command else 0.0
    return min(MAX_DEADLINE, triage_time + settings.timeout * (settings.retries + 1) + pauses + MARGIN)


# --- the ledger's side ------------------------------------------------------------------------

class Book(Protocol):
    """Where the deliverer learns what was told lately and records what it did."""

    def turn(self, wait: float) -> Any: ...                          # a context manager: one deliverer at a time
    def told(self, since: float) -> list[Ticket]: ...                # tickets told since (epoch), oldest first
    def record(self, run_id: str, detail: dict) -> None: ...


class LedgerBook:
    """The ledger (genesis.ledger) as the deliverer's book."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @contextmanager
    def turn(self, wait: float) -> Iterator[None]:
        """Hold the alerts' lock next to the ledger, waiting at most `wait` seconds; past
        that, or without a usable lock file, go on without it (late beats never)."""
        fd = None
        try:
            fd = os.open(f"{self.path}.alerts-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC |
                         getattr(os, "O_NOFOLLOW", 0), 0o600)
            flock_within(fd, wait)  # past the wait, go on without it
        except OSError:  # no folder, a symlink planted, no room: no lock
            pass
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)

    def told(self, since: float) -> list[Ticket]:
        if not self.path.is_file():
            return []

        with Ledger.open(self.path, readonly=True) as led:
            events = led.events(kinds=["alert"], since=since)
        return [t for t in map(_told_ticket, events) if t is not None]

    def record(self, run_id: str, detail: dict) -> None:
        with Ledger.open(self.path) as led:
            led.record(run_id, "alert", **detail)


def _told_ticket(event: Mapping[str, Any]) -> Ticket | None:
    """The ticket of an `alert` event that was told: intervened, and delivered somewhere
    unless every channel failed (an alert nobody got may be told again)."""
    if event.get("decision") != INTERVENE or (event.get("failed") and not event.get("delivered")):
        return None
    try:
        return Ticket.from_json(event.get("ticket"))
    except ValueError:
        return None


# --- the deliverer ----------------------------------------------------------------------------

def run(ticket: Ticket, settings: AlertSettings, book: Book, env: Mapping[str, str] | None = None) -> dict:
    """Triage, tell, record; returns the recorded detail. Nothing raises out of it: a
    failing step is noted in the detail and the rest goes on."""
    env = dict(os.environ if env is None else env)
    limit = deadline_seconds(settings)
    detail: dict[str, Any] = {"ticket": safe_ticket(ticket, env), "decision": INTERVENE, "why": "", "by": "rules",
                              "delivered": [], "failed": {}}
    with book.turn(limit):
        deadline = time.monotonic() + limit
        try:
            recent = book.told(ticket.epoch - REPEAT_WINDOW)
        except Exception as exc:  # no memory of what was told: better told twice than never
            recent, detail["why"] = [], f"(what was told lately is unknown: {type(exc).__name__}) "
        try:
            verdict = triage(ticket, recent, settings.triage_command,
                             min(settings.triage_timeout, max(1.0, deadline - time.monotonic() - MARGIN)), env)
            detail.update(decision=verdict.decision, why=detail["why"] + verdict.why, by=verdict.by)
        except Exception as exc:
            detail["why"] += f"triage failed ({type(exc).__name__}: {exc}); told to be safe"
        if detail["decision"] == INTERVENE:
            try:
                channels = notify.channels_for(settings, env)
                detail["delivered"], detail["failed"] = notify.deliver(ticket, channels, settings, deadline)
            except Exception as exc:
                detail["failed"] = {"all": f"{type(exc).__name__}: {exc}"}
        try:
            book.record(ticket.run_id, detail)
        except Exception:
            pass  # detached: nobody to tell; the notification itself went out
    return detail


def main() -> int:
    """The deliverer: one JSON document {ticket, settings, ledger} on stdin. Never raises,
    never prints (it is detached from any terminal)."""
    try:
        document = json.loads(sys.stdin.buffer.read(MAX_DOCUMENT))
        ticket = Ticket.from_json(document["ticket"])
        settings = AlertSettings.from_json(document["settings"])
        run(ticket, settings, LedgerBook(Path(document["ledger"])))
    except BaseException:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
