"""The deliverer: a detached process (started by handoff.dispatch) that triages a ticket,
tells the configured channels, and records the outcome in the ledger as an `alert` event.

It is bounded by an overall deadline. One deliverer at a time decides and tells (a lock next
to the ledger), so two tickets raised together are never both told for the same cause.

Related tickets within seconds are one message. A ticket whose event ends the loop (breaker
OPEN, recovery budget spent, disk full, history rewritten: `holds_for_end`) waits, holding the
lock, at most HOLD_FOR_END seconds for the loop's end to be recorded; if it comes, the ticket
is recorded as folded and the loop end's deliverer (next in turn) tells both in one message,
whose title names the cause. If the loop dies before its end, the ticket is told alone when
the wait is over: held, never lost. A resolution (the retry of a stuck phase recovered) is
folded the same way when the loop's end follows within FOLD_RESOLVED seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

from genesis.alerts import notify
from genesis.alerts.message import safe_ticket
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import MAX_LINE, MAX_LINES, Ticket
from genesis.alerts.triage import DISMISS, INTERVENE, REPEAT_WINDOW, triage
from genesis.ledger.store import Ledger
from genesis.store.atomicio import flock_within

__all__ = ["run", "deadline_seconds", "Book", "LedgerBook", "main", "HOLD_FOR_END", "FOLD_RESOLVED"]

MAX_DOCUMENT = 1 << 20
MAX_DEADLINE = 900.0       # seconds: the deliverer's work (once its turn came) never takes longer
MARGIN = 5.0               # seconds for the ledger and the threads' ends
HOLD_FOR_END = 20.0        # seconds a ticket whose event ends the loop waits for the loop's end
FOLD_RESOLVED = 3.0        # seconds a resolution waits for the loop's end to fold into it
RESOLVE_WINDOW = 24 * 3600  # seconds back a resolution looks for the stall it resolves
POLL = 0.2
MAX_ALSO = 3               # folded tickets named in the loop end's message


def deadline_seconds(settings: AlertSettings) -> float:
    """How long the deliverer's work may take: the triage command, then every try of a
    channel (channels run side by side) with the pauses between them."""
    triage_time = settings.triage_timeout if settings.triage_command else 0.0
    return min(MAX_DEADLINE, triage_time + notify.send_seconds(settings) + MARGIN)


# --- the ledger's side ------------------------------------------------------------------------

class Book(Protocol):
    """Where the deliverer learns what was told lately and records what it did."""

    def turn(self, wait: float) -> Any: ...                          # a context manager: one deliverer at a time
    def told(self, since: float) -> list[Ticket]: ...                # tickets told since (epoch), oldest first
    def record(self, run_id: str, detail: dict) -> None: ...
    def ended(self, run_id: str) -> bool: ...                        # the run's end is recorded
    def folded(self, run_id: str, since: float) -> list[Ticket]: ...  # tickets held for the run's end
    def channels_of(self, ticket_id: str, since: float) -> list[str] | None: ...  # where a told ticket went


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

    def ended(self, run_id: str) -> bool:
        if not self.path.is_file():
            return False
        with Ledger.open(self.path, readonly=True) as led:
            return bool(led.events(run_id, kinds=["loop_end"], limit=1))

    def channels_of(self, ticket_id: str, since: float) -> list[str] | None:
        if not self.path.is_file():
            return None
        with Ledger.open(self.path, readonly=True) as led:
            events = led.events(kinds=["alert"], since=since)
        went = [e.get("delivered") for e in events
                if isinstance(e.get("ticket"), dict) and e["ticket"].get("ticket_id") == ticket_id]
        return [str(c) for c in went[-1]] if went and isinstance(went[-1], list) else None

    def folded(self, run_id: str, since: float) -> list[Ticket]:
        if not self.path.is_file():
            return []
        with Ledger.open(self.path, readonly=True) as led:
            events = led.events(run_id, kinds=["alert"], since=since)
        found = []
        for event in events:
            if event.get("folded"):
                try:
                    found.append(Ticket.from_json(event.get("ticket")))
                except ValueError:
                    pass
        return found


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
    with book.turn(limit + HOLD_FOR_END):
        if ticket.holds_for_end and _loop_ends(book, ticket.run_id, HOLD_FOR_END):
            return _folded(book, ticket, detail)
        deadline = time.monotonic() + limit
        try:
            recent = book.told(ticket.epoch - (RESOLVE_WINDOW if ticket.kind == "resolved" else REPEAT_WINDOW))
        except Exception as exc:  # no memory of what was told: better told twice than never
            recent, detail["why"] = [], f"(what was told lately is unknown: {type(exc).__name__}) "
        if ticket.kind == "resolved":
            ticket = _resolving(ticket, recent)
            detail["ticket"] = safe_ticket(ticket, env)
            if ticket.resolves and _loop_ends(book, ticket.run_id, FOLD_RESOLVED):
                return _folded(book, ticket, detail)
        if ticket.final:
            ticket = _with_folded(book, ticket)
            detail["ticket"] = safe_ticket(ticket, env)
        try:
            verdict = triage(ticket, recent, settings.triage_command,
                             min(settings.triage_timeout, max(1.0, deadline - time.monotonic() - MARGIN)), env)
            detail.update(decision=verdict.decision, why=detail["why"] + verdict.why, by=verdict.by)
        except Exception as exc:
            detail["why"] += f"triage failed ({type(exc).__name__}: {exc}); told to be safe"
        if detail["decision"] == INTERVENE:
            try:  # a channel below its minimum severity is skipped, and said so (not failed)
                told = notify.tell(ticket, settings, deadline, env, to=_went_to(book, ticket))
                detail.update(delivered=list(told.delivered), failed=dict(told.failed), skipped=dict(told.skipped))
            except Exception as exc:
                detail["failed"] = {"all": f"{type(exc).__name__}: {exc}"}
        try:
            book.record(ticket.run_id, detail)
        except Exception:
            pass  # detached: nobody to tell; the notification itself went out
    return detail


def _loop_ends(book: Book, run_id: str, seconds: float, sleep=time.sleep) -> bool:
    """Whether the run's end is recorded within `seconds` (a book that cannot say: no)."""
    until = time.monotonic() + seconds
    while True:
        try:
            if book.ended(run_id):
                return True
        except Exception:  # noqa: BLE001 - unknown: tell the ticket alone rather than lose it
            return False
        if time.monotonic() >= until:
            return False
        sleep(POLL)


