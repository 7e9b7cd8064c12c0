"""Escalation tickets, their triage and the notifications that pass it.

The loop maps a ledger event to a Ticket (tickets.ticket_for) and hands it to
handoff.dispatch(), which returns at once; a detached deliverer (deliver.py) triages it
(triage.py), notifies (notify.py, message.py; secrets out by genesis/redact.py), and records
an `alert` event.
settings.py holds the alert knobs. Nothing is imported here: import each from its module.
"""
