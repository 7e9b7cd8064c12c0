"""The run ledger (SQLite): every event of every run, and the tables the views read.

store.py opens, migrates and writes it; schema.py holds the versioned schema; tables.py
projects each event into the tables; legacy.py brings an older events.jsonl in once.
"""

from genesis.ledger.store import BUSY_TIMEOUT, Ledger, LedgerError, RunRecord, iso

__all__ = ["Ledger", "LedgerError", "RunRecord", "BUSY_TIMEOUT", "iso"]
