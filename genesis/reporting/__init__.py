"""The morning report and what it is read from.

model.py holds the night's records; load.py reads them from the ledger; kpis.py computes
seed 000's KPIs; text.py and html.py render the night for the terminal and the browser;
command.py is `genesis report`; words.py is how every view says durations, statuses and
waits. Nothing is imported here: a loop step that needs only words.py loads only that.
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["UnknownRun", "night", "open_view", "pick_run", "run_events", "LABELS", "WAIT_LABELS", "duration",
           "epoch_of", "money", "reported"]

_HOMES = {"UnknownRun": "load", "night": "load", "open_view": "load", "pick_run": "load", "run_events": "load",
          "LABELS": "words", "WAIT_LABELS": "words", "duration": "words", "epoch_of": "words", "money": "words",
          "reported": "words"}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)