def _folded(book: Book, ticket: Ticket, detail: dict) -> dict:
    """Recorded as told with the loop's end (that message names it), not on its own."""
    detail.update(decision=DISMISS, why="the loop's end followed at once: told in its message", folded=True)
    try:
        book.record(ticket.run_id, detail)
    except Exception:  # noqa: BLE001 - detached: nobody to tell
        pass
    return detail


def _resolving(ticket: Ticket, recent: list[Ticket]) -> Ticket:
    """The resolution with the stall it resolves: the last told retry of the same phase, or
    (a phase that works again) its last told give-up of an earlier iteration. One the deliverer
    of its own maker already linked (a fleet's task that came home) keeps its link."""
    if ticket.resolves:
        return ticket
    stalls = [t for t in recent if t.run_id == ticket.run_id and t.phase == ticket.phase and (
        (t.kind == "retry" and t.iteration == ticket.iteration) or
        (t.kind == "phase_failed" and ticket.iteration is not None and t.iteration is not None
         and t.iteration < ticket.iteration))]
    return replace(ticket, resolves=stalls[-1].ticket_id) if stalls else ticket


def _went_to(book: Book, ticket: Ticket) -> list[str] | None:
    """A resolution goes wherever the stall it resolves went (None: by severity, as any other)."""
    if not ticket.resolves:
        return None
    try:
        return book.channels_of(ticket.resolves, ticket.epoch - RESOLVE_WINDOW)
    except Exception:  # noqa: BLE001 - not known: by severity
        return None


def _with_folded(book: Book, ticket: Ticket) -> Ticket:
    """The loop end's ticket with what was folded into it: the cause (or, when the title
    already names it, its first line) and, when it says what to do, its action."""
    try:
        folded = book.folded(ticket.run_id, ticket.epoch - HOLD_FOR_END - MAX_DEADLINE)
    except Exception:  # noqa: BLE001
        return ticket
    if not folded:
        return ticket
    also = [f"Also: {t.lines[0] if t.headline == ticket.headline and t.lines else t.headline or t.cause}"
            for t in folded][-MAX_ALSO:]
    acts = [t.lines[-1] for t in folded if t.lines and t.lines[-1].startswith("Act:")]
    head, act = list(ticket.lines[:-1]), (acts[-1:] or list(ticket.lines[-1:]))  # the last line: whether to act
    lines = [*head[:MAX_LINES - len(also) - len(act)], *also, *act]
    return replace(ticket, lines=tuple(_cut_line(line) for line in lines))


def _cut_line(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + "..."


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
