"""Escalation tickets, their triage and the notifications that pass it.

The loop maps a ledger event to a Ticket (ticket_for) and hands it to dispatch(), which
returns at once; a detached deliverer triages it, notifies, and records an `alert` event.
"""

from __future__ import annotations

from .redact import redact
from .settings import KNOBS, AlertSettings, parse
from .tickets import SEVERITIES, Ticket, ticket_for
from .triage import Verdict, triage

__all__ = ["Ticket", "ticket_for", "SEVERITIES", "Verdict", "triage", "AlertSettings", "parse", "KNOBS",
           "dispatch", "redact"]


def __getattr__(name: str):
    # The deliverer runs as `python -m genesis.alerts.deliver`: importing it here as well
    # would load it twice in that process.
    if name == "dispatch":
        from .deliver import dispatch

        return dispatch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
