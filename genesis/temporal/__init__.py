"""The fleet on Temporal (`--engine temporal`): the same tasks, ladder, limits and merge queue
as the local fleet, carried by a Temporal server so that one fleet spans machines.

Only this package imports `temporalio` (the `temporal` extra); the local fleet needs nothing
of it, and `genesis/cli.py` imports these modules only when asked for this engine.
"""

from __future__ import annotations

import importlib.util

MISSING = ("the Temporal engine needs the temporal extra: pip install 'genesis-loop[temporal]' (in a checkout: "
           "pip install -e '.[temporal]')")


def installed() -> bool:
    """temporalio is there to import: the temporal extra is installed (this module needs nothing)."""
    return importlib.util.find_spec("temporalio") is not None
