"""The morning report and what it is read from.

model.py holds the night's records; load.py reads them from the ledger; kpis.py computes
seed 000's KPIs; text.py and html.py render the night for the terminal and the browser;
words.py is how every view says durations, statuses and waits.
"""

from .load import UnknownRun, night, open_view, pick_run, run_events
from .words import LABELS, WAIT_LABELS, duration, epoch_of, reported

__all__ = ["UnknownRun", "night", "open_view", "pick_run", "run_events", "LABELS", "WAIT_LABELS", "duration",
           "epoch_of", "reported"]
