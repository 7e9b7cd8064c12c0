"""The morning report and what it is read from.

model.py holds the night's records; load.py reads them from the ledger; kpis.py computes
the health KPIs; text.py and html.py render the night for the terminal and the browser;
command.py is `genesis report`; genesis/words.py is how every view says durations, phase
endings and waits, and makes untrusted text safe to show. Nothing is imported here: import
each from its module.
"""
