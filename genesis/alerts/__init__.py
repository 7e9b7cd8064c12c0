"""Escalation tickets, their triage and the notifications that pass it.

The loop maps a ledger event to a Ticket (tickets.ticket_for) and hands it to
deliver.dispatch(), which returns at once; a detached deliverer triages it, notifies, and
records an `alert` event. Nothing is imported here: every step reads the alert knobs
(settings.py), and the rest loads only where a ticket is raised.
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["Ticket", "ticket_for", "SEVERITIES", "Verdict", "triage", "AlertSettings", "parse", "KNOBS",
           "dispatch", "redact"]

_HOMES = {"Ticket": "tickets", "ticket_for": "tickets", "SEVERITIES": "tickets", "Verdict": "triage",
          "triage": "triage", "AlertSettings": "settings", "parse": "settings", "KNOBS": "settings",
          "dispatch": "deliver", "redact": "redact"}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)
